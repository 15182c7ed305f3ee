"""The self-contained HTML report, verdict first: a banner with the count of every status and the findings, a
model x precision matrix of worst statuses linking to the checks, then the checks worst first (failures as
cards with their full cause and evidence, passes in a table, skips collapsed). No script, no network."""

import json

from paritygate.common.escape import html_text as ESC
from paritygate.report.engine import builder_text
from paritygate.report.engine import html_section as engine_section
from paritygate.report.html_checks import badge, baseline_section
from paritygate.report.html_checks import render as render_checks
from paritygate.report.shadow import html_section as shadow_section
from paritygate.report.text import (
    PRECISION_ORDER,
    SEVERITY,
    by_severity,
    check_id,
    counts,
    interrupted_text,
    precision_label,
    run_fails,
    stop_problems,
    upstream_note,
    worst_status,
)
from paritygate.result import read_checks
from paritygate.verdict import STATUSES

COLOURS = {"fail": "#b42318", "error": "#c4320a", "inconclusive": "#6941c6", "xfail": "#93370d",
           "regenerated": "#175cd3", "pass": "#067647", "skip": "#667085"}
TINTS = {"fail": "#fee4e2", "error": "#ffead5", "inconclusive": "#ebe9fe", "xfail": "#fef0c7",
         "regenerated": "#d1e9ff", "pass": "#dcfae6", "skip": "#f2f4f7"}
CSS = """*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
margin:0 auto;padding:16px 24px;max-width:1360px;color:#101828}h1{font-size:20px;margin:0 0 8px}
h2{font-size:16px;margin:20px 0 8px}code,pre{font:12px/1.4 "DejaVu Sans Mono",Menlo,Consolas,monospace}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0}table{border-collapse:collapse;max-width:100%}
td,th{border:1px solid #d0d5dd;padding:3px 8px;vertical-align:top;text-align:left}th{background:#f9fafb}
img{max-width:100%;height:auto;display:block}.muted{color:#667085}a{color:inherit}
.badge{display:inline-block;min-width:7.5em;padding:1px 6px;border-radius:4px;color:#fff;font-weight:600;
font-size:12px;text-align:center;text-transform:uppercase;letter-spacing:.03em}
#verdict{border-radius:8px;padding:12px 16px;color:#fff;display:flex;flex-wrap:wrap;gap:8px 24px;align-items:center}
#verdict .word{font-size:26px;font-weight:700;letter-spacing:.04em}#verdict .why{flex:1 1 420px}
#verdict ul{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:6px}
#verdict li{background:#fff;color:#101828;border-radius:6px;padding:2px 10px;border-left:6px solid}
#verdict li b{font-size:16px}.env{margin:6px 0 0;color:#475467;font-size:12px}
.matrix td,.matrix th{padding:4px 12px}.matrix td{min-width:9em}.matrix a{text-decoration:none;display:block}
.matrix small{font-weight:400;color:#475467;margin-left:6px}
.card{border:1px solid #d0d5dd;border-left:6px solid;border-radius:6px;padding:8px 12px;margin:10px 0}
.card h3{font-size:15px;margin:0 0 4px}.card table{margin:6px 0}.cause{background:#f9fafb;padding:6px 8px;
border-radius:4px}details{margin:6px 0}summary{cursor:pointer}.plots{display:flex;flex-wrap:wrap;gap:8px}
.plots svg{max-width:100%;height:auto;display:block}.tag{font-size:12px;font-weight:600;color:#b42318;border:1px solid;
border-radius:4px;padding:0 5px;margin-left:6px}.tag.old{color:#667085}#verdict li.zero{color:#667085}.checks td:nth-child(5){max-width:640px}
"""


def render_html(data):
    checks = read_checks(data["checks"])
    parts = [(f"<!doctype html><html lang=en><meta charset=utf-8><title>Parity report: "
             f"{_verdict_word(data, checks)}</title><style>{CSS}{_status_css()}</style><body>"),
             _banner(data, checks), _matrix(checks),
             *render_checks(by_severity(checks), data.get("baseline"), before_rest=[
                 _baseline(data.get("baseline")), engine_section(checks), shadow_section(checks),
                 _findings(data.get("findings"))]),
             "</body></html>"]
    return "\n".join(p for p in parts if p) + "\n"


def _status_css():
    return "".join(f".st-{s}{{border-color:{COLOURS[s]}}}.bg-{s}{{background:{COLOURS[s]}}}"
                   f".tint-{s}{{background:{TINTS[s]}}}" for s in STATUSES)


def _run_fails(data, checks):
    return run_fails(checks) or any(d["gating"] for d in (data.get("baseline") or {}).get("drift", []))


def _verdict_word(data, checks):
    if interrupted_text(data):
        return "INTERRUPTED"
    if stop_problems(data, checks):
        return "STOPPED"
    if not checks:
        return "NO CHECKS RAN"
    return "FAIL" if _run_fails(data, checks) else "PASS"


