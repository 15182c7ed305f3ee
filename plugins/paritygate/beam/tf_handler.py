"""The suite's own TensorFlow ``ModelHandler`` over numpy, so that ``pip install 'paritygate[cpu]'`` alone gives
working Beam TensorFlow handlers.

Beam 2.77's ``apache_beam.ml.inference.tensorflow_inference`` imports ``tensorflow_hub`` at module level, which
under Keras 3 needs ``tf_keras``; both declare a dependency on ``tensorflow`` (not ``tensorflow-cpu``), so they
cannot be extras of a tensorflow-cpu install. ``TFNumpyHandler`` needs neither: it loads a SavedModel signature
or a ``.keras`` file through the suite's reference runner (``paritygate.backend.tf.runner.TfRunner``).

An element is one ndarray without the batch axis (a single-input model) or a dict input name -> ndarray; a
result's ``inference`` is the output ndarray (a single-output model, as Beam's own TF handler returns it) or a
dict output name -> ndarray; each a copy owning its data. The handler holds only
paths and names, so it pickles; each worker loads its own model in ``load_model`` (as on Dataflow or Flink).

Imports apache_beam: import it on first use.
"""

import contextlib
import importlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from apache_beam.ml.inference.base import PredictionResult

from paritygate.backend.tf.runner import TfRunner
from paritygate.beam.serving import NumpyContract

METRICS_NAMESPACE = "paritygate_TFNumpy"


class TFNumpyHandler(NumpyContract):
    """RunInference over a TensorFlow SavedModel signature or a ``.keras`` file, numpy in and out.

    Args:
        model_uri: a SavedModel folder or a ``.keras`` file (local path).
        signature: the SavedModel signature (ignored for ``.keras``).
        custom_objects: ``"module:callable"`` returning the Keras custom objects needed to load a ``.keras``
            file; a name, not a dict, so that the handler pickles and each worker imports them itself.
        **kwargs: Beam's ModelHandler batching arguments (``min_batch_size``, ``max_batch_size``, ...).
    """

    metrics_namespace = METRICS_NAMESPACE

    def __init__(self, model_uri, signature="serving_default", custom_objects=None, **kwargs):
        super().__init__(**kwargs)
        self._model_uri = str(model_uri)
        self._signature = signature
        self._custom_objects = custom_objects
        if custom_objects is not None and ":" not in custom_objects:
            raise ValueError(f"custom_objects={custom_objects!r}: expected 'module:callable'")

    def load_model(self):
        shared = _SHARED.pop(_lent(self._model_uri, self._signature), None)
        if shared is not None and self._custom_objects is None:
            return shared
        runner = TfRunner(Path(self._model_uri), self._signature)
        with self._keras_scope():
            runner.activate()
        return runner

    def _keras_scope(self):
        if self._custom_objects is None:
            return contextlib.nullcontext()
        import keras

        module, _, attr = self._custom_objects.partition(":")
        return keras.saving.custom_object_scope(getattr(importlib.import_module(module), attr)())

    def run_inference(self, batch, model, inference_args=None):
        if inference_args:
            raise ValueError(f"{type(self).__name__} takes no inference_args, got {sorted(inference_args)}")
        names = list(model.input_metadata())
        feeds = [dict(e) if isinstance(e, Mapping) else _single(names, e) for e in batch]
        feed = {name: np.stack([np.asarray(f[name]) for f in feeds]) for name in names}
        outputs = model.infer(feed)
        return [PredictionResult(element, _row(outputs, i), self._model_uri) for i, element in enumerate(batch)]


_SHARED = {}  # (model path, signature) -> an activated TfRunner this process lends to the next load_model


@contextlib.contextmanager
def lending(runner):
    """While inside, the first ``TFNumpyHandler.load_model`` of ``runner``'s SavedModel and signature in this process
    takes ``runner`` (activated) instead of loading the model again: ``paritygate shadow`` reads the reference's
    output names with it, and a pipeline run in this process (DirectRunner, one worker) serves from it. Workers in
    other processes load their own; what was not taken is dropped on leaving."""
    key = _lent(runner.path, runner.signature)
    _SHARED[key] = runner
    try:
        yield runner
    finally:
        _SHARED.pop(key, None)


def _lent(path, signature):
    """The key a lent runner is found by: its path as ``Path`` spells it (a trailing slash dropped), its signature."""
    return str(Path(path)), signature


def _row(outputs, i):
    if len(outputs) == 1:
        return np.array(next(iter(outputs.values()))[i])
    return {k: np.array(v[i]) for k, v in outputs.items()}


def _single(names, element):
    if len(names) != 1:
        raise ValueError(f"the model takes {len(names)} inputs {names}: an element must be a dict input name -> "
                         f"array, got a {type(element).__name__}")
    return {names[0]: element}
