"""beam_multi_process: a correct handler passes on Beam's multi-process runner (2 worker processes); one that
cannot be pickled, or that relies on state left in the launching process, is reported. The handlers are in
tests/beam/toy_handlers.py: a worker imports the module of the handler it unpickles, and this one imports
TensorFlow (measured: 2.8 s of CPU a worker process)."""

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.beam.multiprocess import multi_process, pickling_failures
from tests.beam import toy_handlers as toys

pytestmark = [pytest.mark.beam, pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]


def test_correct_handler_passes_on_two_worker_processes(toy_subject):
    result = multi_process(toy_subject(toys.correct))
    assert result.passed, result.failures
    assert len(result.details["worker_pids"]) == 2, result.details
    meetings = result.details["overlap"]  # its first two batches were inside the handler at once (beam.overlap)
    assert len(meetings) == 2 and all(m["met"] and m["model_met"] for m in meetings), meetings


def test_unpicklable_handler_is_a_contract_breach(toy_subject):
    subject = toy_subject(toys.factory_of(toys.LoadsInInit))
    (failure,) = pickling_failures(subject)
    assert "(LoadsInInit) cannot be pickled" in failure and "InferenceSession" in failure, failure
    result = multi_process(subject)
    assert not result.passed and "cannot be pickled" in result.failures[0]


def test_state_left_in_the_launching_process_is_caught(toy_subject):
    subject = toy_subject(toys.loaded_by_factory)
    assert pickling_failures(subject) == []
    result = multi_process(subject)
    assert not result.passed
    assert any("pipeline failed" in f and "KeyError" in f for f in result.failures), result.failures
