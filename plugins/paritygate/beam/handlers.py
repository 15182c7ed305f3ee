"""The suite's own wrapper around the (keyed) handler under test. Imports apache_beam: import it lazily.

``TracedHandler`` is the outermost handler given to ``RunInference``. It delegates everything and, per batch:
times the inner ``run_inference`` call (its results are listed inside the timing, so a lazy iterable is timed
too) and appends one ``BatchTrace`` after the batch's results, which rides the pipeline's output to the
suite on any runner; and, when Beam calls ``get_num_bytes``, counts a batch whose reported bytes are below its
payload in the Beam counter ``paritygate/underreported_batches`` (metrics reach the suite on any runner).
"""

import os
import time
from dataclasses import dataclass

from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler

from paritygate.beam.contract import digest, payload_bytes

NAMESPACE = "paritygate"


@dataclass(frozen=True)
class BatchTrace:
    size: int  # elements in the batch
    returned: int  # results the (keyed) handler returned for it
    seconds: float  # wall time of the run_inference call, results listed
    payload: int  # bytes of the batch's arrays
    digests: tuple  # the batch's elements, in order
    pid: int = None  # the process that ran the batch (multi-process runners: a worker)


def unkeyed(element):
    """The example of a keyed ``(key, example)`` element (the bundled elements are never tuples)."""
    return element[1] if isinstance(element, tuple) and len(element) == 2 else element


def element_weight(element):
    """Payload bytes of a (maybe keyed) element: the ``element_size_fn`` of the batch-weight check."""
    return payload_bytes(unkeyed(element))


class TracedHandler(ModelHandler):
    def __init__(self, inner, extra_batching=None):
        self._inner = inner
        self._extra_batching = dict(extra_batching or {})
        self._env_vars = getattr(inner, "_env_vars", {})

    def load_model(self):
        return self._inner.load_model()

    def run_inference(self, batch, model, inference_args=None):
        start = time.perf_counter()
        results = list(self._inner.run_inference(batch, model, inference_args))
        seconds = time.perf_counter() - start
        examples = [unkeyed(e) for e in batch]
        trace = BatchTrace(len(batch), len(results), seconds, sum(payload_bytes(e) for e in examples),
                           tuple(digest(e) for e in examples), os.getpid())
        return results + [trace]

    def get_num_bytes(self, batch):
        reported = self._inner.get_num_bytes(batch)
        payload = sum(element_weight(e) for e in batch)
        Metrics.distribution(NAMESPACE, "payload_bytes").update(payload)
        if not isinstance(reported, int) or reported < payload:
            Metrics.counter(NAMESPACE, "underreported_batches").inc()
        return reported

    def get_metrics_namespace(self):
        return self._inner.get_metrics_namespace()

    def get_resource_hints(self):
        return self._inner.get_resource_hints()

    def batch_elements_kwargs(self):
        return {**self._inner.batch_elements_kwargs(), **self._extra_batching}

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


def weight_batching(max_batch_weight):
    """The batching kwargs Beam's own ``ModelHandler(max_batch_weight=..., element_size_fn=...)`` produces."""
    return ModelHandler(max_batch_weight=max_batch_weight, element_size_fn=element_weight).batch_elements_kwargs()
