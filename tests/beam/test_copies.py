"""beam_model_copies: load_model calls per worker process against the handler's promise, on Beam's multi-process
runner (2 workers). A handler that loads per batch, or drops the model_copies it was given, fails; a correct one,
with and without model_copies, passes."""

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.beam.copies import load_failures, model_copies, takes_model_copies
from paritygate.beam.handlers import LoadRecord
from paritygate.beam.pipeline import Case, PipelineRun
from tests.beam import toy_handlers as toys

pytestmark = [pytest.mark.beam, pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]


def test_correct_handler_shares_one_copy_between_two_workers(toy_subject):
    result = model_copies(toy_subject(toys.shares_copies))
    assert result.passed, result.failures
    own, asked = result.details["runs"]
    assert own["share_model_across_processes"] is False and all(n == 1 for n in own["loads_by_pid"].values())
    assert asked["model_copies"] == 1 and sum(asked["loads_by_pid"].values()) == 1, asked
    assert len(asked["batches_by_pid"]) == 2, asked  # both workers ran batches on the one shared copy
    assert [m["met"] for m in asked["overlap"]] == [True, True], asked["overlap"]  # two at once (beam.overlap)


def test_factory_without_model_copies_checks_its_own_promise(toy_subject):
    result = model_copies(toy_subject(toys.correct))
    assert result.passed, result.failures
    assert len(result.details["runs"]) == 1 and "takes no model_copies" in result.details["note"]


def test_handler_loading_per_batch_fails(toy_subject):
    result = model_copies(toy_subject(toys.factory_of(toys.LoadsPerBatch)))
    assert not result.passed
    assert any("called load_model" in f and "never per batch or element" in f for f in result.failures), \
        result.failures


def test_handler_dropping_model_copies_fails(toy_subject):
    result = model_copies(toy_subject(toys.drops_copies))
    assert not result.passed
    assert any(f.startswith("model_copies=1: the factory was given model_copies=1") for f in result.failures)
    assert any("2 load_model calls across 2 process(es)" in f and "at most 1" in f for f in result.failures), \
        result.failures


def test_load_failures_read_the_promise():
    run = PipelineRun(Case(3, 1, 2), [], loads=[LoadRecord(1, 0.0), LoadRecord(2, 0.0), LoadRecord(2, 1.0)])
    assert load_failures(run, True, 3) == []
    (shared,) = load_failures(run, True, 2)
    assert "3 load_model calls across 2 process(es)" in shared
    (per_process,) = load_failures(run, False, 1)
    assert per_process.startswith("worker process 2 called load_model 2 times")
    assert takes_model_copies(toys.shares_copies) and takes_model_copies(toys.drops_copies)
    assert not takes_model_copies(toys.correct)


def test_handler_that_cannot_take_model_copies_skips_that_pipeline_and_keeps_its_own_promise(toy_subject):
    """def make(**kw): return OrtHandler(**kw), OrtHandler.__init__ without model_copies: the factory seems to take
    it, building the handler says otherwise. Not offered, so not judged; its per-process loads still are."""
    assert takes_model_copies(toys.make_ort)
    result = model_copies(toy_subject(toys.make_ort))
    assert result.passed, result.failures
    own, asked = result.details["runs"]
    assert own["share_model_across_processes"] is False and all(n == 1 for n in own["loads_by_pid"].values())
    assert "unexpected keyword argument 'model_copies'" in asked["skipped"] and asked["model_copies_asked"] == 1
    assert "does not offer model_copies" in result.details["note"]


def test_refusal_of_model_copies_still_judges_loads_per_process(toy_subject):
    class LoadsPerBatchOwnInit(toys.LoadsPerBatch, toys.OrtHandler):
        pass

    def make(onnx_path, **kwargs):
        return LoadsPerBatchOwnInit(onnx_path, **kwargs)

    result = model_copies(toy_subject(make))
    assert "skipped" in result.details["runs"][1]
    assert any("called load_model" in f for f in result.failures), result.failures
