"""The precision-coverage rule of fp16/int8 candidate checks (``details.precision_coverage``): a pass whose
artifact computes less than the model's minimum share of its multiply-accumulates in the stated precision is
``inconclusive``. Judged inside each candidate check: ``judge.parity.candidate_parity``, ``judge.properties``,
``latency.checks.latency_check``, and ``judged`` around the checks conformance/test_parity.py judges in its body."""

from contextlib import contextmanager

from paritygate.verdict import inconclusive


def coverage_of(ctx, spec, precision):
    """The coverage of the candidate artifact at ``precision``: None when the check has none (not fp16/int8, its
    candidate never loaded, or a prebuilt engine)."""
    from paritygate.backend.precision import precision_coverage
    from paritygate.backend.runtimes import CANDIDATES
    from paritygate.common.memo import ArtifactKey

    if precision not in ("fp16", "int8") or CANDIDATES.peek(ctx, ArtifactKey(ctx.runtime, spec.name, precision)) is None:
        return None
    return precision_coverage(ctx, spec, precision)


def judge(ctx, spec, precision, result, passed=None):
    """Put the coverage in ``result``; a result that passed (``passed``; default: no failure and not already
    inconclusive) becomes inconclusive below the model's minimum. A result that did not pass keeps its outcome:
    coverage that cannot be measured is noted in its details instead. Returns ``result``."""
    passed = result.passed and not result.inconclusive if passed is None else passed
    try:
        found = coverage_of(ctx, spec, precision)
    except Exception as err:  # the check's own outcome is the one to report
        if passed:
            raise
        result.details["precision_coverage_error"] = f"{type(err).__name__}: {err}"
        return result
    if found is None:
        return result
    result.precision_coverage = found
    share = found["mac_share"] if found["mac_share"] is not None else found["node_share"]
    if passed and share is not None and share < found["minimum"]:
        result.set_inconclusive(inconclusive(
            f"{result.model} {precision}: the artifact computes {share:.1%} of its "
            f"{'multiply-accumulates' if found['mac_share'] is not None else 'nodes'} in {precision} "
            f"(minimum {found['minimum']:.0%}, {found['minimum_source']}): a pass would be a verdict on FP32, not "
            f"{precision}; keep fewer nodes in FP32 / quantize more, or lower min_precision_coverage with "
            "the reason"))
    return result


@contextmanager
def judged(ctx, spec, precision, result):
    """Around a check judged in a test's body that fills ``result``: a body that raises (a failure, a skip, an
    error) records the coverage first; one that ends is a pass, judged (``judge``), and raises the Inconclusive
    when its coverage is below the minimum."""
    try:
        yield result
    except BaseException:
        judge(ctx, spec, precision, result, passed=False)
        raise
    if judge(ctx, spec, precision, result, passed=True).inconclusive:
        raise result.inconclusive_error()
