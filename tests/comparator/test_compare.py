"""paritygate.comparator.compare: isclose semantics at the boundary, statistics, NaN/Inf rules, the worst
element, failing batch elements, shape and output pairing errors, and speed."""

import math
import time

import numpy as np
import pytest

from paritygate.comparator.compare import (
    OutputMismatchError,
    compare_array,
    compare_outputs,
    cosine_ok,
    pair_outputs,
)
from paritygate.comparator.stats import p99 as _p99
from paritygate.comparator.tolerance import DEFAULTS, Tolerance
from tests.conftest import toy_spec

TOL = Tolerance(0.25, 0.25, "test")


def f32(*values):
    return np.array(values, dtype=np.float32)


# -- isclose semantics at the boundary -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ref", [1.0, -1.0, 4.0])
def test_exactly_atol_plus_rtol_times_ref_passes_and_the_next_float_up_fails(dtype, ref):
    ref = dtype(ref)
    limit = dtype(0.25) + dtype(0.25) * abs(ref)  # exact in binary: 0.5, 0.5, 1.25
    at = ref + np.sign(ref) * limit
    beyond = np.nextafter(at, dtype(np.inf) * np.sign(ref))
    assert compare_array(np.array([ref]), np.array([at]), TOL).passed
    assert np.isclose(at, ref, rtol=0.25, atol=0.25)  # the semantics the comparator promises
    result = compare_array(np.array([ref]), np.array([beyond]), TOL)
    assert not result.passed and result.mismatches == 1
    assert not np.isclose(beyond, ref, rtol=0.25, atol=0.25)


def test_boundary_with_the_fp32_default_tolerance_at_zero():
    tol = DEFAULTS["fp32"]
    atol = np.float32(tol.atol)  # not exact in binary: the float32 value of 1e-5 is the limit
    assert compare_array(f32(0.0, 0.0), np.array([atol, -atol]), tol).passed
    up = np.nextafter(atol, np.float32(1))
    assert compare_array(f32(0.0), np.array([up]), tol).mismatches == 1


def test_the_symmetric_candidate_side_is_not_used_as_reference():
    # isclose is asymmetric: rtol scales |reference|, not |candidate|
    tol = Tolerance(0.0, 0.5, "test")
    assert compare_array(f32(2.0), f32(1.0), tol).passed  # |1 - 2| = 1 <= 0.5 * 2
    assert not compare_array(f32(1.0), f32(2.0), tol).passed  # |2 - 1| = 1 > 0.5 * 1


# -- statistics ---------------------------------------------------------------------------------------
def test_statistics_against_hand_computed_values():
    ref, cand = f32(1, 2, 4, -2), f32(1.5, 2, 3, -2)
    r = compare_array(ref, cand, Tolerance(0.1, 0.1, "test"))
    # |diff| = 0.5 0 1 0; |diff|/|ref| = 0.5 0 0.25 0; limits 0.2 0.3 0.5 0.3
    assert (r.elements, r.mismatches, r.nonfinite_mismatches, r.passed) == (4, 2, 0, False)
    assert (r.max_abs, r.mean_abs, r.p99_abs) == (1.0, 0.375, 1.0)
    assert (r.max_rel, r.mean_rel, r.p99_rel) == (0.5, 0.1875, 0.5)
    assert r.cosine == pytest.approx(21.5 / (5 * math.sqrt(19.25)), rel=1e-12)
    assert r.worst == {"index": [2], "batch_element": 2, "reference": 4.0, "candidate": 3.0}
    assert r.failing_batch_elements == [0, 2]
    assert r.shape == (4,) and r.as_dict()["shape"] == [4]
    assert r.tolerance == {"atol": 0.1, "rtol": 0.1, "source": "test"}


def test_p99_is_the_nearest_rank_percentile():
    ref = np.zeros(200, np.float64)
    cand = np.arange(1, 201, dtype=np.float64)  # |diff| = 1..200; rank ceil(0.99 * 200) = 198
    r = compare_array(ref, cand, Tolerance(1000, 0, "test"))
    assert r.p99_abs == 198.0 and r.max_abs == 200.0 and r.mean_abs == 100.5 and r.passed


def _nearest_rank_p99(v):
    k = int(np.ceil(0.99 * v.size)) - 1
    return float(np.sort(v)[k])


