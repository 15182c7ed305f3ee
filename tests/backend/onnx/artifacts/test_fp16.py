"""paritygate.backend.onnx.artifacts.fp16: FP16 conversion that yields valid graphs, keeps representable constants exact
and reports what it could not keep, on graphs made in code (each reproduces a failure seen on a real model)."""

import numpy as np
import pytest

from paritygate.backend.onnx.artifacts import fp16, validate

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


def test_constants_fp16_can_hold_stay_exact_and_the_others_are_reported_and_kept():
    """30000 is an FP16 value: it must survive (onnxconverter-common's default max_finite_val=1e4 made it 1e4).
    90000 is not: it is reported, and the Mul reading it stays in FP32 so that it keeps its value."""
    inits = [h.make_tensor("k30000", T.FLOAT, [], [30000.0]), h.make_tensor("k90000", T.FLOAT, [], [90000.0])]
    nodes = [h.make_node("Mul", ["x", "k30000"], ["y"], name="mul_30000"),
             h.make_node("Mul", ["x", "k90000"], ["z"], name="mul_90000")]
    source = graph(nodes, outputs=("y", "z"), initializers=inits)
    half, report = fp16.convert(source, (), {"x": X[:1]})
    assert {k: float(v) for k, v in halves(half).items()} == {"k30000": 30000.0}
    (finding,) = report["constants_out_of_range"]
    assert finding["tensor"] == "k90000" and finding["kind"] == "overflow" and finding["max_abs"] == 90000.0
    assert finding["count"] == 1 and finding["stored_as"] == "float32" and "above FP16's largest" in finding["message"]
    assert [(b["node"], b["op"]) for b in report["fp16_blocked"]] == [("mul_90000", "Mul")]
    assert "reads constant 'k90000'" in report["fp16_blocked"][0]["reason"]
    x = X / 2  # products stay inside FP16's range: the graph output passes through FP16 on its way out
    out = run(half, x)
    np.testing.assert_allclose(out["y"], 30000 * x, rtol=2.0 ** -10)  # FP16 rounding of the products only
    np.testing.assert_allclose(out["z"], 90000 * x, rtol=2.0 ** -10)  # 90000, not 65504 (clamped) or 10000


def test_the_converter_alone_changes_representable_constants():
    """Premise of the test above: onnxconverter-common's defaults turn 30000 into 10000 (max_finite_val=1e4)."""
    from onnxconverter_common import float16

    k = h.make_tensor("k30000", T.FLOAT, [], [30000.0])
    source = graph([h.make_node("Mul", ["x", "k30000"], ["y"], name="mul")], initializers=[k])
    with pytest.warns(UserWarning, match="truncated"):
        plain = float16.convert_float_to_float16(source, keep_io_types=True)
    assert float(halves(plain)["k30000"]) == 10000.0


def test_constants_below_the_smallest_subnormal_are_reported_and_kept():
    """basic-pitch's log epsilon 1e-10 (normalized_log/add/y) is below FP16's smallest subnormal 2**-24."""
    inits = [h.make_tensor("eps", T.FLOAT, [], [1e-10]), h.make_tensor("tiny", T.FLOAT, [], [1e-7])]
    nodes = [h.make_node("Add", ["x", "eps"], ["a"], name="add_eps"),
             h.make_node("Add", ["a", "tiny"], ["y"], name="add_tiny")]
    half, report = fp16.convert(graph(nodes, initializers=inits), (), {"x": X[:1]})
    assert [(f["tensor"], f["kind"], f["stored_as"]) for f in report["constants_out_of_range"]] == \
        [("eps", "underflow", "float32")]
    assert [b["node"] for b in report["fp16_blocked"]] == ["add_eps"]
    assert float(halves(half)["tiny"]) == float(np.float16(1e-7))  # a subnormal FP16 holds: rounded, not clamped


def test_a_weight_with_a_few_values_below_fp16_is_reported_and_converted():
    """basic-pitch's CQT kernel holds 2 values near 3.4e-8 among 9216: raised by at most 2**-24 each, converted."""
    w = h.make_tensor("w", T.FLOAT, [1, 2], [3.4e-8, 0.5])
    nodes = [h.make_node("MatMul", ["x", "w"], ["y2"], name="mm"),
             h.make_node("ReduceMax", ["y2"], ["y"], name="rmax", keepdims=1, axes=[1])]
    half, report = fp16.convert(graph(nodes, initializers=[w]), (), {"x": X[:1]})
    (finding,) = report["constants_out_of_range"]
    assert (finding["tensor"], finding["kind"], finding["count"], finding["whole"]) == ("w", "underflow", 1, False)
    assert finding["stored_as"] == "float16 ±2**-24 (raised)" and report["fp16_blocked"] == []
    np.testing.assert_array_equal(halves(half)["w"], np.array([[2.0 ** -24, 0.5]], np.float16))


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


def test_an_initializer_read_in_fp32_and_in_fp16_is_split():
    """nakdimon: a blocked Loop takes the LSTM kernels that a MatMul outside it also reads. The converter keeps the
    initializer float32 for the blocked reader, and the FP16 reader is left reading float32."""
    from onnxconverter_common import float16

    k = h.make_tensor("k", T.FLOAT, [], [3.0])
    nodes = [h.make_node("Mul", ["x", "k"], ["a"], name="kept"), h.make_node("Add", ["a", "k"], ["y"], name="half")]
    source = graph(nodes, initializers=[k])
    plain = float16.convert_float_to_float16(source, keep_io_types=True, node_block_list=["kept"])
    with pytest.raises(validate.ArtifactError, match="at node 'half'"):
        validate.validate(plain, {"x": X[:1]}, "onnxconverter-common")
    half, report = fp16.convert(source, (), {"x": X[:1]}, keep_nodes=["kept"])
    assert report["initializers_split"] == [{"tensor": "k", "copy": "k__fp32", "readers": ["kept"]}]
    assert report["fp16_blocked"] == [] and halves(half).keys() == {"k"}
    np.testing.assert_allclose(run(half)["y"], 3 * X + 3, rtol=2.0 ** -10)
