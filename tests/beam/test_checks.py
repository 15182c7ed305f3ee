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
    (row,) = result.latency
    assert row["batch"] == "all" and row["p99_ms"] >= 1000 * toys.SLOW_SECONDS
    assert len(row["samples_ms"]) == checks.LATENCY_BATCHES and row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"]
    # one percentile in the suite: nearest rank (an observed sample), as the latency rows and the comparator
    from paritygate.latency.harness import percentile

    assert row["p99_ms"] == percentile(row["samples_ms"], 99) and row["p99_ms"] in row["samples_ms"]


def test_misreported_bytes_are_caught(toy_subject):
    subject = toy_subject(toys.factory_of(toys.MisreportsBytes))
    assert "(under-reported 0.25x)" in _failures(checks.metric_bytes(subject))


def test_a_1000x_byte_over_report_is_caught(toy_subject):
    subject = toy_subject(toys.factory_of(toys.OverReportsBytes))
    assert "(over-reported 1e+03x)" in _failures(checks.metric_bytes(subject))
    assert "not the 16 bytes of the sum of the elements' nbytes" in _failures(direct.num_bytes(subject))


def test_a_declared_byte_formula_is_held_exactly(toy_subject):
    subject = toy_subject(toys.factory_of(toys.DeclaresItsBytes))
    assert checks.metric_bytes(subject).passed and direct.num_bytes(subject).passed
    assert direct.num_bytes(subject).details["rule"] == "paritygate_num_bytes declared by the handler"


def test_a_pre_and_post_processing_handler_passes(toy_subject):
    """with_preprocess_fn / with_postprocess_fn: the suite keeps them on its outermost handler (Beam's Keyed
    wrappers refuse them), maps preprocessed examples to the elements sent, and runs them in direct calls."""
    subject = toy_subject(toys.with_fns, beam={"handler": "toy_handlers:with_fns"})
    known = expectations_for()
    for name, check in {**checks.PIPELINE_CHECKS, **direct.DIRECT_CHECKS}.items():
        result = check(subject)
        assert result.passed != bool(match(name, subject, known)), (name, result.failures)
    from paritygate.beam.pipeline import Case, run_case

    keyed = run_case(subject, Case(6, 1, 4, "keyed", "unique_str"))
    assert keyed.error is None and not checks.pairing_failures(subject, keyed)
    assert {e.digest for e in keyed.results} == {d for _, _, d, _ in keyed.inputs}  # named by the elements sent


def test_a_converted_example_is_a_contract_breach_naming_the_element(toy_subject):
    subject = toy_subject(toys.factory_of(toys.ConvertsExample))
    text = _failures(checks.exactly_once(subject))
    assert ("contract breach: element #0: run_inference returned its example converted (float32[1] ndarray came "
            "back as float64[1] ndarray)") in text
    assert "lost:" not in text and "foreign" not in text
    assert "contract breach: result 0's example is element 0 converted" in _failures(direct.batch_extremes(subject))


def test_batch_bounds_follow_the_handlers_batching_kwargs(toy_subject):
    """max_batch_duration_secs + batch_length_fn: every length bucket flushes its own short batch.
    (FnApiRunner: BundleBasedDirectRunner loses the num_inferences counter of timer-flushed batches.)"""
    from paritygate.beam.pipeline import Case, run_case

    subject = toy_subject(toys.factory_of(toys.BucketedBatches))
    for case in (Case(12, 4, 4), Case(12, 4, 4, "keyed", "unique_int")):
        run = run_case(subject, case)
        short = [t.size for t in run.traces if t.size < 4]
        assert run.error is None and len(short) > 1, "several short batches: 'at most one' would wrongly fail"
        assert checks.batch_bounds_failures(subject, run) == []
        assert checks.exactly_once_failures(run) == []
    # without time-based batching the one-short-batch rule stands
    assert checks.short_batch_rule({"min_batch_size": 4, "max_batch_size": 4}, 1)[:2] == (4, 1)
    assert checks.short_batch_rule(subject.make(4, 4).batch_elements_kwargs(), 4)[:2] == (4, None)


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
    details = result.to_dict()["details"]
    assert details["failing"]["case"]["count"] >= 1 and details["failing"]["batch_sizes"]
    assert details["runners"] == ["FnApiRunner", "BundleBasedDirectRunner"]


