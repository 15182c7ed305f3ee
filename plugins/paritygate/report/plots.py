"""Plots for the HTML report, drawn as inline SVG by hand (no plotting library, no network, a few milliseconds each):
per output an |error| histogram beside error vs |reference|, error by depth of a failing fp16/int8 check, and a
latency CDF. Each is an ``<svg role="img">`` whose ``<title>`` and aria-label say what it shows; its viewBox and the
report's CSS (``.plots svg``) let it scale down to the page. Plot data arrives as strict JSON: NaN and Inf are the
strings "nan", "inf", "-inf" and are left out (counted in the title where today's report counts them)."""

import math
import re

from paritygate.common.escape import html_text

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
RED, INK, GRID = "#d62728", "#344054", "#98a2b3"
FONT, CHAR_W = 11, 6.4  # px in the SVG's own units (1 unit = 1 CSS px at full size); a rough mean glyph width
PANEL_W, PLOT_H = 430, 170  # one panel's width and its plot area's height
LEFT, RIGHT, TOP, BOTTOM = 64, 14, 24, 40  # margins around the plot area; the legend goes under BOTTOM
ROW = 15  # a legend row's height
EDGE_FLOOR = 1e-10  # the histogram's first edge is 0 (exact matches): drawn a decade below its second, 1e-9
DEPTH_FLOOR, DEPTH_TOP = 1e-12, 1e30  # error by depth: zero drawn at the bottom, non-finite at the top
BIG = 1e300  # finite values beyond this are clipped so that no span overflows to inf


def has_plots(check):
    """Whether a CheckResult has plot data: error histograms, latency samples, divergence by depth, or a shadow
    check's rates or |error| quantiles."""
    shadow = check.details.get("shadow") if isinstance(check.details.get("shadow"), dict) else {}
    return any("error_histogram" in o for o in check.outputs or []) or \
        any("samples_ms" in r for r in check.latency or []) or \
        bool((check.details.get("divergence") or {}).get("error_by_depth")) or \
        bool(shadow.get("groups") is not None and shadow.get("examples") or shadow.get("outputs"))


def plots(check):
    """<svg> elements: per output an |error| histogram and error vs |reference|; error by depth; a latency CDF;
    a shadow check's rate per class and slice with its interval, or its per-example |error| quantiles."""
    shadow = check.details.get("shadow") if isinstance(check.details.get("shadow"), dict) else {}
    images = [_error_plot(o) for o in check.outputs or [] if "error_histogram" in o]
    if shadow.get("groups") is not None and shadow.get("examples"):
        images.append(_rate_plot(shadow))
    if shadow.get("outputs"):
        images.append(_quantile_plot(shadow))
    divergence = check.details.get("divergence") or {}
    if divergence.get("error_by_depth"):
        images.append(_divergence_plot(divergence))
    rows = [r for r in check.latency or [] if r.get("samples_ms")]
    if rows:
        images.append(_latency_plot(rows))
    return images


