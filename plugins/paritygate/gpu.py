"""The CUDA device probe and the GPU fixtures: ``gpu``, ``cuda_stream``, ``gpu_timer``, ``gpu_memory_guard``.

cuda-python's ``cuda.bindings`` is imported on first use (inside ``probe()`` and the fixtures), so
importing this module imports no CUDA. Every ``cuda.bindings`` call returns a tuple ``(err, *values)``;
``check()`` turns a non-success ``err`` into a ``CudaError`` that names the call and the error.
"""

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paritygate.lazy import available

GPU_EXTRA = "pip install 'paritygate[gpu]'"

# cuMemGetInfo reports device-wide free memory in the driver's allocation granularity (2 MiB pages), and
# the first launch of a kernel loads its module then (lazy loading is the default on Linux since CUDA
# 12.2: CUDA programming guide, "Lazy Loading"), which allocates device memory that stays. docs/gpu.md
# records that noise as measured on an H100; 16 MiB sits well above it and below what a leaked TensorRT
# execution context, engine or batch of the zoo's activations holds. Set `guard.threshold_bytes` in a test
# that needs another bound.
LEAK_THRESHOLD_BYTES = 16 * 2**20

# cuEventElapsedTime: "Computes the elapsed time between two events (in milliseconds with a resolution of
# around 0.5 microseconds)" (CUDA driver API reference, Event Management).
EVENT_RESOLUTION_MS = 0.0005


class CudaError(RuntimeError):
    """A CUDA driver, runtime or NVRTC call failed; the message names the call and the error."""


def check(result, call="CUDA call"):
    """Unpack a ``cuda.bindings`` result tuple: raise ``CudaError`` on failure, else return its values."""
    err, *values = result
    if int(err) != 0:
        raise CudaError(f"{call} failed: {_error_text(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _error_text(err):
    name = getattr(err, "name", repr(err))
    try:
        from cuda.bindings import driver

        if isinstance(err, driver.CUresult):
            status, text = driver.cuGetErrorString(err)
            if int(status) == 0 and text:
                return f"{name} ({text.decode(errors='replace')})"
    except Exception:  # noqa: BLE001 - the name alone still says what failed
        pass
    return name


# -- the probe --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuInfo:
    """The device tests run on (the first visible one: xdist workers see only their pinned GPU)."""

    index: int
    name: str
    compute_capability: str  # "9.0"
    total_memory_bytes: int
    driver_version: str  # highest CUDA version the driver supports, "13.0"
    cuda_runtime_version: str | None  # CUDA runtime cuda.bindings was built against, "13.0"


@dataclass
class GpuProbe:
    available: bool
    reason: str | None = None  # why no GPU test can run; None when available
    devices: list = field(default_factory=list)  # one dict per visible device, GpuInfo's fields
    extra: dict = field(default_factory=dict)  # driver release, cuda-bindings version, CUDA_VISIBLE_DEVICES

    def info(self):
        if not self.available:
            raise RuntimeError(f"no GPU: {self.reason}")
        return GpuInfo(**self.devices[0])

    def describe(self):
        """Machine info for reports: the pinned device plus driver and runtime versions."""
        if not self.available:
            return {"available": False, "reason": self.reason}
        return {**self.devices[0], **self.extra, "device_count": len(self.devices)}

    def device_class(self):
        return device_class(self.devices[0]["name"]) if self.available else "cpu"


_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}
_MODEL_WORD = re.compile(r"[a-z]{1,2}\d{1,4}[a-z]?")


def device_class(name):
    """Latency budget class from a GPU name: "NVIDIA H100 80GB HBM3" -> "h100", "Tesla T4" -> "t4".

    The first word that looks like a model number (letters then digits: h100, a100, a10g, l40s, t4) wins;
    an unknown name becomes a slug of itself ("NVIDIA GeForce RTX 4090" -> "geforce-rtx-4090").
    """
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    for word in words:
        if word not in _VENDOR_WORDS and _MODEL_WORD.fullmatch(word):
            return word
    slug = "-".join(w for w in words if w != "nvidia")
    return slug or "unknown-gpu"


