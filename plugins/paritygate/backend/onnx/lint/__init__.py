"""What an artifact holds, read without an engine: ``trt_lint`` (what onnx-tensorrt's parser would refuse, from its
support matrix in ``data/``) and ``coverage`` (how much of a reduced-precision artifact computes in its precision)."""