def _finite(value):
    """Plot data arrives as strict JSON: NaN and Inf are the strings "nan", "inf", "-inf"."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_esc = html_text  # text for an SVG element or attribute (paritygate.common.escape)


def _f(v):
    return f"{v:.1f}"


def _num(v, spec=".4g"):
    """A tick label: 0.25, 1200, 1e-5 (no exponent padding), never -0."""
    text = re.sub(r"e([+-])0*(\d)", lambda m: "e" + m[1].replace("+", "") + m[2], f"{v:{spec}}")
    return "0" if text in ("-0", "0e0", "-0e0") else text


# -- axes ------------------------------------------------------------------------------------------------------
class _Axis:
    """One axis: its ticks and domain from the finite values it must show, mapped onto pixels p0 (the domain's low
    end) to p1. A log axis labels decades (1e-3), or 1-2-5 / 1-9 steps over less than two decades."""

    def __init__(self, values, log, p0, p1):
        finite = [min(max(v, -BIG), BIG) if abs(v) > 1 / BIG else 0.0 for v in values if _finite(v)]
        self.log, self.p0, self.p1 = log, p0, p1
        self.ticks, lo, hi = _log_ticks([v for v in finite if v > 0]) if log else _linear_ticks(finite)
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)

    def __call__(self, v):
        """The pixel of ``v``; a value off the domain (zero on a log axis, non-finite) lands on its nearer end."""
        if not _finite(v):
            t = self.hi if v in (math.inf, "inf") else self.lo
        else:
            t = (math.log10(v) if v > 0 else self.lo) if self.log else v
        t = min(max(t, self.lo), self.hi)
        return self.p0 + (t - self.lo) / ((self.hi - self.lo) or 1.0) * (self.p1 - self.p0)

    def label(self, t):
        return _num(t, ".0e") if self.log else _num(t)


def _linear_ticks(values):
    """(ticks, low, high): about five 1-2-5 steps covering ``values``; a single value gets a span around it."""
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi - lo <= abs(hi) * 1e-12:  # one value: 0 to 1 for zeros (errors, magnitudes), else half its size around it
        lo, hi = (0.0, 1.0) if lo == 0 else (lo - abs(lo) / 2, hi + abs(hi) / 2)
    step = _nice((hi - lo) / 5)
    ticks = [i * step for i in range(math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9) + 1)]
    return ticks, ticks[0], ticks[-1]


def _nice(x):
    k = math.floor(math.log10(x))
    return next(m * 10.0 ** k for m in (1, 2, 5, 10) if m * 10.0 ** k >= x * (1 - 1e-9))


def _log_ticks(values):
    """(ticks, low, high) of a log axis over positive ``values``, low and high on ticks; at most 8 decades
    labelled (every 2nd, 3rd, ... decade over a wide span)."""
    lo, hi = (min(values), max(values)) if values else (1.0, 10.0)
    a, b = math.log10(lo), math.log10(hi)
    steps = (1,) if b - a >= 2 else (1, 2, 5) if b - a >= 0.3 else range(1, 10)
    cands = [m * 10.0 ** k for k in range(math.floor(a) - 1, math.ceil(b) + 2) for m in steps]
    low = max(c for c in cands if c <= lo * (1 + 1e-9))
    high = min(c for c in cands if c >= hi * (1 - 1e-9) and c > low * (1 + 1e-9))
    ticks = [c for c in cands if low * (1 - 1e-9) <= c <= high * (1 + 1e-9)]
    if steps == (1,):
        every = math.ceil(len(ticks) / 8)
        ticks = [t for t in ticks if round(math.log10(t)) % every == 0]
    return ticks, low, high


# -- drawing ---------------------------------------------------------------------------------------------------
def _text(x, y, text, anchor="middle", width=None, extra=""):
    """A <text>; cut to ``width`` px with an ellipsis where it would not fit, the full text in its <title>."""
    text = str(text)
    full = ""
    if width is not None and len(text) * CHAR_W > width:
        full, text = f"<title>{_esc(text)}</title>", text[:max(int(width / CHAR_W) - 1, 1)] + "\u2026"
    return f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}"{extra}>{full}{_esc(text)}</text>'


def _frame(x, y, title, xlabel, ylabel):
    """The plot area's border, ticks and tick labels, the axis labels and the title."""
    left, right, top, bottom = x.p0, x.p1, y.p1, y.p0
    marks = "".join(f"M{_f(x(t))} {_f(bottom)}v4" for t in x.ticks) + \
        "".join(f"M{_f(left)} {_f(y(t))}h-4" for t in y.ticks)
    out = [(f'<rect x="{_f(left)}" y="{_f(top)}" width="{_f(right - left)}" height="{_f(bottom - top)}" '
            f'fill="none" stroke="{INK}"/>'), f'<path d="{marks}" stroke="{INK}"/>']
    out += [_text(x(t), bottom + 15, x.label(t)) for t in x.ticks]
    out += [_text(left - 6, y(t) + 4, y.label(t), "end") for t in y.ticks]
    out.append(_text((left + right) / 2, bottom + 31, xlabel, width=right - left + RIGHT))
    if ylabel:
        mid = (top + bottom) / 2
        out.append(_text(left - LEFT + 12, mid, ylabel, extra=f' transform="rotate(-90 {_f(left - LEFT + 12)} {_f(mid)})"'))
    out.append(_text(left - LEFT + PANEL_W / 2, top - 8, title, width=PANEL_W - 8, extra=' font-weight="600"'))
    return "".join(out)