@pytest.mark.parametrize("n", [1, 100, 65_535, 65_536, 300_007])
@pytest.mark.parametrize("kind", ["normal", "ties", "sorted", "reversed", "sparse", "hidden_from_sample"])
def test_p99_is_exact_on_large_and_adversarial_arrays(n, kind):
    rng = np.random.default_rng(n)
    v = {"normal": lambda: rng.standard_normal(n),
         "ties": lambda: rng.integers(0, 3, n).astype(float),
         "sorted": lambda: np.arange(n, dtype=float),
         "reversed": lambda: np.arange(n, dtype=float)[::-1].copy(),
         "sparse": lambda: np.where(rng.random(n) < 0.005, rng.random(n), 0.0),
         "hidden_from_sample": lambda: np.where(np.arange(n) % 64 == 1, 1.0, 0.0)}[kind]().astype(np.float32)
    assert _p99(v) == _nearest_rank_p99(v)
    v[v.size // 2] = np.inf  # relative errors hold inf where the reference is zero
    assert _p99(v) == _nearest_rank_p99(v)


def test_relative_error_where_the_reference_is_zero():
    r = compare_array(f32(0, 0, 2), f32(0, 1, 3), Tolerance(10, 0, "test"))
    # 0/0 counts as 0; x/0 as inf, which the mean skips
    assert r.max_rel == math.inf and r.mean_rel == pytest.approx(0.25)
    assert r.passed


def test_identical_outputs():
    x = np.linspace(-3, 3, 50, dtype=np.float32).reshape(5, 10)
    r = compare_array(x, x.copy(), DEFAULTS["fp32"])
    assert r.passed and r.max_abs == 0 and r.max_rel == 0 and r.cosine == pytest.approx(1.0)
    assert r.worst == {} and r.failing_batch_elements == [] and cosine_ok(r)


def test_cosine_of_zero_vectors_and_opposite_vectors():
    assert compare_array(f32(0, 0), f32(0, 0), TOL).cosine == 1.0
    assert compare_array(f32(0, 0), f32(1, 0), Tolerance(5, 0, "t")).cosine == 0.0
    r = compare_array(f32(1, 2), f32(-1, -2), Tolerance(5, 0, "t"))
    assert r.cosine == pytest.approx(-1.0) and not cosine_ok(r)


def test_empty_outputs_pass():
    r = compare_array(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), TOL)
    assert r.passed and r.elements == 0


def test_integer_outputs_compare_exactly_with_zero_tolerance():
    r = compare_array(np.array([1, 2, 3], np.int64), np.array([1, 2, 4], np.int64), Tolerance(0, 0, "t"))
    assert r.mismatches == 1 and r.worst["index"] == [2]


def test_float16_candidate_against_float32_reference():
    ref = f32(1.0, 2.0, 3.0)
    r = compare_array(ref, ref.astype(np.float16), DEFAULTS["fp16"])
    assert r.passed


# -- NaN / Inf rules ---------------------------------------------------------------------------------
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("ref, cand, passed", [
    (1.0, NAN, False),   # candidate NaN where the reference is finite
    (1.0, INF, False),   # candidate Inf where the reference is finite
    (NAN, NAN, True),    # matching NaN
    (INF, INF, True),    # matching +Inf
    (-INF, -INF, True),  # matching -Inf
    (-INF, INF, False),  # opposite infinities
    (INF, NAN, False),
    (NAN, INF, False),
    (NAN, 1.0, False),   # reference NaN with a finite candidate
    (INF, 1e38, False),  # reference Inf with a finite candidate
], ids=lambda v: repr(v))
def test_nonfinite_rules(ref, cand, passed):
    r = compare_array(f32(0.5, ref, 2.0), f32(0.5, cand, 2.0), TOL)
    assert r.passed is passed
    assert (r.mismatches, r.nonfinite_mismatches) == ((0, 0) if passed else (1, 1))
    if not passed:
        assert r.worst["index"] == [1] and r.failing_batch_elements == [1]
    assert r.max_abs == 0.0 and r.cosine == pytest.approx(1.0)  # statistics over the finite pairs only


