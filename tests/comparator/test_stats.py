"""The one percentile (nearest rank, exact) that latency rows, the comparator's p99 errors and Beam use."""

import numpy as np
import pytest

from paritygate.comparator.stats import nearest_rank, p99, percentile


def test_nearest_rank_is_exact():
    # 0.99 * 100 is 99.00000000000001 in binary floats on some paths; the rank must be exactly 99
    assert [nearest_rank(n, 99) for n in (1, 40, 99, 100, 101, 1000)] == [1, 40, 99, 99, 100, 990]
    assert nearest_rank(10, 50) == 5 and nearest_rank(3, 100) == 3


def test_percentile_takes_a_sample_never_interpolates():
    samples = list(range(1, 11))
    assert percentile(samples, 99) == 10.0 != float(np.percentile(samples, 99))  # numpy: 9.91
    assert percentile(samples, 50) == 5.0 and percentile(samples, 90) == 9.0


def test_p99_of_large_arrays_is_percentile():
    v = np.random.default_rng(0).standard_normal(70_001).astype(np.float32)
    assert p99(v) == percentile(v, 99)


@pytest.mark.parametrize("q", [0, -1, 100.5])
def test_percentile_rejects_q_outside_0_100(q):
    with pytest.raises(ValueError, match=r"q must be in \(0, 100\]"):
        percentile([1.0], q)
