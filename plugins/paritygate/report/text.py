"""Words and numbers shared by the Markdown and HTML reports, the terminal summary and the JUnit properties: status
order, the full cause of a check, and error statistics that say first how many values were NaN or Inf. A check is
a ``paritygate.result.CheckResult`` (``read_checks`` turns a report's records into them)."""

import json

from paritygate.verdict import STATUSES

# Worst first: a matrix cell shows the first of these among its checks, and rows are listed in this order.
SEVERITY = ("fail", "error", "inconclusive", "xfail", "regenerated", "pass", "skip")
assert set(SEVERITY) == set(STATUSES), "every verdict word needs a place in the report's order"
PRECISION_ORDER = ("fp32", "fp16", "int8")


def num(value, spec=".3g"):
    """Format a statistic; non-finite values arrive as the strings "nan"/"inf" (strict JSON)."""
    if isinstance(value, bool):
        return str(value)
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def worst_status(statuses):
    statuses = list(statuses)
    return min(statuses, key=SEVERITY.index) if statuses else None


def by_severity(checks):
    """Checks ordered failures first, then errors, inconclusive, xfail, regenerated, passes and skips."""
    return sorted(checks, key=lambda c: (SEVERITY.index(c.status), c.model, _precision_rank(c.precision), c.check))


def _precision_rank(precision):
    """fp32, fp16, int8, then any other precision by name, then model-level checks (no precision)."""
    if precision in PRECISION_ORDER:
        return (0, PRECISION_ORDER.index(precision), "")
    return (1, 0, precision) if precision else (2, 0, "")


def precision_label(check, empty="—", text=str):
    """The precision and, for an fp16/int8 row, the numerics it was computed with: ``fp16 [strict]``; with its
    precision coverage when measured: ``fp16 [strict, 97% MACs]`` (the result's ``precision_coverage``). ``text``
    escapes the record's values (Markdown's, paritygate.common.escape); the brackets are the label's own."""
    if not check.precision:
        return empty
    tags = [text(check.numerics)] if check.numerics else []
    cov = check.precision_coverage or {}
    if isinstance(cov.get("mac_share"), (int, float)):
        tags.append(f"{cov['mac_share']:.0%} MACs")
    return f"{text(check.precision)} [{', '.join(tags)}]" if tags else text(check.precision)

def counts(checks):
    """Count of every verdict word, zeros included, in the vocabulary's order."""
    return {s: sum(c.status == s for c in checks) for s in STATUSES}


def stop_problems(data, checks):
    """The problems that stopped a run before any check (the validation pass's lines, exit code 4): empty when
    checks ran or nothing was recorded."""
    if checks:
        return []
    validation = data.get("validation") if isinstance(data.get("validation"), dict) else {}
    return [str(p) for p in validation.get("problems") or []]


def interrupted_text(data):
    """"interrupted after 5 of 9 selected tests: ..." for a report whose run was interrupted (its ``status``), or
    "" for a run that ended."""
    if not isinstance(data, dict) or data.get("status") != "interrupted":
        return ""
    info = data.get("interrupted") if isinstance(data.get("interrupted"), dict) else {}
    of = f" of {info['selected']}" if isinstance(info.get("selected"), int) else ""
    return (f"the run was interrupted (Ctrl-C) after {len(data.get('checks') or [])}{of} selected checks: the "
            "checks below ran, the others did not; this report is no verdict, rerun for one")


def run_fails(checks):
    """Whether these checks fail the run: a fail or error, or an inconclusive the model does not allow."""
    return any(c.status in ("fail", "error") or
               (c.status == "inconclusive" and not c.details.get("allow_uninformative")) for c in checks)


def cause(check):
    """The full cause of a check's status (never cut): the failure message, skip/xfail reason or note."""
    d = check.details
    return str(d.get("message") or d.get("reason") or d.get("note") or "")


