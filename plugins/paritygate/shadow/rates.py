"""One rate gated overall, per reference class and per slice (issue 39): the verdict of ``shadow_top1`` and
``shadow_detection``.

Each gated rate -- the overall one and every class or slice with at least ``min_examples`` examples -- gets its exact
two-sided 95% Clopper-Pearson interval (``shadow.gate``). The check:

- **fails** when some gated rate is shown above the budget with the family-wise error held at 2.5% (the one-sided
  level of the interval's lower bound): Holm's step-down correction over the m gated rates (Holm 1979,
  ``gate.holm``) on each rate's exact p-value P(X >= x | n, budget). A candidate whose every class and slice is
  within the budget is failed with probability at most 2.5%, however many classes it has.
- **passes** when every gated rate's upper bound lies within the budget. No correction is needed for that claim
  ("every rate is within the budget"): it is an intersection-union test, at the level of each single test
  (Berger 1982, "Multiparameter hypothesis testing and acceptance sampling", Technometrics 24(4) 295-300).
- else is **inconclusive**, naming each rate that cannot decide and how many more examples (of that class, and of
  traffic at its share) would decide at its observed rate.

A class or slice with fewer than ``min_examples`` examples is reported with its interval and not gated. By default
``min_examples`` is ``gate.min_count(budget)``: the fewest examples at which a rate with no event at all could pass
(368 at a 1% budget, 3,688 at 0.1%). Below it a group could never pass, so gating it would only make every run
inconclusive; its examples still count in the overall rate, which is always gated. The pooled "(other slices)" row
(slices beyond ``stats.MAX_SLICES``) is reported and never gated: it is no one slice.
"""

import math

from paritygate.shadow.gate import (
    CONFIDENCE,
    CONFIDENCE_SOURCE,
    clopper_pearson,
    examples_to_decide,
    holm,
    min_count,
    over_budget_p,
)
from paritygate.shadow.stats import OTHER_SLICE

ALPHA = (1.0 - CONFIDENCE) / 2  # one-sided: the level of the interval's lower bound
CORRECTION = ("Holm (1979) step-down over the overall rate and every gated class and slice: family-wise error "
              "2.5% for a fail; pass when every gated upper bound is within the budget (intersection-union test, "
              "Berger 1982: no correction needed)")
MIN_SOURCE = "the fewest examples at which a rate with no event could pass (gate.min_count)"


def label(member):
    if member["kind"] == "overall":
        return "overall"
    return f"{member['kind']} {member['value']!r}" if member["kind"] == "slice" else f"class {member['value']}"


def gate_rates(what, events, examples, groups, budget, source, min_examples=None):
    """The record of a gated rate (a check's ``details["shadow"]``): ``groups`` are dicts with ``kind`` ("class"
    or "slice"), ``value``, ``examples`` and ``events`` (and any counts of their own, kept)."""
    floor = min_examples if min_examples is not None else min_count(budget)
    overall = {"kind": "overall", "value": None, "examples": int(examples), "events": int(events)}
    rows = [overall] + [dict(g) for g in groups]
    gated = [r for r in rows if r["examples"] and (r["kind"] == "overall" or (
        floor is not None and r["examples"] >= floor and r["value"] != OTHER_SLICE))]
    adjusted = holm([over_budget_p(r["events"], r["examples"], budget) for r in gated])
    for r in rows:
        n, x = r["examples"], r["events"]
        r["rate"] = x / n if n else None
        r["lower"], r["upper"] = clopper_pearson(x, n) if n else (0.0, 1.0)
        r["status"] = "not gated" if n else "no examples"
    for r, p in zip(gated, adjusted):
        r["p_adjusted"] = p
        r["status"] = "fail" if p <= ALPHA else ("pass" if r["upper"] <= budget else "inconclusive")
        if r["status"] == "inconclusive":
            r["examples_to_decide"] = examples_to_decide(r["events"], r["examples"], budget, ALPHA / len(gated))
    statuses = {r["status"] for r in gated}
    status = "fail" if "fail" in statuses else ("pass" if statuses == {"pass"} else "inconclusive")
    record = {"what": what, "events": overall["events"], "examples": overall["examples"], "rate": overall["rate"],
              "lower": overall["lower"], "upper": overall["upper"], "confidence": CONFIDENCE,
              "interval_source": CONFIDENCE_SOURCE, "budget": budget, "budget_source": source,
              "min_examples": floor, "min_examples_source": "command line" if min_examples is not None else MIN_SOURCE,
              "min_examples_set": min_examples, "correction": CORRECTION, "gated": len(gated),
              "groups": rows[1:], "overall_status": overall["status"], "status": status}
    if "p_adjusted" in overall:
        record["p_adjusted"] = overall["p_adjusted"]
    if overall["status"] == "inconclusive":
        record["examples_to_decide"] = overall.get("examples_to_decide")
    ids = {id(r) for r in gated}
    record["decided_by"] = [_line(r, record) for r in rows if r["status"] == status and id(r) in ids]
    record["message"] = _message(record, overall, rows)
    return record


def _interval(r):
    return f"{r['events']}/{r['examples']}, {CONFIDENCE:.0%} interval [{r['lower']:.3g}, {r['upper']:.3g}]"


def _line(r, record):
    """Why one gated rate decided as it did, in words."""
    budget = f"the budget {record['budget']:g}"
    if r["status"] == "fail":
        return (f"{label(r)} {_interval(r)} above {budget}: Holm-adjusted p {r['p_adjusted']:.3g} <= {ALPHA:g} over "
                f"{record['gated']} gated rate(s)")
    if r["status"] == "pass":
        return f"{label(r)} {_interval(r)} within {budget}"
    need = r.get("examples_to_decide")
    if need is None:
        more = "its observed rate sits on the budget: more examples alone will not decide"
    elif r["kind"] == "overall":
        more = f"about {need - r['examples']:,} more examples at the observed rate would decide"
    else:
        share = r["examples"] / record["examples"]
        more = (f"about {need - r['examples']:,} more {label(r)} examples would decide at its observed rate "
                f"(about {math.ceil((need - r['examples']) / share):,} more examples of traffic at its share "
                f"{share:.1%})")
    return f"{label(r)} {_interval(r)} holds {budget}: {more}"


def _message(record, overall, rows):
    what, status = record["what"], record["status"]
    head = f"{what} (budget {record['budget']:g}: {record['budget_source']})"
    groups = [r for r in rows[1:] if r["examples"]]
    small = sum(r["status"] == "not gated" for r in groups)
    kept = (f"; {small} class(es)/slice(s) below {record['min_examples']} examples reported, not gated"
            if small else "")
    if status == "pass":
        others = record["gated"] - 1
        return (f"{head}: overall {_interval(overall)} within the budget"
                + (f"; so is each of {others} gated class(es)/slice(s)" if others else "") + kept)
    lines = record["decided_by"]
    if status == "inconclusive" and not lines:
        return f"{head}: no example was judged"
    shown = "; ".join(lines[:5]) + (f"; and {len(lines) - 5} more" if len(lines) > 5 else "")
    context = "" if overall["status"] == status else f"; overall {_interval(overall)} ({overall['status']})"
    return f"{head}: {shown}{context}{kept}"
