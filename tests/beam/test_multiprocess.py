"""beam_multi_process: a correct handler passes on Beam's multi-process runner (2 worker processes); one that
cannot be pickled, or that relies on state left in the launching process, is reported."""

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.beam.multiprocess import multi_process, pickling_failures
from tests.beam import toy_handlers as toys

pytestmark = [pytest.mark.beam, pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]


class LoadsInInit(toys.ToyHandler):
    """Loads its ONNX Runtime session in __init__ and keeps it: the session cannot be pickled."""

    def __init__(self, onnx_path, min_batch_size=None, max_batch_size=None):
        super().__init__(onnx_path, min_batch_size, max_batch_size)
        self.session = toys.ToyHandler.load_model(self)

    def load_model(self):
        return self.session


_LOADED = {}  # filled by the factory in the launching process only


class LoadedByFactory(toys.ToyHandler):
    """load_model hands back the session the factory loaded into a module global: empty in a worker."""

    def load_model(self):
        return _LOADED["session"]


def loaded_by_factory(onnx_path, min_batch_size=None, max_batch_size=None):
    handler = LoadedByFactory(onnx_path, min_batch_size=min_batch_size, max_batch_size=max_batch_size)
    _LOADED["session"] = toys.ToyHandler.load_model(handler)
    return handler


def test_correct_handler_passes_on_two_worker_processes(toy_subject):
    result = multi_process(toy_subject(toys.correct))
    assert result.passed, result.failures
    assert len(result.details["worker_pids"]) == 2, result.details


def test_unpicklable_handler_is_a_contract_breach(toy_subject):
    subject = toy_subject(toys.factory_of(LoadsInInit))
    (failure,) = pickling_failures(subject)
    assert "(LoadsInInit) cannot be pickled" in failure and "InferenceSession" in failure, failure
    result = multi_process(subject)
    assert not result.passed and "cannot be pickled" in result.failures[0]


def test_state_left_in_the_launching_process_is_caught(toy_subject):
    subject = toy_subject(loaded_by_factory)
    assert pickling_failures(subject) == []
    result = multi_process(subject)
    assert not result.passed
    assert any("pipeline failed" in f and "KeyError" in f for f in result.failures), result.failures
