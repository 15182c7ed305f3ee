"""Strict FP16 emulation against real FP16 GPU kernels (``gpu``): fp16 artifacts run by ONNX Runtime CPU with strict
numerics and by PyTorch CUDA through onnx2torch (FP16 kernels). Skips, with its reason, where there is no CUDA
device, PyTorch or onnx2torch, or (the evidence table) no prepared folder. No TensorRT is involved or claimed.

- ``test_the_evidence_table_agrees_as_recorded`` re-measures docs/numerics.md's "GPU evidence" table: it runs
  docs/gpu_evidence.py's computation (``measure``) over ``.gpuev/`` (made on the CPU machine by
  docs/gpu_evidence_prep.py, with TensorFlow) and asserts, per model and check, that strict emulation (b) and the
  GPU's FP16 kernels (c) agree (pass/fail) as recorded in docs/gpu_evidence.json, and that a model recorded as a
  converter gap still is one. onnx2torch comes from its wheel in ``.whl/`` (docs/gpu_evidence.py).
- ``test_strict_emulation_agrees_with_fp16_cuda_kernels``: issue 15's RMS-norm graph, which overflows in FP16.

Run on a GPU machine from the repository root, ``.gpuev/`` and ``.whl/`` present (docs/numerics.md):
``pytest -m gpu tests/backend/onnx/strict/test_gpu.py -rA -s``."""

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from paritygate.backend.onnx.strict import rewrite

onnx = pytest.importorskip("onnx")
pytestmark = [pytest.mark.gpu, pytest.mark.onnx]
ROOT = Path(__file__).resolve().parents[4]
FOLDER, WHEELS, RECORDED = ROOT / ".gpuev", ROOT / ".whl", ROOT / "docs" / "gpu_evidence.json"


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    if any(WHEELS.glob("onnx2torch-*.whl")):
        evidence_module().import_onnx2torch(WHEELS)  # the carried pure-Python wheel, as docs/gpu_evidence.py does
    pytest.importorskip("onnx2torch", reason=f"onnx2torch is not installed (pip install onnx2torch, or its wheel in {WHEELS})")
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


def evidence_module():
    spec = importlib.util.spec_from_file_location("gpu_evidence", ROOT / "docs" / "gpu_evidence.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_evidence_table_agrees_as_recorded():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    if not any(FOLDER.glob("*/meta.json")):
        pytest.skip(f"no prepared folder {FOLDER} (make it on a machine with TensorFlow: "
                    "python docs/gpu_evidence_prep.py, then carry .gpuev/ here)")
    if not any(WHEELS.glob("onnx2torch-*.whl")):
        pytest.skip(f"no onnx2torch wheel in {WHEELS}")
    recorded = json.loads(RECORDED.read_text())["models"]
    with warnings.catch_warnings():  # PyTorch's own warnings while onnx2torch converts (e.g. torch's non-tuple
        warnings.simplefilter("ignore")  # indexing UserWarning on basic_pitch) are not what is judged here, and
        results, _ = evidence_module().measure(FOLDER, WHEELS, "cuda")  # pyproject's filterwarnings=error would fail them
    print(evidence_module().table(results))  # the re-measured table (-s shows it)
    stale = {m: r.get("strict_build") for m, r in results.items()
             if "error" not in r and r.get("strict_build") != rewrite.BUILD}
    assert not stale, f"{FOLDER} holds strict outputs of another rewrite {stale}, not {rewrite.BUILD}: make it again"
    assert set(results) == set(recorded), (sorted(results), sorted(recorded))
    for model, got in results.items():
        want = recorded[model]
        if "error" in want:  # a converter gap recorded (Loop, GatherND with batch_dims): still one, same kind
            assert got.get("error", "").split(":")[0] == want["error"].split(":")[0], (model, got.get("error"))
            continue
        assert "error" not in got, (model, got["error"])
        agree = {c: v["b_c_agree"] for c, v in got["checks"].items()}
        assert agree == {c: v["b_c_agree"] for c, v in want["checks"].items()}, (model, got["checks"])


def test_strict_emulation_agrees_with_fp16_cuda_kernels():
    torch = _torch_cuda()
    ort = pytest.importorskip("onnxruntime")
    from onnx2torch import convert

    half = rms_norm_fp16()
    x = np.array([[300.0, -250.0, 200.0, -150.0], [0.3, -0.25, 0.2, -0.15]], np.float32)
    emulated = ort.InferenceSession(rewrite.emulate(half)[0].SerializeToString(), providers=["CPUExecutionProvider"])
    cpu = emulated.run(None, {"x": x})[0]
    gpu = convert(half).cuda().eval()(torch.from_numpy(x).cuda()).float().cpu().numpy()
    assert np.array_equal(np.isfinite(cpu), np.isfinite(gpu)) and np.allclose(cpu[0], gpu[0], atol=1e-3), (cpu, gpu)
    np.testing.assert_allclose(cpu[1], gpu[1], rtol=2 ** -9, atol=2 ** -14)  # in range: within FP16 rounding
