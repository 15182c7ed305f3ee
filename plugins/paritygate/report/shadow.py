"""The report's "Shadow traffic" section and the terminal lines of ``paritygate shadow``: what decided each
``shadow_*`` check, from its record (``details["shadow"]``, written by ``paritygate.shadow.results`` / ``.data``):
its message with the interval, the table of the overall rate and every class and slice (examples, events, interval,
Holm-adjusted p, verdict), each output's per-example |error| quantiles, and the worst examples by key with their
replay commands. Every string from data (class and slice values, keys, messages) goes through the one escaping
layer (``common.escape``); the plots are ``report.plots``'."""

from paritygate.common.escape import html_text, md_code, md_text, one_line
from paritygate.report.text import num

ROWS_SHOWN = 50  # class / slice rows per check in the Markdown and HTML tables (all of them are in the JSON)
TERMINAL_ROWS = 12
ORDER = {"fail": 0, "inconclusive": 1, "pass": 2, "not gated": 3, "no examples": 4}
EVENTS = {"shadow_top1": "flips", "shadow_detection": "missed"}
UNIT = {"shadow_top1": "examples", "shadow_detection": "detections"}


def shadow_checks(checks):
    return sorted((c for c in checks if c.check.startswith("shadow_") and isinstance(c.details.get("shadow"), dict)),
                  key=lambda c: (c.model, c.precision or "", c.check))


def group_rows(check):
    """The overall rate first, then classes and slices worst first (fail, inconclusive, pass, not gated)."""
    s = check.details["shadow"]
    overall = {"kind": "overall", "value": None, **{k: s.get(k) for k in ("examples", "events", "rate", "lower",
                                                                          "upper", "p_adjusted") if k in s},
               "status": s.get("overall_status", s.get("status"))}
    groups = [g for g in s.get("groups") or [] if isinstance(g, dict)]
    return [overall] + sorted(groups, key=lambda g: (ORDER.get(g.get("status"), 9), str(g.get("kind")),
                                                     str(g.get("value"))))


def group_label(g):
    if g.get("kind") == "overall":
        return "overall"
    return f"{g.get('kind')} {g.get('value')}"


def _interval(g):
    return f"[{num(g.get('lower'), '.3g')}, {num(g.get('upper'), '.3g')}]"


def _cells(g):
    return [group_label(g), str(g.get("examples")), str(g.get("events")), num(g.get("rate"), ".3g"), _interval(g),
            num(g["p_adjusted"], ".3g") if "p_adjusted" in g else "—", str(g.get("status"))]


def _head(check):
    return ["group", UNIT.get(check.check, "examples"), EVENTS.get(check.check, "events"), "rate",
            "95% interval", "Holm-adjusted p", "verdict"]


def output_rows(check):
    """Per output of a ``shadow_elementwise`` check: failing examples, mismatching elements, |error| quantiles."""
    rows = []
    for o in check.details["shadow"].get("outputs") or []:
        e = o.get("max_abs_error_per_example") or {}
        tol = o.get("tolerance") or {}
        rows.append([str(o.get("output")), f"{o.get('failing_examples')}/{e.get('examples')}",
                     f"{o.get('mismatching_elements')}/{o.get('elements')}",
                     *[num(e.get(k), ".3g") for k in ("p50", "p99", "p99.9", "max")], str(e.get("key_of_max")),
                     f"atol {num(tol.get('atol'), 'g')}, rtol {num(tol.get('rtol'), 'g')}"])
    return rows


OUTPUT_HEAD = ["output", "failing examples", "mismatching elements", "p50 |error|", "p99", "p99.9", "max",
               "key of max", "tolerance"]
WORST_HEAD = ["key", "slice", "top-1 (reference → candidate)", "max |error|", "judged", "replay"]


def worst_rows(check):
    rows = []
    for w in check.details["shadow"].get("worst") or []:
        top1 = w.get("top1")
        rows.append([str(w.get("key")), str(w.get("slice")) if w.get("slice") is not None else "—",
                     f"{top1[0]} → {top1[1]}" if isinstance(top1, list) and len(top1) == 2 else "—",
                     num(w.get("max_abs_error"), ".3g"), "pass" if w.get("passed") else "fail",
                     (w.get("reproducer") or {}).get("command") or "—"])
    return rows


