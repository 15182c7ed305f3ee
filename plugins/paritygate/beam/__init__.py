"""RunInference conformance: the Beam ``ModelHandler`` a model's ``[models.beam] handler`` names, checked in
real Beam pipelines and by direct calls.

    contract.py      the handler contract: load ``module:callable``, its precision, normalise results
    handlers.py      the suite's wrappers around the handler (timing, tracing, byte accounting)
    pipeline.py      one pipeline run of a ``Case`` on a pinned runner: results, dead letters, metrics
    records.py       what a run sends back: each output as a record, written by the workers and read back
    cases.py         Hypothesis strategies of cases (element count, batch bounds, keys)
    checks.py        pipeline-level checks (exactly once, pairing, batch bounds, metric bytes, dead letter,
                     latency) returning a ``paritygate.result.CheckResult``
    direct.py        handler-level checks (direct calls to load_model / run_inference / get_num_bytes ...)
    multiprocess.py  ``beam_multi_process``: the handler pickled into Beam's multi-process runner
    copies.py        ``beam_model_copies``: ``load_model`` calls per worker process against the handler's promise
    updates.py       ``beam_model_update``: RunInference's model updates through ``model_metadata_pcoll``
    serving.py       the suite's own handlers (``paritygate.beam.handlers:onnxruntime`` / ``:tensorrt``)
    tf_handler.py    the suite's own TensorFlow ``ModelHandler`` over numpy
    expectations.py  known upstream non-conformance (fixtures/expectations.toml), applied as strict xfail

Importing this package imports no apache_beam, TensorFlow or ONNX Runtime: ``handlers`` and ``pipeline``
import Beam, and the others import them on first use.
"""
