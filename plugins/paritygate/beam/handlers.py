"""The suite's own wrapper around the (keyed) handler under test. Imports apache_beam: import it lazily.

``TracedHandler`` is the outermost handler given to ``RunInference``. It delegates everything and, per batch:
times the inner ``run_inference`` call (its results are listed inside the timing, so a lazy iterable is timed
too) and appends one ``BatchTrace`` after the batch's results, which rides the pipeline's output to the
suite on any runner (with any example the handler returned converted instead of the element itself); and,
when Beam calls ``get_num_bytes``, counts a batch whose bytes (the unkeyed handler's, keys apart) differ from
``contract.expected_num_bytes`` in the Beam counter ``paritygate/misreported_batches`` (metrics reach the suite
on any runner). The handler's ``with_preprocess_fn`` / ``with_postprocess_fn`` functions move to it
(``WithoutFns``), since Beam's Keyed wrappers refuse a handler that carries them.
"""

import os
import pickle
import time
import uuid
from dataclasses import dataclass

import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler

from paritygate.beam.contract import describe, digest, expected_num_bytes, payload_bytes, same_values

# The suite's own handlers (paritygate.beam.serving), by the names a config gives them:
# [models.beam] handler = "paritygate.beam.handlers:onnxruntime" (or ":tensorrt").
from paritygate.beam.serving import onnxruntime, tensorrt  # noqa: F401 - re-exported for configs

NAMESPACE = "paritygate"


@dataclass(frozen=True)
class BatchTrace:
    size: int  # elements in the batch
    returned: int  # results the (keyed) handler returned for it
    seconds: float  # wall time of the run_inference call, results listed
    payload: int  # bytes of the batch's arrays
    digests: tuple  # the batch's elements, in order
    converted: tuple = ()  # (element digest, returned example digest, description): converted_examples
    pid: int = None  # the process that ran the batch (multi-process runners: a worker)
    overlap: dict = None  # the batch's part in the rendezvous of a multi-worker run (overlap.Meeting.record())


@dataclass(frozen=True)
class LoadRecord:
    pid: int  # the process that called load_model (multi-process runners: a worker)
    seconds: float  # time.time() at the call


class CountedLoad:
    """Set as the handler instance's ``load_model``: each call (Beam's, or the handler's own ``self.load_model()``)
    writes one LoadRecord under ``folder`` through Beam's FileSystems, then runs the class's load_model. The
    handler pickles with it into every worker (the instance's attributes travel with it)."""

    def __init__(self, handler, folder):
        self.handler, self.folder = handler, folder

    def __call__(self):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(f"{self.folder}/load-{uuid.uuid4().hex}.pkl") as f:
            f.write(pickle.dumps([("load", LoadRecord(os.getpid(), time.time()))]))
        return type(self.handler).load_model(self.handler)


def count_loads(handler, folder):
    """Count the load_model calls of the handler the factory returned (of the handler under Beam's pre/post-
    processing wrappers, which keep it in ``_base``). False when the instance takes no attribute (slots)."""
    while hasattr(handler, "_base") and isinstance(handler._base, ModelHandler):
        handler = handler._base
    try:
        handler.load_model = CountedLoad(handler, folder)
    except (AttributeError, TypeError):
        return False
    return True


def unkeyed(element):
    """The example of a keyed ``(key, example)`` element (the bundled elements are never tuples)."""
    return element[1] if isinstance(element, tuple) and len(element) == 2 else element


def element_weight(element):
    """Payload bytes of a (maybe keyed) element: the ``element_size_fn`` of the batch-weight check."""
    return payload_bytes(unkeyed(element))


class Delegating(ModelHandler):
    """A ModelHandler that delegates every ModelHandler method (and any other attribute) to ``inner``."""

    def __init__(self, inner):
        self._inner = inner
        self._env_vars = getattr(inner, "_env_vars", {})

    def __getattr__(self, name):  # handler-specific attributes (e.g. paritygate_num_bytes) of the wrapped handler
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def load_model(self):
        return self._inner.load_model()

    def run_inference(self, batch, model, inference_args=None):
        return self._inner.run_inference(batch, model, inference_args)

    def get_num_bytes(self, batch):
        return self._inner.get_num_bytes(batch)

    def get_metrics_namespace(self):
        return self._inner.get_metrics_namespace()

    def get_resource_hints(self):
        return self._inner.get_resource_hints()

    def batch_elements_kwargs(self):
        return self._inner.batch_elements_kwargs()

    def validate_inference_args(self, inference_args):
        return self._inner.validate_inference_args(inference_args)

    def update_model_path(self, model_path=None):
        return self._inner.update_model_path(model_path=model_path)

    def get_preprocess_fns(self):
        return self._inner.get_preprocess_fns()

    def get_postprocess_fns(self):
        return self._inner.get_postprocess_fns()

    def should_skip_batching(self):
        return self._inner.should_skip_batching()

    def set_environment_vars(self):
        return self._inner.set_environment_vars()

    def share_model_across_processes(self):
        return self._inner.share_model_across_processes()

    def model_copies(self):
        return self._inner.model_copies()

    def override_metrics(self, metrics_namespace=""):
        return self._inner.override_metrics(metrics_namespace)

    def should_garbage_collect_on_timeout(self):
        return self._inner.should_garbage_collect_on_timeout()


