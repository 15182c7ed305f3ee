"""paritygate.backend.onnx.strict.fusion: the engine model's fused kernels (a Conv / Gemm / MatMul and its pointwise
epilogues round only the chain's output), on fp16 artifacts made by onnxconverter-common as teams make them."""

import numpy as np
import pytest

from paritygate.backend.onnx.strict import fusion, rewrite

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
float16 = pytest.importorskip("onnxconverter_common.float16")
pytestmark = pytest.mark.onnx
h, T = onnx.helper, onnx.TensorProto
ARR = onnx.numpy_helper.from_array


def fp16_model(nodes, inits, x_shape, y_shape, outputs=("y",)):
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                         [h.make_tensor_value_info(o, T.FLOAT, y_shape if o == "y" else None) for o in outputs], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return float16.convert_float_to_float16(model, keep_io_types=True)


def conv_bn_relu6(scale=1e-3, extra_reader=False):
    """Conv (weights 3e3: its output overflows FP16 at |x| ~ 1) -> Mul by a per-channel scale -> Add a per-channel
    shift -> Clip(0, 6): a batch norm left unfolded, as the bundled mobilenet's fp16 artifact holds it."""
    rng = np.random.default_rng(0)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Mul", ["c", "s"], ["m"], name="bn_mul"), h.make_node("Add", ["m", "b"], ["a"], name="bn_add"),
             h.make_node("Clip", ["a", "lo", "hi"], ["y"], name="relu6")]
    if extra_reader:  # the Conv output is also read elsewhere: stored, so rounded
        nodes.append(h.make_node("Neg", ["c"], ["n"], name="other"))
    inits = [ARR((rng.normal(0, 1, (4, 3, 3, 3)) * 3e3).astype(np.float32), "w"),
             ARR(np.full((4, 1, 1), scale, np.float32), "s"), ARR(rng.normal(0, 1, (4, 1, 1)).astype(np.float32), "b"),
             ARR(np.float32(0), "lo"), ARR(np.float32(6), "hi")]
    return fp16_model(nodes, inits, ["N", 3, 8, 8], ["N", 4, 8, 8], ("y", "n") if extra_reader else ("y",))


def rounded(emulated):
    """The raw tensors an emulated model rounds to FP16."""
    return {n.input[0] for n in emulated.graph.node if n.name.endswith(rewrite.ROUND)}


def output_of(model, node_name):
    """``node_name``'s output in ``model`` (onnxconverter-common renames a node writing a graph output)."""
    return next(n.output[0] for n in model.graph.node if n.name == node_name)


