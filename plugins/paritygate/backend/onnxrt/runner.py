"""The ONNX Runtime runner: a session from ``loader.SessionFromOnnx`` (the CPU provider, or the CUDA provider's
``cuda_providers()``), run on numpy feeds."""

import numpy as np

from paritygate.backend.base import BaseRunner, CandidateFault, InferenceTimeout
from paritygate.backend.deadline import bounded
from paritygate.backend.onnxrt.loader import CPU, SessionFromOnnx, ort
from paritygate.common.numerics import DEFAULT_NUMERICS

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
              "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(int8)": np.int8,
              "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


class OnnxrtRunner(BaseRunner):
    """``spin``: whether ONNX Runtime's intra-op threads spin-wait between runs (its default). None: they do,
    except in an xdist worker (or a run it started): there the workers' thread pools share the cores, and spinning
    threads take them from each other (the outputs are the same, spinning only changes how threads wait).
    ``threads``: intra-op threads (None: ONNX Runtime's default, one per core, in a worker too). Not 1 in a worker,
    though it would be faster there: the thread count changes ONNX Runtime's numerics, and a verdict must not
    depend on pytest's ``-n``. The latency checks never run in a worker, so they measure the default. A candidate
    of the conformance checks spins only in a run that measures latency (``RunContext.spin``, set by the plugin).
    Both choices were measured: docs/measured.md, "ONNX Runtime's threads in the candidate".
    ``level``, ``library``: the graph optimization level (None: ONNX Runtime's default) and a custom-op library to
    register, as ``backend.onnx.strict.loader.computed`` gives them for the file it made (a strict artifact's twin).
    ``numerics``: ``strict`` runs Q/DQ as fake quantization in FP32, the engine's INT8 arithmetic on any CPU
    (``options.session_options``); ``ort`` lets ONNX Runtime fuse them into its integer kernels, whose results
    depend on the CPU's instruction set. ``providers``: ONNX Runtime's execution providers (names or (name, options)
    pairs; ``loader.cuda_providers()`` for CUDA). ``path`` may be a ``loader.SessionFromOnnx`` itself (Polygraphy's
    ``OnnxrtRunner(SessionFromOnnx(path, providers=...))``): the other settings are then the loader's."""

    def __init__(self, path, providers=(CPU,), name=None, threads=None, spin=None,
                 numerics=DEFAULT_NUMERICS, level=None, library=None):
        loader = path if isinstance(path, SessionFromOnnx) else SessionFromOnnx(
            path, providers, threads=threads, spin=spin, level=level, library=library, fake_quant=numerics == "strict")
        super().__init__(name or f"onnxruntime:{loader.path.name}")
        self.loader, self.path, self.providers = loader, loader.path, loader.providers
        self.numerics = numerics
        self._sess = None

    def activate_impl(self):
        self._sess = self.loader()
        self.output_names = [o.name for o in self._sess.get_outputs()]
        self._run_options = ort.RunOptions  # the class itself: through the lazy module, 2 us a call (latency)

    def infer_bounded(self, feed):
        """In the caller's thread (latency measures the call itself): the watchdog stops a call past the limit
        through ``RunOptions.terminate``, which ONNX Runtime checks between nodes and in every Loop iteration."""
        run_options = self._run_options()
        return bounded(lambda: self.infer_impl(feed, run_options), self.where, in_thread=False, error=InferenceTimeout,
                       cancel=lambda: terminate(run_options))

    def infer_impl(self, feed, run_options=None):
        try:
            values = self._sess.run(None, feed, run_options)
        except Exception as err:
            shapes = {k: (v.dtype.name, list(v.shape)) for k, v in feed.items()}
            raise CandidateFault(f"{self.path}: ONNX Runtime failed on inputs {shapes}: {str(err)[:400]}") from err
        return dict(zip(self.output_names, values))

    def input_metadata_impl(self):
        return {i.name: (np.dtype(_ORT_TYPES.get(i.type, np.float32)),
                         tuple(d if isinstance(d, int) else -1 for d in i.shape))
                for i in self._sess.get_inputs()}

    def deactivate_impl(self):
        self._sess = None


def terminate(run_options):
    """Stop the ONNX Runtime run that ``run_options`` drives (from another thread), without its error log line:
    the caller's InferenceTimeout says what happened."""
    run_options.log_severity_level = 4  # fatal only
    run_options.terminate = True