def _dots(x, y, pairs, color):
    """Points as one path of zero-length round-capped segments (a dot each)."""
    if not pairs:
        return ""
    d = "".join(f"M{_f(x(a))} {_f(y(b))}h0" for a, b in pairs)
    return f'<path d="{d}" stroke="{color}" stroke-width="4" stroke-linecap="round" fill="none"/>'


def _crosses(x, y, pairs, color):
    if not pairs:
        return ""
    d = "".join(f"M{_f(x(a) - 3)} {_f(y(b) - 3)}l6 6m0 -6l-6 6" for a, b in pairs)
    return f'<path d="{d}" stroke="{color}" stroke-width="1.3" fill="none"/>'


def _vline(x, y, at, color=RED):
    return (f'<path d="M{_f(x(at))} {_f(y.p0)}V{_f(y.p1)}" stroke="{color}" stroke-width="1.5" '
            f'stroke-dasharray="5 3"/>')


def _swatch(kind, color, x, y):
    """A legend entry's mark, 18 px wide, centred on height ``y``."""
    if kind == "fill":
        return f'<rect x="{_f(x)}" y="{_f(y - 5)}" width="18" height="9" fill="{color}"/>'
    if kind == "dot":
        return f'<path d="M{_f(x + 9)} {_f(y)}h0" stroke="{color}" stroke-width="5" stroke-linecap="round"/>'
    if kind == "cross":
        return f'<path d="M{_f(x + 6)} {_f(y - 3)}l6 6m0 -6l-6 6" stroke="{color}" stroke-width="1.3"/>'
    dash = ' stroke-dasharray="5 3"' if kind == "dash" else ""
    return f'<path d="M{_f(x)} {_f(y)}h18" stroke="{color}" stroke-width="1.5"{dash}/>'


def _legend(entries, x0, y0, width):
    """(svg, height): entries (label, kind, color) flowed left to right under the plot, wrapping into rows."""
    out, x, y = [], x0, y0 + ROW - 4
    for label, kind, color in entries:
        w = 24 + min(len(label) * CHAR_W, width - 24) + 14
        if x > x0 and x + w > x0 + width:
            x, y = x0, y + ROW
        out.append(_swatch(kind, color, x, y - 4) + _text(x + 24, y, label, "start", width=width - 24))
        x += w
    return "".join(out), (y - y0 + 4 if entries else 0)


def _panel(ox, x, y, labels, body, legend=()):
    """(svg, height under the plot area) of one panel at x offset ``ox``: frame, body, legend under it."""
    keys, height = _legend(legend, ox + LEFT - 40, TOP + PLOT_H + BOTTOM, PANEL_W - LEFT + 40 - RIGHT)
    return _frame(x, y, *labels) + body + keys, height


def _axes(ox, xs, ys, xlog=False, ylog=False):
    """The x and y axes of the panel at x offset ``ox``."""
    return _Axis(xs, xlog, ox + LEFT, ox + PANEL_W - RIGHT), _Axis(ys, ylog, TOP + PLOT_H, TOP)


def _svg(panels, alt):
    """The <svg> element around ``panels`` [(svg, legend height)] side by side."""
    width, height = PANEL_W * len(panels), TOP + PLOT_H + BOTTOM + max(h for _, h in panels) + 6
    alt = _esc(alt)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{alt}" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" font-size="{FONT}" fill="{INK}"><title>{alt}</title>'
            f'{"".join(svg for svg, _ in panels)}</svg>')