def test_nonfinite_mismatch_is_worse_than_any_finite_one():
    r = compare_array(f32(0, 0, 1), f32(1000, 0, NAN), TOL)
    assert r.mismatches == 2 and r.nonfinite_mismatches == 1
    assert r.worst["index"] == [2] and math.isnan(r.worst["candidate"])
    assert r.max_abs == 1000.0
    assert "1 non-finite" in r.describe()


def test_nan_and_inf_are_counted_per_side_and_the_statistics_say_finite_only():
    ref = np.ones(64, np.float32)
    ref[0], ref[1] = INF, NAN
    cand = np.ones(64, np.float32)
    cand[1:32] = NAN  # 31 NaN, one of them matching the reference's NaN
    cand[63] = -INF
    r = compare_array(ref, cand, TOL, "y")
    assert (r.reference_nan, r.reference_inf, r.candidate_nan, r.candidate_inf) == (1, 1, 31, 1)
    assert r.finite_elements == 31 and r.nonfinite_mismatches == 32 and r.max_abs == 0.0
    assert r.nonfinite_text() == "1 NaN in the reference; 1 Inf in the reference; 31 NaN in the candidate; " \
                                 "1 Inf in the candidate"
    assert "over the 31 finite elements only: max abs 0," in r.describe()
    clean = compare_array(f32(1, 2), f32(1, 2), TOL)
    assert clean.finite_elements == 2 and clean.nonfinite_text() == "" and "finite elements only" not in clean.describe()


# -- worst element, failing batch elements -----------------------------------------------------------
def test_worst_index_and_failing_batch_elements():
    ref = np.zeros((4, 2, 3), np.float32)
    cand = ref.copy()
    cand[0, 1, 2] = 1.0
    cand[2, 0, 1] = -3.0  # largest excess over the limit
    cand[3, 1, 1] = 0.2  # within atol 0.25
    r = compare_array(ref, cand, TOL, name="y", cand_name="out_y")
    assert r.worst == {"index": [2, 0, 1], "batch_element": 2, "reference": 0.0, "candidate": -3.0}
    assert r.failing_batch_elements == [0, 2]
    assert (r.output, r.candidate_output, r.mismatches) == ("y", "out_y", 2)
    text = r.describe()
    assert "output 'y': 2/24 elements outside atol=0.25 rtol=0.25" in text
    assert "worst at index [2, 0, 1] (batch element 2)" in text


def test_worst_is_by_excess_over_the_limit_not_by_absolute_error():
    # |diff| 2 at ref 100 is within rtol; |diff| 1 at ref 0 is not
    r = compare_array(f32(100, 0), f32(102, 1), Tolerance(0.1, 0.1, "t"))
    assert r.mismatches == 1 and r.worst["index"] == [1] and r.max_abs == 2.0


def test_scalar_outputs():
    r = compare_array(np.float32(1.0), np.float32(2.0), TOL)
    assert not r.passed and r.worst["batch_element"] == 0 and r.failing_batch_elements == []


# -- shapes and pairing ----------------------------------------------------------------------------
def test_shape_mismatch_names_both_outputs_and_shapes():
    with pytest.raises(OutputMismatchError, match=r"output 'y': candidate 'out_y' has shape \[2, 3\], "
                                                   r"reference has \[2, 1\]"):
        compare_array(np.zeros((2, 1)), np.zeros((2, 3)), TOL, "y", "out_y")


def test_same_size_but_different_shape_is_a_mismatch_too():
    with pytest.raises(OutputMismatchError):
        compare_array(np.zeros((2, 3)), np.zeros((3, 2)), TOL)


def test_pairing_by_name():
    assert pair_outputs(toy_spec(), ["y", "z"], ["z", "y"]) == {"y": "y", "z": "z"}


def test_pairing_through_the_outputs_map():
    spec = toy_spec(outputs={"y": "Identity", "z": "Identity_1"})
    assert pair_outputs(spec, ["y", "z"], ["Identity_1", "Identity"]) == {"y": "Identity", "z": "Identity_1"}


def test_unmatched_reference_output_is_an_error_naming_the_outputs():
    with pytest.raises(OutputMismatchError) as info:
        pair_outputs(toy_spec(), ["y", "z"], ["y", "w"])
    msg = str(info.value)
    assert "reference output 'z' has no candidate output 'z'" in msg and "['w', 'y']" in msg
    assert "parity.toml: model 'toy': key 'outputs'" in msg


