"""The pipeline-level checks: each deliberately defective toy handler is caught by its check, and the correct
handlers pass every check except the Beam-level known defects (which must still fail, as expected)."""

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.beam import checks, direct
from paritygate.beam.expectations import expectations_for, match
from tests.beam import toy_handlers as toys

pytestmark = [pytest.mark.beam, pytest.mark.tf, pytest.mark.onnx]

BEAM_LEVEL = {"beam_batch_weight", "beam_maybe_keyed_mixed"}  # Beam 2.77 fails these for every handler


@pytest.mark.parametrize("factory", [toys.correct, toys.factory_of(toys.ReturnsLists)], ids=["dicts", "lists"])
def test_correct_handler_passes_every_check(toy_subject, factory):
    subject = toy_subject(factory, beam={"handler": "toy_handlers:correct", "batch_latency_p99_ms": 1000.0})
    known = expectations_for()
    every = {**checks.PIPELINE_CHECKS, **direct.DIRECT_CHECKS}
    for name, check in every.items():
        result = check(subject)
        expected = match(name, subject, known)
        assert result.passed != bool(expected), (name, result.failures, [e.id for e in expected])
        assert {e.id for e in expected} <= {"beam-max-batch-weight", "beam-maybe-keyed-mixed"}
        assert bool(expected) == (name in BEAM_LEVEL)
    assert checks.batch_latency(subject, 1000.0).passed


def _failures(result):
    assert not result.passed, f"{result.check} did not catch the defect"
    return "\n".join(result.failures)


def test_dropped_element_is_caught_plain_and_keyed(toy_subject):
    subject = toy_subject(toys.factory_of(toys.DropsElement))
    text = _failures(checks.exactly_once(subject))
    assert "lost: element #" in text
    assert "came back with" in text  # the batch trace: fewer results than elements
    # KeyedModelHandler silently zips keys with the fewer results: the keyed run must be caught too
    from paritygate.beam.pipeline import Case, run_case

    keyed = run_case(subject, Case(5, 1, 4, "keyed", "unique_str"))
    assert any("lost" in f for f in checks.exactly_once_failures(keyed))


def test_misaligned_results_are_caught_by_pairing(toy_subject):
    text = _failures(checks.pairing(toy_subject(toys.factory_of(toys.MisalignsResults))))
    assert "results misaligned" in text


def test_ignored_max_batch_size_is_caught(toy_subject):
    subject = toy_subject(toys.ignores_max_batch_size)
    assert "exceeds max_batch_size=" in _failures(checks.batch_bounds(subject))
    assert "min/max" in _failures(direct.batch_kwargs(subject))


def test_duplicated_result_is_caught(toy_subject):
    text = _failures(checks.exactly_once(toy_subject(toys.factory_of(toys.DuplicatesResult))))
    assert "duplicated or foreign result" in text


def test_latency_over_budget_is_caught(toy_subject):
    subject = toy_subject(toys.factory_of(toys.SlowHandler))
    result = checks.batch_latency(subject, budget_ms=1000 * toys.SLOW_SECONDS / 2)
    assert "exceeds the budget" in _failures(result)
    (row,) = result.details()["latency"]
    assert row["batch"] == "all" and row["p99_ms"] >= 1000 * toys.SLOW_SECONDS
    assert len(row["samples_ms"]) == checks.LATENCY_BATCHES and row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"]


def test_misreported_bytes_are_caught(toy_subject):
    subject = toy_subject(toys.factory_of(toys.MisreportsBytes))
    assert "fewer bytes than their payload" in _failures(checks.metric_bytes(subject))


def test_failure_on_a_batch_of_one_is_caught(toy_subject):
    subject = toy_subject(toys.factory_of(toys.FailsOnBatchOfOne))
    assert "pipeline failed: " in _failures(checks.exactly_once(subject))


def test_dead_letter_keeps_every_other_element(toy_subject):
    result = checks.dead_letter(toy_subject(toys.correct))
    assert result.passed, result.failures
    failing = checks.dead_letter(toy_subject(toys.factory_of(toys.DropsElement)))
    assert "lost: element #" in _failures(failing)


def test_a_failing_check_records_the_failing_case(toy_subject):
    result = checks.exactly_once(toy_subject(toys.factory_of(toys.DropsElement)))
    details = result.details()
    assert details["failing"]["case"]["count"] >= 1 and details["failing"]["batch_sizes"]
    assert details["runners"] == ["FnApiRunner", "BundleBasedDirectRunner"]