# -- the plots -------------------------------------------------------------------------------------------------
def _error_plot(o):
    """|error| histogram of the finite elements (log x, the tolerance or the check's own bound dashed) beside
    error vs |reference| (non-finite points left out and counted in the title)."""
    h = o["error_histogram"]
    bins = [(max(a, EDGE_FLOOR), max(b, EDGE_FLOOR), c) for a, b, c in zip(h["edges"], h["edges"][1:], h["counts"])
            if _finite(a) and _finite(b) and _finite(c)]
    tol = o.get("tolerance") or {}
    held = "bound" if "bound" in tol else "atol"  # batch_invariance / determinism: their own bound
    limit = tol.get(held)
    line = [max(limit, EDGE_FLOOR)] if _finite(limit) else []
    x, y = _axes(0, [e for a, b, _ in bins for e in (a, b)] + line, [0] + [c for *_, c in bins], xlog=True)
    bars = "".join(f"H{_f(x(a))}V{_f(y(c))}H{_f(x(b))}V{_f(y(0))}" for a, b, c in bins)
    body = (f'<path d="M{_f(x(bins[0][0]))} {_f(y(0))}{bars}Z" fill="{COLORS[0]}"/>' if bins else "") + \
        (_vline(x, y, line[0]) if line else "")
    labels = (f"{o['output']}: |error| of the finite elements", "|error| (exact matches in the leftmost bin)", "elements")
    left = _panel(0, x, y, labels, body, [(held, "dash", RED)] if line else [])
    s = o.get("error_vs_magnitude") or {}
    pairs = [(a, b) for a, b in zip(s.get("reference_abs", []), s.get("abs_error", [])) if _finite(a) and _finite(b)]
    left_out = len(s.get("abs_error", [])) - len(pairs)
    x, y = _axes(PANEL_W, [a for a, _ in pairs], [b for _, b in pairs])
    title = "error vs |reference|" + (f" ({left_out} non-finite left out)" if left_out else "")
    right = _panel(PANEL_W, x, y, (title, "|reference|", "|error|"), _dots(x, y, pairs, COLORS[0]))
    return _svg([left, right], f"{o['output']} error plots")


def _latency_plot(rows):
    """The CDF of each row's latency samples (log x), one step line per row."""
    series = [(f"{r.get('runtime', '')} batch {r.get('batch')}".strip(), sorted(v for v in r["samples_ms"] if _finite(v)))
              for r in rows]
    x, y = _axes(0, [v for _, xs in series for v in xs], [0, 1], xlog=True)
    lines, legend = [], []
    for i, (label, xs) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        legend.append((label, "line", color))
        if xs:
            steps = "".join(f"V{_f(y((j + 1) / len(xs)))}H{_f(x(xs[j + 1]) if j + 1 < len(xs) else x.p1)}"
                            for j in range(len(xs)))
            lines.append(f'<path d="M{_f(x(xs[0]))} {_f(y(0))}{steps}" stroke="{color}" stroke-width="1.5" fill="none"/>')
    return _svg([_panel(0, x, y, ("latency CDF", "ms (log)", "CDF"), "".join(lines), legend)], "latency CDF")


def _divergence_plot(d):
    """Error by depth for a failing fp16/int8 check: max abs and max rel error of every matched node output
    against its depth, the first divergent node marked; non-finite errors are drawn at the top (1e30)."""
    rows = [r for r in d["error_by_depth"] if _finite(r.get("depth"))]

    def at(v):
        return max(v if _finite(v) else DEPTH_TOP, DEPTH_FLOOR)

    absolute = [(r["depth"], at(r.get("max_abs"))) for r in rows]
    relative = [(r["depth"], at(r.get("max_rel"))) for r in rows]
    x, y = _axes(0, [r["depth"] for r in rows], [v for _, v in absolute + relative], ylog=True)
    body = _dots(x, y, absolute, COLORS[0]) + _crosses(x, y, relative, COLORS[1])
    legend = [("max abs", "dot", COLORS[0]), ("max rel", "cross", COLORS[1])]
    first = next((r for r in rows if r.get("node") == d.get("first_node")), None)
    if first is not None:
        body += _vline(x, y, first["depth"])
        legend.append((f"first divergent: {first.get('node')} ({first.get('op_type')})", "dash", RED))
    labels = ("error by depth", "node depth (longest path from the inputs)", "error vs FP32 ONNX")
    return _svg([_panel(0, x, y, labels, body, legend)], "error by depth")


RATE_BARS = 40  # classes / slices drawn in the rate plot (worst first after the overall rate)


def _categorical(n, width):
    """An x axis of n categories at 0..n-1, half a step of margin each side, no numeric ticks."""
    x = _Axis([0.0, 1.0], False, LEFT, width - RIGHT)
    x.ticks, x.lo, x.hi = [], -0.5, n - 0.5
    return x


def _categories(x, labels, y):
    """Tick marks and labels under categorical positions 0..n-1 of ``x`` (labels cut to fit)."""
    width = (x.p1 - x.p0) / max(len(labels), 1)
    return "".join(f'<path d="M{_f(x(i))} {_f(y.p0)}v4" stroke="{INK}"/>' + _text(x(i), y.p0 + 15, label, width=width)
                   for i, label in enumerate(labels))


