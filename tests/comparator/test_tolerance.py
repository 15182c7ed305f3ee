"""paritygate.comparator.tolerance: defaults with their sources, overrides per precision and per output,
each override's ``source`` naming the config file, its table and the model."""

import numpy as np
import pytest

from paritygate.comparator import tolerance as tol_mod
from paritygate.comparator.tolerance import DEFAULTS, Tolerance, tolerance_for
from tests.conftest import toy_spec

CONFIG = "/cfg/parity.toml"


def spec(tolerances=None):
    return toy_spec(source=CONFIG, precisions=("fp32", "fp16", "int8"), tolerances=tolerances or {})


def test_defaults_and_their_sources():
    cos = (tol_mod.COSINE_MIN, tol_mod.COSINE_SOURCE)
    assert DEFAULTS["fp32"] == Tolerance(1e-5, 1e-5, tol_mod.TF_TRT_BASE, *cos)
    assert DEFAULTS["fp16"] == Tolerance(1e-2, 1e-2, tol_mod.TF_TRT_BASE, *cos)
    assert DEFAULTS["int8"] == Tolerance(3e-1, 1e-1, tol_mod.TF_TRT_INT8, *cos)
    assert "tf_trt_integration_test_base.py" in tol_mod.TF_TRT_BASE
    assert "INT8" in tol_mod.TF_TRT_INT8
    for t in DEFAULTS.values():  # every row shows its cosine budget, its source and where it applies
        assert t.source and t.as_dict() == {"atol": t.atol, "rtol": t.rtol, "source": t.source,
                                            "cosine_min": 0.997, "cosine_source": tol_mod.COSINE_SOURCE,
                                            "cosine_applies_above_rms": t.cosine_rms_floor()}
    assert DEFAULTS["int8"].cosine_rms_floor() == pytest.approx(0.3 / 0.0776, rel=1e-3)


def test_overrides_keep_the_cosine_budget():
    t = tolerance_for(spec({"int8": {"atol": 0.5}}), "int8", "y")
    assert (t.cosine_min, t.cosine_source) == (tol_mod.COSINE_MIN, tol_mod.COSINE_SOURCE)


def test_batch_bound_scales_with_the_output_and_its_dtype():
    import numpy as np

    s = spec()  # one input element: n = 1
    a = np.array([[2.0, -4.0]], np.float32)
    assert tol_mod.invariance_bound(s, a, a) == pytest.approx(10 * 4.0 * np.finfo(np.float32).eps / 2)
    assert tol_mod.invariance_bound(s, a.astype(np.float16), a.astype(np.float16)) == pytest.approx(
        10 * 4.0 * np.finfo(np.float16).eps / 2)
    assert tol_mod.invariance_bound(s, a.astype(np.int32), a.astype(np.int32)) == 0.0
    image = toy_spec(inputs={"image": ((-1, 32, 32, 3), "float32", (-1.0, 1.0))})
    assert tol_mod.reduction_length(image) == 3072
    assert tol_mod.invariance_bound(image, a, a) == pytest.approx(10 * np.sqrt(3072) * 4.0 * 2**-24)


def test_every_budget_has_a_named_source():
    assert tol_mod.COSINE_MIN == 0.997 and "Polygraphy" in tol_mod.COSINE_SOURCE
    assert tol_mod.TASK_RATIO == 0.99 and "MLPerf" in tol_mod.TASK_SOURCE


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_no_override_gives_the_default(precision):
    assert tolerance_for(spec(), precision) is DEFAULTS[precision]
    assert tolerance_for(spec(), precision, "y") is DEFAULTS[precision]


def test_per_precision_override_names_the_config():
    t = tolerance_for(spec({"fp16": {"atol": 0.05, "rtol": 0.02}}), "fp16", "y")
    assert (t.atol, t.rtol) == (0.05, 0.02)
    assert t.source == f"{CONFIG} [models.tolerances.fp16] of model 'toy'"


def test_partial_per_precision_override_keeps_the_other_default():
    t = tolerance_for(spec({"fp16": {"atol": 0.05}}), "fp16")
    assert (t.atol, t.rtol) == (0.05, DEFAULTS["fp16"].rtol)
    assert CONFIG in t.source


def test_override_of_one_precision_leaves_the_others():
    s = spec({"fp16": {"atol": 0.05}})
    assert tolerance_for(s, "fp32") is DEFAULTS["fp32"] and tolerance_for(s, "int8") is DEFAULTS["int8"]


def test_per_output_override_names_the_output_and_inherits_the_precision_table():
    s = spec({"int8": {"atol": 0.5, "rtol": 0.2, "outputs": {"z": {"rtol": 0.05}}}})
    z = tolerance_for(s, "int8", "z")
    assert (z.atol, z.rtol) == (0.5, 0.05)
    assert z.source == f"{CONFIG} [models.tolerances.int8.outputs.z] of model 'toy'"
    y = tolerance_for(s, "int8", "y")  # other outputs: the precision's table
    assert (y.atol, y.rtol) == (0.5, 0.2) and y.source.endswith("[models.tolerances.int8] of model 'toy'")


def test_per_output_override_without_a_precision_table_falls_back_to_the_defaults():
    s = spec({"fp32": {"outputs": {"y": {"atol": 1e-3}}}})
    y = tolerance_for(s, "fp32", "y")
    assert (y.atol, y.rtol) == (1e-3, DEFAULTS["fp32"].rtol) and "outputs.y" in y.source
    assert tolerance_for(s, "fp32", "z") is DEFAULTS["fp32"]
    assert tolerance_for(s, "fp32") is DEFAULTS["fp32"]  # no output named: no per-output override


def test_zero_tolerance_override_is_honoured():
    t = tolerance_for(spec({"fp32": {"atol": 0.0, "rtol": 0.0}}), "fp32")
    assert (t.atol, t.rtol) == (0.0, 0.0)


def test_invariance_bound_uses_the_unit_roundoff_of_the_precision_computed():
    """An fp16 artifact with float32 I/O computes in float16: its bound uses float16's u = 2**-11, not float32's."""
    s = toy_spec()
    a = np.full((1, 1), 4.0, np.float32)
    assert tol_mod.invariance_bound(s, a, a, computed=np.float16) == pytest.approx(10 * 4.0 * 2.0 ** -11)
    assert tol_mod.invariance_bound(s, a, a, computed=np.float64) == tol_mod.invariance_bound(s, a, a)  # never finer
    assert tol_mod.invariance_bound(s, a.astype(np.int32), a.astype(np.int32), computed=np.float16) == 0.0
