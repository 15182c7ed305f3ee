"""A shadow run's combined statistics as the report's ``CheckResult``s, one set per candidate precision:

    shadow_top1         classification: the top-1 flip rate (overall, per reference class, per slice), gated on
                        its Clopper-Pearson interval against the flip budget (shadow.gate)
    shadow_detection    detection: the rate of reference detections the candidate misses, gated the same way
    shadow_elementwise  the checks' elementwise policy (comparator.tolerance, with the cosine budget) on every
                        example: fails when any example fails it; |error| quantiles per output with the key of the max
    shadow_judged       error when an example read was not judged (a handler returned no result for it)

Dead letters are no verdict on the candidate: a finding ``shadow_dead_letters`` with the counts per category.
The worst examples that failed are saved as reproducers of ``matches_reference`` (``paritygate replay FILE``).
"""

from paritygate.backend import registry
from paritygate.comparator.tolerance import TASK_RATIO, TASK_SOURCE, tolerance_for
from paritygate.inputs.reproducer import save_reproducer
from paritygate.result import CheckResult
from paritygate.shadow.gate import clopper_pearson, gate_rate

# The flip budget: MLPerf Inference's closed-division accuracy target of 99% of the FP32 reference (TASK_RATIO),
# read as "at most 1% of top-1 decisions may differ"; its high-accuracy target (99.9%, e.g. BERT-99.9, DLRM-99.9 in
# the MLPerf Inference rules' Benchmarks table) gives 0.1%.
FLIP_BUDGET = round(1 - TASK_RATIO, 10)
FLIP_SOURCE = f"1 - {TASK_RATIO} ({TASK_SOURCE})"
HIGH_ACCURACY_BUDGET = 0.001
HIGH_ACCURACY_SOURCE = "1 - 0.999 (MLPerf Inference rules: 99.9% high-accuracy target)"


def rate_result(spec, precision, check, gate, extra):
    result = CheckResult(spec.name, precision, check, gate["status"], details={"shadow": {**gate, **extra}})
    if gate["status"] == "fail":
        result.failures.append(f"{spec.name} {precision}: {gate['what']} {gate['events']}/{gate['examples']}: "
                               f"{gate['confidence']:.0%} interval [{gate['lower']:.3g}, {gate['upper']:.3g}] above "
                               f"the budget {gate['budget']:g} ({gate['budget_source']})")
    elif gate["status"] == "inconclusive":
        result.inconclusive = {"message": gate["message"], "allowed": False}
        result.details["message"] = gate["message"]
    else:
        result.details["message"] = (f"{gate['what']} {gate['events']}/{gate['examples']}: {gate['confidence']:.0%} "
                                     f"interval [{gate['lower']:.3g}, {gate['upper']:.3g}] within the budget "
                                     f"{gate['budget']:g} ({gate['budget_source']})")
    return result


def _rows(table, names):
    rows = []
    for value, counts in sorted(table.items(), key=lambda kv: str(kv[0])):
        n, events = counts[0], counts[1]
        lower, upper = clopper_pearson(events, n) if n else (0.0, 1.0)
        rows.append({names: value, "examples": n, "flips": events, "rate": events / n if n else None,
                     "lower": lower, "upper": upper, **({"failing": counts[2]} if len(counts) > 2 else {})})
    return rows


def elementwise_result(spec, precision, stats):
    outputs = [{"output": name, "elements": o.elements, "mismatching_elements": o.mismatches,
                "failing_examples": o.failing_examples, "nonfinite": dict(o.nonfinite),
                "tolerance": tolerance_for(spec, precision, name).as_dict(),
                "max_abs_error_per_example": o.abs_error.summary()} for name, o in sorted(stats.outputs.items())]
    failing = sum(o["failing_examples"] for o in outputs)
    result = CheckResult(spec.name, precision, "shadow_elementwise", "fail" if failing else "pass",
                         details={"shadow": {"examples": stats.examples, "outputs": outputs}})
    for o in outputs:
        if o["failing_examples"]:
            result.failures.append(
                f"{spec.name} {precision}: output '{o['output']}': {o['failing_examples']}/{stats.examples} examples "
                f"outside the elementwise policy ({o['mismatching_elements']} elements); worst |error| "
                f"{o['max_abs_error_per_example']['max']:.3g} at {o['max_abs_error_per_example']['key_of_max']}")
    if not failing:
        result.details["message"] = f"{stats.examples} examples within the elementwise policy"
    return result


def worst_examples(spec, precision, stats, folder):
    """The kept worst examples (worst first); those that failed saved as reproducers under ``folder``."""
    import numpy as np

    rows = []
    for record in stats.worst_first():
        row = {"key": record["key"], "slice": record.get("slice"), "max_abs_error": record["score"],
               "top1": record.get("top1"), "passed": record["passed"], "failures": record["failures"]}
        if not record["passed"] and folder is not None:
            inputs = {k: np.asarray(v)[None] for k, v in record["inputs"].items()}
            row["reproducer"] = save_reproducer(folder, spec, precision, "matches_reference", registry.CPU, inputs,
                                                record["failures"])
        rows.append(row)
    return rows


def precision_results(spec, precision, stats, read, budget, budget_source, folder=None):
    """The CheckResults of one precision's ShadowStats (``read``: examples read, to find unjudged ones)."""
    worst = worst_examples(spec, precision, stats, folder)
    results = [elementwise_result(spec, precision, stats)]
    if stats.flips is not None:
        extra = {"per_class": _rows(stats.per_class, "class"), "slices": _rows(stats.slices, "slice")}
        results.append(rate_result(spec, precision, "shadow_top1",
                                   gate_rate(stats.flips, stats.examples, budget, "top-1 flip rate", budget_source),
                                   extra))
    if stats.detection is not None:
        total, matched = stats.detection
        results.append(rate_result(spec, precision, "shadow_detection",
                                   gate_rate(total - matched, total, budget, "missed detection rate", budget_source),
                                   {"slices": _rows(stats.slices, "slice")}))
    for r in results:
        r.details["shadow"]["worst"] = worst
        repro = next((w["reproducer"] for w in worst if w.get("reproducer")), None)
        if repro and r.status == "fail":
            r.reproducer = repro
    unjudged = read - stats.examples
    if unjudged:
        results.append(CheckResult(spec.name, precision, "shadow_judged", "error", errors=[
            (f"{spec.name} {precision}: {unjudged} of {read} examples read were not judged "
             "(a handler returned no result for them)")]))
    return results


def dead_letter_finding(spec, outcome):
    """The finding that names the dead letters (None without any)."""
    if not outcome.dead:
        return None
    total = sum(outcome.dead.values())
    return {"kind": "shadow_dead_letters", "model": spec.name, "precision": None, "check": "shadow",
            "details": {"summary": f"{total} record(s) could not be judged and went to the dead-letter output "
                        f"({', '.join(f'{k}: {n}' for k, n in sorted(outcome.dead.items()))})",
                        "counts": dict(outcome.dead), "samples": outcome.dead_samples,
                        "dead_letter": outcome.settings.dead_letter}}
