"""paritygate.backend.onnx.diagnosis.localize / repair and paritygate.judge.divergence: precision breaks injected into
ONNX graphs made in code are found at the right node, and the plan (keep in FP32 / leave unquantized) verifies."""

import time

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.onnx.artifacts import loader
from paritygate.backend.onnx.diagnosis import localize
from paritygate.judge import divergence
from tests.conftest import make_onnx, toy_spec

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")
pytestmark = pytest.mark.onnx

h = onnx.helper
FLOAT = onnx.TensorProto.FLOAT


def const(name, value):
    return h.make_node("Constant", [], [name], name=name, value=h.make_tensor(name, FLOAT, [], [value]))


def run(path, feed):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


# -- an intermediate that overflows FP16 -------------------------------------------------------------------
def overflow_onnx(path):
    """y = LayerNormalization(x * 1e4) over 4 features: for |x| > 6.55, x * 1e4 exceeds float16's 65504. The
    constant is within float16 range, so the converter's constant clamping plays no part.

    Why a LayerNormalization behind it: ONNX Runtime's CPU provider (1.31, x86) has FP16 kernels for few ops
    (LayerNormalization, Transpose, Concat, Max/Min/Clip, Identity, measured); it runs the others upcast to FP32
    and drops the FP16 round trip between two upcast ops, so an overflowing Mul feeding another Mul never shows
    there. A LayerNormalization running in FP16 (not kept in FP32) reads the product in FP16, as TensorRT would."""
    scale = onnx.numpy_helper.from_array(np.ones(4, np.float32), "gamma")
    bias = onnx.numpy_helper.from_array(np.zeros(4, np.float32), "beta")
    nodes = [const("k_up", 1e4), h.make_node("Mul", ["x", "k_up"], ["big"], name="scale_up"),
             h.make_node("LayerNormalization", ["big", "gamma", "beta"], ["y"], name="layer_norm", axis=-1)]
    return make_onnx(path, nodes, outputs=("y",), width=4, initializers=[scale, bias])


@pytest.fixture
def overflow(tmp_path, parity_cache):
    spec = toy_spec(onnx=overflow_onnx(tmp_path / "overflow.onnx"), precisions=("fp32", "fp16"),
                    inputs={"x": ((-1, 4), "float32", (-10.0, 10.0))},
                    min_precision_coverage=0.0)  # three nodes: any plan keeps most of them in FP32
    x = np.random.default_rng(0).uniform(-10, 10, (8, 4)).astype(np.float32)
    x[:4] /= 2  # samples 0..3 stay within float16 (|x| * 1e4 <= 5e4), samples 4..7 do not
    x[4:, 0] = 9.0
    return spec, {"x": x}, run(spec.onnx, {"x": x})


def test_fp16_overflow_breaks_the_check(overflow):
    spec, feed, ref = overflow
    out = run(loader.fp16_onnx(spec, keep_fp32=()), feed)["y"]
    assert np.isfinite(out[:4]).all() and not np.isfinite(out[4:]).any(axis=1).all() is False
    assert (~np.isfinite(out[4:])).any(axis=1).all()  # the break the tests below localize
    np.testing.assert_allclose(run(loader.fp16_onnx(spec), feed)["y"], ref["y"], atol=1e-2, rtol=1e-2)  # kept


def test_fp16_overflow_is_localized_at_the_mul_and_the_plan_verifies(overflow):
    spec, feed, ref = overflow
    d = divergence.localize_and_repair(spec, "fp16", feed, ref, fp16_ops=())
    assert "error" not in d, d
    assert (d["first_node"], d["op_type"], d["tensor"]) == ("scale_up", "Mul", "big")
    assert d["max_abs_error"] == float("inf")
    assert d["input"]["samples"] == [4, 5, 6, 7]  # the samples that failed the check
    assert d["verified"] is True and d["keep_fp32"] == ["scale_up", "layer_norm"]
    assert d["coverage"]["mac_share"] is None and d["coverage"]["node_share"] == 0.0  # no MACs; both kept
    assert d["config"].splitlines()[1] == 'fp16_keep_fp32 = ["scale_up", "layer_norm"]'
    by_node = {r["node"]: r for r in d["error_by_depth"]}
    assert by_node["k_up"]["max_abs"] == 0 and by_node["scale_up"]["depth"] == 2
    # the plan, written as config, builds an artifact that passes on the same inputs
    import dataclasses

    fixed = dataclasses.replace(spec, precision={"fp16_keep_fp32": d["keep_fp32"]})
    np.testing.assert_allclose(run(loader.fp16_onnx(fixed, keep_fp32=()), feed)["y"], ref["y"], rtol=1e-2, atol=1e-2)


