"""Markdown summary, suitable for ``$GITHUB_STEP_SUMMARY``: verdict and counts, changes since the baseline
(new failures first), every failing check with its full cause, then the table of all checks.

Every value from the report's records is data, escaped here whatever wrote the record (paritygate.common.escape):
``_t`` for text, ``_c`` for a name or command as inline code; a cause is shown whole in a code fence."""

import re

from paritygate.common.escape import md_code, md_text
from paritygate.report.engine import builder_text
from paritygate.report.engine import markdown as engine_lines
from paritygate.report.shadow import markdown as shadow_lines
from paritygate.report.text import (
    by_severity,
    cause,
    counts,
    divergence_text,
    interrupted_text,
    num,
    precision_label,
    run_fails,
    statistics_text,
    stop_problems,
    tolerance_groups,
    tolerance_text,
    upstream_note,
    worst_output,
)
from paritygate.result import read_checks
from paritygate.verdict import STATUSES

ICON = {"pass": "✅ pass", "fail": "❌ fail", "error": "💥 error", "inconclusive": "❔ inconclusive", "skip": "⏭️ skip",
        "xfail": "⚠️ xfail", "regenerated": "♻️ regenerated"}
FAILING = ("fail", "error", "inconclusive")
NOTE_CHARS = 240  # a table cell stays one readable line; the full cause is under "Failures" or in the JSON


_t = md_text


def _c(value):
    """A name or command as inline code, safe in a table cell too."""
    return md_code(value, cell=True)


def _icon(status):
    return ICON.get(status) or _t(status)


def _divergence_note(check):
    """" · node adding the most error `n` (Op), ...; keep in FP32 `n` (verified)" or "" (paritygate/judge/divergence.py)."""
    text = divergence_text(check, _c, _t)
    return f" · {text}" if text else ""


def _note(check):
    """A table cell: the cause, cut at NOTE_CHARS before it is escaped, then where precision broke."""
    text = cause(check)
    if len(text) > NOTE_CHARS:
        where = "under Failures below" if check.status in FAILING else "in parity-report.json"
        return _t(text[:NOTE_CHARS]) + f"… (full text {where})"
    return _t(text) + _divergence_note(check)


def _stat_cell(check):
    o = worst_output(check)
    return f"{_c(o['output'])} {_t(statistics_text(o))}" if o else ""


