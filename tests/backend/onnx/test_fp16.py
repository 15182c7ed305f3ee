"""paritygate.backend.onnx.fp16: FP16 conversion that yields valid graphs, keeps representable constants exact
and reports what it could not keep, on graphs made in code (each reproduces a failure seen on a real model)."""

import numpy as np
import pytest

from paritygate.backend.onnx import fp16, validate

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")
pytestmark = pytest.mark.onnx
h = onnx.helper
T = onnx.TensorProto
X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(6, 1)


def graph(nodes, outputs=("y",), initializers=()):
    info = lambda n: h.make_tensor_value_info(n, T.FLOAT, ["N", 1])
    m = h.make_model(h.make_graph(nodes, "g", [info("x")], [info(o) for o in outputs], list(initializers)),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def run(model, x=X):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))


def halves(model):
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == T.FLOAT16}


def test_constants_fp16_can_hold_stay_exact_and_the_others_are_reported():
    """30000 is an FP16 value: it must survive (onnxconverter-common's default max_finite_val=1e4 made it 1e4).
    90000 is not: it is clamped to 65504 and reported."""
    inits = [h.make_tensor("k30000", T.FLOAT, [], [30000.0]), h.make_tensor("k90000", T.FLOAT, [], [90000.0])]
    nodes = [h.make_node("Mul", ["x", "k30000"], ["y"], name="mul_30000"),
             h.make_node("Mul", ["x", "k90000"], ["z"], name="mul_90000")]
    source = graph(nodes, outputs=("y", "z"), initializers=inits)
    half, report = fp16.convert(source, (), {"x": X[:1]})
    stored = halves(half)
    assert float(stored["k30000"]) == 30000.0
    assert float(stored["k90000"]) == 65504.0
    (finding,) = report["constants_out_of_range"]
    assert finding["tensor"] == "k90000" and finding["kind"] == "overflow" and finding["max_abs"] == 90000.0
    assert finding["count"] == 1 and "clamped to ±65504" in finding["message"]
    out = run(half)
    np.testing.assert_allclose(out["y"], 30000 * X, rtol=2.0 ** -10)  # FP16 rounding of the products only
    assert out["z"][-1, 0] == 65504.0  # x = 1: the clamped constant, as reported


def test_constants_below_the_smallest_subnormal_are_reported():
    inits = [h.make_tensor("eps", T.FLOAT, [], [1e-10]), h.make_tensor("tiny", T.FLOAT, [], [1e-7])]
    nodes = [h.make_node("Add", ["x", "eps"], ["a"], name="add_eps"),
             h.make_node("Add", ["a", "tiny"], ["y"], name="add_tiny")]
    half, report = fp16.convert(graph(nodes, initializers=inits), (), {"x": X[:1]})
    assert [(f["tensor"], f["kind"]) for f in report["constants_out_of_range"]] == [("eps", "underflow")]
    assert float(halves(half)["eps"]) == 2.0 ** -24
    assert float(halves(half)["tiny"]) == float(np.float16(1e-7))  # a subnormal FP16 holds: rounded, not clamped


def test_a_graph_output_that_another_node_reads_converts_to_a_valid_graph():
    """basic-pitch 0.4.0: output StatefulPartitionedCall:0 also feeds an Unsqueeze. Converted as it is, ONNX
    Runtime refuses the fp16 model ("Type (tensor(float16)) of output arg ... does not match expected type")."""
    from onnxconverter_common import float16

    k = h.make_tensor("k", T.FLOAT, [], [3.0])
    nodes = [h.make_node("Mul", ["x", "k"], ["y"], name="mul"), h.make_node("Relu", ["y"], ["z"], name="reads_y")]
    source = graph(nodes, outputs=("y", "z"), initializers=[k])
    plain = float16.convert_float_to_float16(source, keep_io_types=True)
    with pytest.raises(validate.ArtifactError, match="at node 'reads_y'"):
        validate.validate(plain, {"x": X[:1]}, "onnxconverter-common")
    half, report = fp16.convert(source, (), {"x": X[:1]})
    assert report["isolated_outputs"] == ["y"] and report["fp16_blocked"] == []
    out = run(half)
    assert out["y"].dtype == np.float32
    np.testing.assert_allclose(out["y"], 3 * X, rtol=1e-3)
    np.testing.assert_allclose(out["z"], np.maximum(3 * X, 0), rtol=1e-3)


def test_a_node_rejected_in_fp16_is_kept_in_fp32_and_reported():
    """Celu has no float16 in its opset-17 schema: the checker names the node, which is blocked on the retry."""
    k = h.make_tensor("k", T.FLOAT, [], [2.0])
    nodes = [h.make_node("Mul", ["x", "k"], ["a"], name="scale"), h.make_node("Celu", ["a"], ["y"], name="celu")]
    half, report = fp16.convert(graph(nodes, initializers=[k]), (), {"x": X[:1]})
    (blocked,) = report["fp16_blocked"]
    assert blocked["node"] == "celu" and blocked["op"] == "Celu" and "unsupported type: tensor(float16)" in \
        blocked["reason"]
    assert halves(half).keys() == {"k"}  # the Mul still runs in FP16
    a = 2 * X
    np.testing.assert_allclose(run(half)["y"], np.where(a > 0, a, np.exp(a) - 1), atol=2e-3)


def test_a_build_that_stays_invalid_raises_naming_the_node():
    """A Reshape to a fixed batch of 2 fails the batch-1 smoke run in FP16 and in FP32: blocking cannot fix it."""
    shape = h.make_tensor("shape", T.INT64, [2], [2, 1])
    nodes = [h.make_node("Reshape", ["x", "shape"], ["y"], name="fixed_batch")]
    with pytest.raises(validate.ArtifactError, match=r"^onnxconverter-common .* smoke run on .* at node "
                                                      r"'fixed_batch'"):
        fp16.convert(graph(nodes, initializers=[shape]), (), {"x": X[:1]})
