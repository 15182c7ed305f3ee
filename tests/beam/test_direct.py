"""The handler-level checks (direct calls), on the toy handlers."""

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.beam import direct
from tests.beam import toy_handlers as toys

pytestmark = [pytest.mark.beam, pytest.mark.tf, pytest.mark.onnx]


@pytest.mark.parametrize("check", sorted(direct.DIRECT_CHECKS))
def test_correct_handler_passes(toy_subject, check):
    result = direct.DIRECT_CHECKS[check](toy_subject(toys.correct))
    assert result.passed, result.failures
    assert result.check == check


def test_aliased_output_buffer_is_caught(toy_subject):
    result = direct.results_stable(toy_subject(toys.factory_of(toys.AliasesOutput)))
    assert not result.passed
    assert "changed after" in result.failures[0] and "reuses" in result.failures[0]


def test_batch_of_one_failure_is_caught(toy_subject):
    result = direct.batch_extremes(toy_subject(toys.factory_of(toys.FailsOnBatchOfOne)))
    assert result.failures == ["a batch of 1 raised ValueError: a batch of one"]


def test_misaligned_results_are_caught(toy_subject):
    result = direct.batch_extremes(toy_subject(toys.factory_of(toys.MisalignsResults)))
    assert not result.passed and all(f.startswith("batch of 4: result") for f in result.failures)


def test_dropped_or_duplicated_results_are_caught(toy_subject):
    assert "returned 3 result(s)" in direct.batch_extremes(toy_subject(toys.factory_of(toys.DropsElement))).failures[1]
    duplicated = direct.batch_extremes(toy_subject(toys.factory_of(toys.DuplicatesResult)))
    assert duplicated.failures == ["a batch of 1 returned 2 result(s)", "a batch of 4 returned 5 result(s)"]


def test_misreported_bytes_are_caught_for_both_forms(toy_subject):
    result = direct.num_bytes(toy_subject(toys.factory_of(toys.MisreportsBytes)))
    assert len(result.failures) == 2 and "= 4, not the 16 bytes" in result.failures[0]


def test_ignored_batch_bounds_are_caught(toy_subject):
    result = direct.batch_kwargs(toy_subject(toys.ignores_max_batch_size))
    assert "gives min/max 1/None" in result.failures[0]


def test_non_string_namespace_is_caught(toy_subject):
    class NoNamespace(toys.ToyHandler):
        def get_metrics_namespace(self):
            return None

    result = direct.metrics_namespace(toy_subject(toys.factory_of(NoNamespace)))
    assert result.failures == ["get_metrics_namespace() returned None, not a non-empty string"]


def test_load_failure_is_a_failure_not_a_crash(toy_subject, tmp_path):
    subject = toy_subject(toys.correct, onnx_path=tmp_path / "missing.onnx")
    for check in (direct.results_stable, direct.batch_extremes, direct.load_model):
        assert check(subject).failures[0].startswith("load_model raised")


def test_beam_decoded_elements_are_views():
    from paritygate.beam.contract import beam_decoded

    x = np.ones((4, 4), np.float32)
    decoded = beam_decoded(x)
    assert np.array_equal(decoded, x) and not decoded.flags.owndata


def test_a_model_beam_cannot_cache_is_caught(toy_subject):
    class ReturnsTuple(toys.ToyHandler):
        def load_model(self):
            return (super().load_model(),)

    (failure,) = direct.load_model(toy_subject(toys.factory_of(ReturnsTuple))).failures
    assert "returned a tuple, which cannot be weakly referenced" in failure
