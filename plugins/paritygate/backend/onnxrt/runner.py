"""ONNX Runtime candidate (CPU execution provider here; CUDA EP where present)."""

import os
from pathlib import Path

import numpy as np

from paritygate.backend.base import BaseRunner, RunnerError
from paritygate.lazy import lazy_import

ort = lazy_import("onnxruntime")

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
              "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(int8)": np.int8,
              "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


class OnnxrtRunner(BaseRunner):
    """``spin``: whether ONNX Runtime's intra-op threads spin-wait between runs (its default). None: they do,
    except in an xdist worker (or a run it started): there the workers' thread pools share the cores, and spinning
    threads take them from each other (measured: nakdimon's ONNX at batch 4, 499 ms a call spinning, 298 ms not,
    on the 2-core machine under load; the outputs are the same, spinning only changes how threads wait). The
    latency checks never run in a worker, so they measure the default."""

    def __init__(self, path, providers=("CPUExecutionProvider",), name=None, threads=None, spin=None):
        super().__init__(name or f"onnxruntime:{Path(path).name}")
        self.path = Path(path)
        self.providers = list(providers)
        self.threads = threads
        self.spin = not os.environ.get("PYTEST_XDIST_WORKER") if spin is None else spin
        self._sess = None

    def activate_impl(self):
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if self.threads:
            options.intra_op_num_threads = self.threads
        if not self.spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._sess = ort.InferenceSession(str(self.path), sess_options=options, providers=self.providers)
        except Exception as err:
            raise RunnerError(f"{self.path}: ONNX Runtime cannot load the model: {str(err)[:400]}") from err
        self.output_names = [o.name for o in self._sess.get_outputs()]

    def infer_impl(self, feed):
        try:
            values = self._sess.run(None, feed)
        except Exception as err:
            shapes = {k: (v.dtype.name, list(v.shape)) for k, v in feed.items()}
            raise RunnerError(f"{self.path}: ONNX Runtime failed on inputs {shapes}: {str(err)[:400]}") from err
        return dict(zip(self.output_names, values))

    def input_metadata_impl(self):
        return {i.name: (np.dtype(_ORT_TYPES.get(i.type, np.float32)),
                         tuple(d if isinstance(d, int) else -1 for d in i.shape))
                for i in self._sess.get_inputs()}

    def deactivate_impl(self):
        self._sess = None
