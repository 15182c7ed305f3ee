"""Fixtures of the RunInference tests: the toy model (y = 5x, z = 2x) as the TF reference SavedModel
(tests/conftest.py's ``toy_saved_model``) and as ONNX, and ``toy_subject`` to put a toy handler under test.

    toy_onnx_path            session-scoped ONNX of the toy model (x float32 [N, 1])
    toy_reference            the activated TfRunner over the toy SavedModel
    toy_subject(factory)     a HandlerUnderTest for ``factory(onnx_path, min_batch_size=, max_batch_size=)``
"""

import functools

import pytest

from tests.conftest import make_onnx, toy_spec


@pytest.fixture(scope="session")
def toy_onnx_path(tmp_path_factory):
    return make_onnx(tmp_path_factory.mktemp("toy_onnx") / "toy.onnx")


@pytest.fixture(scope="session")
def toy_reference(toy_saved_model):
    from paritygate.backend.tf.runner import TfRunner

    return TfRunner(toy_saved_model).activate()


@pytest.fixture
def toy_subject(toy_onnx_path, toy_reference, toy_saved_model):
    """``toy_subject(factory, max_batch=4, beam=None, **spec_fields)`` -> HandlerUnderTest."""
    from paritygate.beam.contract import HandlerUnderTest

    def make(factory, max_batch=4, beam=None, onnx_path=None, **fields):
        beam = beam or {"handler": f"toy_handlers:{getattr(factory, '__name__', 'factory')}"}
        spec = toy_spec(reference=toy_saved_model, max_batch=max_batch, beam=beam, **fields)
        bound = functools.partial(factory, onnx_path or toy_onnx_path)
        return HandlerUnderTest.from_spec(spec, toy_reference, factory=bound)

    return make
