"""The GPU fixtures on real hardware: device info, streams, the event timer against workloads of known cost,
and the memory guard against a deliberate leak. Without a GPU every test here skips with the probe's reason.

Each test prints its measurements as one `gpu-evidence {json}` line (see them with -s or -rP) and adds them
to the test's user_properties (so --junitxml keeps them); docs/gpu.md lists them per machine.
"""

import json
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from paritygate.gpu import device as pg

pytestmark = pytest.mark.gpu
# Timing and memory-guard tests need the GPU to itself, like latency tests: beside another xdist worker on
# the same GPU they would time its work or count its allocations. The plugin skips them on xdist workers.
exclusive = pytest.mark.latency

# Peak DRAM bandwidth by device class, bytes/s, from NVIDIA's datasheets (the highest-bandwidth variant of
# each: H100 SXM5 HBM3, A100 80GB SXM). A device-to-device copy reads and writes every byte, so it moves
# 2 * size; it cannot beat the peak (5% slack for datasheet rounding) and on these parts reaches 70-90%
# of it; 30% is the floor, low enough for the PCIe variants (H100 PCIe: 2.0 TB/s of the SXM's 3.35).
PEAK_DRAM_BYTES_PER_S = {"t4": 320e9, "l4": 300e9, "a10": 600e9, "a10g": 600e9, "l40s": 864e9, "v100": 900e9,
                         "a100": 2039e9, "h100": 3350e9, "h200": 4800e9}
PEAK_SLACK, FLOOR_FRACTION = 1.05, 0.30
COPY_BYTES = 256 * 2**20

# A kernel that spins on %globaltimer (PTX ISA: "a 64-bit global nanosecond timer") for `ns` nanoseconds.
SPIN_SOURCE = r"""
extern "C" __global__ void spin_ns(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""
# Tolerance for the spin kernel's event-timed duration:
#  below: the kernel cannot end before `ns` passed on %globaltimer; allow the event resolution (0.5 us) and
#         a %globaltimer update period of up to 1 us (it is implementation-defined).
#  above: the launch latency from the start event to the kernel's first instruction and from its exit to
#         the stop event (a few us on current GPUs), bounded at 20 us, plus 0.5% for clock-domain rounding.
SPIN_EARLY_MS, SPIN_LATE_MS, SPIN_LATE_FRACTION = 0.0015, 0.020, 0.005
# Queued warm-up ahead of timed runs: 1 ms is ~100x the host's enqueue cost of one timed run (an event record
# and a launch: a few us each, docs/gpu.md) and 10x the 10 timed 50 us runs' own enqueueing, so the GPU cannot
# catch up with the host before the timed loop is queued, unless the host stalls for a millisecond.
WARMUP_QUEUE_MS = 1.0
# Back-to-back events with nothing between them cost a few microseconds; 50 us would mean the timer adds
# more than the shortest kernels we time, i.e. that it is broken or the device is shared and busy.
OVERHEAD_LIMIT_MS = 0.050


def _driver():
    from cuda.bindings import driver

    return driver


def _compile(source, name, compute_capability):
    """NVRTC-compile `source` to a cubin for this device, load it, return (module, function)."""
    from cuda.bindings import nvrtc

    arch = "sm_" + compute_capability.replace(".", "")
    prog = pg.check(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode()]
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if int(err) != 0:
            size = pg.check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            pg.check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise pg.CudaError(f"nvrtcCompileProgram failed: {err.name}: {log.decode(errors='replace')}")
        size = pg.check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        pg.check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    finally:
        pg.check(nvrtc.nvrtcDestroyProgram(prog), "nvrtcDestroyProgram")
    driver = _driver()
    image = np.frombuffer(cubin, dtype=np.uint8)  # cuModuleLoadData copies the image from this address
    module = pg.check(driver.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")
    return module, pg.check(driver.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")


@pytest.fixture
def evidence(request):
    """record(**values): print one `gpu-evidence` JSON line and keep the values in the test's user_properties."""
    def record(**values):
        request.node.user_properties.extend(values.items())
        print("gpu-evidence", json.dumps({"test": request.node.name, **values}, default=str))
    return record


@pytest.fixture(scope="module")
def spin(gpu):
    """launch(stream, ns): enqueue one spin_ns<<<1, 1>>> on `stream`."""
    pg.activate_context()
    driver = _driver()
    module, function = _compile(SPIN_SOURCE, "spin_ns", gpu.compute_capability)

    def launch(stream, ns):
        arg = np.array([ns], dtype=np.uint64)
        params = np.array([arg.ctypes.data], dtype=np.uint64)
        pg.check(driver.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, params.ctypes.data, 0),
                 "cuLaunchKernel")

    yield launch
    pg.check(driver.cuModuleUnload(module), "cuModuleUnload")


