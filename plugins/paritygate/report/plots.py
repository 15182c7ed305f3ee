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
    """Whether a CheckResult has plot data: error histograms, latency samples or divergence by depth."""
    return any("error_histogram" in o for o in check.outputs or []) or \
        any("samples_ms" in r for r in check.latency or []) or \
        bool((check.details.get("divergence") or {}).get("error_by_depth"))


def plots(check):
    """<svg> elements: per output an |error| histogram and error vs |reference|; error by depth; a latency CDF."""
    images = [_error_plot(o) for o in check.outputs or [] if "error_histogram" in o]
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
