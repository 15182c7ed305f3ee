"""Latency per model x precision: the candidate and the TF reference at batch sizes {1, max_batch} (and any a
budget names), gated by ``[models.latency.<device class>]``. Runs serially: skipped on xdist workers.

Cost: the ``ci`` profile (paritygate.latency.harness.PROFILES) warms up >= 0.1 s / 10 calls and measures
>= 0.5 s and >= 100 samples per row, about 1-3 s per model x precision; PARITYGATE_LATENCY_PROFILE=nightly
measures for trtexec's 3 s per row.
"""

import pytest

# Not marked `tf`: without TensorFlow the candidate is still measured (the check notes the missing reference,
# and the budgets that need it are an `error`: not judged, never passed).
pytestmark = [pytest.mark.latency, pytest.mark.onnx, pytest.mark.usefixtures("parity_candidate_available")]


def test_latency(parity_context, parity_case, parity_record):
    """p50/p90/p99 per batch size for the candidate and the TF reference, held to the model's budgets for the device class."""
    from paritygate.judge import coverage
    from paritygate.latency import latency_check, numbers
    from paritygate.verdict import SuiteError

    spec, precision = parity_case
    result = parity_record(latency_check(parity_context, spec, precision))
    passing = not (result.failures or result.errors or result.inconclusive or result.details["unbudgeted"])
    coverage.judge(parity_context, spec, precision, result, passed=passing)  # a pass below it: inconclusive
    if result.inconclusive:  # load only slows a run down: a pass stands, a miss cannot tell
        raise result.inconclusive_error()
    assert result.passed, "\n".join(result.failures + result.errors)  # the candidate missed a budget: fail
    if result.errors:
        raise SuiteError("\n".join(result.errors))
    if result.details["unbudgeted"]:  # nothing was gated: a pass here could not have failed
        pytest.skip(f"measured, no budget: {result.details['unbudgeted']}; {numbers(result)}")
