import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not installed (pip install 'paritygate[beam]')")

from paritygate.comparator.stats import percentile
from paritygate.shadow.combiners import MAX_SLICES, OTHER_SLICE, SKETCH_ACCURACY, QuantileSketch, ShadowStats


def test_sketch_quantiles_are_within_the_stated_accuracy():
    values = np.random.default_rng(0).lognormal(-8, 3, 100_000)
    values[::10] = 0.0
    sketch = QuantileSketch()
    for i, v in enumerate(values):
        sketch.add(float(v), key=i)
    for q in (50, 99, 99.9):
        assert sketch.quantile(q) == pytest.approx(percentile(values, q), rel=SKETCH_ACCURACY)
    assert sketch.max == values.max() and sketch.max_key == int(values.argmax())
    assert len(sketch.buckets) < 3000  # bounded by the values' dynamic range, not their number


def test_sketches_merge_as_one():
    values = np.random.default_rng(1).exponential(1e-3, 2000)
    whole, a, b = QuantileSketch(), QuantileSketch(), QuantileSketch()
    for i, v in enumerate(values):
        whole.add(v, i)
        (a if i % 2 else b).add(v, i)
    merged = a.merge(b)
    assert merged.summary() == whole.summary()


def record(key, flipped=False, passed=True, error=0.0, slice_value=None):
    row = {"elements": 10, "mismatches": 0 if passed else 1, "passed": passed, "max_abs": error,
           "reference_nan": 0, "reference_inf": 0, "candidate_nan": 0, "candidate_inf": 0}
    return {"key": key, "slice": slice_value, "passed": passed, "outputs": {"probs": row}, "failures": [],
            "inputs": {"x": np.zeros(1)}, "score": error, "top1": (3, 4 if flipped else 3)}


def test_stats_keep_the_worst_k_flips_first():
    stats = ShadowStats(k=3)
    for i in range(100):
        stats.add(record(f"k{i}", error=i / 100))
    stats.add(record("flip", flipped=True, passed=False, error=0.001))
    assert [r["key"] for r in stats.worst_first()] == ["flip", "k99", "k98"]
    assert (stats.examples, stats.flips, stats.failing, stats.per_class) == (101, 1, 1, {3: [101, 1]})


def test_slices_are_bounded():
    a, b = ShadowStats(k=1), ShadowStats(k=1)
    for i in range(MAX_SLICES + 5):
        a.add(record(f"a{i}", slice_value=i))
        b.add(record(f"b{i}", slice_value=-i - 1, flipped=True))
    a.merge(b)
    assert len(a.slices) == MAX_SLICES + 1
    assert a.slices[OTHER_SLICE][0] == 5 + MAX_SLICES + 5
    assert sum(n for n, _, _ in a.slices.values()) == a.examples
