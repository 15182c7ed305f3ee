"""Self-contained HTML report with plots (matplotlib, embedded as base64 PNG)."""

import base64
import html
import io

from paritygate.report.markdown import ICON, _divergence_note, _note, _stat_cell

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}.fail,.error{background:#fdd}
.pass{background:#efe}.skip{background:#eee}.xfail{background:#ffd}img{max-width:560px}"""


def _png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _plots(check):
    """Error histogram and error vs reference magnitude per output; latency CDF per batch size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return ["<p>(plots need matplotlib: pip install 'paritygate[report]')</p>"]
    images = []
    for o in check["details"].get("outputs") or []:
        if "error_histogram" not in o:
            continue
        fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3))
        h = o["error_histogram"]
        a.stairs(h["counts"], [max(e, 1e-10) for e in h["edges"]], fill=True)
        a.set_xscale("log")
        a.set_title(f"{o['output']}: |error| histogram")
        a.set_xlabel("|error| (exact matches in the leftmost bin)")
        a.axvline(max(o["tolerance"]["atol"], 1e-10), color="r", ls="--", label="atol")
        a.legend()
        s = o["error_vs_magnitude"]
        b.scatter(s["reference_abs"], s["abs_error"], s=4)
        b.set_xlabel("|reference|")
        b.set_ylabel("|error|")
        b.set_title("error vs reference magnitude")
        images.append(f'<img src="{_png(fig)}" alt="{html.escape(o["output"])} error plots">')
        plt.close(fig)
    images += _divergence_plot(check, plt)
    rows = check["details"].get("latency") or []
    if rows and any("samples_ms" in r for r in rows):
        fig, ax = plt.subplots(figsize=(5, 3))
        for r in rows:
            xs = sorted(r.get("samples_ms", []))
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=f"{r.get('runtime', '')} batch {r['batch']}")
        ax.set_xscale("log")
        ax.set_xlabel("ms (log)")
        ax.set_ylabel("CDF")
        ax.legend()
        images.append(f'<img src="{_png(fig)}" alt="latency CDF">')
        plt.close(fig)
    return images


def render_html(data):
    env = html.escape(", ".join(f"{k}: {v}" for k, v in data["environment"].items()))
    out = [f"<!doctype html><meta charset=utf-8><title>Parity report</title><style>{CSS}</style>",
           f"<h1>Parity report</h1><p>Runtime <b>{html.escape(data['runtime'])}</b>; {env}</p>",
           ("<table><tr><th>model</th><th>precision</th><th>check</th><th>status</th><th>statistics</th>"
            "<th>note</th><th>plots</th></tr>")]
    for c in data["checks"]:
        repro = c["details"].get("reproducer")
        note = html.escape(_note(c) + _divergence_note(c)) + (f"<br><code>{html.escape(repro['command'])}</code>" if repro else "")
        tol = "".join(f"<br><small>{html.escape(o['output'])}: tolerance from {html.escape(o['tolerance']['source'])}"
                      f"</small>" for o in c["details"].get("outputs") or [])
        out.append(f"<tr class={c['status']}><td>{html.escape(c['model'])}</td><td>{c['precision'] or '—'}</td>"
                   f"<td>{html.escape(c['check'])}</td><td>{ICON[c['status']]}</td>"
                   f"<td>{html.escape(_stat_cell(c))}{tol}</td><td>{note}</td><td>{''.join(_plots(c))}</td></tr>")
    out.append("</table>")
    return "\n".join(out) + "\n"


def _divergence_plot(check, plt):
    """Error by depth for a failing fp16/int8 check (details["divergence"]["error_by_depth"]): max abs and max rel
    error of every matched node output against its depth, the first divergent node marked."""
    d = check["details"].get("divergence") or {}
    rows = d.get("error_by_depth") or []
    if not rows:
        return []

    def finite(v):
        return v if isinstance(v, (int, float)) else 1e30  # "inf"/"nan" strings in strict JSON: plot at the top

    fig, ax = plt.subplots(figsize=(6, 3))
    depth = [r["depth"] for r in rows]
    ax.scatter(depth, [max(finite(r["max_abs"]), 1e-12) for r in rows], s=6, label="max abs")
    ax.scatter(depth, [max(finite(r["max_rel"]), 1e-12) for r in rows], s=6, marker="x", label="max rel")
    first = next((r for r in rows if r["node"] == d.get("first_node")), None)
    if first is not None:
        ax.axvline(first["depth"], color="r", ls="--", label=f"first divergent: {first['node']} ({first['op_type']})")
    ax.set_yscale("log")
    ax.set_xlabel("node depth (longest path from the inputs)")
    ax.set_ylabel("error vs FP32 ONNX")
    ax.set_title("error by depth")
    ax.legend(fontsize=7)
    image = f'<img src="{_png(fig)}" alt="error by depth">'
    plt.close(fig)
    return [image]