def upstream_defects(check):
    """The ids of the upstream (Apache Beam) defects an ``xfail`` stands for: the bundled ``[[expectations]]`` a
    RunInference check met (``details.expectations``) or a ``[[known_failures]]`` entry's ``upstream_defect``
    (``details.upstream_defect``, models.known.mark_known_failures); empty for any other status or a known
    failure of the team's own."""
    if check.status != "xfail":
        return []
    d = check.details
    ids = [e.get("id") for e in d.get("expectations") or [] if isinstance(e, dict)] + [d.get("upstream_defect")]
    return list(dict.fromkeys(i for i in ids if i))


def upstream_note(checks):
    """What an xfail cell says of whose defect it is: "upstream: Beam's defect (ids), not your handler" when every
    xfail among ``checks`` stands for an upstream defect, "N of M xfail upstream (Beam): ..." when some do, else ""."""
    xfails = [c for c in checks if c.status == "xfail"]
    upstream = [c for c in xfails if upstream_defects(c)]
    if not upstream:
        return ""
    ids = ", ".join(dict.fromkeys(i for c in upstream for i in upstream_defects(c)))
    if len(upstream) == len(xfails):
        return f"upstream: Beam's defect ({ids}), not your handler"
    return f"{len(upstream)} of {len(xfails)} xfail upstream: Beam's defect ({ids}), not your handler"


def check_id(model, precision, check):
    """An HTML id for a check's row."""
    raw = f"{model}-{precision or 'model'}-{check}"
    return "c-" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in raw)


def nonfinite_counts(o):
    """(side, kind, count) for every non-zero NaN/Inf count of an output comparison (schema-1 reports
    written before these counts existed have none)."""
    return [(side, kind, o.get(f"{side}_{kind.lower()}", 0)) for side in ("reference", "candidate")
            for kind in ("NaN", "Inf") if o.get(f"{side}_{kind.lower()}", 0)]


def finite_only(o):
    """Whether the output's statistics cover only part of its elements (non-finite values left out)."""
    finite = o.get("finite_elements")
    if finite is None:  # older report: only the non-finite mismatches were counted
        return bool(o.get("nonfinite_mismatches"))
    return finite < o.get("elements", 0)


def nonfinite_text(o):
    parts = [f"{n} {kind} in the {side}" for side, kind, n in nonfinite_counts(o)]
    if not parts and o.get("nonfinite_mismatches"):
        parts = [f"{o['nonfinite_mismatches']} non-finite mismatches"]
    return "; ".join(parts)


def held_to(tol):
    """The bound a row was held to: atol/rtol, or a within-candidate bound (batch_invariance, determinism), never
    the zero atol/rtol such a check compares with before its bound replaces them."""
    if "bound" in tol:
        text = f"bound {num(tol['bound'], 'g')}" + (" (bit-identical)" if not tol["bound"] else "")
        if tol.get("reference_floor_max"):
            text += (f", or {num(tol.get('k', 2), 'g')} x the reference's own spread where larger (up to "
                     f"{num(tol['reference_floor_max'], 'g')})")
        return text
    return f"atol {num(tol.get('atol', 0), 'g')}/rtol {num(tol.get('rtol', 0), 'g')}"


def statistics_text(o):
    """One output's statistics, NaN/Inf first and finite-only statistics labelled as such."""
    tol = o.get("tolerance", {})
    out_of = f"{o.get('mismatches', 0)}/{o.get('elements', 0)} out of {held_to(tol)}"
    stats = (f"max abs {num(o.get('max_abs', 0))}, p99 abs {num(o.get('p99_abs', 0))}, "
             f"cos {num(o.get('cosine', 1), '.5f')}")
    if o.get("cosine_failed"):
        stats += f" (below the cosine budget {num(tol.get('cosine_min'), 'g')})"
    if finite_only(o):
        finite = o.get("finite_elements")
        over = f" ({finite}/{o.get('elements', 0)} elements)" if finite is not None else ""
        return f"{nonfinite_text(o)}; {out_of}; finite-only{over}: {stats}"
    return f"{out_of}; {stats}"


def worst_output(check):
    """The output to summarise a check by: a failing one with the most non-finite values, else the largest
    finite max abs error."""
    outs = check.outputs or []
    pool = [o for o in outs if not o.get("passed", True)] or outs
    if not pool:
        return None

    def badness(o):
        m = o.get("max_abs", 0)
        return (o.get("nonfinite_mismatches", 0), m if isinstance(m, (int, float)) else float("inf"))

    return max(pool, key=badness)