def test_localization_pairs_tensors_across_the_inserted_casts(overflow):
    spec, feed, _ = overflow
    import dataclasses

    plan = dataclasses.replace(spec, precision={"fp16_keep_fp32": ["scale_up"]})
    kept = onnx.load(str(loader.fp16_onnx(plan, keep_fp32=())))
    fp32 = onnx.load(str(spec.onnx))
    pairs = localize.pair_tensors(fp32, kept)
    assert pairs["big"] == "scale_up_output_cast_0"  # a kept node's own FP32 output, not the Cast after it
    assert pairs["y"] == "layer_norm_cast_to_y"  # keep_io_types renames the producer of a graph output
    div = localize.divergence(fp32, kept, feed, 1e-2, 1e-2)
    assert div.first.node == "layer_norm" and not div.unmatched  # the FP16 cast after the kept Mul overflows


def test_fp16_plan_entry_that_names_nothing_is_an_error_naming_the_key(overflow):
    spec, _, _ = overflow
    import dataclasses

    bad = dataclasses.replace(spec, precision={"fp16_keep_fp32": ["scale_upp"]})
    with pytest.raises(RunnerError, match=r"key 'precision.fp16_keep_fp32': \['scale_upp'\] name no node"):
        loader.fp16_onnx(bad)


# -- a quantized op that breaks INT8 ------------------------------------------------------------------------
def outlier_onnx(path):
    """y = relu(x @ W1) @ W2, W1 the identity with column 0 scaled by 1000: per-tensor symmetric INT8 of the
    MatMul's output steps by ~1000/127, which rounds columns 1..7 (|v| <= 1) to zero; W2 ignores column 0."""
    w1 = np.eye(8, dtype=np.float32)
    w1[:, 0] *= 1000
    w2 = np.random.default_rng(0).uniform(-1, 1, (8, 4)).astype(np.float32)
    w2[0] = 0
    inits = [onnx.numpy_helper.from_array(w1, "W1"), onnx.numpy_helper.from_array(w2, "W2")]
    nodes = [h.make_node("MatMul", ["x", "W1"], ["h"], name="outlier_matmul"),
             h.make_node("Relu", ["h"], ["r"], name="relu"),
             h.make_node("MatMul", ["r", "W2"], ["y"], name="head_matmul")]
    path = make_onnx(path, nodes, outputs=("y",), width=8, initializers=inits)
    model = onnx.load(str(path))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 4
    onnx.save(model, str(path))
    return path


@pytest.fixture
def outlier(tmp_path, parity_cache):
    calib = tmp_path / "calib.npz"
    rng = np.random.default_rng(1)
    np.savez(calib, x=rng.uniform(-1, 1, (16, 8)).astype(np.float32))
    spec = toy_spec(onnx=outlier_onnx(tmp_path / "outlier.onnx"), precisions=("fp32", "int8"), calibration=calib,
                    inputs={"x": ((-1, 8), "float32", (-1.0, 1.0))})
    x = rng.uniform(-1, 1, (6, 8)).astype(np.float32)
    return spec, {"x": x}, run(spec.onnx, {"x": x})