class WithoutFns(Delegating):
    """The handler with its ``with_preprocess_fn`` / ``with_postprocess_fn`` functions held back: Beam's Keyed
    wrappers refuse a handler that has any ("All pre/postprocessing functions must be defined on the outer model
    handler", apache_beam/ml/inference/base.py:764 and :1085), so the suite puts them on its outermost handler."""

    def get_preprocess_fns(self):
        return []

    def get_postprocess_fns(self):
        return []


class OnExample:
    """A pre- or post-processing function applied to the example of a keyed ``(key, value)`` element (the suite's
    examples and PredictionResults are never 2-tuples), as the handler's own fns see it unkeyed."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, element):
        if isinstance(element, tuple) and len(element) == 2:
            return element[0], self.fn(element[1])
        return self.fn(element)


class PassTraces(OnExample):
    """A post-processing function that lets the suite's BatchTrace records through untouched."""

    def __call__(self, element):
        return element if isinstance(element, BatchTrace) else super().__call__(element)


class TracedHandler(Delegating):
    """The outermost handler: ``inner`` is the (keyed) handler without its pre/post-processing functions, which
    come back here (``preprocess`` / ``postprocess``: the handler's own, applied to keyed elements' examples).
    ``unkeyed`` is the handler under test without keys, whose byte count is checked exactly."""

    def __init__(self, inner, extra_batching=None, preprocess=(), postprocess=(), unkeyed=None, rendezvous=None):
        super().__init__(inner)
        self._extra_batching = dict(extra_batching or {})
        self._pre, self._post = list(preprocess), list(postprocess)
        self._unkeyed = unkeyed
        self._rendezvous = rendezvous  # overlap.Rendezvous: the first two batches meet inside (multi-worker runs)

    def run_inference(self, batch, model, inference_args=None):
        meeting = self._rendezvous.enter() if self._rendezvous is not None else None
        start = time.perf_counter()
        used = meeting.wrap(model) if meeting is not None else model
        results = list(self._inner.run_inference(batch, used, inference_args))
        seconds = time.perf_counter() - start
        examples = [unkeyed(e) for e in batch]
        trace = BatchTrace(len(batch), len(results), seconds, sum(payload_bytes(e) for e in examples),
                           tuple(digest(e) for e in examples), converted_examples(examples, results), os.getpid(),
                           meeting.record() if meeting is not None else None)
        return results + [trace]

    def get_num_bytes(self, batch):
        reported = self._inner.get_num_bytes(batch)
        handler = self._unkeyed or self._inner
        examples = [unkeyed(e) for e in batch]
        own = reported if handler is self._inner else handler.get_num_bytes(examples)  # keys' bytes apart
        expected, _ = expected_num_bytes(handler, examples)
        Metrics.distribution(NAMESPACE, "payload_bytes").update(expected)
        if isinstance(own, (int, np.integer)):
            Metrics.distribution(NAMESPACE, "reported_bytes").update(int(own))
        if not isinstance(own, (int, np.integer)) or own != expected:
            Metrics.counter(NAMESPACE, "misreported_batches").inc()
        return reported

    def batch_elements_kwargs(self):
        return {**self._inner.batch_elements_kwargs(), **self._extra_batching}

    def get_preprocess_fns(self):
        return [OnExample(fn) for fn in self._pre]

    def get_postprocess_fns(self):
        return [PassTraces(fn) for fn in self._post]


def converted_examples(batch, results):
    """(element digest, returned digest, what changed) for each result whose example is not the element at its
    position but holds the same values: the handler returned a converted copy (a contract breach), not the
    element. A result whose example is some other element of the batch is left to the pairing checks."""
    digests = {digest(e) for e in batch}
    out = []
    for element, result in zip(batch, results):
        example = getattr(unkeyed(result), "example", None)
        if example is None:
            continue
        d = digest(example)
        if d not in digests and same_values(element, example):
            out.append((digest(element), d, f"{describe(element)} came back as {describe(example)}"))
    return tuple(out)


def weight_batching(max_batch_weight):
    """The batching kwargs Beam's own ``ModelHandler(max_batch_weight=..., element_size_fn=...)`` produces."""
    return ModelHandler(max_batch_weight=max_batch_weight, element_size_fn=element_weight).batch_elements_kwargs()

