"""Strict FP16 numerics rounding at every op against rounding only at TensorRT-RTX's kernel boundaries (issue 29,
"decide with numbers whether strict numerics should round at the builder's boundaries"; table in docs/engine.md).

Strict numerics round every float16 tensor where it is produced, except inside the Conv/Gemm/MatMul chains of
``fusion.py``. TensorRT-RTX's builder fuses more (its layer report lists each kernel's ONNX nodes), and its build log
does not say whether a kernel keeps its intermediates in FP32 or rounds them. The two emulations bracket the engine:

- ``every op``: the suite's strict artifact (``strict.rewrite.emulate``);
- ``builder boundaries``: the same rewrite, with every float16 tensor whose producer and readers all sit in one
  builder kernel left unrounded (FP32 inside the kernel, FP16 where a kernel stores its output).

For every model with an fp16 candidate in the config, both run on ONNX Runtime's CPU provider over the model's
reference set (goldens, or live TensorFlow), and the suite's own comparison (``judge.parity.compare``, the model's
fp16 policy and task metric) judges each. Printed: a Markdown row per model with each emulation's verdict, the worst
|error| over all outputs, and the largest difference between the two emulations' outputs.

    .venv/bin/python docs/measure_boundaries.py [CONFIG.toml]        # default: the bundled models
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from paritygate.backend.base import run_batched
from paritygate.backend.engines import engine_build
from paritygate.backend.inputspec import MappedRunner, declared_casts, input_names
from paritygate.backend.onnx.artifacts.loader import onnx_artifact
from paritygate.backend.onnx.strict import fusion, rewrite
from paritygate.backend.onnxrt.runner import OnnxrtRunner
from paritygate.backend.runtimes import candidate_runner, resolved_spec
from paritygate.backend.trt import layers
from paritygate.context import RunOptions
from paritygate.judge.parity import compare, reference_set


def kernel_of(report):
    """ONNX node name -> the builder kernel that computes it."""
    return {n: k["name"] for k in layers.kernels(report["layers"]) for n in k["onnx_nodes"]}


def boundary_interior(kernels):
    """``fusion.interior`` widened by every tensor whose producer and readers all sit in one builder kernel."""
    model_interior = fusion.interior

    def interior(graph, half, shapes, readers=None):
        inside = model_interior(graph, half, shapes, readers)
        stored = {o.name for o in graph.output}
        for node in graph.node:
            kernel = kernels.get(node.name)
            for out in node.output:
                read = (readers or {}).get(out, [])
                if kernel and out in half and out not in stored and read and all(
                        r is not None and kernels.get(r.name) == kernel for r, _ in read):
                    inside.add(out)
        return inside
    return interior


def emulated(path, folder, kernels=None):
    """The strict rewrite of ``path`` (rounding at the builder's kernel boundaries only when ``kernels`` is given)."""
    saved = fusion.interior
    if kernels is not None:
        fusion.interior = boundary_interior(kernels)
    try:
        model, report = rewrite.emulate(onnx.load(str(path)))
    finally:
        fusion.interior = saved
    out = Path(folder) / f"{'boundaries' if kernels else 'every-op'}-{Path(path).name}"
    onnx.save(model, str(out))
    return out, report["rounded"]


def judged(ctx, spec, path):
    runner = OnnxrtRunner(path)
    runner.activate()
    fed = MappedRunner(runner, input_names(spec, runner), declared_casts(spec, "candidate"))
    results, outputs = [], []
    for group in reference_set(ctx, spec).groups:
        got = run_batched(fed, group.inputs, spec.max_batch)
        results.append(compare(resolved_spec(ctx, spec), "fp16", group.outputs, got, group.labels))
        outputs.append(got)
    worst = max(o["max_abs"] for r in results for o in r.outputs)
    return ("pass" if all(r.passed for r in results) else "fail"), worst, outputs


def main(config=None):
    options = RunOptions(config)
    ctx = options.context
    print("| model | roundings: every op / builder boundaries | verdict, worst abs error: every op "
          "| builder boundaries | largest difference between the two |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for spec in options.models:
            if "fp16" not in spec.precisions:
                continue
            artifact = onnx_artifact(spec, "fp16", ctx.fp16_keep_fp32)
            build = engine_build(ctx, spec, "fp16")
            if not build or not build["built"]:
                print(f"| {spec.name} | the builder did not build its fp16 artifact | | | |")
                continue
            candidate_runner(ctx, spec, "fp16")  # resolves the candidate's output names (resolved_spec)
            every, n_every = emulated(artifact, folder)
            bounded, n_bounded = emulated(artifact, folder, kernel_of(build))
            v1, w1, o1 = judged(ctx, spec, every)
            v2, w2, o2 = judged(ctx, spec, bounded)
            gap = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)), initial=0))
                      for a, b in zip(o1, o2) for k in a)
            print(f"| {spec.name} | {n_every} / {n_bounded} | {v1}, {w1:.4g} | {v2}, {w2:.4g} | {gap:.4g} |")


if __name__ == "__main__":
    main(*sys.argv[1:2])