def _fenced(text):
    """``text`` in a code fence longer than any run of backticks inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, text, fence]


def _environment_line(data):
    env = data.get("environment") or {}
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
    gpu = gpu.get("name") or f"none ({env.get('gpu_unavailable_reason')})"
    return (f"Runtime **{_t(data.get('runtime'))}** · device class {_c(data.get('device_class'))} · " + _t(
            f"TensorFlow {env.get('tensorflow')} · ONNX Runtime {env.get('onnxruntime')} · "
            f"TensorRT {env.get('tensorrt') or 'not installed'} · TensorRT-RTX builder "
            f"{builder_text(data)} · "
            f"Beam {env.get('apache-beam')} · GPU: {gpu} · "
            f"CPU {', '.join(map(str, env.get('cpu_isa') or [])) or 'unknown'}"))


def _verdict(data, checks):
    problems = stop_problems(data, checks)
    if problems:
        head = (f"**Verdict: STOPPED before any check** (exit code 4): {len(problems)} problem(s) in the input, "
                "each to fix before the checks can run:")
        return [head, "", *[f"- {_t(p)}" for p in problems]]
    stopped = interrupted_text(data)
    if stopped:
        return [f"**Verdict: INTERRUPTED**: {stopped}", "", " · ".join(f"{ICON[s]}: {counts(checks)[s]}"
                                                                          for s in STATUSES)]
    if not checks:
        return ["no checks ran"]
    n = counts(checks)
    gating = [d for d in (data.get("baseline") or {}).get("drift", []) if d["gating"]]
    word = "FAIL" if run_fails(checks) or gating else "PASS"
    line = " · ".join(f"{ICON[s]}: {n[s]}" for s in STATUSES)
    if data.get("findings") is not None:
        line += f" · findings: {len(data['findings'])}"
    return [f"**Verdict: {word}**", "", line]


def _failure(c):
    lines = ["", f"### {_icon(c.status)}: {_t(c.model)} {precision_label(c, 'model-level', _t)} {_t(c.check)}", ""]
    lines += _fenced(cause(c) or "(no message recorded)")
    for o in (o for o in c.outputs or [] if not o.get("passed", True)):
        lines.append(f"- output {md_code(o['output'])}: {_t(statistics_text(o))}")
        w = o.get("worst") or {}
        if w:
            lines.append("  - " + _t(f"worst element {w.get('index')} (batch element {w.get('batch_element')}): "
                                     f"reference {num(w.get('reference'), '.6g')}, candidate "
                                     f"{num(w.get('candidate'), '.6g')}"))
        for name, v in (w.get("inputs") or {}).items():
            shown = v.get("values", v.get("head")) or []
            values = f"{'' if 'values' in v else 'first values '}{[num(x, '.6g') for x in shown]}".replace("'", "")
            described = f"{v.get('dtype')} {v.get('shape')}: {values}"
            lines.append(f"  - its input {md_code(name)} {_t(described)}")
    for tol, names in tolerance_groups(c.outputs or []):
        lines.append(f"- tolerance for {', '.join(md_code(n) for n in names)}: {_t(tolerance_text(tol))}")
    if c.details.get("divergence"):
        lines.append(f"- where precision broke: {divergence_text(c, md_code, _t)}")
    if c.reproducer:
        lines.append(f"- replay: {md_code(c.reproducer['command'])}")
    return lines


def _baseline(base):
    lines = ["", "## Changes since baseline", "", f"Baseline: {md_code(base['path'])}"]
    if base.get("environment_differs"):
        lines += ["", "> **Warning:** the baseline came from another machine or runtime: "
                  + _t("; ".join(map(str, base["environment_differs"])))]
    for title, key in (("New failures", "new_failures"), ("Fixed", "fixed"),
                       ("Still failing, as in the baseline", "existing_failures")):
        if base.get(key):
            lines += ["", f"**{title}** ({len(base[key])}):", ""]
            lines += [f"- {_icon(i.get('status'))} " + _t(f"{i['model']} {i['precision'] or 'model-level'} {i['check']} "
                                                          f"(baseline: {i.get('baseline_status') or 'not run'})")
                      for i in base[key]]
    if base.get("drift"):
        lines += ["", f"**Drift** ({len(base['drift'])}):", "",
                  "| | check | where | statistic | baseline | now | change | threshold |", "|---|---|---|---|---|---|---|---|"]
        for d in sorted(base["drift"], key=lambda d: not d["gating"]):
            lines.append(f"| {'**gates**' if d['gating'] else 'reported'} | "
                         f"{_t(d['model'])} {_t(d['precision'] or '')} {_t(d['check'])} | {_t(d['where'])} | "
                         f"{_t(d['field'])} | {_t(num(d['baseline'], '.4g'))} | {_t(num(d['current'], '.4g'))} | "
                         f"{_t(d['change'])} | {_c(d['threshold'])} |")
    if len(lines) == 4:
        lines += ["", "No change: no new failure, nothing fixed, no drift past the thresholds."]
    return lines


def render_markdown(data):
    checks = by_severity(read_checks(data["checks"]))
    lines = ["# Parity report", "", *_verdict(data, checks), "", _environment_line(data)]
    if data.get("baseline"):
        lines += _baseline(data["baseline"])
    failing = [c for c in checks if c.status in FAILING]
    if failing:
        lines += ["", "## Failures"]
        for c in failing:
            lines += _failure(c)
    lines += ["", "## Checks", "", "| model | precision | check | status | statistics (worst output) | note |",
              "|---|---|---|---|---|---|"]
    for c in checks:
        upstream = upstream_note([c])
        lines.append(f"| {_t(c.model)} | {precision_label(c, text=_t)} | {_t(c.check)} | {_icon(c.status)}"
                     f"{f' ({_t(upstream)})' if upstream else ''} | {_stat_cell(c)} | {_note(c)} |")
    lines += (_latency(checks) + engine_lines(checks) + shadow_lines(checks) + _findings(data.get("findings"))
              + _reproducers(checks))
    return "\n".join(lines) + "\n"


def _latency(checks):
    latency = [c for c in checks if c.latency]
    if not latency:
        return []
    lines = ["", "## Latency", "",
             "| model | precision | runtime | batch | p50 ms | p90 ms | p99 ms | budget | within budget |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(latency, key=lambda c: (c.model, c.precision or "")):
        for row in c.latency:
            within = row.get("within_budget")
            cells = (c.model, c.precision or "—", row.get("runtime", "—"), row.get("batch"),
                     num(row.get("p50_ms", 0), ".3f"), num(row.get("p90_ms", 0), ".3f"),
                     num(row.get("p99_ms", 0), ".3f"), row.get("budget") or "—")
            lines.append("| " + " | ".join(map(_t, cells)) +
                         f" | {'—' if within is None else ('yes' if within else 'NO')} |")
    return lines


def _findings(findings):
    """Facts about the model that are no verdict on the candidate (e.g. the reference unstable on an input)."""
    if not findings:
        return []
    lines = ["", "## Findings", "", "Not candidate failures: the model's own behaviour, for its owner.", ""]
    for f in findings:
        d = f.get("details") or {}
        replay = f" Inputs: {md_code(d['reproducer'].get('npz'))}" if d.get("reproducer") else ""
        lines.append(f"- **{_t(f['kind'])}** " + _t(f"{f['model']} {f['precision'] or ''} {f['check']}: "
                                                   f"{d.get('summary', '')}") + f".{replay}")
    return lines


def _reproducers(checks):
    repro = [c for c in checks if c.reproducer]
    if not repro:
        return []
    return ["", "## Reproducers", ""] + [f"- {_t(c.model)} {_t(c.precision)} {_t(c.check)}: "
                                         f"{md_code(c.reproducer['command'])}" for c in repro]