def test_int8_outlier_is_localized_and_the_exclusion_verifies(outlier):
    import dataclasses

    spec, feed, ref = outlier
    spec = dataclasses.replace(spec, min_precision_coverage=0.0)  # two MatMuls: any exclusion halves the share
    assert np.abs(run(loader.int8_onnx(spec), feed)["y"] - ref["y"]).max() > 0.3  # the break: beyond INT8 atol
    d = divergence.localize_and_repair(spec, "int8", feed, ref)
    assert "error" not in d, d
    # relu(x @ W1) still matches at its own (outlier) scale and the head MatMul, fed the rounded-away columns, is
    # the first output to leave tolerance; but the error is added by the outlier MatMul (per-tensor INT8 of W1
    # rounds its unit entries to 0), and the ranking names it
    assert d["first_out_of_tolerance"] == "head_matmul"
    assert (d["first_node"], d["op_type"]) == ("outlier_matmul", "MatMul")
    assert d["ranking"][0]["node"] == "outlier_matmul" and d["ranking"][0]["added_abs"] > 1
    assert {"matches_reference", "corners", "fresh_sample"} <= set(d["verification"]["rows"])
    assert d["verified"] is True and "outlier_matmul" in d["exclude_from_quantization"]
    assert "keep_fp32" not in d and d["config"].splitlines()[1].startswith("int8_exclude = [")
    fixed = dataclasses.replace(spec, precision={"int8_exclude": d["exclude_from_quantization"]})
    assert np.abs(run(loader.int8_onnx(fixed), feed)["y"] - ref["y"]).max() < 0.3


def test_a_plan_that_leaves_too_little_in_int8_is_not_verified_and_the_note_says_what_was_tried(outlier):
    spec, feed, ref = outlier  # default minimum: 50% of the MACs in INT8; excluding the outlier MatMul leaves 33%
    d = divergence.localize_and_repair(spec, "int8", feed, ref)
    assert d["verified"] is False and d["config"] is None
    assert any("precision coverage" in t.get("why_not", "") for t in d["trials"]), d["trials"]
    assert d["plan_note"].startswith(f"no plan within the search budget ({len(d['trials'])} of 24 rebuilds)")
    assert f"tried {len(d['trials'])} rebuild(s)" in d["plan_note"]  # each node named once: the plan's, beside it
    assert "outlier_matmul" in d["exclude_from_quantization"] and "outlier_matmul" not in d["plan_note"]


def test_int8_exclusion_by_op_type_leaves_that_op_unquantized(outlier):
    spec, _, _ = outlier
    import dataclasses

    path = loader.int8_onnx(dataclasses.replace(spec, precision={"int8_exclude": ["MatMul"]}))
    assert path != loader.int8_onnx(spec)  # the plan is part of the cache key
    assert "QuantizeLinear" not in [n.op_type for n in onnx.load(str(path)).graph.node]


# -- the tolerance rule -------------------------------------------------------------------------------------
def test_tensor_error_scales_the_absolute_term_with_the_magnitude():
    ref = np.array([1000.0, 1.0, 0.0])
    assert localize.tensor_error(ref, ref + [5.0, 5.0, 5.0], 1e-2, 1e-2)[2]  # 5 <= 1e-2 * 1000 + ...
    assert not localize.tensor_error(ref, ref + [0, 11.0, 0], 1e-2, 1e-2)[2]
    assert not localize.tensor_error(ref, np.array([np.inf, 1, 0]), 1e-2, 1e-2)[2]
    assert localize.tensor_error(np.array([np.inf]), np.array([np.inf]), 1e-2, 1e-2)[2]  # same non-finite
    assert not localize.tensor_error(np.zeros(3), np.array([0, 0, 1e-9]), 1e-2, 1e-2)[2]  # zero tensor: exact


# -- a plan must keep the precision coverage --------------------------------------------------------------
def matmul_overflow_onnx(path):
    """y = LayerNormalization(x W), W = 1e4 I: the MatMul's own output overflows float16 for |x| > 6.55, so the
    only plan that passes keeps the model's one MatMul (all its multiply-accumulates) in FP32."""
    w = onnx.numpy_helper.from_array((1e4 * np.eye(4)).astype(np.float32), "w")
    scale = onnx.numpy_helper.from_array(np.ones(4, np.float32), "gamma")
    bias = onnx.numpy_helper.from_array(np.zeros(4, np.float32), "beta")
    nodes = [h.make_node("MatMul", ["x", "w"], ["big"], name="project"),
             h.make_node("LayerNormalization", ["big", "gamma", "beta"], ["y"], name="layer_norm", axis=-1)]
    return make_onnx(path, nodes, outputs=("y",), width=4, initializers=[w, scale, bias])


