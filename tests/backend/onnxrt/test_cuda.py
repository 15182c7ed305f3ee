"""paritygate.backend.onnxrt.loader on ONNX Runtime's CUDA provider (the onnxruntime-cuda candidate): the providers
list (TF32 off), a session that fell back to the CPU refused, the reason where CUDA cannot run; and, marked ``gpu``
(onnxruntime-gpu on an NVIDIA GPU), real CUDA kernels: FP32 with TF32 off within FP32 rounding of float64, FP16,
and Q/DQ placed on the CUDA provider. The numbers each GPU test measured go to its user_properties (JUnit XML)."""

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.onnxrt import loader

pytestmark = pytest.mark.onnx
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

H = 256  # a 256x256 MatMul + Add + Relu + MatMul, batch 64, as shared/gpu/ORT-CUDA.md measured


def mlp(path, dtype=np.float32, seed=0):
    """y = relu(x @ w1 + b) @ w2 in ``dtype`` (weights scaled so outputs stay within a few units); returns
    (path, weights in float64)."""
    rng = np.random.default_rng(seed)
    w1, b, w2 = (rng.standard_normal(s) / np.sqrt(H) for s in ((H, H), (H,), (H, H)))
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [onnx.numpy_helper.from_array(a.astype(dtype), n) for a, n in ((w1, "w1"), (b, "b"), (w2, "w2"))]
    nodes = [onnx.helper.make_node("MatMul", ["x", "w1"], ["h"]), onnx.helper.make_node("Add", ["h", "b"], ["a"]),
             onnx.helper.make_node("Relu", ["a"], ["r"]), onnx.helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = onnx.helper.make_graph(nodes, "mlp", [onnx.helper.make_tensor_value_info("x", elem, [None, H])],
                                   [onnx.helper.make_tensor_value_info("y", elem, [None, H])], inits)
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path, (w1, b, w2)


def float64_mlp(x, weights):
    w1, b, w2 = weights
    return np.maximum(x.astype(np.float64) @ w1 + b, 0) @ w2


def qdq_matmul(path):
    """y = DQ(Q(x)) @ DQ(w_int8): activations and weights through QuantizeLinear / DequantizeLinear (symmetric)."""
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, (H, H), dtype=np.int8)
    consts = [onnx.numpy_helper.from_array(w, "wq"), onnx.numpy_helper.from_array(np.float32(0.02), "ws"),
              onnx.numpy_helper.from_array(np.int8(0), "zp"), onnx.numpy_helper.from_array(np.float32(0.05), "xs")]
    nodes = [onnx.helper.make_node("QuantizeLinear", ["x", "xs", "zp"], ["xq"]),
             onnx.helper.make_node("DequantizeLinear", ["xq", "xs", "zp"], ["xd"]),
             onnx.helper.make_node("DequantizeLinear", ["wq", "ws", "zp"], ["wd"]),
             onnx.helper.make_node("MatMul", ["xd", "wd"], ["y"])]
    f32 = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph(nodes, "qdq", [onnx.helper.make_tensor_value_info("x", f32, [None, H])],
                                   [onnx.helper.make_tensor_value_info("y", f32, [None, H])], consts)
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path, w.astype(np.float64) * 0.02


def test_the_cuda_candidate_asks_for_the_cuda_provider_with_tf32_off_and_the_cpu_behind_it():
    (name, options), cpu = loader.cuda_providers()
    assert (name, cpu) == ("CUDAExecutionProvider", "CPUExecutionProvider")
    assert options == {"device_id": "0", "use_tf32": "0"} and loader.CUDA_TF32 is False
    assert loader.cuda_providers(1, tf32=True)[0][1] == {"device_id": "1", "use_tf32": "1"}
    assert loader.provider_names(loader.cuda_providers()) == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_a_session_without_the_provider_asked_for_is_refused(tmp_path):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider: nothing falls back")
    path, _ = mlp(tmp_path / "mlp.onnx")
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"), pytest.raises(RunnerError, match="CUDAExecution"):
        loader.SessionFromOnnx(path, loader.cuda_providers())()
    assert "onnxruntime-gpu in place of onnxruntime" in loader.cuda_reason()


def test_without_a_gpu_the_cuda_runtime_says_why_before_anything_else():
    from paritygate.backend import registry
    from paritygate.gpu import device

    if device.probe().available:
        pytest.skip("a GPU is here")
    assert registry.get("onnxruntime-cuda").needs([]) == device.probe().reason


# -- on the GPU ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda_here():
    reason = loader.cuda_reason()
    if reason:
        pytest.skip(reason)


def _run(path, x, providers, **settings):
    session = loader.SessionFromOnnx(path, providers, **settings)()
    return session.run(None, {"x": x})[0], session


@pytest.mark.gpu
def test_fp32_with_tf32_off_is_within_fp32_rounding_of_float64(tmp_path, cuda_here, request):
    path, weights = mlp(tmp_path / "mlp.onnx")
    x = np.random.default_rng(2).standard_normal((64, H)).astype(np.float32)
    want = float64_mlp(x, weights)
    off, session = _run(path, x, loader.cuda_providers())
    on, _ = _run(path, x, loader.cuda_providers(tf32=True))
    assert session.get_providers()[0] == "CUDAExecutionProvider"
    err_off, err_on = (float(np.max(np.abs(y - want))) for y in (off, on))
    request.node.user_properties.append(("max_abs_tf32_off", err_off))
    request.node.user_properties.append(("max_abs_tf32_on", err_on))
    scale = float(np.max(np.abs(want)))
    assert err_off <= 64 * np.finfo(np.float32).eps * scale  # FP32 arithmetic: a few ulps of the largest output
    assert err_off <= err_on  # TF32's 10-bit mantissa is never closer than FP32 on this product


@pytest.mark.gpu
def test_fp16_runs_in_fp16_on_cuda(tmp_path, cuda_here, request):
    path, weights = mlp(tmp_path / "mlp16.onnx", np.float16)
    x = np.random.default_rng(3).standard_normal((64, H)).astype(np.float16)
    got, session = _run(path, x, loader.cuda_providers())
    assert got.dtype == np.float16 and session.get_providers()[0] == "CUDAExecutionProvider"
    err = float(np.max(np.abs(got.astype(np.float64) - float64_mlp(x, [w.astype(np.float16) for w in weights]))))
    request.node.user_properties.append(("max_abs_fp16", err))
    assert 0 < err <= 8e-3  # FP16 outputs (unit roundoff 2^-11) of values up to a few units


@pytest.mark.gpu
def test_qdq_runs_on_the_cuda_provider_without_a_cpu_fallback(tmp_path, cuda_here, request):
    path, w = qdq_matmul(tmp_path / "qdq.onnx")
    x = np.random.default_rng(4).uniform(-3, 3, (64, H)).astype(np.float32)
    session = loader.SessionFromOnnx(path, loader.cuda_providers())()
    import onnxruntime as ort

    strict = ort.SessionOptions()
    strict.add_session_config_entry("session.disable_cpu_ep_fallback", "1")  # fails if a node needs the CPU
    ort.InferenceSession(str(path), sess_options=strict, providers=loader.cuda_providers()[:1])
    got = session.run(None, {"x": x})[0]
    want = (np.clip(np.round(x / 0.05), -128, 127) * 0.05).astype(np.float64) @ w  # fake quantization in float64
    err = float(np.max(np.abs(got - want)))
    request.node.user_properties.append(("max_abs_qdq", err))
    assert err <= 1e-4 * float(np.max(np.abs(want)))