def tolerance_groups(outputs):
    """[(tolerance dict, [output names])]: each distinct tolerance (atol, rtol, cosine budget and their sources)
    once, with the outputs it covers."""
    groups = {}
    for o in outputs:
        tol = o.get("tolerance") or {}
        key = json.dumps({k: tol.get(k) for k in ("atol", "rtol", "bound", "reference_floor_max", "source",
                                                  "cosine_min", "cosine_source")})
        groups.setdefault(key, (tol, []))[1].append(o["output"])
    return list(groups.values())


def tolerance_text(tol):
    """'atol 1e-05, rtol 1e-05 (source: ...); cosine >= 0.997 where the reference rms > 0.00013 (source: ...)'."""
    text = f"{held_to(tol).replace('/rtol', ', rtol')} (source: {tol.get('source', 'unstated')})"
    if tol.get("cosine_min") is not None:
        text += (f"; cosine >= {num(tol['cosine_min'], 'g')} where the reference rms > "
                 f"{num(tol.get('cosine_applies_above_rms'), '.3g')} (source: {tol.get('cosine_source')})")
    return text


def key_numbers(result):
    """The numbers a CI test tab should show for a check (a ``paritygate.result.CheckResult``): (name, value) pairs
    for JUnit properties."""
    props = [("paritygate.status", result.status)]
    for o in result.outputs or []:
        name = f"paritygate.{o['output']}"
        props += [(f"{name}.mismatches", f"{o.get('mismatches', 0)}/{o.get('elements', 0)}")]
        props += [(f"{name}.{side}_{kind.lower()}", n) for side, kind, n in nonfinite_counts(o)]
        label = ".finite_only" if finite_only(o) else ""
        props += [(f"{name}{label}.{k}", o[k]) for k in ("max_abs", "p99_abs", "max_rel", "cosine") if k in o]
    props += [(f"paritygate.task.{k}", v) for k, v in (result.task or {}).items() if isinstance(v, (int, float)) and
              not isinstance(v, bool) and k not in ("samples", "min_ratio")]
    for row in result.latency or []:
        where = f"paritygate.latency.{row.get('role', 'candidate')}.batch{row.get('batch')}"
        props += [(f"{where}.{k}", row[k]) for k in ("p50_ms", "p99_ms") if k in row]
    return [(k, v if isinstance(v, str) else num(v, "g")) for k, v in props]


def divergence_text(check, code=str, text=str):
    """Where precision broke and the plan that repairs it (``details["divergence"]``, paritygate/judge/divergence.py),
    in words; ``code`` wraps node and op names (backticks in Markdown, <code> in HTML) and ``text`` every other
    value of the record (the renderer's escaping: paritygate.common.escape)."""
    d = check.details.get("divergence")
    if not d:
        return ""
    if d.get("error"):
        return f"localization failed: {text(d['error'])}"
    if d.get("crash"):
        where = f"the candidate crashed at {code(d['crashed_node'])}" if d.get("crashed_node") else "the candidate crashed"
        return f"{where}: {text(d['crash'])}" + (f"; cause: {text(d['cause'])}" if d.get("cause") else "")
    where = (f"node adding the most error {code(d['first_node'])} ({text(d.get('op_type'))}), max abs error "
             f"{text(num(d.get('max_abs_error')))}" if d.get("first_node") else text(d.get("note") or "no divergent node"))
    plan = d.get("keep_fp32", d.get("exclude_from_quantization"))
    if plan is None:
        return where
    verb = "keep in FP32" if "keep_fp32" in d else "leave unquantized"
    status = "verified" if d.get("verified") else "NOT verified"
    config = f"; config: {code(d['config'].splitlines()[1])}" if d.get("config") and "\n" in d["config"] else ""
    if d.get("plan_note"):
        config += f"; {text(d['plan_note'])}"
    if len(d.get("covers") or []) > 1:
        config += f"; one plan for {text(', '.join(map(str, d['covers'])))}"
    return f"{where}; {verb} {', '.join(code(n) for n in plan) or 'nothing'} ({status}){config}"
