"""Markdown summary, suitable for ``$GITHUB_STEP_SUMMARY``."""

ICON = {"pass": "✅ pass", "fail": "❌ fail", "error": "💥 error", "inconclusive": "❔ inconclusive", "skip": "⏭️ skip",
        "xfail": "⚠️ xfail", "regenerated": "♻️ regenerated"}


def _num(value, spec=".3g"):
    """Format a statistic; non-finite values arrive as the strings "nan"/"inf" (strict JSON)."""
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def _stat_cell(check):
    outs = check["details"].get("outputs") or []
    worst = [o for o in outs if not o.get("passed", True)] or outs
    if not worst:
        return ""
    o = max(worst, key=lambda o: o.get("max_abs", 0) if isinstance(o.get("max_abs", 0), (int, float)) else 1e300)
    tol = o.get("tolerance", {})
    return (f"`{o['output']}` max abs {_num(o.get('max_abs', 0))}, p99 abs {_num(o.get('p99_abs', 0))}, "
            f"cos {_num(o.get('cosine', 1), '.5f')}, {o.get('mismatches', 0)}/{o.get('elements', 0)} out of "
            f"atol {tol.get('atol', 0):g}/rtol {tol.get('rtol', 0):g}")


def _note(check):
    d = check["details"]
    text = d.get("message") or d.get("reason") or d.get("note") or ""
    text = text.replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= 240 else text[:240] + "… (full text in parity-report.json)"


def _divergence_note(check):
    """Where precision broke and the plan that repairs it (details["divergence"], paritygate/divergence.py)."""
    d = check["details"].get("divergence")
    if not d:
        return ""
    if d.get("error"):
        return f" · localization failed: {d['error']}".replace("|", "\\|")
    where = (f"first divergent node `{d['first_node']}` ({d['op_type']}), max abs error "
             f"{_num(d['max_abs_error'])}" if d.get("first_node") else (d.get("note") or "no divergent node"))
    plan = d.get("keep_fp32", d.get("exclude_from_quantization"))
    if plan is None:
        return f" · {where}"
    verb = "keep in FP32" if "keep_fp32" in d else "leave unquantized"
    status = "verified ✅" if d.get("verified") else "not verified ❌"
    config = f": `{d['config'].splitlines()[1]}`" if d.get("config") else ""
    return f" · {where}; {verb} {', '.join(f'`{n}`' for n in plan) or 'nothing'} ({status}){config}"


def _environment_line(data):
    env = data["environment"]
    gpu = (env.get("gpu") or {}).get("name") or f"none ({env.get('gpu_unavailable_reason')})"
    return (f"Runtime **{data['runtime']}** · device class `{data['device_class']}` · "
            f"TensorFlow {env.get('tensorflow')} · ONNX Runtime {env.get('onnxruntime')} · "
            f"TensorRT {env.get('tensorrt') or 'not installed'} · Beam {env.get('apache-beam')} · GPU: {gpu}")


def render_markdown(data):
    checks = data["checks"]
    counts = {s: sum(c["status"] == s for c in checks) for s in ICON}
    lines = ["# Parity report", "",
             _environment_line(data),
             "", " · ".join(f"{ICON[s]}: {n}" for s, n in counts.items() if n) or "no checks ran", "",
             "| model | precision | check | status | statistics (worst output) | note |",
             "|---|---|---|---|---|---|"]
    for c in checks:
        lines.append(f"| {c['model']} | {c['precision'] or '—'} | {c['check']} | {ICON[c['status']]} | "
                     f"{_stat_cell(c)} | {_note(c)}{_divergence_note(c)} |")
    latency = [c for c in checks if c["details"].get("latency")]
    if latency:
        lines += ["", "## Latency", "",
                  "| model | precision | runtime | batch | p50 ms | p90 ms | p99 ms | budget | within budget |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in latency:
            for row in c["details"]["latency"]:
                within = row.get("within_budget")
                lines.append(f"| {c['model']} | {c['precision'] or '—'} | {row.get('runtime', '—')} | "
                             f"{row.get('batch')} | {_num(row.get('p50_ms', 0), '.3f')} | "
                             f"{_num(row.get('p90_ms', 0), '.3f')} | {_num(row.get('p99_ms', 0), '.3f')} | "
                             f"{row.get('budget') or '—'} | {'—' if within is None else ('yes' if within else 'NO')} |")
    lines += _findings(data.get("findings") or [])
    repro = [(c, c["details"]["reproducer"]) for c in checks if c["details"].get("reproducer")]
    if repro:
        lines += ["", "## Reproducers", ""]
        lines += [f"- {c['model']} {c['precision']} {c['check']}: `{r['command']}`" for c, r in repro]
    return "\n".join(lines) + "\n"


def _findings(findings):
    """Facts about the model that are no verdict on the candidate (e.g. the reference unstable on an input)."""
    if not findings:
        return []
    lines = ["", "## Findings", "", "Not candidate failures: the model's own behaviour, for its owner.", ""]
    for f in findings:
        d = f["details"]
        replay = f" Inputs: `{d['reproducer']['npz']}`" if d.get("reproducer") else ""
        lines.append(f"- **{f['kind']}** {f['model']} {f['precision'] or ''} {f['check']}: "
                     f"{d.get('summary', '')}.{replay}")
    return lines
