"""paritygate.backend.onnxrt.options: strict INT8 numerics run Q/DQ as fake quantization in FP32, so an int8 verdict
cannot depend on the CPU's instruction set (docs/numerics.md, "INT8").

Two ways this can fail: ONNX Runtime fusing the Q/DQ pattern into an integer kernel (QLinearConv, QLinearMatMul,
ConvInteger, MatMulInteger: whose results differ between AVX2 and AVX-512 VNNI CPUs), seen in the graph it runs; and
the values leaving fake quantization, checked against a NumPy evaluation of the same Q/DQ graph in float64 within the
bound of FP32 summation in any order (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., eq. 3.5:
|fl(sum) - sum| <= gamma_K * sum|terms|, gamma_K = K*u / (1 - K*u), u = 2^-24).
"""

import numpy as np
import pytest

from paritygate.backend.onnxrt.runner import OnnxrtRunner

pytestmark = pytest.mark.onnx
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

INTEGER_KERNELS = {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "MatMulIntegerToFloat",
                   "QGemm", "QLinearAdd", "DynamicQuantizeMatMul"}
U32 = 2.0 ** -24


def quantize(x, scale, zero=0):
    """ONNX QuantizeLinear to int8: round half to even, saturate."""
    return np.clip(np.rint(x / np.float32(scale)) + zero, -128, 127).astype(np.int8)


def qdq_graph(kind, rng, cin=16, cout=8, expose_c=True):
    """x -> Q -> DQ -> Conv/MatMul (int8 weights through DQ, per output channel) -> Q -> DQ -> y, as
    onnxruntime.quantization writes it and TensorRT reads it (symmetric, zero points 0), and its NumPy evaluation.
    ``expose_c``: the Conv/MatMul output is a graph output too (ONNX Runtime then fuses nothing)."""
    from onnx import TensorProto, helper, numpy_helper

    x_scale = np.float32(0.05)
    if kind == "conv":
        w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
        shape_in, shape_out, axis = [None, cin, 6, 6], [None, cout, 6, 6], 0
    else:
        w = rng.standard_normal((cin, cout)).astype(np.float32)
        shape_in, shape_out, axis = [None, cin], [None, cout], 1
    w_scale = (np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis)) / 127).astype(np.float32)
    wq = quantize(w, w_scale.reshape([-1] + [1] * (w.ndim - 1)) if axis == 0 else w_scale)
    y_scale = np.float32(0.5)
    inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(w_scale, "ws"),
             numpy_helper.from_array(np.zeros(cout, np.int8), "wz"), numpy_helper.from_array(x_scale, "xs"),
             numpy_helper.from_array(np.int8(0), "z"), numpy_helper.from_array(y_scale, "ys")]
    op = helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]) if kind == "conv" else \
        helper.make_node("MatMul", ["xd", "wd"], ["c"])
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=axis), op,
             helper.make_node("QuantizeLinear", ["c", "ys", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "ys", "z"], ["y"])]
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape_in)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape_out)]
                              + [helper.make_tensor_value_info("c", TensorProto.FLOAT, shape_out)] * expose_c, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    w_hat = wq.astype(np.float64) * (w_scale.reshape([-1] + [1] * (w.ndim - 1)) if axis == 0 else w_scale)
    return model, x_scale, w_hat