def test_unmatched_candidate_output_is_an_error_naming_it():
    with pytest.raises(OutputMismatchError, match=r"candidate output\(s\) \['extra'\] match no reference output "
                                                   r"\['y'\]"):
        pair_outputs(toy_spec(), ["y"], ["y", "extra"])


def test_mapping_an_output_the_reference_lacks_is_an_error():
    spec = toy_spec(outputs={"y": "y", "ghost": "y"})
    with pytest.raises(OutputMismatchError, match=r"maps \['ghost'\], which the reference does not have"):
        pair_outputs(spec, ["y"], ["y"])


def test_mapped_output_missing_on_the_candidate():
    spec = toy_spec(outputs={"y": "Identity"})
    with pytest.raises(OutputMismatchError, match=r"reference output 'y' has no candidate output 'Identity'"):
        pair_outputs(spec, ["y"], ["y"])


def test_compare_outputs_uses_each_outputs_tolerance():
    spec = toy_spec(precisions=("fp16",), outputs={"y": "out_y"},
                    tolerances={"fp16": {"atol": 0.0, "rtol": 0.0, "outputs": {"z": {"atol": 1.0}}}})
    ref = {"y": f32(1, 2), "z": f32(1, 2)}
    cand = {"out_y": f32(1, 2.5), "z": f32(1, 2.5)}
    y, z = compare_outputs(spec, "fp16", ref, cand)
    assert (y.output, y.candidate_output, y.passed) == ("y", "out_y", False)
    assert (z.output, z.passed, z.tolerance["atol"]) == ("z", True, 1.0)
    assert "outputs.z" in z.tolerance["source"]


# -- speed ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.latency  # a timed assertion: it runs with the latency tests, alone (under -n 2 it once took 1.01 s)
def test_ten_million_float32_elements_compare_in_under_half_a_second():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((100, 100_000), dtype=np.float32)
    cand = ref + rng.standard_normal(ref.shape, dtype=np.float32) * np.float32(1e-7)
    compare_array(ref, cand, DEFAULTS["fp32"])  # warm-up
    times = []
    for _ in range(3):
        start = time.perf_counter()
        r = compare_array(ref, cand, DEFAULTS["fp32"])
        times.append(time.perf_counter() - start)
    assert r.elements == 10_000_000
    assert min(times) < 0.5, f"best of 3: {min(times):.3f} s"


# -- the cosine budget, enforced where the reference's rms is above the floor atol alone could breach -------
COS = Tolerance(0.3, 0.1, "t", 0.997, "Polygraphy")


def test_a_failing_cosine_fails_the_output_and_cites_its_source():
    ref = np.full(100, 10.0, np.float32)
    ref[::2] = -10.0
    cand = ref + np.where(np.arange(100) % 4 < 2, 1.2, -1.2).astype(np.float32)  # within atol + rtol*10 = 1.3
    r = compare_array(ref, cand, COS)
    assert r.mismatches == 0 and r.cosine_enforced and r.cosine < 0.997
    assert not r.passed and r.cosine_failed
    assert "below the budget 0.997 (Polygraphy" in r.describe()
    assert compare_array(ref, cand, Tolerance(0.3, 0.1, "t")).passed, "no budget: reported only"


def test_the_cosine_is_not_enforced_at_the_absolute_error_floor():
    ref = np.array([0.5, 0.5], np.float32)  # rms 0.5 < 0.3 / 0.0776: atol alone may move the cosine this far
    r = compare_array(ref, np.array([0.75, 0.25], np.float32), COS)
    assert r.cosine < 0.997 and not r.cosine_enforced and r.passed


def test_the_reference_noise_floor_widens_only_where_it_exceeds_the_policy():
    ref = np.array([1.0, 2.0, 3.0], np.float32)
    cand = np.array([1.05, 2.0, 3.0], np.float32)
    tight = Tolerance(1e-3, 0.0, "t")
    assert not compare_array(ref, cand, tight).passed
    r = compare_array(ref, cand, tight, floor=np.array([0.06, 0.0, 0.0]))
    assert r.passed and r.widened_by_reference == 1
    assert not compare_array(ref, cand, tight, floor=np.array([0.04, 0.0, 0.0])).passed
