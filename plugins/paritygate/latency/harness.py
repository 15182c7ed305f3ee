"""The timing loop, in the manner of trtexec: a warm-up, then at least N timed iterations, then percentiles.

A sample is the wall time from ``time.perf_counter_ns`` around one call. When one call is so short that the
loop's own cost (the clock read and the call) would exceed OVERHEAD_TARGET of it, a sample times
``calls_per_sample`` back-to-back calls and is divided by that count (pytest-benchmark calibrates its
"iterations" the same way); the percentiles are then those of these per-call means, and the row says so.

The loop's self-overhead is measured by timing an empty callable through the very same loop, in slices
interleaved with the measurement; the check fails when it exceeds OVERHEAD_LIMIT of the median measured. The garbage collector is paused while a
loop runs (as ``timeit`` does), so a collection triggered by earlier tests does not land in a sample.
"""

import gc
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from paritygate.comparator.stats import PERCENTILE_METHOD, percentile  # noqa: F401 - the one percentile, re-exported

# The requirement: the harness's own cost must stay within 1% of what it measures, or the check fails.
OVERHEAD_LIMIT = 0.01
# Grouping calls aims at half the limit: the overhead estimate is a median of ~40-100 ns values, which moves
# by 10-25% from one measurement to the next on a busy machine, so the final measurement stays under 1%.
OVERHEAD_TARGET = OVERHEAD_LIMIT / 2
GROUPINGS = (1, 2, 5, 10, 20, 50, 100)  # candidate calls_per_sample, smallest first
CALIBRATION_SAMPLES = 200  # empty-callable samples per grouping tried (well under 1 ms each)
OVERHEAD_SAMPLES = 1000  # empty-callable samples for the overhead reported with a row (at most) ...
OVERHEAD_CHUNKS = 10  # ... taken in this many slices between slices of the timed loop
WARMUP_CAP = 10_000  # warm-up calls at most: a 100 ns callable needs no million calls to warm up
PROFILE_ENV = "PARITYGATE_LATENCY_PROFILE"


class LatencyError(RuntimeError):
    """The harness cannot measure as asked; the message says how to fix the call or the environment."""


@dataclass(frozen=True)
class Profile:
    """How long to warm up and measure. A row takes about ``warmup_s + duration_s``, at least the iterations."""

    name: str
    warmup_s: float  # warm up for at least this long ...
    warmup_iterations: int  # ... and at least this many calls
    duration_s: float  # measure for at least this long ...
    min_iterations: int  # ... and at least this many samples (nearest-rank p99 of 100 is the 2nd largest)
    max_iterations: int  # ... but never more samples than this


PROFILES = {
    # tests of the harness itself and smoke runs: ~0.1 s per row
    "quick": Profile("quick", warmup_s=0.02, warmup_iterations=5, duration_s=0.05, min_iterations=100,
                     max_iterations=20_000),
    # the default: ~0.6 s per row, so a model x precision (4 rows, the reference's 2 shared) costs 1-3 s
    "ci": Profile("ci", warmup_s=0.1, warmup_iterations=10, duration_s=0.5, min_iterations=100,
                  max_iterations=20_000),
    # trtexec's defaults (--warmUp=200 ms, --duration=3 s) with 1000 samples at least
    "nightly": Profile("nightly", warmup_s=0.2, warmup_iterations=10, duration_s=3.0, min_iterations=1000,
                       max_iterations=200_000),
    # a model x precision that no budget gates (its check is a skip that reports the numbers): one warm-up call
    # and >= 3 samples per row, so a model whose call takes seconds costs seconds, not minutes (issue 30: HED at
    # 320x320 spent 725 s in the ci profile's 100 samples per row before being skipped)
    "probe": Profile("probe", warmup_s=0.0, warmup_iterations=1, duration_s=0.2, min_iterations=3,
                     max_iterations=2_000),
}
UNBUDGETED = "probe"  # the profile of an unbudgeted check unless PARITYGATE_LATENCY_PROFILE names one


