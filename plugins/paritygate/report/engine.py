"""The report's section "What the engine runs": per model and precision, what TensorRT's builder (TensorRT-RTX, ahead
of time: ``backend.trt.aot``) made of the candidate's ONNX, from the ``engine_builds`` rows: built or rejected (with
the node and op), its kernels, the share computing in the row's precision, the ONNX nodes fused into one kernel, and
the builder's warnings. The builder and its version head the section: TensorRT 11's own parser may differ."""

from paritygate.common.escape import html_text as ESC
from paritygate.common.escape import md_text

CAVEAT = "not TensorRT 11, whose own parser and builder may differ; no engine was run"
OFF = " (turned off: --parity-engine-build=off)"  # the environment line's note on a run without the builder


def builder_text(data):
    """The environment line's TensorRT-RTX builder: its version (or "not installed"), and whether the run turned
    it off."""
    env = data.get("environment") or {}
    return f"{env.get('tensorrt-rtx') or 'not installed'}{OFF if data.get('engine_build') == 'off' else ''}"


def rows(checks):
    """One dict per ``engine_builds`` row that reached the builder."""
    out = []
    for c in sorted((c for c in checks if c.check == "engine_builds" and (c.details or {}).get("engine")),
                    key=lambda c: (c.model, c.precision or "")):
        engine = c.details["engine"]
        cov, error = engine.get("coverage") or {}, engine.get("error") or {}
        fused = c.details.get("fused") or []
        out.append({"model": c.model, "precision": c.precision, "builder": engine.get("builder"),
                    "built": _built(engine, error),
                    "kernels": cov.get("kernels"), "share": _share(cov), "fused": len(fused),
                    "largest": max((len(g) for g in fused), default=0),
                    "datatypes": ", ".join(f"{k} {v}" for k, v in (cov.get("tensor_datatypes") or {}).items()),
                    "warnings": len(engine.get("warnings") or [])})
    return out


def _built(engine, error):
    if engine.get("built"):
        return "yes"
    if error.get("cannot_run"):  # the builder's failure, not the artifact's (backend.engines.builder_fault)
        return f"could not run: {error['cannot_run']}: {error.get('message') or ''}"
    return f"NO: {error.get('op') or ''} node '{error.get('node') or '?'}': {error.get('message') or ''}"


def _share(cov):
    if not cov.get("kernels"):
        return "—"
    return (f"{cov['kernels_in_precision']}/{cov['kernels']} kernels, "
            f"{cov['tensors_in_precision']}/{cov['tensors']} tensors")


def _builders(found):
    return ", ".join(sorted({r["builder"] for r in found if r["builder"]}))


HEADER = ("model", "precision", "built", "kernels", "in the row's precision", "fused kernels (largest)",
          "tensor datatypes", "builder warnings")


def _cells(r):
    return (r["model"], r["precision"], r["built"], r["kernels"], r["share"], f"{r['fused']} ({r['largest']} nodes)",
            r["datatypes"], r["warnings"])


def markdown(checks):
    found = rows(checks)
    if not found:
        return []
    lines = ["", "## What the engine runs", "", (f"Built ahead of time by {md_text(_builders(found))} ({CAVEAT}); each "
             "`engine_builds` row's details list every kernel, the ONNX nodes it fuses and its tensors' datatypes."),
             "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(md_text(v) for v in _cells(r)) + " |" for r in found]
    return lines


def html_section(checks):
    found = rows(checks)
    if not found:
        return ""
    head = "".join(f"<th>{ESC(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{ESC(str(v))}</td>" for v in _cells(r)) + "</tr>" for r in found)
    return (f"<section id=engine><h2>What the engine runs</h2><p class=muted>Built ahead of time by "
            f"{ESC(_builders(found))} ({ESC(CAVEAT)}); each engine_builds check lists every kernel, the ONNX nodes "
            f"it fuses and its tensors' datatypes.</p><table><tr>{head}</tr>{body}</table></section>")
