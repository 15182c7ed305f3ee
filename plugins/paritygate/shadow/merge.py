"""Shadow checks of several runs (workers on parts of the traffic, or runs on several days) as one: counts add,
and the gate is taken again on the sums (one set of intervals, one Holm correction over the merged classes and
slices), never by combining verdicts. ``paritygate report A/parity-report.json B/parity-report.json --out M``
calls ``merge_checks`` for each (model, precision, check) that several shadow reports hold.

Refused (ValueError naming what differs): runs gated against different budgets or minimum counts, judged with
different tolerances, keyed by different key features, or that judged one precision on the same data file
(counted twice). Runs over the very same files (one run per precision) share one ``shadow_data``.
"""

from paritygate.result import CheckResult
from paritygate.shadow import data as shadow_data
from paritygate.shadow import results
from paritygate.shadow.rates import gate_rates
from paritygate.shadow.stats import OutputStats

SAMPLES = 5  # dead-letter samples kept per category


def _same(records, keys, what):
    for key in keys:
        values = {repr(r.get(key)) for r in records}
        if len(values) > 1:
            raise ValueError(f"{what}: the reports differ in '{key}' ({', '.join(sorted(values))}); merge runs "
                             "gated alike")


def _worst(records):
    rows = [w for r in records for w in r.get("worst") or [] if isinstance(w, dict)]

    def rank(w):
        top1 = w.get("top1") or [0, 0]
        return (int(top1[0] != top1[1] or bool(w.get("missed"))), int(not w.get("passed", True)),
                w.get("max_abs_error") if isinstance(w.get("max_abs_error"), (int, float)) else 0.0)

    return sorted(rows, key=rank, reverse=True)[:max(len(r.get("worst") or []) for r in records)]


def _rates(model, precision, check, records):
    _same(records, ("what", "budget", "budget_source", "min_examples_set"), f"{model} {precision} {check}")
    groups = {}
    for r in records:
        for g in r["groups"]:
            row = groups.setdefault((g["kind"], g["value"]), {"kind": g["kind"], "value": g["value"],
                                                                "examples": 0, "events": 0})
            row["examples"] += g["examples"]
            row["events"] += g["events"]
            if "counts" in g:
                counts = row.setdefault("counts", {})
                for k, n in g["counts"].items():
                    counts[k] = counts.get(k, 0) + n
    first = records[0]
    record = gate_rates(first["what"], sum(r["events"] for r in records), sum(r["examples"] for r in records),
                        list(groups.values()), first["budget"], first["budget_source"], first["min_examples_set"])
    return results.rate_result(model, precision, check, record, _worst(records))


def _elementwise(model, precision, records):
    outputs, tolerances = {}, {}
    for r in records:
        for o in r["outputs"]:
            name = o["output"]
            if name in tolerances and tolerances[name] != o["tolerance"]:
                raise ValueError(f"{model} {precision} shadow_elementwise: output '{name}' was judged with different "
                                 f"tolerances ({tolerances[name]} and {o['tolerance']}); merge runs judged alike")
            tolerances[name] = o["tolerance"]
            stats = OutputStats.from_json(o)
            outputs[name] = outputs[name].merge(stats) if name in outputs else stats
    return results.elementwise_result(model, precision, outputs, tolerances, sum(r["examples"] for r in records),
                                      _worst(records))


def _data(model, records):
    files = [f for r in records for f in r["files"]]
    keys = [r["keys"] for r in records if r.get("keys")]
    _same(keys, ("feature",), f"{model} shadow_data --key-feature")
    merged = {"files": files, "read": sum(r["read"] for r in records), "dead_letters": {}, "dead_samples": {},
              "dead_letter_files": [r.get("dead_letter_files") for r in records], "outside": None, "keys": None}
    for r in records:
        for k, n in r["dead_letters"].items():
            merged["dead_letters"][k] = merged["dead_letters"].get(k, 0) + n
        for k, samples in r["dead_samples"].items():
            merged["dead_samples"][k] = (merged["dead_samples"].get(k, []) + samples)[:SAMPLES]
        merged["outside"] = _outside(merged["outside"], r.get("outside"))
    if keys:
        merged["keys"] = {"feature": keys[0]["feature"], "records": sum(k["records"] for k in keys),
                          "repeated": sum(k["repeated"] for k in keys),
                          "samples": [s for k in keys for s in k["samples"]][:SAMPLES],
                          "note": "a key repeated across reports is not seen (each run checked its own keys)"}
    return shadow_data.data_result(model, merged)


def _outside(a, b):
    if not b:
        return a
    if not a:
        return b
    inputs = dict(a["inputs"])
    for name, i in b["inputs"].items():
        j = inputs.get(name)
        inputs[name] = i if j is None else {**j, "records": j["records"] + i["records"],
                                            "values": j["values"] + i["values"], "min": min(j["min"], i["min"]),
                                            "max": max(j["max"], i["max"])}
    return {"records": a["records"] + b["records"], "samples": (a["samples"] + b["samples"])[:SAMPLES],
            "inputs": inputs}


def disjoint(check, files):
    """The reports' data files (``files``: [(report, [file, ...])] aligned with the checks), refused when a file
    was read by two of them: its records would count twice. ``shadow_data`` of runs over the very same files (one
    run per precision) is one read: True when they are identical and the check is ``shadow_data``."""
    sets = [set(f) for _, f in files]
    if check == results.DATA and len({frozenset(s) for s in sets}) == 1 and sets[0]:
        return True
    seen = {}
    for (report, names), s in zip(files, sets):
        for name in sorted(s):
            if name in seen:
                raise ValueError(f"{check}: the data file {name} was read by {seen[name]} and by {report}: its "
                                 "records would count twice; merge reports of disjoint parts of the traffic (one "
                                 "report per precision over the same data merges its other checks)")
            seen[name] = report
    return False


def merge_checks(checks, files=None):
    """One CheckResult from the CheckResults of one (model, precision, shadow check) in several reports; ``files``:
    [(report, its data files)] aligned with ``checks`` (``disjoint``)."""
    first = checks[0]
    if files is not None and disjoint(first.check, files):
        return first
    records = [c.details.get("shadow") for c in checks]
    if not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{first.model} {first.precision} {first.check}: a report holds it without its counts "
                         "(details.shadow): it cannot be merged")
    try:
        if first.check in (results.TOP1, results.DETECTION):
            merged = _rates(first.model, first.precision, first.check, records)
        elif first.check == results.ELEMENTWISE:
            merged = _elementwise(first.model, first.precision, records)
        elif first.check == results.DATA:
            merged = _data(first.model, records)
        elif first.check == results.JUDGED:
            merged = results.judged_result(first.model, first.precision, sum(r["read"] for r in records),
                                           sum(r["judged"] for r in records))
        else:
            raise ValueError(f"{first.check}: not a shadow check this paritygate merges")
    except (KeyError, TypeError) as err:
        raise ValueError(f"{first.model} {first.precision} {first.check}: a report's counts are not as a shadow "
                         f"run writes them ({type(err).__name__}: {err})") from None
    repro = next((c.reproducer for c in checks if c.reproducer), None)
    if repro and merged.status == "fail":
        merged.reproducer = repro
    return merged.settle() if isinstance(merged, CheckResult) else merged