@functools.cache
def probe():
    """Probe the CUDA driver once per process; never raises: a failure becomes ``GpuProbe.reason``."""
    try:
        import cuda.bindings
        from cuda.bindings import driver, runtime
    except ImportError as err:
        return GpuProbe(False, _missing_bindings_reason(err))
    return probe_driver(driver, runtime, cuda.bindings.__version__)


def _missing_bindings_reason(err):
    if available("cuda.bindings"):
        return f"cuda-python (cuda.bindings) is installed but failed to import: {err}"
    if available("cuda"):
        return "cuda-python is too old: it has no cuda.bindings (pip install -U 'paritygate[gpu]')"
    return f"cuda-python (cuda.bindings) is not installed ({GPU_EXTRA})"


_OLD_DRIVER_ERRORS = {"CUDA_ERROR_INSUFFICIENT_DRIVER", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
                      "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"}


def probe_driver(driver, runtime, bindings_version):
    """The probe proper, over the ``driver``/``runtime`` modules given (tests pass fakes)."""
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as exc:  # cuda.pathfinder could not dlopen libcuda.so.1
        return GpuProbe(False, f"the NVIDIA driver library (libcuda.so.1) was not found: {exc}")
    if int(err) != 0:
        reason = f"cuInit failed: {_error_text(err)}"
        if getattr(err, "name", "") in _OLD_DRIVER_ERRORS:
            reason += f"; the NVIDIA driver is too old for cuda-bindings {bindings_version}"
        return GpuProbe(False, reason)
    try:
        return _probe_devices(driver, runtime, bindings_version)
    except (CudaError, RuntimeError) as exc:
        return GpuProbe(False, f"probing the GPU failed: {exc}")


def _probe_devices(driver, runtime, bindings_version):
    driver_api = check(driver.cuDriverGetVersion(), "cuDriverGetVersion")
    needed = int(bindings_version.split(".")[0]) * 1000
    if driver_api < needed:
        return GpuProbe(False, f"the NVIDIA driver supports CUDA {_cuda_version(driver_api)} but cuda-bindings "
                               f"{bindings_version} needs CUDA {needed // 1000}.0 or newer: upgrade the driver or "
                               f"pip install 'cuda-python=={driver_api // 1000}.*'")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if count == 0:
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return GpuProbe(False, f"the NVIDIA driver sees no CUDA device{where}")
    err, rt = runtime.cudaRuntimeGetVersion()
    runtime_version = _cuda_version(rt) if int(err) == 0 else None
    devices = [_device(driver, i, _cuda_version(driver_api), runtime_version) for i in range(count)]
    extra = {"driver_release": _driver_release(), "cuda_bindings_version": bindings_version,
             "cuda_visible_devices": visible}
    return GpuProbe(True, None, devices, extra)


