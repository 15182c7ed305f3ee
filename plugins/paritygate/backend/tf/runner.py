"""Native TensorFlow reference: a SavedModel signature, a .keras file or a legacy Keras 2 .h5/.hdf5 file, run on CPU.

A Keras-2-era SavedModel that carries optimizer slots (basic-pitch's ``nmp/``) cannot be revived object by object
without tf_keras (TensorFlow asks the optimizer object for ``add_slot``); its SignatureDef is then run from the
MetaGraph in a TF1 session (``tf.compat.v1.saved_model.load``), which reads the same graph and checkpoint.
"""

import hashlib
from pathlib import Path

import numpy as np

from paritygate.backend.base import BaseRunner, InferenceTimeout, RunnerError
from paritygate.backend.tf.util import REFERENCE_KINDS, is_keras, keras_name, load_keras, output_names
from paritygate.common.escape import one_line
from paritygate.lazy import lazy_import

tf = lazy_import("tensorflow")


class TfRunner(BaseRunner):
    """Runs ``spec.reference`` (SavedModel dir + signature, or .keras file) and returns named outputs."""

    def __init__(self, path, signature="serving_default", name=None):
        super().__init__(name or f"tf:{Path(path).name}")
        self.path = Path(path)
        self.signature = signature
        self._fn = None
        self._inputs = None  # name -> (np.dtype, shape)
        self.output_names = None

    def activate_impl(self):
        if is_keras(self.path):
            self._load_keras()
        else:
            self._load_saved_model()

    def describe(self):
        """The reference as messages name it: a SavedModel with its signature, or a Keras file."""
        if is_keras(self.path):
            return f"{self.path} (Keras file, read with {keras_name(self.path)})"
        return f"{self.path} (signature '{self.signature}')"

    def _load_saved_model(self):
        if not (self.path / "saved_model.pb").exists():
            raise RunnerError(f"{self.path}: not a TensorFlow SavedModel (no saved_model.pb); expected "
                              f"{REFERENCE_KINDS}")
        from paritygate.files import check_file

        check_file(self.path / "saved_model.pb", "SavedModel graph", "onnx", RunnerError)  # a FIFO: no hang
        try:
            loaded = tf.saved_model.load(str(self.path))
        except Exception as err:  # TF raises many types for corrupt models
            if "add_slot" in str(err) or "optimizer" in str(err).lower():
                return self._load_signature_v1(err)
            raise RunnerError(f"{self.path}: cannot load SavedModel: {err}") from err
        if self.signature not in loaded.signatures:
            raise RunnerError(f"{self.path}: SavedModel has no signature '{self.signature}'; "
                              f"it has {sorted(loaded.signatures) or 'none'}")
        fn = loaded.signatures[self.signature]
        self._keep = loaded  # the signature holds weak references to the loaded object's variables
        self._variables = lambda: _snapshot((v.name, v) for v in fn.variables)  # read when hashed, not held
        self._fn = lambda feed: fn(**{k: tf.constant(v) for k, v in feed.items()})
        specs = fn.structured_input_signature[1]
        self._inputs = {k: (np.dtype(s.dtype.as_numpy_dtype), tuple(-1 if d is None else d for d in s.shape))
                        for k, s in specs.items()}
        self.output_names = sorted(fn.structured_outputs)

    def _load_signature_v1(self, why):
        """The signature run from the MetaGraph in a TF1 session: no object revival, so no optimizer slots."""
        graph = tf.Graph()
        session = tf.compat.v1.Session(graph=graph)
        try:
            with graph.as_default():
                meta = tf.compat.v1.saved_model.load(session, ["serve"], str(self.path))
        except Exception as err:  # TF raises many types for corrupt models
            raise RunnerError(f"{self.path}: cannot load SavedModel: {why}; as a TF1 MetaGraph neither: {err}") from err
        if self.signature not in meta.signature_def:
            raise RunnerError(f"{self.path}: SavedModel has no signature '{self.signature}'; "
                              f"it has {sorted(meta.signature_def) or 'none'}")
        sig = meta.signature_def[self.signature]
        feeds = {k: graph.get_tensor_by_name(v.name) for k, v in sig.inputs.items()}
        fetches = {k: graph.get_tensor_by_name(v.name) for k, v in sig.outputs.items()}
        reader = tf.train.load_checkpoint(str(self.path / "variables" / "variables"))
        self._variables = lambda: [(n, reader.get_tensor(n)) for n in reader.get_variable_to_shape_map()
                                   if n.endswith("VARIABLE_VALUE") and ".OPTIMIZER_SLOT" not in n
                                   and not n.startswith(("optimizer/", "save_counter"))]
        self._keep = self._session = session
        self._fn = lambda feed: session.run(fetches, {feeds[k]: v for k, v in feed.items()})
        self._inputs = {k: (np.dtype(t.dtype.as_numpy_dtype), tuple(-1 if d is None else d for d in t.shape))
                        for k, t in feeds.items()}
        self.output_names = sorted(fetches)

    def _load_keras(self):
        key = (str(self.path.resolve()), *_stat(self.path), keras_name(self.path))
        if key not in _KERAS:
            try:
                _KERAS[key] = _keras_state(self.path)
            except RunnerError:
                raise
            except Exception as err:
                # name that is no valid TensorFlow scope name); Keras's message carries ANSI colour codes
                raise RunnerError(f"{self.path}: TensorFlow cannot trace the Keras model ({keras_name(self.path)}): "
                                  f"{one_line(err)[:400]}") from err
        self._inputs, names, self._variables, self._fn = _KERAS[key]
        self.output_names = list(names)

    def weights_sha256(self):
        """sha256 over the model's variable values (name, dtype, shape, bytes), in name order.

        A semantic fingerprint: SavedModel files are not byte-reproducible (two saves of the same weights
        differ), so the goldens' manifest records this, not a hash of the files."""
        digest = hashlib.sha256()
        for name, value in sorted(self._variables(), key=lambda nv: (nv[0], nv[1].shape, nv[1].tobytes())):
            digest.update(f"{name}|{value.dtype}|{value.shape}|".encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        return digest.hexdigest()

    def infer_bounded(self, feed):
        """A SavedModel signature or a traced Keras graph runs in the caller's thread (latency measures the call
        itself) under a TensorFlow CancellationManager, which the watchdog cancels at the inference time limit
        (TensorFlow checks it in every while-loop iteration); a TF1 session's run (or a TensorFlow without the
        API) in a worker thread."""
        try:
            from tensorflow.python.eager import cancellation
        except ImportError:
            return super().infer_bounded(feed)
        if getattr(self, "_session", None) is not None:
            return super().infer_bounded(feed)
        from paritygate.backend.deadline import bounded

        manager = cancellation.CancellationManager()

        def call():
            with cancellation.CancellationManagerContext(manager):
                return self.infer_impl(feed)

        return bounded(call, self.where, cancel=manager.start_cancel, in_thread=False, error=InferenceTimeout)

    def infer_impl(self, feed):
        missing = set(self._inputs) - set(feed)
        if missing:
            raise RunnerError(f"{self.path}: feed is missing input(s) {sorted(missing)}")
        try:
            outputs = self._fn(feed)
        except Exception as err:
            raise RunnerError(f"{self.describe()}: failed on inputs "
                              f"{ {k: (v.dtype.name, v.shape) for k, v in feed.items()} }: {err}") from err
        return {k: np.asarray(v) for k, v in outputs.items()}

    def input_metadata_impl(self):
        return dict(self._inputs)

    def deactivate_impl(self):
        if getattr(self, "_session", None) is not None:
            self._session.close()
        self._fn = self._keep = self._session = None


# A Keras file read once per process (keyed by its path, size, mtime and the Keras that reads it): a Beam handler
# over it loads it in every pipeline (RunInference's setup), and reading a .keras file and tracing its graph cost
# 0.3 s of each of mobilenet's pipelines (py-spy, conformance/test_runinference.py). Inference never changes it.
_KERAS = {}


def _stat(path):
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _keras_state(path):
    """(inputs, output names, variables, call) of the Keras file ``path``."""
    model = load_keras(path)
    def variables():  # read when hashed: a copy of every weight is not held for the run
        return _snapshot((getattr(w, "path", w.name), w) for w in model.weights)
    names = [t.name.split(":")[0] for t in model.inputs]
    inputs = {n: (np.dtype(getattr(t.dtype, "as_numpy_dtype", t.dtype)), tuple(-1 if d is None else d for d in t.shape))
              for n, t in zip(names, model.inputs)}
    structure = getattr(model, "output", None)
    # a functional model built with a dict of outputs: its keys name them
    outs = list(structure) if isinstance(structure, dict) else list(output_names(model))

    # One traced graph with the batch (and any unknown) dimension left open, as a SavedModel signature runs:
    # eager calls of a recurrent model run its loop op by op (nakdimon's BiLSTM: 0.7 s eager, 0.05 s traced,
    # the outputs bit-identical; measured with tf_keras 2.21 on 2 cores).
    specs = [tf.TensorSpec([None] * len(t.shape), t.dtype) for t in model.inputs]
    # Traced here, once: the shared concrete function is then only called (a tf.function first called from a Beam
    # worker thread with a dead-letter check's string input never released its tracing lock: the next call hung).
    graph = tf.function(lambda *args: model(list(args) if len(args) > 1 else args[0], training=False),
                        input_signature=specs, autograph=False).get_concrete_function()

    def call(feed):
        result = graph(*[feed[n] for n in names])
        if isinstance(result, dict):
            return {k: result[k] for k in outs}
        return dict(zip(outs, result if isinstance(result, (list, tuple)) else [result]))

    return inputs, outs, variables, call


def _snapshot(named_variables):
    """(name, value) of each variable. Keras 3's variables convert through ``np.array(x)``, which NumPy 2 answers
    with a DeprecationWarning (keras/src/backend/tensorflow/core.py): the library's, not a verdict, so a caller's
    ``-W error`` must not make the reference unloadable."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return [(name, np.asarray(v.numpy())) for name, v in named_variables]