def numpy_fake_quant(kind, x, x_scale, w_hat):
    """(c, |terms| summed, accumulation length K) of the Q/DQ graph in float64: the engine's exact arithmetic."""
    x_hat = quantize(x, x_scale).astype(np.float64) * np.float64(x_scale)
    if kind == "matmul":
        return x_hat @ w_hat, np.abs(x_hat) @ np.abs(w_hat), w_hat.shape[0]
    padded = np.pad(x_hat, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # n, cin, h, w, 3, 3
    c = np.einsum("nchwij,ocij->nohw", windows, w_hat)
    mag = np.einsum("nchwij,ocij->nohw", np.abs(windows), np.abs(w_hat))
    return c, mag, w_hat.shape[1] * 9


@pytest.fixture(params=["conv", "matmul"])
def qdq(request, tmp_path):
    rng = np.random.default_rng(7)
    model, x_scale, w_hat = qdq_graph(request.param, rng)
    path = tmp_path / f"{request.param}.onnx"
    onnx.save(model, str(path))
    x = (rng.standard_normal((4, 16, 6, 6) if request.param == "conv" else (64, 16)) * 2).astype(np.float32)
    return request.param, path, x, x_scale, w_hat


def _ops_run(path, numerics, tmp_path):
    """The op types of the graph ONNX Runtime runs for ``path`` (its optimized model, saved)."""
    from paritygate.backend.onnxrt.options import session_options

    options = session_options(threads=1, fake_quant=numerics == "strict")
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return {n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node}


def test_strict_runs_no_integer_kernel(qdq, tmp_path):
    kind = qdq[0]
    path = tmp_path / "fusable.onnx"
    onnx.save(qdq_graph(kind, np.random.default_rng(7), expose_c=False)[0], str(path))
    assert not _ops_run(path, "strict", tmp_path) & INTEGER_KERNELS
    # the guard: ONNX Runtime's own numerics do fuse this pattern into an integer kernel, on every CPU
    assert _ops_run(path, "ort", tmp_path) & INTEGER_KERNELS


def test_strict_values_are_fake_quantization_within_fp32_reordering(qdq):
    kind, path, x, x_scale, w_hat = qdq
    c, mag, k = numpy_fake_quant(kind, x, x_scale, w_hat)
    with OnnxrtRunner(path, threads=1) as runner:
        got = runner.infer({"x": x})
    # each DQ'd operand is one FP32 rounding from its exact value (relative u), each product one more, the sum gamma_K
    bound = (k * U32 / (1 - k * U32) + 3 * U32) * mag + 1e-12
    assert np.all(np.abs(got["c"] - c) <= bound), np.max(np.abs(got["c"] - c) - bound)
    # the output's Q/DQ: the same grid point, except where FP32 noise crossed a rounding tie
    expected = quantize(c.astype(np.float32), 0.5).astype(np.float32) * np.float32(0.5)
    near_tie = np.abs(np.abs(c / 0.5 - np.floor(c / 0.5)) - 0.5) <= bound / 0.5
    assert np.all((got["y"] == expected) | near_tie)


RUN_BOTH = """
import sys, numpy as np
from paritygate.backend.onnxrt.runner import OnnxrtRunner
folder = sys.argv[1]
out = {}
for kind in ("conv", "matmul"):
    x = np.load(f"{folder}/{kind}-x.npy")
    for numerics in ("strict", "ort"):
        with OnnxrtRunner(f"{folder}/{kind}.onnx", threads=1, numerics=numerics) as runner:
            out[f"{kind}-{numerics}"] = runner.infer({"x": x})["y"]
np.savez(sys.argv[2], **out)
"""


def test_same_int8_values_on_an_avx2_only_cpu(tmp_path):
    """The whole claim, on two instruction sets: this CPU and an AVX2-only one (no AVX-512, no VNNI) emulated by
    Debian's qemu-user, which reproduced a real AVX2-only EPYC's int8 numbers exactly (docs/numerics.md, "INT8").
    Strict outputs are bit-identical on both and equal the NumPy fake quantization; ONNX Runtime's own integer kernels
    are not (the guard: the emulated CPU really takes another kernel)."""
    import shutil
    import subprocess
    import sys

    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.skip("qemu-x86_64 is not installed (Debian's qemu-user; .ci/run installs it)")
    expected = {}
    for kind in ("conv", "matmul"):
        rng = np.random.default_rng(7)
        model, x_scale, w_hat = qdq_graph(kind, rng, expose_c=False)
        onnx.save(model, str(tmp_path / f"{kind}.onnx"))
        x = (rng.standard_normal((4, 16, 6, 6) if kind == "conv" else (64, 16)) * 2).astype(np.float32)
        np.save(tmp_path / f"{kind}-x.npy", x)
        c = numpy_fake_quant(kind, x, x_scale, w_hat)[0]
        expected[kind] = quantize(c.astype(np.float32), 0.5).astype(np.float32) * np.float32(0.5)
    runs = {}
    for name, prefix in (("native", []), ("haswell", [qemu, "-cpu", "Haswell"])):
        out = tmp_path / f"{name}.npz"
        done = subprocess.run([*prefix, sys.executable, "-c", RUN_BOTH, str(tmp_path), str(out)],
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[name] = dict(np.load(out))
    for kind in ("conv", "matmul"):
        for name in runs:
            np.testing.assert_array_equal(runs[name][f"{kind}-strict"], expected[kind], err_msg=f"{kind} {name}")
    assert any(not np.array_equal(runs["haswell"][f"{k}-ort"], expected[k]) for k in ("conv", "matmul"))