def _device(driver, index, driver_version, runtime_version):
    dev = check(driver.cuDeviceGet(index), "cuDeviceGet")
    attr = driver.CUdevice_attribute
    major, minor = (check(driver.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute")
                    for a in (attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                              attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    name = check(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
    return {"index": index, "name": name.split(b"\0", 1)[0].decode(errors="replace").strip(),
            "compute_capability": f"{major}.{minor}",
            "total_memory_bytes": int(check(driver.cuDeviceTotalMem(dev), "cuDeviceTotalMem")),
            "driver_version": driver_version, "cuda_runtime_version": runtime_version}


def _cuda_version(number):
    """CUDA's integer versions: 13000 -> "13.0", 12040 -> "12.4"."""
    return f"{number // 1000}.{number % 1000 // 10}"


def _driver_release():
    """The kernel module's release ("580.159.04"), read without CUDA or NVML; None where unreadable."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    found = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return found.group(1) if found else None


def trt_reason():
    """Why TensorRT runs cannot happen here (None when ``tensorrt`` and ``polygraphy`` are importable)."""
    missing = [name for name in ("tensorrt", "polygraphy") if not available(name)]
    if not missing:
        return None
    verb = "is" if len(missing) == 1 else "are"
    return f"{' and '.join(missing)} {verb} not installed ({GPU_EXTRA})"


# -- xdist: one GPU per worker ---------------------------------------------------------------------------
def pin_xdist_worker(workerid, env=os.environ, device_count=None):
    """Pin xdist worker ``gwN`` to GPU ``N % count`` through CUDA_VISIBLE_DEVICES; return the chosen entry.

    Call it before CUDA is initialised in the worker (plugin.py's pytest_configure). A CUDA_VISIBLE_DEVICES
    the user set is respected: the worker takes an entry of that list (indices, UUIDs or MIG ids alike).
    Returns None and changes nothing when no GPU is known or the worker id is not ``gw<int>``.
    """
    found = re.fullmatch(r"gw(\d+)", workerid or "")
    if not found:
        return None
    preset = env.get("CUDA_VISIBLE_DEVICES")
    if preset is not None:
        choices = [entry.strip() for entry in preset.split(",") if entry.strip()]
    else:
        choices = [str(i) for i in range(_physical_gpu_count() if device_count is None else device_count)]
    if not choices:
        return None
    chosen = choices[int(found.group(1)) % len(choices)]
    env["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


def _physical_gpu_count():
    """GPUs the NVIDIA kernel module lists, counted without initialising CUDA (0 when none or unknown)."""
    try:
        return sum(1 for _ in Path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        return 0


# -- timing and memory -----------------------------------------------------------------------------------
class GpuTimer:
    """Times work on one stream with CUDA events (cuEventRecord / cuEventElapsedTime).

    ``with timer: enqueue(...)`` leaves ``timer.elapsed_ms``; ``timer.time(fn, repeat)`` runs ``fn()``
    (which enqueues its work on ``timer.stream``) ``repeat`` times and returns a float64 array of ms.
    """

    resolution_ms = EVENT_RESOLUTION_MS

    def __init__(self, stream):
        from cuda.bindings import driver

        self._driver = driver
        self.stream = stream
        self.elapsed_ms = None
        self._pair = None

    def _events(self, n):
        flags = self._driver.CUevent_flags.CU_EVENT_DEFAULT
        return [check(self._driver.cuEventCreate(flags), "cuEventCreate") for _ in range(n)]

    def _record(self, event):
        check(self._driver.cuEventRecord(event, self.stream), "cuEventRecord")

    def _elapsed(self, start, stop):
        return float(check(self._driver.cuEventElapsedTime(start, stop), "cuEventElapsedTime"))

    def __enter__(self):
        if self._pair is None:
            self._pair = self._events(2)
        self.elapsed_ms = None
        self._record(self._pair[0])
        return self

    def __exit__(self, exc_type, exc, tb):
        self._record(self._pair[1])
        if exc_type is None:
            check(self._driver.cuEventSynchronize(self._pair[1]), "cuEventSynchronize")
            self.elapsed_ms = self._elapsed(*self._pair)
        return False

    def time(self, fn, repeat=10, warmup=1):
        """Run ``fn()`` ``warmup`` times untimed, then ``repeat`` times between events; ms per run."""
        import numpy as np

        if not callable(fn):
            raise TypeError(f"time(fn=...) needs a callable that enqueues work on timer.stream, got {fn!r}")
        if repeat < 1 or warmup < 0:
            raise ValueError(f"time() needs repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
        for _ in range(warmup):
            fn()
        events = self._events(2 * repeat)
        try:
            for i in range(repeat):
                self._record(events[2 * i])
                fn()
                self._record(events[2 * i + 1])
            check(self._driver.cuEventSynchronize(events[-1]), "cuEventSynchronize")
            return np.array([self._elapsed(events[2 * i], events[2 * i + 1]) for i in range(repeat)])
        finally:
            self._destroy(events)

    def overhead_ms(self, repeat=200):
        """Back-to-back events with nothing between them: what every measurement carries."""
        return self.time(lambda: None, repeat=repeat, warmup=10)

    def close(self):
        if self._pair is not None:
            self._destroy(self._pair)
            self._pair = None

    def _destroy(self, events):
        for event in events:
            check(self._driver.cuEventDestroy(event), "cuEventDestroy")


class MemoryGuard:
    """Free device memory (cuMemGetInfo, after cuCtxSynchronize) at ``start()`` and at ``check()``.

    ``check()`` returns a message when more than ``threshold_bytes`` went missing in between, else None.
    It sees the whole device: work of other processes on the same GPU shows up too.
    """

    def __init__(self, threshold_bytes=LEAK_THRESHOLD_BYTES):
        from cuda.bindings import driver

        self._driver = driver
        self.threshold_bytes = threshold_bytes
        self.free_before = None
        self.free_after = None

    def free_bytes(self):
        check(self._driver.cuCtxSynchronize(), "cuCtxSynchronize")
        free, _total = check(self._driver.cuMemGetInfo(), "cuMemGetInfo")
        return int(free)

    def start(self):
        self.free_before = self.free_bytes()
        return self

    @property
    def leaked_bytes(self):
        return self.free_before - self.free_after

    def check(self):
        if self.free_before is None:
            raise RuntimeError("MemoryGuard.check() before start()")
        self.free_after = self.free_bytes()
        if self.leaked_bytes <= self.threshold_bytes:
            return None
        return (f"device memory leak: {self.leaked_bytes / 2**20:.1f} MiB no longer free after the test "
                f"(free {self.free_before / 2**20:.1f} -> {self.free_after / 2**20:.1f} MiB; threshold "
                f"{self.threshold_bytes / 2**20:.1f} MiB, see paritygate.gpu.LEAK_THRESHOLD_BYTES)")


# -- fixtures (plugin.py imports them, which registers them with pytest) ----------------------------------
def _gpu_or_skip(request):
    found = probe()
    if found.available:
        return found
    if request.config.getoption("require_gpu", default=False):
        pytest.fail(f"--require-gpu: {found.reason}", pytrace=False)
    pytest.skip(found.reason)


_context = {}  # the retained primary context of the visible device 0, per process


def activate_context():
    """Make device 0's primary context (the one the CUDA runtime, TensorRT and PyTorch share) current."""
    from cuda.bindings import driver

    if "ctx" not in _context:
        dev = check(driver.cuDeviceGet(0), "cuDeviceGet")
        _context["dev"] = dev
        _context["ctx"] = check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(driver.cuCtxSetCurrent(_context["ctx"]), "cuCtxSetCurrent")
    return _context["ctx"]


@pytest.fixture(name="gpu", scope="session")
def gpu_fixture(request):
    """GpuInfo of the device under test; skips (fails under --require-gpu) without a usable GPU."""
    found = _gpu_or_skip(request)
    activate_context()
    return found.info()


@pytest.fixture
def cuda_stream(gpu):
    """A non-blocking CUstream, synchronised and destroyed after the test."""
    from cuda.bindings import driver

    activate_context()
    stream = check(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    try:
        yield stream
    finally:
        check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
        check(driver.cuStreamDestroy(stream), "cuStreamDestroy")


@pytest.fixture
def gpu_timer(cuda_stream):
    """A GpuTimer on the test's ``cuda_stream``."""
    timer = GpuTimer(cuda_stream)
    try:
        yield timer
    finally:
        timer.close()


@pytest.fixture
def gpu_memory_guard(gpu):
    """Fails the test (at teardown) when more than LEAK_THRESHOLD_BYTES of device memory leaked."""
    activate_context()
    guard = MemoryGuard().start()
    yield guard
    message = guard.check()
    if message:
        pytest.fail(message, pytrace=False)


__all__ = ["CudaError", "EVENT_RESOLUTION_MS", "GpuInfo", "GpuProbe", "GpuTimer", "LEAK_THRESHOLD_BYTES",
           "MemoryGuard", "activate_context", "check", "cuda_stream", "device_class", "gpu_fixture",
           "gpu_memory_guard", "gpu_timer", "pin_xdist_worker", "probe", "probe_driver", "trt_reason"]
