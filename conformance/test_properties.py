"""Property-based parity over each model's inputs (Hypothesis): every valid input, not a few samples.

(a) parity with the native TF reference within the precision's policy; (b) batch invariance: an element's
output does not depend on its batch companions or the batch size; (c) determinism over repeated runs.
The checks run in ``paritygate.judge.properties`` and return results; these tests only assert on them.
"""

import pytest

pytest.importorskip("hypothesis")

from paritygate.judge import properties

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.usefixtures("parity_candidate_available")]


def _verdict(result):
    assert result.passed, "\n".join(result.failures)
    if result.inconclusive:
        raise result.inconclusive_error()


def test_property_parity(parity_context, parity_case, parity_result):
    """Hypothesis-generated inputs and the model's own input-set rows: candidate vs live TF reference, within the policy and the reference's noise floor."""
    _verdict(properties.property_parity(parity_context, *parity_case, result=parity_result))


def test_batch_invariance(parity_context, parity_case, parity_result):
    """An element's output does not depend on its batch companions, its position or the batch size (10·√n·u·max|output|)."""
    _verdict(properties.batch_invariance(parity_context, *parity_case, result=parity_result))


def test_determinism(parity_context, parity_case, parity_result):
    """Identical inputs give bit-identical outputs over repeated runs."""
    _verdict(properties.determinism(parity_context, *parity_case, result=parity_result))