@pytest.fixture
def device_buffers(gpu):
    """alloc(nbytes) -> CUdeviceptr, freed after the test."""
    driver, held = _driver(), []

    def alloc(nbytes):
        held.append(pg.check(driver.cuMemAlloc(nbytes), "cuMemAlloc"))
        return held[-1]

    yield alloc
    for ptr in held:
        pg.check(driver.cuMemFree(ptr), "cuMemFree")


# -- the device ----------------------------------------------------------------------------------------------
def test_gpu_fixture_reports_the_device(gpu, evidence):
    assert isinstance(gpu, pg.GpuInfo) and gpu.index == 0 and gpu.name
    assert re.fullmatch(r"\d+\.\d+", gpu.compute_capability) and int(gpu.compute_capability.split(".")[0]) >= 5
    assert gpu.total_memory_bytes > 2**30
    assert re.fullmatch(r"\d+\.\d+", gpu.driver_version)
    described = pg.probe().describe()
    assert described["name"] == gpu.name and described["device_count"] >= 1
    evidence(**described, device_class=pg.probe().device_class())


def test_cuda_stream_runs_work(cuda_stream, device_buffers):
    driver, nbytes = _driver(), 2**20
    ptr = device_buffers(nbytes)
    host = np.zeros(nbytes, dtype=np.uint8)
    pg.check(driver.cuMemsetD8Async(ptr, 0xA5, nbytes, cuda_stream), "cuMemsetD8Async")
    pg.check(driver.cuMemcpyDtoHAsync(host.ctypes.data, ptr, nbytes, cuda_stream), "cuMemcpyDtoHAsync")
    pg.check(driver.cuStreamSynchronize(cuda_stream), "cuStreamSynchronize")
    assert (host == 0xA5).all()
    assert int(driver.cuStreamQuery(cuda_stream)[0]) == 0  # idle after the sync


# -- the timer -----------------------------------------------------------------------------------------------
@exclusive
def test_timer_overhead_and_resolution(gpu_timer, evidence):
    samples = gpu_timer.overhead_ms(repeat=1000)
    distinct = np.unique(samples)
    quantum = float(np.diff(distinct).min()) if distinct.size > 1 else float("nan")
    stats = {"overhead_ms_median": float(np.median(samples)), "overhead_ms_p99": float(np.percentile(samples, 99)),
             "overhead_ms_min": float(samples.min()), "overhead_ms_max": float(samples.max()),
             "observed_quantum_ms": quantum, "documented_resolution_ms": pg.EVENT_RESOLUTION_MS}
    evidence(**stats)
    assert (samples >= 0).all()
    assert stats["overhead_ms_median"] < OVERHEAD_LIMIT_MS, stats
    # The timer is at least as fine as documented: distinct readings sit no further apart than 0.5 us.
    assert not quantum > pg.EVENT_RESOLUTION_MS, stats


@exclusive
@pytest.mark.parametrize("requested_ns", [50_000, 1_000_000, 10_000_000], ids=["50us", "1ms", "10ms"])
def test_timer_matches_a_kernel_of_known_duration(gpu_timer, spin, requested_ns, evidence):
    requested_ms = requested_ns / 1e6
    # Warm-up: at least 2 runs and at least WARMUP_QUEUE_MS of queued spinning, enqueued right before the timed
    # runs (GpuTimer.time), so that the host has enqueued the timed launches before the GPU gets to them: each
    # of the 10 readings is then the kernel alone, launch gaps excluded, and each must lie within the bounds.
    warmup = max(2, math.ceil(WARMUP_QUEUE_MS / requested_ms))
    measured = gpu_timer.time(lambda: spin(gpu_timer.stream, requested_ns), repeat=10, warmup=warmup)
    error_us = (measured - requested_ms) * 1e3
    evidence(requested_ms=requested_ms, measured_ms=measured.round(5).tolist(),
             error_us_median=float(np.median(error_us)), error_us_max=float(error_us.max()))
    low, high = requested_ms - SPIN_EARLY_MS, requested_ms * (1 + SPIN_LATE_FRACTION) + SPIN_LATE_MS
    assert ((measured >= low) & (measured <= high)).all(), f"outside [{low}, {high}] ms: {measured}"


@exclusive
def test_timer_context_manager_agrees_with_the_host_clock(gpu_timer, spin, evidence):
    requested_ms = 20.0
    spin(gpu_timer.stream, 1_000)  # warm: the first launch would pay for loading the kernel
    _sync(gpu_timer.stream)
    host_start = time.perf_counter()
    with gpu_timer:
        spin(gpu_timer.stream, int(requested_ms * 1e6))
    host_ms = (time.perf_counter() - host_start) * 1e3
    evidence(requested_ms=requested_ms, event_ms=gpu_timer.elapsed_ms, host_ms=host_ms)
    assert requested_ms - SPIN_EARLY_MS <= gpu_timer.elapsed_ms <= requested_ms * (1 + SPIN_LATE_FRACTION) + SPIN_LATE_MS
    # The events lie inside the host's interval (launch .. synchronised), so they cannot measure more.
    assert gpu_timer.elapsed_ms <= host_ms + pg.EVENT_RESOLUTION_MS