def load_profile(name=None):
    """The profile called ``name``, else ``$PARITYGATE_LATENCY_PROFILE``, else ``ci``."""
    name = name or os.environ.get(PROFILE_ENV) or "ci"
    if name not in PROFILES:
        raise LatencyError(f"unknown latency profile {name!r} (from {PROFILE_ENV} or the caller); "
                           f"choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


# -- percentiles ----------------------------------------------------------------------------------------
def summarize(samples_ms, prefix=""):
    """p50/p90/p99/mean/min/max of ``samples_ms`` as ``{prefix}p50_ms`` ... keys, rounded to 0.1 us."""
    data = np.asarray(samples_ms, dtype=np.float64)
    stats = {f"p{q}": percentile(data, q) for q in (50, 90, 99)}
    stats.update(mean=float(data.mean()), min=float(data.min()), max=float(data.max()))
    return {f"{prefix}{k}_ms": round(v, 4) for k, v in stats.items()}


def cdf_points(samples, limit=500):
    """At most ``limit`` evenly spaced order statistics (min and max included): the CDF, subsampled."""
    data = np.sort(np.asarray(samples, dtype=np.float64))
    if data.size > limit:
        data = data[np.linspace(0, data.size - 1, limit).round().astype(int)]
    return [round(float(v), 4) for v in data]


# -- the loop -------------------------------------------------------------------------------------------
@dataclass
class Timing:
    """What ``measure`` saw: per-call wall times and, when the callable reports them, its own timings."""

    wall_ns: np.ndarray  # float64, one per sample: a call, or the mean of calls_per_sample calls
    calls_per_sample: int
    overhead_ns: float  # median per-call cost of the empty callable through the same loop
    reported: dict = None  # name -> float64 ms array, one per sample (e.g. "compute", "e2e" from a runner)

    @property
    def iterations(self):
        return int(self.wall_ns.size)

    @property
    def overhead_fraction(self):
        return self.overhead_ns / max(float(np.median(self.wall_ns)), 1e-9)


def _noop():
    pass


@contextmanager
def _gc_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _timed(fn, n, k=1, after=None):
    """``n`` samples of ``k`` calls each, ns per call; ``after()`` runs after each sample, outside the clock."""
    clock = time.perf_counter_ns
    out = [0] * n
    extra = [None] * n
    if k == 1 and after is None:
        for i in range(n):
            start = clock()
            fn()
            out[i] = clock() - start
    elif k == 1:
        for i in range(n):
            start = clock()
            fn()
            out[i] = clock() - start
            extra[i] = after()
    else:
        if after is not None:
            raise ValueError("after() reports per call: it needs calls_per_sample == 1")
        calls = range(k)
        for i in range(n):
            start = clock()
            for _ in calls:
                fn()
            out[i] = clock() - start
    return np.asarray(out, dtype=np.float64) / k, extra


def loop_overhead_ns(calls_per_sample=1, samples=OVERHEAD_SAMPLES, after=None):
    """Median per-call cost of an empty callable timed through the same loop ``measure`` uses."""
    with _gc_paused():
        wall, _ = _timed(_noop, samples, calls_per_sample, after)
    return float(np.median(wall))


def _warm_up(fn, profile):
    """Call ``fn`` for the profile's warm-up; return the per-call time of its second half, in ns."""
    clock = time.perf_counter_ns
    durations = []
    end = clock() + int(profile.warmup_s * 1e9)
    while len(durations) < profile.warmup_iterations or (clock() < end and len(durations) < WARMUP_CAP):
        start = clock()
        fn()
        durations.append(clock() - start)
    return max(float(np.median(durations[len(durations) // 2:])), 1.0)


def calls_per_sample_for(per_call_ns):
    """The smallest grouping whose measured loop overhead is within OVERHEAD_TARGET of ``per_call_ns``."""
    for k in GROUPINGS:
        if loop_overhead_ns(k, CALIBRATION_SAMPLES) <= OVERHEAD_TARGET * per_call_ns:
            return k
    return GROUPINGS[-1]


def measure(fn, profile=None, after=None):
    """Warm up, then time ``fn()`` for at least ``profile.min_iterations`` samples and ``profile.duration_s``.

    ``after``, when given, is called after every call outside the timed region and returns a dict of the
    callable's own timings in ms (a GPU runner's CUDA-event times); it forces one call per sample.
    When the overhead measured after the loop still exceeds OVERHEAD_LIMIT (a load spike during calibration),
    the loop is run again once with the next larger grouping; the check reports whatever the last run saw.
    """
    if not callable(fn):
        raise TypeError(f"measure(fn=...) needs a callable taking no arguments, got {fn!r}")
    profile = profile or load_profile()
    per_call = _warm_up(fn, profile)
    k = 1 if after is not None else calls_per_sample_for(per_call)
    timing = _measured(fn, profile, per_call, k, after)
    if after is None and timing.overhead_fraction > OVERHEAD_LIMIT and k < GROUPINGS[-1]:
        timing = _measured(fn, profile, per_call, GROUPINGS[GROUPINGS.index(k) + 1], after)
    return timing


def _measured(fn, profile, per_call, k, after):
    """The timed loop in OVERHEAD_CHUNKS chunks, each followed by empty-callable samples through the same loop,
    so that the overhead is measured over the same minutes (and the same load) as the samples it qualifies."""
    n = math.ceil(profile.duration_s * 1e9 / (k * per_call))
    n = min(max(n, profile.min_iterations), profile.max_iterations)
    empty_after = _empty_report if after is not None else None
    walls, extras, empties = [], [], []
    with _gc_paused():
        for size in _chunk_sizes(n, OVERHEAD_CHUNKS):
            wall, extra = _timed(fn, size, k, after)
            walls.append(wall)
            extras += extra
            empties.append(_timed(_noop, min(size, OVERHEAD_SAMPLES // OVERHEAD_CHUNKS), k, empty_after)[0])
    overhead = float(np.median(np.concatenate(empties)))
    return Timing(np.concatenate(walls), k, overhead, _reported(extras) if after is not None else None)


def _chunk_sizes(n, chunks):
    base, extra = divmod(n, chunks)
    return [base + (i < extra) for i in range(chunks) if base + (i < extra)]


def _empty_report():
    return {}


def _reported(extra):
    """Per-sample dicts -> name -> ms array; a name missing (None) in any sample is dropped."""
    names = set.intersection(*({k for k, v in e.items() if v is not None} for e in extra)) if extra else set()
    return {name: np.asarray([e[name] for e in extra], dtype=np.float64) for name in sorted(names)}
