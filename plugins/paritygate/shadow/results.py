"""A shadow run's combined statistics as the report's ``CheckResult``s, one set per candidate precision:

    shadow_top1         classification: the top-1 flip rate overall, per reference class and per slice, gated on
                        exact intervals with Holm's correction (shadow.rates) against the flip budget
    shadow_detection    detection: the rate of reference detections the candidate misses, gated the same way
                        (overall, per reference class, per slice)
    shadow_elementwise  the checks' elementwise policy (comparator.tolerance, with the cosine budget) on every
                        example: fails when any example fails it; |error| quantiles per output with the key of the max
    shadow_judged       error when an example read was not judged (a handler returned no result for it)

and one model-level ``shadow_data`` check: what was read, the dead letters per category, the records outside the
declared range; ``error`` when no record could be judged or a key feature names several records. Each record
carries its counts (``details["shadow"]``), so that reports of several runs merge into one (``shadow.merge``).
The worst examples that failed are saved as reproducers of ``matches_reference`` (``paritygate replay FILE``).
"""

from paritygate.comparator.tolerance import TASK_RATIO, TASK_SOURCE, tolerance_for
from paritygate.result import CheckResult
from paritygate.shadow.rates import gate_rates
from paritygate.shadow.stats import SLICE_FIELDS

# The flip budget: MLPerf Inference's closed-division accuracy target of 99% of the FP32 reference (TASK_RATIO),
# read as "at most 1% of top-1 decisions may differ"; its high-accuracy target (99.9%, e.g. BERT-99.9, DLRM-99.9 in
# the MLPerf Inference rules' Benchmarks table) gives 0.1%.
FLIP_BUDGET = round(1 - TASK_RATIO, 10)
FLIP_SOURCE = f"1 - {TASK_RATIO} ({TASK_SOURCE})"
HIGH_ACCURACY_BUDGET = 0.001
HIGH_ACCURACY_SOURCE = "1 - 0.999 (MLPerf Inference rules: 99.9% high-accuracy target)"
TOP1, DETECTION, ELEMENTWISE, JUDGED, DATA = ("shadow_top1", "shadow_detection", "shadow_elementwise",
                                              "shadow_judged", "shadow_data")


def rate_result(model, precision, check, record, worst=()):
    """The CheckResult of a gated rate (``rates.gate_rates``'s record)."""
    result = CheckResult(model, precision, check, record["status"],
                         details={"shadow": {**record, "worst": list(worst)}, "message": record["message"]})
    if record["status"] == "fail":
        result.failures = [f"{model} {precision}: {record['what']}: {line}" for line in record["decided_by"]]
    elif record["status"] == "inconclusive":
        result.inconclusive = {"message": record["message"], "allowed": False}
    return result


def class_groups(table):
    return [{"kind": "class", "value": c, "examples": n, "events": e} for c, (n, e) in sorted(table.items())]


def slice_groups(slices, detection=False):
    """Slice rows: top-1 flips out of examples, or (``detection``) missed out of reference detections."""
    rows = []
    for value, counts in sorted(slices.items(), key=lambda kv: str(kv[0])):
        c = dict(zip(SLICE_FIELDS, counts))
        n, e = (c["detections"], c["missed"]) if detection else (c["examples"], c["flips"])
        rows.append({"kind": "slice", "value": value, "examples": n, "events": e, "counts": c})
    return rows


def top1_result(model, precision, stats, budget, source, min_examples=None, worst=()):
    record = gate_rates("top-1 flip rate", stats.flips, stats.examples,
                        class_groups(stats.classes) + slice_groups(stats.slices), budget, source, min_examples)
    return rate_result(model, precision, TOP1, record, worst)


def detection_result(model, precision, stats, budget, source, min_examples=None, worst=()):
    total, matched = stats.detection
    record = gate_rates("missed detection rate", total - matched, total,
                        class_groups(stats.detection_classes) + slice_groups(stats.slices, detection=True), budget,
                        source, min_examples)
    return rate_result(model, precision, DETECTION, record, worst)


