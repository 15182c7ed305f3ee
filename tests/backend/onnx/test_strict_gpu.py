"""Strict FP16 emulation against real FP16 GPU kernels (``gpu``): the same fp16 artifact run by ONNX Runtime CPU
with strict numerics and by PyTorch CUDA through onnx2torch (FP16 kernels). Skips, with its reason, where there is
no CUDA device, PyTorch or onnx2torch. No TensorRT is involved and no TensorRT claim is made.

Run on a GPU machine: ``pytest -m gpu tests/backend/onnx/test_strict_gpu.py -rs`` (docs/numerics.md)."""

import numpy as np
import pytest

from paritygate.backend.onnx import strict

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = [pytest.mark.gpu, pytest.mark.onnx]


def _torch_cuda():
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx2torch", reason="onnx2torch is not installed (pip install onnx2torch)")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def rms_norm_fp16():
    """y = x * rsqrt(mean(x^2) + 1e-6) converted by onnxconverter-common (keep_io_types=True), as in issue 15:
    at x = [300, -250, ...] x^2 overflows FP16, so real FP16 kernels return 0 where FP32 returns ~1.6."""
    float16 = pytest.importorskip("onnxconverter_common.float16")
    h, T = onnx.helper, onnx.TensorProto
    nodes = [h.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             h.make_node("ReduceMean", ["sq"], ["ms"], name="mean", axes=[-1], keepdims=1),
             h.make_node("Add", ["ms", "eps"], ["var"], name="add_eps"),
             h.make_node("Sqrt", ["var"], ["rms"], name="root"), h.make_node("Div", ["x", "rms"], ["y"], name="norm")]
    graph = h.make_graph(nodes, "rms", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])], [h.make_tensor("eps", T.FLOAT, [], [1e-6])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return float16.convert_float_to_float16(model, keep_io_types=True)


def test_strict_emulation_agrees_with_fp16_cuda_kernels():
    torch = _torch_cuda()
    from onnx2torch import convert

    half = rms_norm_fp16()
    x = np.array([[300.0, -250.0, 200.0, -150.0], [0.3, -0.25, 0.2, -0.15]], np.float32)
    emulated = ort.InferenceSession(strict.emulate(half)[0].SerializeToString(), providers=["CPUExecutionProvider"])
    cpu = emulated.run(None, {"x": x})[0]
    gpu = convert(half).cuda().eval()(torch.from_numpy(x).cuda()).float().cpu().numpy()
    assert np.array_equal(np.isfinite(cpu), np.isfinite(gpu)) and np.allclose(cpu[0], gpu[0], atol=1e-3), (cpu, gpu)
    np.testing.assert_allclose(cpu[1], gpu[1], rtol=2 ** -9, atol=2 ** -14)  # in range: within FP16 rounding
