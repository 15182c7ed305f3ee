"""ONNX Runtime sessions, in the manner of Polygraphy's ``SessionFromOnnx(path, providers=...)``: a lazy callable
that makes the ``InferenceSession`` when called, on the execution providers it is given (the CPU provider by
default; ``cuda_providers()`` for the CUDA provider), and refuses a session that silently fell back to another
provider (ONNX Runtime logs a provider that failed to load and carries on with the CPU)."""

from pathlib import Path

from paritygate.backend.base import RunnerError
from paritygate.backend.onnxrt.options import session_options
from paritygate.lazy import lazy_import

ort = lazy_import("onnxruntime")

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
# ONNX Runtime's CUDA provider computes FP32 MatMul/Gemm/Conv on TF32 tensor cores by default on Ampere and later
# (its provider option use_tf32, default 1). The onnxruntime-cuda candidate runs with it off: docs/gpu.md, "TF32",
# has the numbers (on the bundled and third-party models, and 1.6e-3 against 9.6e-7 off float64 on a small MLP).
CUDA_TF32 = False


def cuda_providers(device_id=0, tf32=CUDA_TF32):
    """The providers list of a CUDA candidate: the CUDA provider on ``device_id`` (under xdist, the worker's pinned
    GPU is device 0), TF32 as ``tf32`` says; ONNX Runtime places what CUDA has no kernel for on the CPU provider."""
    return [(CUDA, {"device_id": str(device_id), "use_tf32": "1" if tf32 else "0"}), CPU]


def provider_names(providers):
    return [p[0] if isinstance(p, (tuple, list)) else p for p in providers]


class SessionFromOnnx:
    """``SessionFromOnnx(path, providers)()`` -> an ``onnxruntime.InferenceSession`` on ``providers`` (names, or
    (name, options) pairs), with the suite's session options (``options.session_options``: ``threads``, ``spin``,
    ``level``, ``library``, ``fake_quant``). Raises RunnerError naming the file when ONNX Runtime cannot load it, or
    when a provider asked for is not among the session's (it was not built in, or its libraries did not load)."""

    def __init__(self, path, providers=(CPU,), threads=None, spin=None, level=None, library=None, fake_quant=True):
        self.path = Path(path)
        self.providers = list(providers)
        self.settings = {"threads": threads, "spin": spin, "level": level, "library": library,
                         "fake_quant": fake_quant}

    def __call__(self):
        if CUDA in provider_names(self.providers):
            preload_cuda()
        options = session_options(**self.settings)
        try:
            session = ort.InferenceSession(str(self.path), sess_options=options, providers=self.providers)
        except Exception as err:
            raise RunnerError(f"{self.path}: ONNX Runtime cannot load the model: {str(err)[:400]}") from err
        missing = [p for p in provider_names(self.providers) if p not in session.get_providers()]
        if missing:
            raise RunnerError(f"{self.path}: ONNX Runtime made the session without {', '.join(missing)} (it has "
                              f"{session.get_providers()}): the provider is not in this onnxruntime build or its "
                              "libraries did not load (docs/gpu.md, 'ONNX Runtime on CUDA')")
        return session


_PRELOADED = []  # what ONNX Runtime's preload_dlls said, once per process


def preload_cuda():
    """ONNX Runtime's own ``preload_dlls()`` (once per process): loads CUDA 13's and cuDNN 9's libraries from the
    nvidia-* wheels beside onnxruntime (the ort-cuda extra installs them), else by the loader's default paths
    (``LD_LIBRARY_PATH``); returns what it printed (nothing when every library loaded)."""
    if not _PRELOADED:
        import contextlib
        import io

        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            if hasattr(ort, "preload_dlls"):
                ort.preload_dlls(msvc=False)
        _PRELOADED.append(said.getvalue().strip())
    return _PRELOADED[0]


def cuda_reason():
    """None when ONNX Runtime's CUDA provider makes a session here (a one-node graph on the GPU), else why not, in
    ONNX Runtime's words where it gives them. Imports onnxruntime (and loads CUDA): ask only for a CUDA candidate."""
    from paritygate.lazy import available

    if not available("onnxruntime"):
        return "onnxruntime is not installed (pip install 'paritygate[ort-cuda]')"
    built = ort.get_available_providers()
    if CUDA not in built:
        return (f"this onnxruntime ({ort.__version__}) has no CUDA provider (it has {', '.join(built)}): pip install "
                "'paritygate[ort-cuda]', onnxruntime-gpu in place of onnxruntime")
    import tempfile

    import onnx

    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "probe",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.onnx"
        onnx.save(model, str(path))
        try:
            SessionFromOnnx(path, cuda_providers())()
        except RunnerError as err:
            said = f" (preload_dlls: {preload_cuda()[:300]})" if preload_cuda() else ""
            return f"ONNX Runtime {ort.__version__}'s CUDA provider cannot run here: {str(err).split(': ', 1)[1]}{said}"
    return None
