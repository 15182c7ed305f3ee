"""Plots for the HTML report (matplotlib, embedded as base64 PNG: the page needs no network)."""

import base64
import html
import io
import math

NO_MATPLOTLIB = "<p class=muted>(plots need matplotlib: pip install 'paritygate[report]')</p>"


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return None
    return plt


def _png(fig, alt):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def has_plots(check):
    """Whether a CheckResult has plot data: error histograms, latency samples or divergence by depth."""
    return any("error_histogram" in o for o in check.outputs or []) or \
        any("samples_ms" in r for r in check.latency or []) or \
        bool((check.details.get("divergence") or {}).get("error_by_depth"))


def plots(check):
    """<img> tags: per output an |error| histogram and error vs reference magnitude; a latency CDF."""
    if not has_plots(check):
        return []
    plt = _pyplot()
    if plt is None:
        return [NO_MATPLOTLIB]
    images = [_error_plot(plt, o) for o in check.outputs or [] if "error_histogram" in o]
    if (check.details.get("divergence") or {}).get("error_by_depth"):
        images.append(_divergence_plot(plt, check.details["divergence"]))
    rows = [r for r in check.latency or [] if r.get("samples_ms")]
    if rows:
        images.append(_latency_plot(plt, rows))
    return images


def _error_plot(plt, o):
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 2.8))
    h = o["error_histogram"]
    a.stairs(h["counts"], [max(e, 1e-10) for e in h["edges"]], fill=True)
    a.set_xscale("log")
    a.set_title(f"{o['output']}: |error| of the finite elements", fontsize=10)
    a.set_xlabel("|error| (exact matches in the leftmost bin)")
    held = "bound" if "bound" in o["tolerance"] else "atol"  # batch_invariance / determinism: their own bound
    a.axvline(max(o["tolerance"][held], 1e-10), color="r", ls="--", label=held)
    a.legend()
    s = o["error_vs_magnitude"]
    pairs = [(x, y) for x, y in zip(s["reference_abs"], s["abs_error"]) if _finite(x) and _finite(y)]
    left_out = len(s["abs_error"]) - len(pairs)
    if pairs:
        b.scatter(*zip(*pairs), s=4)
    b.set_xlabel("|reference|")
    b.set_ylabel("|error|")
    b.set_title("error vs |reference|" + (f" ({left_out} non-finite left out)" if left_out else ""), fontsize=10)
    fig.tight_layout()
    try:
        return _png(fig, f"{o['output']} error plots")
    finally:
        plt.close(fig)


def _finite(value):
    """Plot data arrives as strict JSON: NaN and Inf are the strings "nan", "inf", "-inf"."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def _latency_plot(plt, rows):
    fig, ax = plt.subplots(figsize=(5, 2.6))
    for r in rows:
        xs = sorted(r["samples_ms"])
        ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))],
                label=f"{r.get('runtime', '')} batch {r['batch']}".strip())
    ax.set_xscale("log")
    ax.set_xlabel("ms (log)")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=7)
    try:
        return _png(fig, "latency CDF")
    finally:
        plt.close(fig)


def _divergence_plot(plt, d):
    """Error by depth for a failing fp16/int8 check: max abs and max rel error of every matched node output
    against its depth, the first divergent node marked; non-finite errors are drawn at the top (1e30)."""
    rows = d["error_by_depth"]

    def top(v):
        return v if _finite(v) else 1e30

    fig, ax = plt.subplots(figsize=(6, 2.8))
    depth = [r["depth"] for r in rows]
    ax.scatter(depth, [max(top(r["max_abs"]), 1e-12) for r in rows], s=6, label="max abs")
    ax.scatter(depth, [max(top(r["max_rel"]), 1e-12) for r in rows], s=6, marker="x", label="max rel")
    first = next((r for r in rows if r["node"] == d.get("first_node")), None)
    if first is not None:
        ax.axvline(first["depth"], color="r", ls="--", label=f"first divergent: {first['node']} ({first['op_type']})")
    ax.set_yscale("log")
    ax.set_xlabel("node depth (longest path from the inputs)")
    ax.set_ylabel("error vs FP32 ONNX")
    ax.set_title("error by depth", fontsize=10)
    ax.legend(fontsize=7)
    try:
        return _png(fig, "error by depth")
    finally:
        plt.close(fig)
