"""The precision-coverage rule of fp16/int8 candidate checks (``details.precision_coverage``): a pass whose
artifact computes less than the model's minimum share of its multiply-accumulates in the stated precision is
``inconclusive``. Runs after a check's call passed (paritygate.plugin ``pytest_runtest_call``)."""

from paritygate.verdict import Inconclusive


def record_coverage(item, session):
    """Record the coverage in the check's details (None when the check has none: not an fp16/int8 candidate
    check, its candidate never loaded, or a prebuilt engine)."""
    from paritygate.session import DETAILS_KEY

    callspec = getattr(item, "callspec", None)
    if callspec is None or "parity_case" not in callspec.params \
            or "parity_candidate_available" not in getattr(item, "fixturenames", ()):
        return None
    spec, precision = callspec.params["parity_case"]
    if precision not in ("fp16", "int8") or ("candidate", session.runtime, spec.name, precision) not in session.cache:
        return None
    from paritygate.runtimes import precision_coverage

    found = precision_coverage(session, spec, precision)
    if found is not None:
        item.stash.setdefault(DETAILS_KEY, {})["precision_coverage"] = found
    return found


def coverage_after_failure(item, session):
    """After a check that did not pass: record the coverage; one that cannot be measured is noted in the details
    instead, so it never hides the check's own outcome."""
    from paritygate.session import DETAILS_KEY

    try:
        record_coverage(item, session)
    except Exception as err:  # noqa: BLE001 - the check's own exception is the one pytest reports
        item.stash.setdefault(DETAILS_KEY, {})["precision_coverage_error"] = f"{type(err).__name__}: {err}"


def coverage_verdict(item, session):
    """Record the coverage in the check's details; raise Inconclusive when it is below the minimum."""
    from paritygate.session import case_of

    found = record_coverage(item, session)
    if found is None:
        return
    share = found["mac_share"] if found["mac_share"] is not None else found["node_share"]
    if share is not None and share < found["minimum"]:
        raise Inconclusive(
            f"{case_of(item)[0]} {precision_of(item)}: the artifact computes {share:.1%} of its "
            f"{'multiply-accumulates' if found['mac_share'] is not None else 'nodes'} in {precision_of(item)} "
            f"(minimum {found['minimum']:.0%}, {found['minimum_source']}): a pass would be a verdict on FP32, not "
            f"{precision_of(item)}; keep fewer nodes in FP32 / quantize more, or lower min_precision_coverage with "
            "the reason")


def precision_of(item):
    return item.callspec.params["parity_case"][1]
