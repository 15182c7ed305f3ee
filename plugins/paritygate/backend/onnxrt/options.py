"""The ONNX Runtime session options of every session the suite makes (candidates, localization, validation, the
strict twin's build and ``Round16``'s probe)."""

import os

from paritygate.lazy import lazy_import

ort = lazy_import("onnxruntime")


def session_options(threads=None, spin=None, level=None, library=None, fake_quant=True):
    """Warnings off (errors are raised), and the threading policy of ``OnnxrtRunner`` (``runner.py`` says why): in
    an xdist worker the intra-op threads do not spin. ``level``: the graph optimization level (None: ONNX Runtime's
    default, all of them); ``library``: a custom-op library to register (``backend.onnx.strict.round16``).

    ``fake_quant`` (strict INT8 numerics, docs/numerics.md "INT8"): Q/DQ nodes run as themselves, quantize then
    dequantize in FP32 (``session.disable_quant_qdq``), never fused into ONNX Runtime's integer kernels (QLinearConv,
    MatMulInteger...), whose results depend on the CPU's instruction set: measured on one int8 mobilenet, max abs
    0.75 on an AVX2-only EPYC and 0.034 on an AVX-512 VNNI Xeon against the FP32 ONNX, while fake quantization gives
    0.0255 on both. False: ONNX Runtime's own integer kernels (``--parity-numerics=ort``)."""
    if spin is None:
        spin = not os.environ.get("PYTEST_XDIST_WORKER")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if level is not None:
        options.graph_optimization_level = level
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if library:
        options.register_custom_ops_library(str(library))
    if fake_quant:
        options.add_session_config_entry("session.disable_quant_qdq", "1")
    return options
