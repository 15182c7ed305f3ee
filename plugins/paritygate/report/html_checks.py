"""The checks part of the HTML report: failing checks as cards (full cause, each failing output's worst
element with its inputs, the tolerance and its source once, reproducer and replay command, plots), the other
checks in one table, skips collapsed; and the "Changes since baseline" section."""

import json

from paritygate.common.escape import html_text as ESC
from paritygate.report.plots import has_plots, plots
from paritygate.report.text import (
    cause,
    check_id,
    divergence_text,
    finite_only,
    nonfinite_text,
    num,
    precision_label,
    statistics_text,
    tolerance_groups,
    tolerance_text,
    upstream_note,
    worst_output,
)

CARDS = ("fail", "error", "inconclusive")
HIDDEN = {"outputs", "reproducer", "message", "reason", "note", "nodeid", "rerun", "failures", "latency", "divergence"}


def badge(status):
    return f"<span class='badge bg-{ESC(status)}'>{ESC(status)}</span>"


def _title(c):
    return f"{ESC(c.model)} · {ESC(precision_label(c, 'model-level'))} · {ESC(c.check)}"


def _ref_title(ref):
    """A baseline section's entry (model, precision, check of a check)."""
    return f"{ESC(ref['model'])} · {ESC(ref['precision'] or 'model-level')} · {ESC(ref['check'])}"


def _id(c):
    return check_id(c.model, c.precision, c.check)


def render(checks, baseline=None, before_rest=()):
    """Sections for checks already ordered worst first: failing cards, ``before_rest``, the others, skips."""
    cards = [c for c in checks if c.status in CARDS]
    rest = [c for c in checks if c.status not in CARDS + ("skip",)]
    skips = [c for c in checks if c.status == "skip"]
    new = {(f["model"], f["precision"], f["check"]) for f in (baseline or {}).get("new_failures", [])}
    out = []
    if cards:
        out.append(f"<section id=failing><h2>Failing checks ({len(cards)})</h2>"
                   f"{''.join(_card(c, baseline and ((c.model, c.precision, c.check) in new)) for c in cards)}</section>")
    out += [part for part in before_rest if part]
    if rest:
        out.append(f"<section id=others><h2>Other checks ({len(rest)})</h2>{_table(rest, plots_column=True)}</section>")
    if skips:
        out.append(f"<section id=skips><details><summary><h2 style='display:inline'>Skipped ({len(skips)})</h2>"
                   f"</summary>{_table(skips, plots_column=False)}</details></section>")
    return out


def _card(c, new=None):
    """``new``: True (new since the baseline), False (failing in the baseline too), None (no baseline)."""
    d = c.details
    tag = {True: " <span class=tag>new since baseline</span>", False: " <span class='tag old'>failing in the "
           "baseline too</span>", None: ""}[new]
    rerun = f"<p class=muted>rerun: <code>{ESC(d['rerun'])}</code></p>" if d.get("rerun") else ""
    parts = [(f"<article class='card st-{ESC(c.status)}' id={_id(c)}><h3>{badge(c.status)} {_title(c)}{tag}"
             f"</h3><pre class=cause>{ESC(cause(c)) or '(no message recorded)'}</pre>")]
    failing = [o for o in c.outputs or [] if not o.get("passed", True)]
    if failing:
        parts.append(_outputs_table(failing))
    if c.outputs:
        parts.append(_tolerances(c.outputs))
    task = c.task
    if task and not task.get("passed", True):
        parts.append(f"<p><b>Task metric failed</b>: <code>{ESC(_compact(task))}</code></p>")
    if d.get("divergence"):
        text = divergence_text(c, code=lambda name: f"<code>{ESC(name)}</code>", text=ESC)
        parts.append(f"<p><b>Where precision broke</b>: {text}</p>")
    if c.reproducer:
        parts.append(_reproducer(c.reproducer))
    parts.append(rerun)
    if has_plots(c):
        parts.append(f"<details open><summary>plots</summary><div class=plots>{''.join(plots(c))}</div></details>")
    rest = {k: v for k, v in c.to_dict()["details"].items() if k not in HIDDEN}  # the record's, typed fields too
    if rest:
        parts.append(f"<details><summary>all details</summary><pre>{ESC(json.dumps(rest, indent=1))}</pre></details>")
    return "".join(parts) + "</article>"


def _outputs_table(outputs):
    rows = []
    for o in outputs:
        nonfinite = nonfinite_text(o) or "none"
        label = "finite-only statistics" if finite_only(o) else "statistics"
        stats = (f"max abs {num(o.get('max_abs'))}, p99 abs {num(o.get('p99_abs'))}, max rel {num(o.get('max_rel'))}, "
                 f"cosine {num(o.get('cosine'), '.6f')}"
                 + (f" (below the budget {num((o.get('tolerance') or {}).get('cosine_min'), 'g')})"
                    if o.get("cosine_failed") else ""))
        rows.append(f"<tr><td><code>{ESC(o['output'])}</code></td><td>{ESC(nonfinite)}</td>"
                    f"<td>{ESC(o.get('mismatches', 0))}/{ESC(o.get('elements', 0))}</td><td><i>{label}</i>: {ESC(stats)}</td>"
                    f"<td>{_worst(o.get('worst') or {})}</td></tr>")
    return ("<table><tr><th>failing output</th><th>NaN / Inf</th><th>mismatches</th><th>statistics</th>"
            f"<th>worst element and its inputs</th></tr>{''.join(rows)}</table>")


