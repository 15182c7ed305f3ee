"""RunInference conformance of each model's ``[models.beam] handler`` (paritygate.beam): real Beam pipelines on
a pinned runner (FnApiRunner / BundleBasedDirectRunner, or ``--parity-beam-runner``) and direct handler calls.

Each test is one report check (``beam_*``: pipeline level, ``handler_*``: direct calls). A check that a known
upstream defect makes fail (fixtures/expectations.toml, with the Beam file and line) is a strict xfail on the
bundled zoo: if it passes, it is reported as a failure. For a team's own config, a defect in its handler's code
is a failure naming the defect, unless the team's own expectations.toml accepts it (``beam.expectations.split``).
A model without a ``[models.beam]`` table has one row, ``beam_handler``, a skip that says so
(conformance/conftest.py deselects its other RunInference checks).

Cost under HYPOTHESIS_PROFILE=ci (see paritygate/beam/cases.py): exactly_once, pairing, batch_bounds and
metric_bytes share 2 explicit + 5 drawn pipelines per model, dead_letter runs 2 + 2, maybe_keyed_mixed and
batch_latency one each (batch_weight fails at construction on Beam 2.77): 13 pipeline runs per model, about
40 s for the four bundled models on 2 cores (nightly: 80 drawn cases per property, about 5 minutes).
"""

import pytest

pytestmark = [pytest.mark.beam, pytest.mark.tf]


@pytest.fixture
def beam_subject(parity_context, parity_model):
    """The model's HandlerUnderTest; skips without Beam or without a [models.beam] table."""
    pytest.importorskip("apache_beam", reason="apache-beam is not installed (pip install 'paritygate[beam]')")
    spec = parity_model
    if not spec.beam:
        pytest.skip(f"model '{spec.name}' has no [models.beam] table ({spec.where('beam.handler')}): no "
                    "RunInference handler to check")
    from paritygate.beam.checks import subject_for

    return subject_for(parity_context, spec)


@pytest.fixture
def beam_check(request, parity_options, beam_subject, parity_record):
    """Run a named check: apply its known upstream expectations as strict xfail, record details, assert."""
    from paritygate.beam.checks import PIPELINE_CHECKS, batch_latency
    from paritygate.beam.copies import model_copies
    from paritygate.beam.direct import DIRECT_CHECKS
    from paritygate.beam.expectations import match, run_expectations, split
    from paritygate.beam.multiprocess import multi_process
    from paritygate.beam.updates import model_update

    def run(name, **kwargs):
        config = None if parity_options.is_bundled else parity_options.config_path
        expected = match(name, beam_subject, run_expectations(parity_options.context, config))
        xfail, named = split(expected, parity_options.is_bundled)
        noted = {}
        if xfail:
            reason = " | ".join(e.describe() for e in xfail)
            request.applymarker(pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))
            noted["expectations"] = [e.as_dict() for e in xfail]
        if named:
            noted["upstream_defects"] = [e.as_dict() for e in named]
        check = {**PIPELINE_CHECKS, **DIRECT_CHECKS, "beam_batch_latency": batch_latency,
                 "beam_multi_process": multi_process, "beam_model_update": model_update,
                 "beam_model_copies": model_copies}[name]
        result = parity_record(check(beam_subject, **kwargs))
        result.details = {**noted, **result.details}
        assert result.passed, (f"{beam_subject.spec.name} {name} ({result.details['handler']}):\n" + "\n".join(result.failures)
                               + "".join(_named(e, beam_subject.spec.name, name) for e in named))

    return run


def _named(expectation, model, check):
    return (f"\nknown upstream defect '{expectation.id}': {expectation.describe()} -- your handler reaches it; "
            "use a handler that does not (e.g. paritygate.beam.handlers:onnxruntime), or accept it in the "
            f"expectations.toml beside your config: [[known_failures]] model = \"{model}\" check = \"{check}\" "
            f"upstream_defect = \"{expectation.id}\" reason = \"...\"")


def test_beam_handler(parity_model):
    """The one row of a model without a [models.beam] table (deselected for a model with one)."""
    pytest.skip(f"model '{parity_model.name}' has no [models.beam] table ({parity_model.where('beam.handler')}): "
                "no RunInference handler to check, so none of the beam_* / handler_* checks ran")


# -- pipeline level ----------------------------------------------------------------------------------
def test_beam_exactly_once(beam_check):
    beam_check("beam_exactly_once")


def test_beam_pairing(beam_check):
    beam_check("beam_pairing")


def test_beam_batch_bounds(beam_check):
    beam_check("beam_batch_bounds")


def test_beam_metric_bytes(beam_check):
    beam_check("beam_metric_bytes")


def test_beam_dead_letter(beam_check):
    beam_check("beam_dead_letter")


def test_beam_batch_weight(beam_check):
    beam_check("beam_batch_weight")


def test_beam_maybe_keyed_mixed(beam_check):
    beam_check("beam_maybe_keyed_mixed")


def test_beam_multi_process(beam_check):
    """The handler pickled into 2 worker processes (Beam's multi-process mode), each loading its own model."""
    beam_check("beam_multi_process")


def test_beam_model_copies(beam_check):
    """load_model calls per worker process (2 workers) within the handler's share_model_across_processes /
    model_copies promise; with model_copies=1 too when the factory takes it."""
    beam_check("beam_model_copies")


def test_beam_model_update(beam_check, beam_subject):
    """A model update through RunInference's model_metadata_pcoll side input: before it the original model's
    outputs, after it the update target's (a model_id, when present, must name the model that answered); an empty
    side input keeps the default. A skip for a handler that offers no updates (beam.updates.update_claim)."""
    from paritygate.beam.updates import update_claim

    unclaimed = update_claim(beam_subject)
    if unclaimed:
        pytest.skip(unclaimed)
    beam_check("beam_model_update")


@pytest.mark.latency
def test_beam_batch_latency(beam_check, parity_model):
    budget = (parity_model.beam or {}).get("batch_latency_p99_ms")
    if budget is None:
        pytest.skip(f"model '{parity_model.name}' sets no {parity_model.where('beam.batch_latency_p99_ms')}")
    beam_check("beam_batch_latency", budget_ms=budget)


# -- handler level (direct calls) ----------------------------------------------------------------------
def test_handler_load_model(beam_check):
    beam_check("handler_load_model")


def test_handler_results_stable(beam_check):
    beam_check("handler_results_stable")


def test_handler_batch_extremes(beam_check):
    beam_check("handler_batch_extremes")


def test_handler_num_bytes(beam_check):
    beam_check("handler_num_bytes")


def test_handler_batch_kwargs(beam_check):
    beam_check("handler_batch_kwargs")


def test_handler_metrics_namespace(beam_check):
    beam_check("handler_metrics_namespace")
