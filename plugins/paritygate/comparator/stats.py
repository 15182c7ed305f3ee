"""One percentile for the whole suite: nearest rank, exact. Latency rows, the comparator's p99 errors and the
Beam per-batch latency all use it, so a baseline compares one statistic under one name (``p99_ms``)."""

import functools
import math
from fractions import Fraction

import numpy as np

PERCENTILE_METHOD = ("nearest rank: the smallest sample with at least q% of the samples <= it "
                     "(no interpolation; with fewer than 100 samples the p99 is the maximum)")


def nearest_rank(size, q):
    """The 1-based nearest rank of the q-th percentile among ``size`` samples; exact (0.99 * 100 is not 99 in
    binary floats, so the rank is computed in fractions, once per (size, q): the shadow gate asks for the p99 of
    every example's few elements)."""
    if not 0 < q <= 100:
        raise ValueError(f"percentile q must be in (0, 100], got {q!r}")
    return _rank(int(size), q)


@functools.lru_cache(maxsize=4096)
def _rank(size, q):
    return max(math.ceil(Fraction(str(q)) * size / 100), 1)


def percentile(samples, q):
    """Nearest-rank percentile of ``samples`` (see PERCENTILE_METHOD); ``q`` in (0, 100]."""
    data = np.asarray(samples, dtype=np.float64).ravel()
    if data.size == 0:
        raise ValueError("percentile() of no samples")
    k = nearest_rank(data.size, q) - 1
    return float(np.partition(data, k)[k])


def p99(values):
    """``percentile(values, 99)`` of a flat array in its own dtype, for arrays of any size: large arrays partition
    only the top ~1.5% (chosen by a strided sample's 98.5th percentile), falling back to the full partition when
    the sample misjudged."""
    k = nearest_rank(values.size, 99) - 1
    if values.size >= 1 << 16:
        sample = values[::64]
        j = int(0.985 * sample.size)
        top = values[values >= np.partition(sample, j)[j]]
        below = values.size - top.size
        if below <= k:
            return float(np.partition(top, k - below)[k - below])
    return float(np.partition(values, k)[k])