def elementwise_result(model, precision, outputs, tolerances, examples, worst=()):
    """``outputs``: name -> stats.OutputStats; ``tolerances``: name -> the tolerance dict each was judged with."""
    rows = [{"output": name, **o.to_json(), "tolerance": tolerances[name],
             "max_abs_error_per_example": o.abs_error.summary()} for name, o in sorted(outputs.items())]
    failing = sum(o["failing_examples"] for o in rows)
    result = CheckResult(model, precision, ELEMENTWISE, "fail" if failing else "pass",
                         details={"shadow": {"examples": examples, "outputs": rows, "worst": list(worst)}})
    for o in rows:
        e = o["max_abs_error_per_example"]
        if o["failing_examples"]:
            result.failures.append(
                f"{model} {precision}: output '{o['output']}': {o['failing_examples']}/{examples} examples outside "
                f"the elementwise policy ({o['mismatching_elements']} elements); worst |error| {e['max']:.3g} at "
                f"{e['key_of_max']}; per-example max |error| p50 {e['p50']:.3g}, p99 {e['p99']:.3g}")
    result.details["message"] = "; ".join(result.failures) or (
        f"{examples} examples within the elementwise policy; worst |error| "
        + ", ".join(f"'{o['output']}' {o['max_abs_error_per_example']['max']:.3g} at "
                    f"{o['max_abs_error_per_example']['key_of_max']}" for o in rows))
    return result


def judged_result(model, precision, read, judged):
    """``error`` when examples read were not judged, or none was (None when every example read was judged)."""
    unjudged = read - judged
    if judged and not unjudged:
        return None
    message = (f"{model} {precision}: {unjudged} of {read} examples read were not judged (a handler returned no "
               "result for them)" if unjudged else
               f"{model} {precision}: no example was judged: no verdict on the candidate (shadow_data says why)")
    return CheckResult(model, precision, JUDGED, "error", errors=[message],
                       details={"shadow": {"read": read, "judged": judged}, "message": message})


def worst_examples(spec, precision, stats, ctx=None):
    """The kept worst examples (worst first); those that failed saved as reproducers through ``ctx`` (a
    ``context.RunContext``: its runtime and reproducer folder), None: not saved."""
    import numpy as np

    from paritygate.inputs.sets import outside_range

    rows = []
    for record in stats.worst_first():
        row = {"key": record["key"], "slice": record.get("slice"), "max_abs_error": record["score"],
               "top1": record.get("top1"), "passed": record["passed"], "failures": record["failures"],
               "missed": record["detection"]["reference_detections"] - record["detection"]["matched"]
               if record.get("detection") else None}
        if not record["passed"] and ctx is not None:
            outside = [n for n, x in record["inputs"].items() if outside_range(spec.inputs[n], np.asarray(x))[0]]
            inputs = {k: np.asarray(v)[None] for k, v in record["inputs"].items()}
            row["reproducer"] = ctx.save_reproducer(spec, precision, "matches_reference", inputs,
                                                    record["failures"], outside_range=outside)
        rows.append(row)
    return rows


def precision_results(spec, precision, stats, read, budget, source, ctx=None, min_examples=None):
    """The CheckResults of one precision's ShadowStats (``read``: examples read, to find unjudged ones)."""
    if stats is None or not stats.examples:
        return [r for r in [judged_result(spec.name, precision, read, 0)] if r]
    worst = worst_examples(spec, precision, stats, ctx)
    tolerances = {name: tolerance_for(spec, precision, name).as_dict() for name in stats.outputs}
    results = [elementwise_result(spec.name, precision, stats.outputs, tolerances, stats.examples, worst)]
    if stats.flips is not None:
        results.append(top1_result(spec.name, precision, stats, budget, source, min_examples, worst))
    if stats.detection is not None:
        results.append(detection_result(spec.name, precision, stats, budget, source, min_examples, worst))
    repro = next((w["reproducer"] for w in worst if w.get("reproducer")), None)
    for r in results:
        if repro and r.status in ("fail", "inconclusive"):  # a failing example stands behind either
            r.reproducer = repro
    return results + [r for r in [judged_result(spec.name, precision, read, stats.examples)] if r]

