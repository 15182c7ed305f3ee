"""RunInference conformance: the Beam ``ModelHandler`` a model's ``[models.beam] handler`` names, checked in
real Beam pipelines and by direct calls.

    contract.py      the handler contract: load ``module:callable``, its precision, normalise results
    handlers.py      the suite's wrappers around the handler (timing, tracing, byte accounting)
    pipeline.py      one pipeline run of a ``Case`` on a pinned runner: results, dead letters, metrics
    cases.py         Hypothesis strategies of cases (element count, batch bounds, keys)
    checks.py        pipeline-level checks (exactly once, pairing, batch bounds, metric bytes, dead letter,
                     latency) returning a ``paritygate.result.CheckResult``
    direct.py        handler-level checks (direct calls to load_model / run_inference / get_num_bytes ...)
    expectations.py  known upstream non-conformance (fixtures/expectations.toml), applied as strict xfail

Importing this package imports no apache_beam, TensorFlow or ONNX Runtime: ``handlers`` and ``pipeline``
import Beam, and the others import them on first use.
"""