def fp32_model(nodes, inits):
    model = h.make_model(h.make_graph(nodes, "wide", [h.make_tensor_value_info("x", T.FLOAT, None)],
                                      [h.make_tensor_value_info(nodes[-1].output[0], T.FLOAT, None)], inits),
                         opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_a_conv_and_its_epilogue_round_only_the_chain_output():
    half = conv_bn_relu6()
    emulated, report = rewrite.emulate(half)
    assert report["fused"] == 3  # c, m, a: inside the kernel
    assert rounded(emulated) & {"c__fp32", "m__fp32", "a__fp32", output_of(half, "relu6") + "__fp32"} == {
        output_of(half, "relu6") + "__fp32"}


def test_an_accumulator_out_of_fp16_range_scaled_back_by_the_epilogue_stays_finite():
    """The Conv output reaches ~1e5 > 65504 (FP16's largest finite value); the kernel scales it by 1e-3 before
    storing FP16. Fused: finite and equal to the FP32 chain rounded once; unfused (every tensor rounded): the Conv
    output is inf, so the chain gives 6 (Clip) or NaN where the FP32 chain gives something else."""
    half = conv_bn_relu6()
    x = np.random.default_rng(1).normal(0, 3, (2, 3, 8, 8)).astype(np.float32)
    fused, unfused = run(rewrite.emulate(half)[0], x), run(rewrite.emulate(half, fuse=False)[0], x)
    # the FP32 chain from the artifact's stored (FP16) values, rounded once at its output
    stored = [ARR(onnx.numpy_helper.to_array(t).astype(np.float32), t.name) for t in half.graph.initializer]
    conv = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])]
    chain = conv + [h.make_node("Mul", ["c", "s"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
                    h.make_node("Clip", ["a", "lo", "hi"], ["y"])]
    x16 = x.astype(np.float16).astype(np.float32)
    expected = run(fp32_model(chain, stored), x16).astype(np.float16).astype(np.float32)
    assert np.abs(run(fp32_model(conv, stored), x16)).max() > 65504 and np.isfinite(fused).all()
    # FP32 sums in another order may land on the neighbouring FP16 value: one ulp, 2^-10 relative (IEEE binary16)
    np.testing.assert_allclose(fused, expected, rtol=2 ** -10, atol=2 ** -24)
    assert not np.allclose(unfused, expected, rtol=2 ** -10, atol=2 ** -24)


def test_a_tensor_stored_for_another_reader_is_rounded():
    """The Conv output is read by `other` too: stored in FP16, so the chain ends at the Conv. (Mul -> Add -> Clip
    then run as a pointwise kernel of their own, each output rounded: pointwise-only fusion is not modelled.)"""
    emulated, report = rewrite.emulate(conv_bn_relu6(extra_reader=True), defer=False)
    assert report["fused"] == 0 and {"c__fp32", "m__fp32", "a__fp32"} <= rounded(emulated)


@pytest.mark.parametrize("op, const_first, shape, fused", [
    ("Mul", False, (4, 1, 1), True), ("Add", True, (1, 4, 1, 1), True), ("Sub", True, (), True),
    ("Div", False, (4, 1, 1), True), ("Div", True, (4, 1, 1), False),  # c / x: a reciprocal, no epilogue
    ("Mul", False, (4, 8, 8), False),  # one value per element, not per channel: a kernel of its own
    ("Add", False, (1, 1, 8, 1), False)])
def test_which_constant_operands_join_a_conv_chain(op, const_first, shape, fused):
    rng = np.random.default_rng(2)
    inputs = ["k", "c"] if const_first else ["c", "k"]
    half = fp16_model([h.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                       h.make_node(op, inputs, ["y"], name="epilogue")],
                      [ARR(rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32), "w"),
                       ARR(rng.uniform(1, 2, shape).astype(np.float32), "k")], ["N", 3, 8, 8], ["N", 4, 8, 8])
    assert rewrite.emulate(half)[1]["fused"] == int(fused)


def test_a_dense_layer_exported_as_matmul_reshape_bias_is_one_kernel():
    """Keras Dense under tf2onnx: MatMul on [B*S, K], Reshape to [B, S, N], Add a bias of N values."""
    rng = np.random.default_rng(3)
    half = fp16_model([h.make_node("Reshape", ["x", "flat"], ["x2"], name="flatten"),
                       h.make_node("MatMul", ["x2", "w"], ["mm"], name="matmul"),
                       h.make_node("Reshape", ["mm", "back"], ["r"], name="unflatten"),
                       h.make_node("Add", ["r", "bias"], ["y"], name="bias_add")],
                      [ARR(np.array([-1, 8], np.int64), "flat"), ARR(np.array([2, -1, 6], np.int64), "back"),
                       ARR(rng.normal(0, 1, (8, 6)).astype(np.float32), "w"),
                       ARR(rng.normal(0, 1, (6,)).astype(np.float32), "bias")], [2, 5, 8], [2, 5, 6])
    model, report = rewrite.emulate(half)
    assert report["fused"] == 2  # mm and r
    assert fusion.interior(half.graph, set(rewrite.float16_tensors(half)), {}) == {"mm", "r"}
    x = np.random.default_rng(4).normal(0, 1, (2, 5, 8)).astype(np.float32)
    got = run(model, x)
    ref = (x.astype(np.float16).astype(np.float32).reshape(-1, 8) @ onnx.numpy_helper.to_array(
        half.graph.initializer[2]).astype(np.float32)).reshape(2, 5, 6)
    ref = (ref + onnx.numpy_helper.to_array(half.graph.initializer[3]).astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(got, ref.astype(np.float32), rtol=2 ** -10, atol=2 ** -24)  # one FP16 ulp, as above


@pytest.mark.parametrize("skip_shape, fused", [(["N", 4, 8, 8], True), (["N", 4, 1, 1], False)])
def test_a_residual_sum_joins_a_conv_only_without_broadcasting(skip_shape, fused):
    """The catalog's Convolution + ElementWise sum: the sum must not broadcast (except over the batch axis)."""
    rng = np.random.default_rng(5)
    pool = [h.make_node("GlobalAveragePool", ["s"], ["skip"], name="pool")] if skip_shape[2] == 1 else \
        [h.make_node("Identity", ["s"], ["skip"], name="same")]
    half = fp16_model([h.make_node("Conv", ["x", "w0"], ["s"], name="conv0", pads=[1, 1, 1, 1]),
                       h.make_node("Relu", ["s"], ["r"], name="relu0"), *pool,
                       h.make_node("Conv", ["r", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
                       h.make_node("Add", ["c", "skip"], ["y"], name="residual")],
                      [ARR(rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32), "w0"),
                       ARR(rng.normal(0, 1, (4, 4, 3, 3)).astype(np.float32), "w1")], ["N", 3, 8, 8], ["N", 4, 8, 8])
    done = rounded(rewrite.emulate(half)[0])
    assert ("c__fp32" not in done) == fused and output_of(half, "residual") + "__fp32" in done
