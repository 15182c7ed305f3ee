"""What the GPU fixtures measure with: time on a stream (CUDA events) and free device memory (cuMemGetInfo).

Every ``cuda.bindings`` call returns a tuple ``(err, *values)``; ``check()`` turns a non-success ``err`` into
a ``CudaError`` that names the call and the error. ``cuda.bindings`` is imported on first use only.
"""

import contextlib

# A choice, with its evidence: cuMemGetInfo counts device-wide free memory in the driver's allocation pages
# (2 MiB), and memory that libraries create lazily and keep (modules loaded on first launch: lazy loading is
# the default on Linux since CUDA 12.2, CUDA programming guide "Lazy Loading"; cuBLAS/cuDNN workspaces) reads
# as a leak. On an H100 (docs/gpu.md) a 64 MiB cuMemAlloc read as exactly 64 MiB and loading plus first
# launch of an NVRTC module as 0 bytes. 16 MiB (8 pages) leaves room for such library state and still
# catches a leaked TensorRT engine or execution context. Set `guard.threshold_bytes` where a test needs more.
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
        raise CudaError(f"{call} failed: {error_text(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def error_text(err):
    """A CUDA error code: its name, plus the driver's description where a driver can give one."""
    name = getattr(err, "name", repr(err))
    with contextlib.suppress(Exception):  # no driver to describe it: the name alone still says what failed
        from cuda.bindings import driver

        if isinstance(err, driver.CUresult):
            status, text = driver.cuGetErrorString(err)
            if int(status) == 0 and text:
                return f"{name} ({text.decode(errors='replace')})"
    return name


def _cuda_driver():
    from cuda.bindings import driver

    return driver


class GpuTimer:
    """Times work on one stream with CUDA events (cuEventRecord / cuEventElapsedTime).

    ``with timer: enqueue(...)`` leaves ``timer.elapsed_ms``; ``timer.time(fn, repeat)`` runs ``fn()``
    (which enqueues its work on ``timer.stream``) ``repeat`` times and returns a float64 array of ms.
    Events time the GPU's timeline: on an idle stream the host's own launch latency between the start event
    and the work counts too (docs/gpu.md measures it); ``time()`` keeps the queue ahead of the GPU instead.
    """

    resolution_ms = EVENT_RESOLUTION_MS

    def __init__(self, stream, driver=None):
        self._driver = driver or _cuda_driver()
        self.stream = stream
        self.elapsed_ms = None
        self._pair = None

    def _events(self, n):
        flags = int(self._driver.CUevent_flags.CU_EVENT_DEFAULT)
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
        """Run ``fn()`` ``warmup`` times untimed, then ``repeat`` times between events; ms per run.

        The events are created first and the warm-up runs are enqueued last, right before the first start
        event: while the GPU works through them, the host enqueues the timed runs ahead of it, so no reading
        includes the host's launch latency (a warm-up enqueued before creating the events could finish while
        they are created, leaving the first start event on an idle GPU: the first-reading outlier that
        conformance/test_gpu.py's 50 us spin showed on an H100, docs/gpu.md)."""
        import numpy as np

        if not callable(fn):
            raise TypeError(f"time(fn=...) needs a callable that enqueues work on timer.stream, got {fn!r}")
        if repeat < 1 or warmup < 0:
            raise ValueError(f"time() needs repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
        events = self._events(2 * repeat)
        for _ in range(warmup):
            fn()
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

    def __init__(self, threshold_bytes=LEAK_THRESHOLD_BYTES, driver=None):
        self._driver = driver or _cuda_driver()
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
                f"{self.threshold_bytes / 2**20:.1f} MiB, see paritygate.gpu.device.LEAK_THRESHOLD_BYTES)")
