"""paritygate.beam.updates: the bookkeeping of beam_model_update (its pipelines run in test_checks.py and
test_serving.py)."""

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("tensorflow")

from paritygate.beam.contract import digest
from paritygate.beam.updates import UPDATE_OFFSET, update_failures
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
