"""TensorRT runtime: strongly typed engines built from the shared ONNX artifacts (or prebuilt .plan files),
cached per ONNX bytes, TensorRT version and GPU, and run through the TensorRT 10/11 tensor-name API.

Importing this package imports none of tensorrt, polygraphy or cuda; they load on first use.

    runner = TrtRunner(EngineFromPath(EngineFromOnnx(onnx_path, spec, "fp16"), spec))
    with runner:
        outputs = runner.infer({"x": batch})
"""

from paritygate.backend.trt.loader import EngineFromOnnx, EngineFromPath, engine_loader
from paritygate.backend.trt.runner import TrtRunner

__all__ = ["EngineFromOnnx", "EngineFromPath", "TrtRunner", "engine_loader"]
