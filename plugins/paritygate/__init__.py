"""paritygate: a pytest conformance gate for TF -> ONNX -> TensorRT engines served by Beam RunInference."""

__version__ = "0.1.0"
