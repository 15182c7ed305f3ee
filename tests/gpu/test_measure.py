"""paritygate.gpu.measure on any machine, over a fake cuda.bindings driver: result unpacking, the event
timer's bookkeeping and the memory guard's verdicts. The real-GPU behaviour is conformance/test_gpu.py."""

import numpy as np
import pytest

from paritygate.gpu import measure as gm
from tests.conftest import CudaResult

_Err = CudaResult


OK = _Err(0, "CUDA_SUCCESS")


def test_check_unpacks_results_and_names_failures():
    assert gm.check((OK,)) is None
    assert gm.check((OK, 7)) == 7
    assert gm.check((OK, 1, 2)) == (1, 2)
    with pytest.raises(gm.CudaError, match=r"^cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"):
        gm.check((_Err(2, "CUDA_ERROR_OUT_OF_MEMORY"), None), "cuMemAlloc")


class FakeEvents:
    """Events on a fake GPU clock: each cuEventRecord stamps the clock, then advances it by `step_ms`."""

    class CUevent_flags:
        CU_EVENT_DEFAULT = 0

    def __init__(self, step_ms=0.25):
        self.now, self.step, self.stamps, self.live, self.next_id = 0.0, step_ms, {}, set(), 0

    def cuEventCreate(self, flags):
        self.next_id += 1
        self.live.add(self.next_id)
        return OK, self.next_id

    def cuEventRecord(self, event, stream):
        assert event in self.live and stream == "stream"
        self.stamps[event] = self.now
        self.now += self.step
        return (OK,)

    def cuEventSynchronize(self, event):
        return (OK,)

    def cuEventElapsedTime(self, start, stop):
        return OK, self.stamps[stop] - self.stamps[start]

    def cuEventDestroy(self, event):
        self.live.remove(event)
        return (OK,)


def test_timer_times_each_run_and_frees_its_events():
    driver = FakeEvents(step_ms=0.25)
    timer = gm.GpuTimer("stream", driver=driver)
    calls = []
    times = timer.time(lambda: calls.append(1), repeat=4, warmup=2)
    assert len(calls) == 6
    np.testing.assert_allclose(times, [0.25] * 4)
    assert driver.live == set()  # time() destroys the events it made


def test_timer_enqueues_the_warm_up_after_creating_its_events():
    """The warm-up runs must be the last thing before the first start event (the GPU stays busy while the
    timed runs are enqueued), so no event is created between them and the timed loop."""
    driver, log = FakeEvents(), []
    create = driver.cuEventCreate
    driver.cuEventCreate = lambda flags: (log.append("create"), create(flags))[1]
    record = driver.cuEventRecord
    driver.cuEventRecord = lambda event, stream: (log.append("record"), record(event, stream))[1]
    gm.GpuTimer("stream", driver=driver).time(lambda: log.append("run"), repeat=2, warmup=3)
    assert log == ["create"] * 4 + ["run"] * 3 + ["record", "run", "record"] * 2


def test_timer_context_manager_reuses_one_pair_until_closed():
    driver = FakeEvents(step_ms=1.5)
    timer = gm.GpuTimer("stream", driver=driver)
    for _ in range(3):
        with timer:
            pass
        assert timer.elapsed_ms == 1.5
    assert len(driver.live) == 2
    timer.close()
    assert driver.live == set()


def test_timer_checks_its_arguments():
    timer = gm.GpuTimer("stream", driver=FakeEvents())
    with pytest.raises(TypeError, match="needs a callable"):
        timer.time(3)
    with pytest.raises(ValueError, match="repeat >= 1 and warmup >= 0, got repeat=0"):
        timer.time(lambda: None, repeat=0)


class FakeMemory:
    def __init__(self, free):
        self.free = list(free)

    def cuCtxSynchronize(self):
        return (OK,)

    def cuMemGetInfo(self):
        return OK, self.free.pop(0), 80 * 2**30


def test_guard_passes_within_the_threshold_and_names_a_leak_beyond_it():
    mib = 2**20
    clean = gm.MemoryGuard(driver=FakeMemory([1000 * mib, (1000 - 16) * mib])).start()
    assert clean.check() is None and clean.leaked_bytes == 16 * mib  # at the threshold: not a leak
    leaky = gm.MemoryGuard(driver=FakeMemory([1000 * mib, 936 * mib])).start()
    assert leaky.check() == ("device memory leak: 64.0 MiB no longer free after the test (free 1000.0 -> 936.0 "
                             "MiB; threshold 16.0 MiB, see paritygate.gpu.device.LEAK_THRESHOLD_BYTES)")
    freed = gm.MemoryGuard(threshold_bytes=0, driver=FakeMemory([1000 * mib, 1002 * mib])).start()
    assert freed.check() is None  # more free than before is never a leak


def test_guard_check_before_start_is_a_usage_error():
    with pytest.raises(RuntimeError, match=r"check\(\) before start\(\)"):
        gm.MemoryGuard(driver=FakeMemory([])).check()