@exclusive
def test_timer_measures_a_copy_at_plausible_bandwidth(gpu, gpu_timer, device_buffers, evidence):
    driver, stream = _driver(), gpu_timer.stream
    src, dst = device_buffers(COPY_BYTES), device_buffers(COPY_BYTES)
    pg.check(driver.cuMemsetD8Async(src, 1, COPY_BYTES, stream), "cuMemsetD8Async")
    times = gpu_timer.time(lambda: pg.check(driver.cuMemcpyDtoDAsync(dst, src, COPY_BYTES, stream),
                                            "cuMemcpyDtoDAsync"), repeat=20, warmup=3)
    bandwidth = 2 * COPY_BYTES / (np.median(times) / 1e3)  # bytes read + written per second
    device = pg.device_class(gpu.name)
    peak = PEAK_DRAM_BYTES_PER_S.get(device)
    evidence(copy_bytes=COPY_BYTES, copy_ms_median=float(np.median(times)), copy_ms_min=float(times.min()),
             copy_bandwidth_GBps=bandwidth / 1e9, datasheet_peak_GBps=peak / 1e9 if peak else None)
    if peak is None:  # unknown part: only what no GPU of today does
        assert 10e9 <= bandwidth <= 10e12, f"{bandwidth / 1e9:.0f} GB/s"
    else:
        assert FLOOR_FRACTION * peak <= bandwidth <= PEAK_SLACK * peak, (
            f"{device}: {bandwidth / 1e9:.0f} GB/s vs datasheet peak {peak / 1e9:.0f} GB/s")


def _sync(stream):
    pg.check(_driver().cuStreamSynchronize(stream), "cuStreamSynchronize")


# -- the memory guard ----------------------------------------------------------------------------------------
@exclusive
def test_memory_guard_catches_a_deliberate_leak_and_passes_after_the_free(gpu, evidence):
    pg.activate_context()
    driver, leak = _driver(), 64 * 2**20
    guard = pg.MemoryGuard().start()
    ptr = pg.check(driver.cuMemAlloc(leak), "cuMemAlloc")
    try:
        message = guard.check()
        leaked_while_held = guard.leaked_bytes
        assert message and message.startswith("device memory leak: ") and leaked_while_held >= leak, message
    finally:
        pg.check(driver.cuMemFree(ptr), "cuMemFree")
    clean = guard.check()
    evidence(allocated_bytes=leak, leaked_while_held=leaked_while_held, leaked_after_free=guard.leaked_bytes,
             message=message)
    assert clean is None, guard.leaked_bytes


@exclusive
def test_loading_and_first_launch_of_a_kernel_stays_under_the_leak_threshold(gpu, cuda_stream, evidence):
    """The noise LEAK_THRESHOLD_BYTES must absorb: a new module, loaded and launched once, then left loaded."""
    pg.activate_context()
    guard = pg.MemoryGuard().start()
    source = SPIN_SOURCE.replace("spin_ns", "spin_ns_fresh")
    module, function = _compile(source, "spin_ns_fresh", gpu.compute_capability)
    arg = np.array([1000], dtype=np.uint64)
    params = np.array([arg.ctypes.data], dtype=np.uint64)
    pg.check(_driver().cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, cuda_stream, params.ctypes.data, 0), "launch")
    message = guard.check()
    evidence(module_load_and_first_launch_bytes=guard.leaked_bytes, threshold_bytes=guard.threshold_bytes)
    pg.check(_driver().cuModuleUnload(module), "cuModuleUnload")
    assert message is None, message


@exclusive
def test_memory_guard_fixture_fails_a_leaking_test_only(pytester, monkeypatch):
    plugins = Path(pg.__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv(pg.SHARED_GPU_ENV, raising=False)
    pytester.makepyfile(test_leaky="""
        from cuda.bindings import driver

        def test_leaks(gpu_memory_guard):
            err, ptr = driver.cuMemAlloc(64 * 2**20)  # never freed
            assert int(err) == 0

        def test_frees(gpu_memory_guard):
            err, ptr = driver.cuMemAlloc(64 * 2**20)
            assert int(err) == 0
            assert int(driver.cuMemFree(ptr)[0]) == 0
    """)
    result = pytester.runpytest_subprocess("-p", "no:paritygate", "-p", "paritygate.plugin", "-rE")
    result.assert_outcomes(passed=2, errors=1)  # test_leaks passes its call and errors at teardown
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaks*", "*device memory leak: * MiB no longer free after the test*"])
