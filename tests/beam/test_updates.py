"""paritygate.beam.updates: the bookkeeping of beam_model_update (its pipelines run in test_checks.py and
test_serving.py)."""

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("tensorflow")

from paritygate.beam.contract import digest
from paritygate.beam.updates import UPDATE_OFFSET, update_claim, update_failures
from tests.beam import toy_handlers as toys

pytestmark = [pytest.mark.beam, pytest.mark.tf]


def test_elements_with_equal_contents_are_each_accounted_for(toy_subject):
    """An input-set row drawn twice gives two elements with one digest: two results for it are not a loss."""
    subject = toy_subject(toys.correct)
    x = np.float32([0.5])
    inputs = [(None, False, digest(x), x), (None, False, digest(x), x.copy())]
    before = [(digest(x), {"y": np.float32([2.5]), "z": np.float32([1.0])}, "own.onnx")] * 2
    after = [(digest(x), {"y": np.float32([2.5 + UPDATE_OFFSET]), "z": np.float32([1.0 + UPDATE_OFFSET])}, "t")] * 2
    assert update_failures(subject, inputs, {"before": before, "after": after}, "t") == []
    failures = update_failures(subject, inputs, {"before": before[:1], "after": after * 2}, "t")
    assert "lost: element #1 (before the update)" in failures
    assert sum("none of the elements sent, or one sent once came back twice" in f for f in failures) == 2


def test_update_check_runs_only_for_a_handler_that_claims_updates(toy_subject):
    """A handler keeping Beam's no-op update_model_path takes no updates: skipped with the reason, unless the
    config says the pipeline sends them. Overriding it (wrapped by with_preprocess_fn too) is a claim."""
    reason = update_claim(toy_subject(toys.make_ort))
    assert "does not override update_model_path" in reason and "base.py:291" in reason
    assert "key 'beam.model_updates'" in reason
    assert update_claim(toy_subject(toys.make_ort, beam={"handler": "h:m", "model_updates": True})) is None
    assert update_claim(toy_subject(toys.make_updatable_ort)) is None
    assert update_claim(toy_subject(toys.with_fns)) is None  # ToyHandler under Beam's pre/post wrappers


def test_results_without_model_id_are_recorded_not_failed(toy_subject):
    subject = toy_subject(toys.correct)
    x = np.float32([0.5])
    inputs = [(None, False, digest(x), x)]
    before = [(digest(x), {"y": np.float32([2.5]), "z": np.float32([1.0])}, None)]
    after = [(digest(x), {"y": np.float32([2.5 + UPDATE_OFFSET]), "z": np.float32([1.0 + UPDATE_OFFSET])}, None)]
    assert update_failures(subject, inputs, {"before": before, "after": after}, "t") == []
    wrong = [(digest(x), after[0][1], "other.onnx")]
    (failure,) = update_failures(subject, inputs, {"before": before, "after": wrong}, "t")
    assert "model_id 'other.onnx', not the update's 't'" in failure