def _banner(data, checks):
    n = counts(checks)
    word = _verdict_word(data, checks)
    colour = COLOURS["fail"] if word == "FAIL" else (COLOURS["pass"] if checks else COLOURS["skip"])
    problems = stop_problems(data, checks)
    why = _why(data, checks) if checks else "no check was recorded"
    if word == "INTERRUPTED":
        colour, why = COLOURS["error"], ESC(interrupted_text(data))
    if problems:
        colour = COLOURS["error"]
        why = (f"stopped before any check (exit code 4): {len(problems)} problem(s) in the input, each to fix "
               "before the checks can run<ul class=problems>" + "".join(f"<li>{ESC(p)}</li>" for p in problems) +
               "</ul>")
    base = data.get("baseline")
    if base:
        why += (f"<br>vs baseline: {len(base['new_failures'])} new failure(s), {len(base['fixed'])} fixed, "
                f"{len(base['existing_failures'])} still failing, {len(base['drift'])} drift "
                f"({sum(d['gating'] for d in base['drift'])} gating)")
    items = "".join(f"<li style='border-color:{COLOURS[s]}'{'' if n[s] else ' class=zero'}><b>{n[s]}</b> {s}</li>"
                    for s in STATUSES)
    findings = data.get("findings")
    if findings is not None:
        items += f"<li style='border-color:#344054'><b>{len(findings)}</b> findings</li>"
    return (f"<h1>Parity report</h1><header id=verdict style='background:{colour}'>"
            f"<div class=word>{word}</div><div class=why>{why}</div><ul aria-label='status counts'>{items}</ul>"
            f"</header><p class=env>{ESC(_environment_line(data))}</p>")


def _why(data, checks):
    failing = counts([c for c in checks if run_fails([c])])
    parts = [f"{failing[s]} {s}" for s in ("fail", "error", "inconclusive") if failing[s]]
    gates = sum(d["gating"] for d in (data.get("baseline") or {}).get("drift", []))
    parts += [f"{gates} drift past --parity-baseline-fail"] if gates else []
    if parts:
        return f"this run fails: {', '.join(parts)}"
    return "no check failed: each passed, was skipped with its reason, or is a recorded known failure"


def _environment_line(data):
    env = data.get("environment") or {}
    gpu = (env.get("gpu") or {}).get("name") if isinstance(env.get("gpu"), dict) else None
    return (f"Candidate runtime {data.get('runtime')} · device class {data.get('device_class')} · "
            f"TensorFlow {env.get('tensorflow')} · ONNX Runtime {env.get('onnxruntime')} · "
            f"TensorRT {env.get('tensorrt') or 'not installed'} · TensorRT-RTX builder "
            f"{builder_text(data)} · "
            f"Beam {env.get('apache-beam')} · GPU {gpu or 'none'} · "
            f"CPU {', '.join(env.get('cpu_isa') or []) or 'unknown'} · Python {env.get('python')} · "
            f"config {data.get('config')}")


def _matrix(checks):
    if not checks:
        return ""
    models = sorted({c.model for c in checks})
    present = {c.precision for c in checks}
    columns = [p for p in PRECISION_ORDER if p in present] + sorted(p for p in present - {None}
                                                                    if p not in PRECISION_ORDER)
    columns += [None] if None in present else []
    head = "".join(f"<th>{ESC(p) if p else 'model-level'}</th>" for p in columns)
    rows = []
    for m in models:
        cells = [_cell([c for c in checks if c.model == m and c.precision == p]) for p in columns]
        rows.append(f"<tr><th>{ESC(m)}</th>{''.join(cells)}</tr>")
    return (f"<section id=matrix><h2>Model × precision (worst status; click for its checks)</h2>"
            f"<table class=matrix><tr><th>model</th>{head}</tr>{''.join(rows)}</table></section>")


def _cell(checks):
    if not checks:
        return "<td class=muted>—</td>"
    worst = worst_status(c.status for c in checks)
    first = min((c for c in checks if c.status == worst), key=lambda c: c.check)
    tally = ", ".join(f"{sum(c.status == s for c in checks)} {s}" for s in SEVERITY
                      if any(c.status == s for c in checks))
    tags = precision_label(first).partition(" ")[2]  # the numerics and coverage of an fp16/int8 cell
    upstream = upstream_note(checks) if worst == "xfail" else ""  # amber for Beam's defect: say it is Beam's
    return (f"<td class=tint-{ESC(worst)}><a href='#{check_id(first.model, first.precision, first.check)}' "
            f"title='{ESC(tally)}'>{badge(worst)}"
            f"<small>{ESC(tally)}</small>{f'<small> {ESC(tags)}</small>' if tags else ''}"
            f"{f'<br><small class=upstream>{ESC(upstream)}</small>' if upstream else ''}</a></td>")


def _baseline(base):
    if not base:
        return ""
    return baseline_section(base)


def _findings(findings):
    """Facts about the model that are no verdict on the candidate (e.g. the reference unstable on an input)."""
    if not findings:
        return ""
    rows = []
    for f in findings:
        d = f.get("details") or {}
        inputs = f"<br>inputs: <code>{ESC(str(d['reproducer'].get('npz')))}</code>" if d.get("reproducer") else ""
        rest = {k: v for k, v in d.items() if k not in ("summary", "reproducer")}
        more = (f"<details><summary>details</summary><pre>{ESC(json.dumps(rest, indent=1))}</pre></details>"
                if rest else "")
        rows.append(f"<tr><td>{ESC(str(f.get('kind')))}</td><td>{ESC(str(f.get('model')))}</td>"
                    f"<td>{ESC(str(f.get('precision') or '—'))}</td><td>{ESC(str(f.get('check')))}</td>"
                    f"<td>{ESC(str(d.get('summary', '')))}{inputs}{more}</td></tr>")
    return (f"<section id=findings><h2>Findings ({len(findings)})</h2><p class=muted>Not candidate failures: the "
            f"model's own behaviour, for its owner.</p><table><tr><th>kind</th><th>model</th><th>precision</th>"
            f"<th>check</th><th>summary</th></tr>{''.join(rows)}</table></section>")
