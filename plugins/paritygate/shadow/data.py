"""What a shadow run read, as the model-level check ``shadow_data`` and the findings beside it:

- the files read, the records judged, the dead letters per category (``shadow.read.CATEGORIES``) with samples;
- the records holding values outside an input's declared range: judged as recorded, and a finding with their
  share of the traffic (the checks' own inputs never go there, so nothing else has judged the candidate there);
- with a key feature, the records whose key another record holds too.

``shadow_data`` is ``error`` when no record could be judged (an empty file, every record a dead letter) or when a
key feature names several records (the report's keys would not say which example they mean); it passes otherwise:
dead letters and out-of-range traffic are facts about the data, not verdicts on the candidate. Its record carries
the counts, so that reports of several runs merge (``shadow.merge``).
"""

from paritygate.result import CheckResult

DATA = "shadow_data"


def summary(outcome, key_feature=None):
    """The JSON-able counts of an Outcome (``shadow.pipeline``)."""
    spec, outside = outcome.settings.spec, outcome.outside
    out = {"files": list(outcome.files), "read": outcome.read, "dead_letters": dict(outcome.dead),
           "dead_samples": {k: [list(s) for s in v] for k, v in outcome.dead_samples.items()},
           "dead_letter_files": outcome.settings.dead_letter, "outside": None, "keys": None}
    if outside is not None and outside.records:
        out["outside"] = {"records": outside.records, "samples": outside.samples,
                          "inputs": {n: {"records": r, "values": v, "min": lo, "max": hi,
                                         "declared": list(spec.inputs[n].range)}
                                     for n, (r, v, lo, hi) in sorted(outside.inputs.items())}}
    if key_feature and outcome.keys is not None:
        records, repeated, samples = outcome.keys
        out["keys"] = {"feature": key_feature, "records": records, "repeated": repeated, "samples": samples}
    return out


def problems(data):
    """Why the data could not serve a verdict: lines (empty when it could)."""
    lines = []
    if not data["read"]:
        dead = sum(data["dead_letters"].values())
        if dead:
            first = next(iter(s for v in data["dead_samples"].values() for s in v), None)
            lines.append(f"no record could be judged: all {dead} record(s) of {len(data['files'])} file(s) are dead "
                         f"letters ({_counts(data['dead_letters'])})" + (f"; e.g. {first[1]}" if first else ""))
        else:
            lines.append(f"no record could be judged: the {len(data['files'])} file(s) hold no record")
    keys = data.get("keys")
    if keys and keys["repeated"]:
        shown = f" (e.g. {', '.join(repr(k) for k in keys['samples'])})" if keys["samples"] else ""
        lines.append(f"--key-feature '{keys['feature']}': {keys['repeated']} of {keys['records']} records repeat a "
                     f"key another record holds{shown}; a key must name one record (a request id): name a unique "
                     "feature, or leave --key-feature out to key records by file and index")
    return lines


def _counts(table):
    return ", ".join(f"{k}: {n}" for k, n in sorted(table.items()))


def data_result(model, data):
    """The model-level ``shadow_data`` CheckResult of a summary (``summary``, or merged ones)."""
    lines = problems(data)
    dead = sum(data["dead_letters"].values())
    message = "; ".join(lines) or (
        f"{data['read']} record(s) judged from {len(data['files'])} file(s)"
        + (f"; {dead} dead letter(s), not judged ({_counts(data['dead_letters'])})" if dead else "")
        + (f"; {outside_text(data)}" if data.get("outside") else ""))
    result = CheckResult(model, None, DATA, "error" if lines else "pass", errors=lines or None,
                         details={"shadow": data, "message": message})
    for finding in findings(model, data):
        result.findings.append(finding)
    return result


def outside_text(data):
    out = data["outside"]
    share = out["records"] / data["read"] if data["read"] else 0.0
    parts = [f"input '{n}' {i['records']} record(s), {i['values']} value(s) in [{i['min']:.4g}, {i['max']:.4g}] "
             f"(declared [{i['declared'][0]:g}, {i['declared'][1]:g}])" for n, i in out["inputs"].items()]
    return (f"{out['records']} of {data['read']} records judged ({share:.2%}) hold values outside the declared "
            f"range: {'; '.join(parts)}")


def _where(prefix):
    if isinstance(prefix, str):
        return f": {prefix}-*.jsonl"
    return f": {', '.join(f'{p}-*.jsonl' for p in prefix if p)}" if prefix else ""


def findings(model, data):
    """The findings of a summary: dead letters, traffic outside the declared range."""
    found = []
    if data["dead_letters"]:
        total = sum(data["dead_letters"].values())
        found.append({"kind": "shadow_dead_letters", "model": model, "precision": None, "check": DATA,
                      "details": {"summary": f"{total} record(s) could not be judged and went to the dead-letter "
                                  f"output ({_counts(data['dead_letters'])})" + _where(data["dead_letter_files"]),
                                  "counts": data["dead_letters"],
                                  "samples": data["dead_samples"], "dead_letter": data["dead_letter_files"]}})
    if data.get("outside"):
        out = data["outside"]
        found.append({"kind": "shadow_outside_range", "model": model, "precision": None, "check": DATA,
                      "details": {"summary": outside_text(data) + ": judged as recorded, where the checks' own "
                                  "inputs never go; their reproducers replay with `paritygate replay FILE` (the "
                                  "range is not checked for an input recorded outside it)",
                                  "share": out["records"] / data["read"] if data["read"] else None,
                                  "records": out["records"], "inputs": out["inputs"], "samples": out["samples"]}})
    return found
