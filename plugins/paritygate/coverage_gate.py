"""The precision-coverage rule of fp16/int8 candidate checks (``details.precision_coverage``): a pass whose
artifact computes less than the model's minimum share of its multiply-accumulates in the stated precision is
``inconclusive``. Runs after a check's call passed (paritygate.plugin ``pytest_runtest_call``)."""

from paritygate.verdict import Inconclusive


def coverage_verdict(item, session):
    """Record the coverage in the check's details; raise Inconclusive when it is below the minimum."""
    from paritygate.session import DETAILS_KEY, case_of

    callspec = getattr(item, "callspec", None)
    if callspec is None or "parity_case" not in callspec.params \
            or "parity_candidate_available" not in getattr(item, "fixturenames", ()):
        return
    spec, precision = callspec.params["parity_case"]
    if precision not in ("fp16", "int8") or ("candidate", session.runtime, spec.name, precision) not in session.cache:
        return
    from paritygate.runtimes import precision_coverage

    found = precision_coverage(session, spec, precision)
    if found is None:
        return
    details = item.stash.setdefault(DETAILS_KEY, {})
    details["precision_coverage"] = found
    share = found["mac_share"] if found["mac_share"] is not None else found["node_share"]
    if share is not None and share < found["minimum"]:
        raise Inconclusive(
            f"{case_of(item)[0]} {precision}: the artifact computes {share:.1%} of its "
            f"{'multiply-accumulates' if found['mac_share'] is not None else 'nodes'} in {precision} (minimum "
            f"{found['minimum']:.0%}, {found['minimum_source']}): a pass would be a verdict on FP32, not {precision}; "
            "keep fewer nodes in FP32 / quantize more, or lower min_precision_coverage with the reason")