def _worst(w):
    if not w:
        return "<span class=muted>—</span>"
    text = ESC(f"index {w.get('index')} (batch element {w.get('batch_element')}): reference "
               f"{num(w.get('reference'), '.6g')}, candidate {num(w.get('candidate'), '.6g')}")
    inputs = w.get("inputs")
    if inputs:
        text += "".join(f"<br>input <code>{ESC(name)}</code> {ESC(_input_text(v))}" for name, v in inputs.items())
    elif w.get("inputs_error"):
        text += f"<br><span class=muted>{ESC(w['inputs_error'])}</span>"
    return text


def _input_text(v):
    shape = f"{v.get('dtype')} {v.get('shape')}"
    if "values" in v:
        return f"{shape} = {[num(x, '.6g') for x in v['values']]}".replace("'", "")
    extra = f", {v['nan']} NaN, {v['inf']} Inf" if v.get("nan") or v.get("inf") else ""
    return (f"{shape}: min {num(v.get('min'), '.6g')}, max {num(v.get('max'), '.6g')}{extra}; "
            f"first values {[num(x, '.4g') for x in v.get('head', [])]}".replace("'", ""))


def _tolerances(outputs):
    lines = []
    for tol, names in tolerance_groups(outputs):
        which = "every output" if len(names) == len(outputs) else "outputs " + ", ".join(names)
        lines.append(f"{ESC(which)}: {ESC(tolerance_text(tol))}")
    return "<p><b>Tolerance</b> for " + "<br>".join(lines) + "</p>"


def _reproducer(r):
    poly = f"<br>Polygraphy inputs: <code>{ESC(r['polygraphy_inputs'])}</code>" if r.get("polygraphy_inputs") else ""
    return (f"<p><b>Reproducer</b>: <code>{ESC(str(r.get('npz')))}</code>{poly}<br>Replay:</p>"
            f"<pre class=cause>{ESC(str(r.get('command')))}</pre>")


def _compact(task):
    return ", ".join(f"{k}={num(v) if isinstance(v, float) else v}" for k, v in task.items() if k != "source")


def summary(c):
    """One cell of text for a check in the table: its worst output's statistics, latency or cause."""
    o = worst_output(c)
    parts = [f"<code>{ESC(o['output'])}</code> {ESC(statistics_text(o))}"] if o else []
    for r in c.latency or []:
        parts.append(ESC(f"{r.get('role', 'candidate')} {r.get('runtime', '')} batch {r.get('batch')}: p50 "
                         f"{num(r.get('p50_ms'), '.3f')} ms, p99 {num(r.get('p99_ms'), '.3f')} ms"
                         + (f" (budget {r['budget']})" if r.get("budget") else "")))
    if cause(c):
        parts.append(f"<span class=muted>{ESC(cause(c))}</span>")
    return "<br>".join(parts)


def _table(checks, plots_column):
    rows = []
    for c in checks:
        extra = ""
        if plots_column and has_plots(c):
            extra = f"<details><summary>plots</summary><div class=plots>{''.join(plots(c))}</div></details>"
        upstream = upstream_note([c])
        status = badge(c.status) + (f"<br><small class=upstream>{ESC(upstream)}</small>" if upstream else "")
        rows.append(f"<tr id={_id(c)}><td>{status}</td><td>{ESC(c.model)}</td>"
                    f"<td>{ESC(precision_label(c))}</td><td>{ESC(c.check)}</td><td>{summary(c)}{extra}</td></tr>")
    return ("<table class=checks style='table-layout:fixed;width:100%'><colgroup><col style='width:9em'>"
            "<col style='width:9em'><col style='width:6em'><col style='width:15em'><col></colgroup>"
            "<tr><th>status</th><th>model</th><th>precision</th><th>check</th><th>numbers and cause</th></tr>"
            f"{''.join(rows)}</table>")


def baseline_section(base):
    """"Changes since baseline": environment warning, new failures first, gating drift, drift, fixed, existing."""
    out = [(f"<section id=baseline><h2>Changes since baseline</h2><p class=muted>baseline: "
           f"<code>{ESC(base['path'])}</code></p>")]
    if base.get("environment_differs"):
        out.append("<p><b>Warning: the baseline came from another machine or runtime</b> (latency and numerics "
                   f"may differ for that reason alone): {ESC('; '.join(base['environment_differs']))}</p>")
    for title, key in (("New failures", "new_failures"), ("Fixed", "fixed"),
                       ("Still failing (as in the baseline)", "existing_failures")):
        items = base.get(key) or []
        if items:
            out.append(f"<h3>{title} ({len(items)})</h3><ul>" + "".join(
                f"<li>{badge(i['status'])} <a href='#{check_id(i['model'], i['precision'], i['check'])}'>"
                f"{_ref_title(i)}</a> "
                f"<span class=muted>(baseline: {ESC(str(i.get('baseline_status') or 'not run'))})</span></li>"
                for i in items) + "</ul>")
    if base.get("drift"):
        rows = "".join(f"<tr><td>{'<b>gates</b>' if d['gating'] else 'reported'}</td><td>{_ref_title(d)}</td>"
                       f"<td>{ESC(d['where'])}</td><td>{ESC(d['field'])}</td><td>{ESC(num(d['baseline'], '.4g'))}</td>"
                       f"<td>{ESC(num(d['current'], '.4g'))}</td><td>{ESC(d['change'])}</td><td>{ESC(d['threshold'])}</td>"
                       f"</tr>" for d in sorted(base["drift"], key=lambda d: not d["gating"]))
        out.append(f"<h3>Drift ({len(base['drift'])})</h3><table><tr><th></th><th>check</th><th>where</th>"
                   f"<th>statistic</th><th>baseline</th><th>now</th><th>change</th><th>threshold</th></tr>{rows}</table>")
    if len(out) == 1:
        out.append("<p>No change: no new failure, nothing fixed, no drift past the thresholds.</p>")
    return "".join(out) + "</section>"
