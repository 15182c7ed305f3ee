"""The precision-coverage rule of fp16/int8 candidate checks (``details.precision_coverage``): a pass whose
artifact computes less than the model's minimum share of its multiply-accumulates in the stated precision is
``inconclusive``. Runs after a check's call passed (paritygate.plugin ``pytest_runtest_call``)."""

from paritygate.verdict import inconclusive


def record_coverage(item, ctx, result):
    """Put the coverage in ``result`` (the item's CheckResult) and return it (None when the check has none: not an
    fp16/int8 candidate check, its candidate never loaded, or a prebuilt engine)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "parity_case" not in callspec.params \
            or "parity_candidate_available" not in getattr(item, "fixturenames", ()):
        return None
    spec, precision = callspec.params["parity_case"]
    from paritygate.backend.precision import precision_coverage
    from paritygate.backend.runtimes import CANDIDATES
    from paritygate.common.memo import ArtifactKey

    if precision not in ("fp16", "int8") or CANDIDATES.peek(ctx, ArtifactKey(ctx.runtime, spec.name, precision)) is None:
        return None

    found = precision_coverage(ctx, spec, precision)
    if found is not None:
        result.coverage = found
    return found


def coverage_after_failure(item, ctx, result):
    """After a check that did not pass: record the coverage; one that cannot be measured is noted in the details
    instead, so it never hides the check's own outcome."""
    try:
        record_coverage(item, ctx, result)
    except Exception as err:  # noqa: BLE001 - the check's own exception is the one pytest reports
        result.details["precision_coverage_error"] = f"{type(err).__name__}: {err}"


def coverage_verdict(item, ctx, result):
    """Record the coverage in ``result``; raise Inconclusive when it is below the minimum."""
    found = record_coverage(item, ctx, result)
    if found is None:
        return
    share = found["mac_share"] if found["mac_share"] is not None else found["node_share"]
    precision = result.precision
    if share is not None and share < found["minimum"]:
        raise inconclusive(
            f"{result.model} {precision}: the artifact computes {share:.1%} of its "
            f"{'multiply-accumulates' if found['mac_share'] is not None else 'nodes'} in {precision} "
            f"(minimum {found['minimum']:.0%}, {found['minimum_source']}): a pass would be a verdict on FP32, not "
            f"{precision}; keep fewer nodes in FP32 / quantize more, or lower min_precision_coverage with "
            "the reason")
