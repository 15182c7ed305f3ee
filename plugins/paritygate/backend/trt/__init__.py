"""TensorRT runtime: strongly typed engines built from the shared ONNX artifacts (or prebuilt .plan files),
cached per ONNX bytes, TensorRT version and GPU, and run through the TensorRT 10/11 tensor-name API.

Importing this package imports none of tensorrt, polygraphy or cuda; they load on first use. It re-exports
nothing (its modules import ``util`` from it): import from ``loader`` and ``runner``.

    from paritygate.backend.trt.loader import EngineFromOnnx, EngineFromPath
    from paritygate.backend.trt.runner import TrtRunner

    runner = TrtRunner(EngineFromPath(EngineFromOnnx(onnx_path, spec, "fp16"), spec))
    with runner:
        outputs = runner.infer({"x": batch})
"""