# -- Markdown ------------------------------------------------------------------------------------------------
def _md_table(head, rows, code=()):
    lines = ["| " + " | ".join(md_text(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(md_code(v, cell=True) if i in code else md_text(v) for i, v in enumerate(r)) + " |"
              for r in rows]
    return lines


def markdown(checks):
    found = shadow_checks(checks)
    if not found:
        return []
    lines = ["", "## Shadow traffic", "", ("What decided each `paritygate shadow` check (docs/shadow.md): the "
                                           "message, every gated rate with its exact 95% interval and Holm-adjusted "
                                           "p, the |error| quantiles, the worst examples by key.")]
    for c in found:
        lines += ["", f"### {md_text(c.model)} {md_text(c.precision or 'model-level')} {c.check}: {c.status}", "",
                  md_text(c.details.get("message") or "")]
        lines += _md_parts(c)
    return lines


def _md_parts(c):
    lines = []
    s = c.details["shadow"]
    if "groups" in s:
        rows = group_rows(c)
        lines += ["", *_md_table(_head(c), [_cells(g) for g in rows[:ROWS_SHOWN]])]
        if len(rows) > ROWS_SHOWN:
            lines.append(f"\n{len(rows) - ROWS_SHOWN} more rows in parity-report.json")
        lines += ["", (f"Gated: {s.get('gated')} rate(s), each class or slice from {s.get('min_examples')} examples "
                       f"({md_text(s.get('min_examples_source'))}); {md_text(s.get('correction'))}.")]
    if s.get("outputs"):
        lines += ["", *_md_table(OUTPUT_HEAD, output_rows(c), code=(0, 7))]
    if s.get("worst") and c.check != "shadow_elementwise":
        lines += ["", "Worst examples:", "", *_md_table(WORST_HEAD, worst_rows(c), code=(0, 5))]
    return lines


# -- HTML ----------------------------------------------------------------------------------------------------
def _html_table(head, rows, status_col=None):
    body = "".join("<tr>" + "".join(
        f"<td class='tint-{html_text(v)}'>{html_text(v)}</td>" if i == status_col and v in ORDER else
        f"<td>{html_text(v)}</td>" for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{''.join(f'<th>{html_text(h)}</th>' for h in head)}</tr>{body}</table>"


def html_section(checks):
    found = shadow_checks(checks)
    if not found:
        return ""
    parts = [("<section id=shadow><h2>Shadow traffic</h2><p class=muted>What decided each paritygate shadow check: "
              "every gated rate with its exact 95% interval and Holm-adjusted p, the |error| quantiles, the worst "
              "examples by key.</p>")]
    for c in found:
        s = c.details["shadow"]
        parts.append(f"<h3>{html_text(c.model)} · {html_text(c.precision or 'model-level')} · {html_text(c.check)}: "
                     f"<span class='badge bg-{html_text(c.status)}'>{html_text(c.status)}</span></h3>"
                     f"<pre class=cause>{html_text(c.details.get('message') or '')}</pre>")
        if "groups" in s:
            rows = group_rows(c)
            parts.append(_html_table(_head(c), [_cells(g) for g in rows[:ROWS_SHOWN]], status_col=6))
            if len(rows) > ROWS_SHOWN:
                parts.append(f"<p class=muted>{len(rows) - ROWS_SHOWN} more rows in parity-report.json</p>")
            parts.append(f"<p class=muted>Gated: {html_text(s.get('gated'))} rate(s), each class or slice from "
                         f"{html_text(s.get('min_examples'))} examples ({html_text(s.get('min_examples_source'))}); "
                         f"{html_text(s.get('correction'))}.</p>")
        if s.get("outputs"):
            parts.append(_html_table(OUTPUT_HEAD, output_rows(c)))
        if s.get("worst") and c.check != "shadow_elementwise":
            parts.append("<details><summary>worst examples</summary>" + _html_table(WORST_HEAD, worst_rows(c))
                         + "</details>")
    return "".join(parts) + "</section>"


# -- terminal ------------------------------------------------------------------------------------------------
def terminal_lines(data):
    """The lines ``paritygate shadow`` prints from its report dict: the run, each check's message with its interval,
    the rate tables (worst rows first), replay commands and findings."""
    from paritygate.result import read_checks

    run = data.get("shadow") or {}
    lines = [(f"paritygate shadow: read {run.get('read')} examples, judged them in "
              f"{num(run.get('pipeline_seconds'), '.1f')} s ({run.get('examples_per_second')} examples/s, runner "
              f"{one_line(run.get('runner'))}, {run.get('workers')} worker(s))")]
    for c in shadow_checks(read_checks(data["checks"])):
        lines.append(f"  {one_line(c.model)} {one_line(c.precision or 'model-level')} {c.check}: {c.status.upper()} "
                     f"{one_line(c.details.get('message') or '')}")
        if "groups" in c.details["shadow"]:
            rows = group_rows(c)
            table = [_head(c)] + [_cells(g) for g in rows[:TERMINAL_ROWS]]
            widths = [max(len(one_line(r[i])) for r in table) for i in range(len(table[0]))]
            lines += ["    " + "  ".join(one_line(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in table]
            if len(rows) > TERMINAL_ROWS:
                lines.append(f"    ... {len(rows) - TERMINAL_ROWS} more rows in parity-report.md")
        if c.reproducer:
            lines.append(f"    replay: {one_line(c.reproducer.get('command'))}")
    for f in data.get("findings") or []:
        lines.append(f"paritygate shadow: finding {one_line(f.get('kind'))}: "
                     f"{one_line((f.get('details') or {}).get('summary', ''))}")
    return lines