def _rate_plot(s):
    """The rate overall and per class / slice (the gated ones and the worst of the rest), each with its 95%
    interval as a bar, on a linear axis with the budget dashed."""
    from paritygate.report.shadow import ORDER

    groups = sorted((g for g in s.get("groups") or [] if isinstance(g, dict) and g.get("examples")),
                    key=lambda g: (ORDER.get(g.get("status"), 9), -(g.get("upper") or 0)))
    rows = [{"label": "overall", **s, "status": s.get("overall_status", s.get("status"))}] + [{**g, "label": f"{'cls' if g.get('kind') == 'class' else g.get('kind')} "
                                               f"{g.get('value')}"} for g in groups[:RATE_BARS]]
    rows = [r for r in rows if _finite(r.get("lower")) and _finite(r.get("upper")) and _finite(r.get("rate"))]
    budget = s.get("budget") if _finite(s.get("budget")) else None
    x = _categorical(len(rows), PANEL_W * 2)
    y = _Axis([0] + [r["upper"] for r in rows] + ([budget] if budget is not None else []), False, TOP + PLOT_H, TOP)
    colour = {"fail": RED, "inconclusive": COLORS[3], "pass": COLORS[2]}
    body = "".join(f'<path d="M{_f(x(i))} {_f(y(r["lower"]))}V{_f(y(r["upper"]))}" stroke="{colour.get(r.get("status"), GRID)}" '
                   f'stroke-width="3"/>' for i, r in enumerate(rows))
    body += "".join(_dots(x, y, [(i, r["rate"])], colour.get(r.get("status"), GRID)) for i, r in enumerate(rows))
    if budget is not None:
        body += f'<path d="M{_f(x.p0)} {_f(y(budget))}H{_f(x.p1)}" stroke="{RED}" stroke-width="1.5" stroke-dasharray="5 3"/>'
    what = str(s.get("what") or "rate")
    legend = [("fail", "dot", RED), ("inconclusive", "dot", COLORS[3]), ("pass", "dot", COLORS[2]),
              ("not gated", "dot", GRID)] + ([(f"budget {_num(budget)}", "dash", RED)] if budget is not None else [])
    frame = _frame(x, y, f"{what}: point and 95% interval per class and slice", "", what)
    keys, height = _legend(legend, LEFT - 40, TOP + PLOT_H + BOTTOM, PANEL_W * 2 - LEFT + 40 - RIGHT)
    svg = frame + _categories(x, [r["label"] for r in rows], y) + body + keys
    return _svg([(svg, height), ("", height)], f"{what} per class and slice with 95% intervals")


def _quantile_plot(s):
    """Each output's per-example max |error| at p50, p99, p99.9 and the max (log y), its atol dashed."""
    names = ("p50", "p99", "p99.9", "max")
    series = [(str(o.get("output")), [(i, (o.get("max_abs_error_per_example") or {}).get(k)) for i, k in enumerate(names)],
               (o.get("tolerance") or {}).get("atol")) for o in s.get("outputs") or [] if isinstance(o, dict)]
    points = [(i, max(v, EDGE_FLOOR)) for _, pts, _ in series for i, v in pts if _finite(v)]
    atols = [a for *_, a in series if _finite(a) and a > 0]
    x = _categorical(len(names), PANEL_W)
    y = _Axis([v for _, v in points] + atols, True, TOP + PLOT_H, TOP)
    body, legend = "", []
    for j, (name, pts, atol) in enumerate(series):
        color = COLORS[j % len(COLORS)]
        body += _dots(x, y, [(i, max(v, EDGE_FLOOR)) for i, v in pts if _finite(v)], color)
        legend.append((name, "dot", color))
        if _finite(atol) and atol > 0:
            body += f'<path d="M{_f(x.p0)} {_f(y(atol))}H{_f(x.p1)}" stroke="{color}" stroke-dasharray="5 3"/>'
            legend.append((f"{name} atol {_num(atol)}", "dash", color))
    frame = _frame(x, y, "per-example max |error| quantiles", "", "|error|")
    keys, height = _legend(legend, LEFT - 40, TOP + PLOT_H + BOTTOM, PANEL_W - LEFT + 40 - RIGHT)
    return _svg([(frame + _categories(x, names, y) + body + keys, height)], "per-example |error| quantiles")
