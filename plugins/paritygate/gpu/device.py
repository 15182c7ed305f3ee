"""The CUDA device probe and the GPU fixtures: ``gpu``, ``cuda_stream``, ``gpu_timer``, ``gpu_memory_guard``.

cuda-python's ``cuda.bindings`` is imported on first use (inside ``probe()`` and the fixtures), so
importing this module imports no CUDA. What the fixtures measure with (GpuTimer, MemoryGuard, ``check``)
lives in gpu_measure.py and is re-exported here.
"""

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paritygate.gpu.measure import (  # noqa: F401 - re-exported: paritygate.gpu.device is the one GPU entry point
    EVENT_RESOLUTION_MS,
    LEAK_THRESHOLD_BYTES,
    CudaError,
    GpuTimer,
    MemoryGuard,
    check,
    error_text,
)
from paritygate.lazy import available

GPU_EXTRA = "pip install 'paritygate[gpu]'"

SHARED_GPU_ENV = "PARITYGATE_WORKERS_PER_GPU"  # set by pin_xdist_worker when xdist workers share a GPU


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
        reason = f"cuInit failed: {error_text(err)}"
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
def pin_xdist_worker(workerid, env=os.environ, device_count=None, worker_count=None):
    """Pin xdist worker ``gwN`` to GPU ``N % count`` through CUDA_VISIBLE_DEVICES; return the chosen entry.

    Call it before CUDA is initialised in the worker (plugin.py's pytest_configure). A CUDA_VISIBLE_DEVICES
    the user set is respected: the worker takes an entry of that list (indices, UUIDs or MIG ids alike).
    With more workers than GPUs it also sets PARITYGATE_WORKERS_PER_GPU, which turns the memory guard off.
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
    if worker_count and worker_count > len(choices):
        env[SHARED_GPU_ENV] = str(-(-worker_count // len(choices)))
    return chosen


def _physical_gpu_count():
    """GPUs the NVIDIA kernel module lists, counted without initialising CUDA (0 when none or unknown)."""
    try:
        return sum(1 for _ in Path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        return 0


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
    stream = check(driver.cuStreamCreate(int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")
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
def gpu_memory_guard(gpu, request):
    """Fails the test (at teardown) when more than LEAK_THRESHOLD_BYTES of device memory leaked.

    Off (recorded as a user property, never failing) when xdist workers share the GPU: cuMemGetInfo sees
    the whole device, so another worker's allocations would read as this test's leak.
    """
    activate_context()
    guard = MemoryGuard().start()
    yield guard
    shared = os.environ.get(SHARED_GPU_ENV)
    if shared:
        request.node.user_properties.append(
            ("gpu_memory_guard", f"off: {shared} xdist workers share this GPU (run with -n <= GPU count)"))
        return
    message = guard.check()
    if message:
        pytest.fail(message, pytrace=False)

