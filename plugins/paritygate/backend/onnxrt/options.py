"""The ONNX Runtime session options of every session the suite makes (candidates, localization, validation, the
strict twin's build and ``Round16``'s probe)."""

import os

from paritygate.lazy import lazy_import

ort = lazy_import("onnxruntime")


def session_options(threads=None, spin=None, level=None, library=None):
    """Warnings off (errors are raised), and the threading policy of ``OnnxrtRunner`` (``runner.py`` says why): in
    an xdist worker the intra-op threads do not spin. ``level``: the graph optimization level (None: ONNX Runtime's
    default, all of them); ``library``: a custom-op library to register (``backend.onnx.round16``)."""
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
    return options
