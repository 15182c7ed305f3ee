"""paritygate.backend.onnx.diagnosis.own: a team's own fp16 file is diagnosed by its own nodes. Its softmax written
as Exp / ReduceSum / Div overflows float16 in the Exp; the FP32 source holds one unnamed Softmax (``Softmax__2``),
which the diagnosis once named (issue 41)."""

import numpy as np
import pytest

from paritygate.backend.onnx.diagnosis import own
from paritygate.judge import divergence
from tests.conftest import OPSET, toy_spec

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx

h, numpy_helper = onnx.helper, onnx.numpy_helper
FLOAT, FLOAT16, INT64 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.INT64
W = 4.0 * np.eye(4, dtype=np.float32)  # logits = 4x: up to 16 for x in [-4, 4], exp(16) = 8.9e6 > float16's 65504
B = np.zeros(4, np.float32)


def _save(path, nodes, inits, x_type=FLOAT):
    graph = h.make_graph(nodes, path.stem, [h.make_tensor_value_info("x", x_type, ["N", 4])],
                         [h.make_tensor_value_info("y", FLOAT, ["N", 4])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def source_onnx(path):
    """The FP32 source, unnamed nodes as a converter may leave them: MatMul__0, Add__1, Softmax__2."""
    nodes = [h.make_node("MatMul", ["x", "w"], ["logits0"]), h.make_node("Add", ["logits0", "b"], ["logits"]),
             h.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    return _save(path, nodes, [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])


def team_fp16_onnx(path, x_type=FLOAT):
    """The team's fp16 file: float32 in and out, a softmax computed as exp(z) / sum(exp(z)) in float16."""
    nodes = ([h.make_node("Cast", ["x"], ["x16"], name="to_half", to=FLOAT16)] if x_type == FLOAT else
             [h.make_node("Identity", ["x"], ["x16"], name="to_half")])
    nodes += [h.make_node("MatMul", ["x16", "w16"], ["z0"], name="project"),
              h.make_node("Add", ["z0", "b16"], ["z"], name="bias"),
              h.make_node("Exp", ["z"], ["e"], name="softmax_exp"),
              h.make_node("ReduceSum", ["e", "axes"], ["s"], name="softmax_sum", keepdims=1),
              h.make_node("Div", ["e", "s"], ["p16"], name="softmax_div"),
              h.make_node("Cast", ["p16"], ["y"], name="to_float", to=FLOAT)]
    inits = [numpy_helper.from_array(W.astype(np.float16), "w16"), numpy_helper.from_array(B.astype(np.float16), "b16"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    return _save(path, nodes, inits, x_type)


def run(path_or_model, feed):
    blob = path_or_model.SerializeToString() if hasattr(path_or_model, "SerializeToString") else str(path_or_model)
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def test_the_twin_computes_the_team_graph_in_float32(tmp_path, parity_cache):
    """The twin gives the softmax in float32; the file itself, as the checks run it (strict float16 numerics:
    ONNX Runtime's CPU provider would compute the Exp in float32), gives inf / inf."""
    from paritygate.backend.runtimes import computed_artifact
    from paritygate.common.numerics import DEFAULT_NUMERICS

    for x_type in (FLOAT, FLOAT16):
        path = team_fp16_onnx(tmp_path / f"team{x_type}.onnx", x_type)
        team = onnx.load(str(path))
        twin = own.fp32_twin(team)
        x = np.full((2, 4), 4.0, np.float32)
        np.testing.assert_allclose(run(twin, {"x": x})["y"], 0.25, rtol=1e-6)  # exp(16) is finite in float32
        half = {"x": x.astype(np.float16 if x_type == FLOAT16 else np.float32)}
        assert np.isnan(run(computed_artifact(path, DEFAULT_NUMERICS), half)["y"]).all()
        assert [n.name for n in twin.graph.node] == [n.name for n in team.graph.node]
        assert [i.type.tensor_type.elem_type for i in twin.graph.input] == [FLOAT]


def test_a_team_fp16_softmax_is_diagnosed_at_its_own_exp(tmp_path, parity_cache):
    src = source_onnx(tmp_path / "src.onnx")
    team = team_fp16_onnx(tmp_path / "team.fp16.onnx")
    spec = toy_spec(onnx=src, onnx_artifacts={"fp16": team}, precisions=("fp32", "fp16"),
                    inputs={"x": ((-1, 4), "float32", (-4.0, 4.0))}, min_precision_coverage=0.0)
    x = np.concatenate([np.full((2, 4), 4.0), np.random.default_rng(0).uniform(-1, 1, (2, 4))]).astype(np.float32)
    d = divergence.localize_and_repair(spec, "fp16", {"x": x}, run(src, {"x": x}))
    assert "error" not in d, d
    assert (d["first_node"], d["op_type"], d["tensor"]) == ("softmax_exp", "Exp", "e"), d
    assert d["input"]["samples"] == [0, 1]
    named = {r["node"] for r in d["error_by_depth"]}
    assert named <= {n.name for n in onnx.load(str(team)).graph.node}, named  # only nodes of the judged file
    assert "Softmax__2" not in str(d) and "team file's own FP32 twin" in d["compared_with"]
    assert "its node 'softmax_exp' (Exp) adds the most error: keep it in FP32" in d["note"]


def test_a_team_file_wrong_in_fp32_too_is_compared_with_the_source_under_its_own_names(tmp_path, parity_cache):
    """Weights 10% off and no overflow: float16 breaks nothing inside the file (its twin agrees with it), so the
    comparison with the source stands, each row named by the team's node producing the tensor."""
    src = source_onnx(tmp_path / "src.onnx")
    team = team_fp16_onnx(tmp_path / "team.fp16.onnx")
    model = onnx.load(str(team))
    w = next(i for i in model.graph.initializer if i.name == "w16")
    w.CopyFrom(numpy_helper.from_array((1.1 * W).astype(np.float16), "w16"))
    onnx.save(model, str(team))
    spec = toy_spec(onnx=src, onnx_artifacts={"fp16": team}, precisions=("fp32", "fp16"),
                    inputs={"x": ((-1, 4), "float32", (-4.0, 4.0))}, min_precision_coverage=0.0)
    x = np.random.default_rng(1).uniform(-1, 1, (4, 4)).astype(np.float32)
    d = divergence.localize_and_repair(spec, "fp16", {"x": x}, run(src, {"x": x}))
    assert "error" not in d and d["compared_with"].startswith("the FP32 source ONNX"), d
    names = {n.name for n in model.graph.node}
    assert {r["node"] for r in d["error_by_depth"]} <= names, d["error_by_depth"]
    assert d["first_node"] in names and "Softmax__2" not in str(d), d
