"""The ONNX artifact per precision, each validated before it is cached by content hash: ``loader`` (fp32 from
tf2onnx or the configured file, fp16, int8, the build report), ``fp16`` (onnxconverter-common with its repairs),
``int8`` (Q/DQ with quantize_static in the form TensorRT accepts), ``index_paths`` (float values that become indices
stay FP32), ``validate`` (checker, strict shape inference, an ONNX Runtime session, a smoke run) and ``own`` (a team's
own fp16 / int8 file checked to be what its key says)."""