def test_batch_latency_p99_is_the_latency_rows_statistic(toy_subject):
    """The Beam per-batch p99 is the latency rows' p99_ms (nearest rank, paritygate.comparator.stats), not numpy's
    linear interpolation: the baseline compares both under one field. Of 40 timed batches it is the slowest."""
    import numpy as np

    from paritygate.latency import percentile

    subject = toy_subject(toys.correct, beam={"handler": "toy_handlers:correct", "batch_latency_p99_ms": 1000.0})
    (row,) = checks.batch_latency(subject, 1000.0).latency
    samples = row["samples_ms"]
    assert len(samples) == checks.LATENCY_BATCHES < 100
    assert row["p99_ms"] == max(samples) == percentile(samples, 99)
    assert (row["p50_ms"], row["p90_ms"]) == (percentile(samples, 50), percentile(samples, 90))
    two_slowest = sorted(samples)[-2:]
    if two_slowest[0] != two_slowest[1]:  # interpolation would land between them
        assert float(np.percentile(samples, 99)) < row["p99_ms"]


def test_model_update_passes_a_handler_that_honours_it_and_fails_one_that_ignores_it(toy_subject):
    from paritygate.beam.updates import model_update

    good = model_update(toy_subject(toys.correct))
    assert good.passed, good.failures
    ids = good.details["model_ids"]
    assert good.details["elements"] == 9 and ids["after"] == [good.details["update_target"]] and ids["before"] != ids["after"]
    bad = model_update(toy_subject(toys.factory_of(toys.IgnoresUpdates)))
    assert "(after the update): not the update target's" in _failures(bad)


def test_model_update_judges_outputs_not_model_id(toy_subject):
    """A team's handler that honours updates but leaves PredictionResult.model_id empty passes, the absence
    recorded; the same handler ignoring updates (Beam's no-op, run because the config says it uses them) fails."""
    from paritygate.beam.updates import model_update, update_claim

    good = model_update(toy_subject(toys.make_updatable_ort))
    assert good.passed, good.failures
    assert good.details["model_id_absent"]["before"] == good.details["model_id_absent"]["after"] == 9
    assert good.details["model_ids"] == {"before": ["None"], "after": ["None"]}
    subject = toy_subject(toys.make_ort, beam={"handler": "toy_handlers:make_ort", "model_updates": True})
    assert update_claim(subject) is None
    assert "(after the update): not the update target's" in _failures(model_update(subject))


def test_a_handler_wrong_only_on_short_batches_fails_every_pipeline_check(toy_subject):
    """Every pipeline check runs a count that leaves a short final batch and holds its results to the reference
    (batch_weight and maybe_keyed_mixed fail on Beam itself for every handler, so they cannot show it)."""
    from paritygate.beam.copies import model_copies
    from paritygate.beam.multiprocess import multi_process
    from paritygate.beam.updates import model_update

    subject = toy_subject(toys.factory_of(toys.PadsShortBatchesAtTheFront))
    every = {**checks.PIPELINE_CHECKS, "beam_multi_process": multi_process, "beam_model_copies": model_copies}
    for name, check in every.items():
        if name not in BEAM_LEVEL:
            text = _failures(check(subject))
            # every result compared already (beam_model_copies pairs every result since issue 41: beam/copies.py)
            pairs = name in ("beam_pairing", "beam_multi_process", "beam_model_copies")
            assert ("element #" if pairs else "short batch: element #") in text and "output 'y'" in text, (name, text)
    assert "before the update): not the original model's outputs" in _failures(model_update(subject))