@pytest.mark.parametrize("minimum", [None, 0.0])
def test_a_plan_that_keeps_every_mac_in_fp32_is_not_verified_below_the_coverage_minimum(tmp_path, parity_cache,
                                                                                        minimum):
    """With the default minimum (half the MACs) the passing plan would compute 0% of its MACs in FP16, an
    inconclusive verdict, so it is not offered as verified; with min_precision_coverage = 0 it is, and the
    details report the coverage of the plan verified."""
    spec = toy_spec(onnx=matmul_overflow_onnx(tmp_path / "mm.onnx"), precisions=("fp32", "fp16"),
                    inputs={"x": ((-1, 4), "float32", (-10.0, 10.0))}, min_precision_coverage=minimum)
    x = np.full((4, 4), 9.0, np.float32)
    d = divergence.localize_and_repair(spec, "fp16", {"x": x}, run(spec.onnx, {"x": x}), fp16_ops=())
    assert "error" not in d, d
    assert d["first_node"] == "project"
    if minimum is None:  # the check passes only with the MatMul kept: 0% of the MACs in FP16, refused for that
        assert d["verified"] is False and d["config"] is None
        assert any("precision coverage: 0.0%" in t.get("why_not", "") for t in d["trials"]), d["trials"]
    else:
        assert d["verified"] is True and "project" in d["keep_fp32"]
        assert d["coverage"]["mac_share"] == 0.0


def test_rows_run_a_few_at_a_time_give_what_all_at_once_gives(overflow, monkeypatch):
    """Intermediates over ``ROWS_BYTES`` run a few rows at a time (issue 37's memory budget): every tensor's numbers,
    pass, added error and ranking are those of one run over all the rows (the bound's max|ref| read over all)."""
    spec, feed, _ = overflow
    fp32, fp16 = onnx.load(str(spec.onnx)), onnx.load(str(loader.fp16_onnx(spec, keep_fp32=())))
    whole = localize.divergence(fp32, fp16, feed, 1e-2, 1e-2)
    monkeypatch.setattr(localize, "ROWS_BYTES", 1)  # one row at a time
    rows = localize.divergence(fp32, fp16, feed, 1e-2, 1e-2)
    assert len(next(iter(feed.values()))) > 1 and [r.as_dict() for r in rows.rows] == [r.as_dict() for r in whole.rows]
    assert rows.unmatched == whole.unmatched and rows.top.node == whole.top.node == "scale_up"
    assert any(not r.passed for r in rows.rows) and any(r.passed for r in rows.rows)


def test_a_large_models_divergence_computed_apart_is_the_one_computed_here(overflow, monkeypatch):
    """From APART_BYTES on, the comparison runs in a process of its own (common.apart): the same rows, ranking and
    unmatched tensors as in the run's process."""
    spec, feed, _ = overflow
    fp32, fp16 = onnx.load(str(spec.onnx)), onnx.load(str(loader.fp16_onnx(spec, keep_fp32=())))
    here = localize.divergence(fp32, fp16, feed, 1e-2, 1e-2)
    monkeypatch.setattr("paritygate.common.apart.APART_BYTES", 0)
    for apart in (localize.divergence(fp32, fp16, feed, 1e-2, 1e-2),  # the graphs, or their files read there
                  localize.divergence(spec.onnx, loader.fp16_onnx(spec, keep_fp32=()), feed, 1e-2, 1e-2)):
        assert [r.as_dict() for r in apart.rows] == [r.as_dict() for r in here.rows] and apart.rows
        assert (apart.unmatched, apart.ranking_error, apart.top.node) == \
            (here.unmatched, here.ranking_error, here.top.node)


def test_a_large_models_first_ranking_ends_at_the_deadline_and_says_so(overflow, monkeypatch):
    """Run apart, the first comparison of every node is bounded too: past the deadline its process is ended and
    localization says so, with nothing localized (judge.localization_budget)."""
    spec, feed, ref = overflow
    monkeypatch.setattr("paritygate.common.apart.APART_BYTES", 0)
    d = divergence.localize_and_repair(spec, "fp16", feed, ref, fp16_ops=(), deadline=time.monotonic() - 1)
    assert d["first_node"] is None and d["verified"] is None and "error" not in d
    assert d["note"].startswith("not localized: its comparison of every node's output, the first step, had not "
                                "finished when its time budget ran out")
    d = divergence.localize_and_repair(spec, "fp16", feed, ref, fp16_ops=(), deadline=time.monotonic() + 120)
    assert d["first_node"] == "scale_up"  # the next one, in a new process, with time left
