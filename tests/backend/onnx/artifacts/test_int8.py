"""paritygate.backend.onnx.artifacts.int8: Q/DQ INT8 in the form TensorRT accepts (float bias, per-channel symmetric
INT8 weights, zero-point 0), and the shared-bias repair that basic-pitch 0.4.0 needed, on graphs made in code."""

import numpy as np
import pytest

from paritygate.backend.onnx.artifacts import int8, validate
from paritygate.backend.onnx.lint import trt_lint

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx
h = onnx.helper
T = onnx.TensorProto
RNG = np.random.default_rng(0)
FEEDS = [{"x": RNG.uniform(-1, 1, (1, 2, 4, 4)).astype(np.float32)} for _ in range(8)]


def shared_bias_convs():
    """Three 1x1 Convs sharing weight W and bias B; the first Conv's output is named 'B1', the name
    quantize_static gives its second copy of B (qdq_quantizer.py _dup_initializer: '<name><n>')."""
    w = h.make_tensor("W", T.FLOAT, [3, 2, 1, 1], RNG.uniform(-1, 1, 6).astype(np.float32))
    b = h.make_tensor("B", T.FLOAT, [3], [0.5, -0.25, 0.125])
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["B1"], name="c0"),
             h.make_node("Conv", ["x", "W", "B"], ["y1"], name="c1"),
             h.make_node("Conv", ["x", "W", "B"], ["y2"], name="c2"),
             h.make_node("Add", ["B1", "y1"], ["s"], name="add0"), h.make_node("Add", ["s", "y2"], ["y"], name="add1")]
    x, y = (h.make_tensor_value_info(n, T.FLOAT, ["N", c, 4, 4]) for n, c in (("x", 2), ("y", 3)))
    m = h.make_model(h.make_graph(nodes, "convs", [x], [y], [w, b]), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


def test_shared_biases_quantize_to_a_valid_graph(tmp_path):
    source = shared_bias_convs()
    plain = tmp_path / "plain.onnx"
    onnx.save(source, str(tmp_path / "src.onnx"))
    from onnxruntime import quantization as q

    q.quantize_static(str(tmp_path / "src.onnx"), str(plain), int8._Reader(FEEDS), **int8.settings(["Conv"]))
    with pytest.raises(validate.ArtifactError):  # premise: quantize_static alone shadows the Conv output 'B1'
        validate.validate(onnx.load(str(plain)), FEEDS[0], int8.CONVERTER)

    out = tmp_path / "int8.onnx"
    report = int8.quantize(source, out, FEEDS, ["Conv"])
    model = onnx.load(str(out))
    validate.validate(model, FEEDS[0], int8.CONVERTER)
    assert [(c["node"], c["bias"]) for c in report["unshared_biases"]] == [("c1", "B"), ("c2", "B")]
    assert report["settings"]["extra_options"]["QuantizeBias"] is False
    np.testing.assert_allclose(run(model, FEEDS[0]), run(source, FEEDS[0]), atol=0.1)


def test_no_int32_dequantize_and_weights_per_channel_symmetric_int8(tmp_path):
    out = tmp_path / "int8.onnx"
    int8.quantize(shared_bias_convs(), out, FEEDS, ["Conv"])
    model = onnx.load(str(out))
    inits = {t.name: t for t in model.graph.initializer}
    dqs = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert dqs and trt_lint.lint(model) == []
    weights = [n for n in dqs if n.input[0] in inits]
    assert weights and all(inits[n.input[0]].data_type == T.INT8 for n in dqs if n.input[0] in inits)
    for node in weights:  # one scale per output channel, zero points all 0
        scale = onnx.numpy_helper.to_array(inits[node.input[1]])
        zero = onnx.numpy_helper.to_array(inits[node.input[2]])
        assert scale.shape == (3,) and zero.dtype == np.int8 and not zero.any()
    biases = {n.input[2] for n in model.graph.node if n.op_type == "Conv"}
    assert all(inits[b].data_type == T.FLOAT for b in biases)  # float bias: no INT32 DequantizeLinear


def test_ranges_kept_once_build_the_same_artifact_and_calibrate_no_more(tmp_path):
    """A localization search rebuilds the int8 artifact with nodes left unquantized: the calibration's ranges are kept
    from the first build and read back (quantize_static's calibration_cache_path); an artifact built from them is
    byte for byte the one a fresh calibration builds, with or without a plan's excluded nodes."""
    ranges, source = tmp_path / "ranges.json", shared_bias_convs()
    for exclude in ((), ("c1",)):
        fresh, kept = tmp_path / f"fresh{len(exclude)}.onnx", tmp_path / f"kept{len(exclude)}.onnx"
        int8.quantize(source, fresh, FEEDS, ["Conv"], exclude=exclude)
        report = int8.quantize(source, kept, FEEDS, ["Conv"], exclude=exclude, ranges=ranges)
        assert report["calibration_ranges"] == ("computed" if not exclude else "reused")
        assert onnx.load(str(kept)).SerializeToString() == onnx.load(str(fresh)).SerializeToString()

    class Exhausted(int8._Reader):  # a reused range file runs no calibration row
        def get_next(self):
            raise AssertionError("calibrated again")

    monkey = pytest.MonkeyPatch()
    monkey.setattr(int8, "_Reader", Exhausted)
    try:
        assert int8.quantize(source, tmp_path / "again.onnx", FEEDS, ["Conv"], exclude=("c2",),
                             ranges=ranges)["calibration_ranges"] == "reused"
    finally:
        monkey.undo()
