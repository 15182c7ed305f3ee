"""Merge shard reports: the ``parity-report.json`` of runs that split one gate across CI machines, into one report
with one verdict (``paritygate report shard-*/parity-report.json --out DIR``).

Each check must come from exactly one shard (a check run twice means the shards overlap: refused, naming both
files), and every shard must have judged the same candidate runtime. Counters (artifact and reference cache,
the time line) are summed; the wall time is the longest shard's (shards run side by side); each shard's
environment is kept under ``shards``, and a difference between them is listed in ``environment_differs``.
"""

from pathlib import Path

from paritygate.files import check_version, read_json
from paritygate.report.schema import check_report
from paritygate.result import read_checks


class MergeError(ValueError):
    """The shard reports cannot be merged; the message names the file(s) and what was expected."""


def read_report(path):
    """A ``parity-report.json`` this paritygate reads (``paritygate.files``: a regular file within the JSON
    limit), of schema version ``SCHEMA``, whose check records load; MergeError names the file and what is wrong."""
    from paritygate.report import SCHEMA

    path = Path(path)
    data = read_json(path, "JSON report", error=MergeError)
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        raise MergeError(f"{path}: not a parity report (expected a JSON object with a 'checks' list)")
    check_version(path, "parity report", data.get("schema"), (SCHEMA,), MergeError)
    for key, kind in (("environment", dict), ("findings", list), ("validation", dict), ("time", dict)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise MergeError(f"{path}: key '{key}': expected a JSON {'object' if kind is dict else 'array'}, got "
                             f"{type(data[key]).__name__}")
    try:
        read_checks(data["checks"])
    except ValueError as err:
        raise MergeError(f"{path}: {err}") from err
    check_report(data, path, MergeError)  # every field the renderers read, of its type
    _check_records(path, data)
    return data


def _check_records(path, data):
    """The findings (kind, model, precision, check, details) and the validation's problem lines, as a run
    writes them."""
    for i, f in enumerate(data.get("findings") or []):
        if not (isinstance(f, dict) and {"kind", "model", "precision", "check"} <= set(f)
                and isinstance(f.get("details") or {}, dict)):
            raise MergeError(f"{path}: findings[{i}]: expected a finding record (a JSON object with kind, model, "
                             "precision, check and details)")
    problems = (data.get("validation") or {}).get("problems")
    if problems is not None and not (isinstance(problems, list) and all(isinstance(p, str) for p in problems)):
        raise MergeError(f"{path}: key 'validation.problems': expected a list of problem lines (strings)")


def merge_reports(paths):
    """One report dict (schema 1) from the shard reports at ``paths``."""
    shards = [(Path(p), read_report(p)) for p in paths]
    _each_once(shards)
    first = shards[0][1]
    runtimes = {d.get("runtime") for _, d in shards}
    if len(runtimes) > 1:
        raise MergeError("shards judged different candidate runtimes: " + ", ".join(
            f"{p}: {d.get('runtime')}" for p, d in shards) + "; merge reports of one runtime")
    merged = {k: v for k, v in first.items() if k not in ("checks", "findings", "baseline", "validation")}
    merged.update(checks=_checks(shards), findings=[f for _, d in shards for f in d.get("findings") or []],
                  config=_joined(d.get("config") for _, d in shards),
                  device_class=_joined(d.get("device_class") for _, d in shards),
                  artifact_cache=_summed(d.get("artifact_cache") for _, d in shards),
                  reference_cache=_summed(d.get("reference_cache") for _, d in shards),
                  validation=_validation(shards),
                  shards=[{"path": str(p), "checks": len(d["checks"]), "config": d.get("config"),
                           "environment": d.get("environment"), "time": d.get("time")} for p, d in shards],
                  environment_differs=_environment_differs(shards))
    times = [d["time"] for _, d in shards if d.get("time")]
    if times:
        merged["time"] = {**_summed(times), "wall": max(t.get("wall", 0.0) for t in times)}
    baselines = [d["baseline"] for _, d in shards if d.get("baseline")]
    if baselines:
        merged["baseline"] = _baseline(baselines)
    stopped = [(p, d) for p, d in shards if d.get("status") == "interrupted"]
    if stopped:  # one interrupted shard: the merged run did not run all it selected either
        merged["status"] = "interrupted"
        merged["interrupted"] = {"selected": sum((d.get("interrupted") or {}).get("selected", len(d["checks"]))
                                                 for _, d in shards),
                                 "reason": "interrupted shard(s): " + ", ".join(str(p) for p, _ in stopped)}
    return merged


def _each_once(shards):
    """Refuse a shard given twice: the same file (by any path or link), or two files holding the same checks."""
    seen, held = {}, {}
    for path, data in shards:
        st = path.stat()
        same = seen.setdefault((st.st_dev, st.st_ino), path)
        if same != path or path in held:
            raise MergeError(f"{path}: given twice (also as {same}); give each shard's report once")
        twin = next((p for p, checks in held.items() if checks == data["checks"] and checks), None)
        if twin is not None:  # byte for byte the same records: a copy (two runs of one shard differ: the overlap)
            raise MergeError(f"{path} and {twin} hold the same {len(data['checks'])} check records: one shard given "
                             "twice (a copy?); give each shard's report once")
        held[path] = data["checks"]


def _checks(shards):
    """The shards' check records, each read back as its CheckResult (MergeError names the file of a bad one)."""
    seen, checks = {}, []
    for path, data in shards:
        try:
            results = read_checks(data["checks"])
        except ValueError as err:
            raise MergeError(f"{path}: {err}") from err
        for c in results:
            key = (c.model, c.precision, c.check)
            if seen.get(key, path) != path:
                raise MergeError(f"check {key[0]} {key[1] or 'model-level'} {key[2]} is in {seen[key]} and in "
                                 f"{path}: the shards overlap; give each model (or -k selection) to one shard")
            seen[key] = path
            checks.append(c)
    return [c.to_dict() for c in sorted(checks, key=lambda c: (c.model, c.precision or "", c.check))]


def _joined(values):
    distinct = list(dict.fromkeys(v for v in values if v is not None))
    return distinct[0] if len(distinct) == 1 else "; ".join(map(str, distinct)) or None


def _summed(dicts):
    total = {}
    for d in dicts:
        for k, v in (d or {}).items():
            if isinstance(v, bool):
                total[k] = total.get(k, True) and v
            elif isinstance(v, (int, float)):
                total[k] = round(total.get(k, 0) + v, 3)
    return total


def _validation(shards):
    found = [d["validation"] for _, d in shards if d.get("validation")]
    if not found:
        return None
    return {"config": _joined(v.get("config") for v in found),
            "models": {name: entry for v in found for name, entry in (v.get("models") or {}).items()},
            "problems": [p for v in found for p in v.get("problems") or []]}


def _environment_differs(shards):
    base_path, base = shards[0][0], shards[0][1].get("environment") or {}
    lines = []
    for path, data in shards[1:]:
        env = data.get("environment") or {}
        lines += [f"{k}: {base.get(k)} ({base_path}) vs {env.get(k)} ({path})"
                  for k in sorted(set(base) | set(env)) if base.get(k) != env.get(k)]
    return lines


def _baseline(baselines):
    merged = {"path": _joined(b.get("path") for b in baselines)}
    for key in ("new_failures", "fixed", "existing_failures", "drift", "gates", "environment_differs"):
        items = [x for b in baselines for x in b.get(key) or []]
        merged[key] = list(dict.fromkeys(items)) if all(isinstance(x, str) for x in items) else items
    return merged
