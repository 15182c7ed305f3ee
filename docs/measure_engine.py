"""Two tables of docs/engine.md, measured with TensorRT-RTX's real parser and builder (CPU-only AOT):

1. ``lint``: the suite's static lint (``backend/onnx/lint/trt_lint.py``) against the parser, on every ONNX file given:
   does the lint find a problem, did the parser/builder reject the file, and why.
2. ``fusion``: the kernel boundaries of the strict FP16 engine model (``backend/onnx/strict/fusion.py``: which chains
   strict numerics computes as one kernel, rounding only their output) against the kernels the builder reports for
   the same fp16 file (each kernel's ONNX nodes): how many of the model's fused chains the builder also computes in
   one kernel, and how many FP16 roundings strict numerics makes that the builder does not (a tensor strict numerics
   rounds, inside one builder kernel).

    .venv/bin/python docs/measure_engine.py lint FILE.onnx ...
    .venv/bin/python docs/measure_engine.py fusion FP16.onnx ...

Each file is built over batch 1..4 with every other dynamic dimension at the size given by PARITYGATE_DIM (default
8). Reports are cached under $PARITYGATE_CACHE/trt-rtx like the suite's.
"""

import os
import sys
from pathlib import Path

import onnx

from paritygate.backend.onnx.lint import trt_lint
from paritygate.backend.trt import aot, layers


def settings_of(model):
    """A profile batch 1..4 for every input, other dynamic dims at PARITYGATE_DIM."""
    dim = int(os.environ.get("PARITYGATE_DIM", "8"))
    initializers = {i.name for i in model.graph.initializer}
    profile = {}
    for i in model.graph.input:
        if i.name in initializers:
            continue
        dims = [d.dim_value if d.dim_value > 0 else dim for d in i.type.tensor_type.shape.dim]
        shape = dims[1:]
        profile[i.name] = [[1, *shape], [4, *shape], [4, *shape]] if dims else [[], [], []]
    return {"profile": profile, "strongly_typed": True}


def lint_table(paths):
    print("| file | lint findings | lint says | builder | builder says | agree |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        model = onnx.load(path)
        found = trt_lint.lint(model)
        report = aot.engine_report(path, settings_of(model))
        lint_ok, built = not found, report["built"]
        said = "built" if built else f"{report['error']['op']} '{report['error']['node']}': {report['error']['message']}"
        rules = ", ".join(sorted({f["rule"] for f in found})) or "—"
        print(f"| {Path(path).name} | {len(found)} ({rules}) | {'ok' if lint_ok else 'rejects'} | {report['builder']} "
              f"| {said[:160]} | {'yes' if lint_ok == built else 'NO'} |")


def fusion_table(paths):
    from paritygate.backend.onnx.graph import scopes
    from paritygate.backend.onnx.strict import fusion

    print("| file | strict chains (>1 node) | in one builder kernel | strict roundings inside a builder kernel "
          "| builder kernels | builder fusions (>1 node) |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        model = onnx.load(path)
        inferred = onnx.shape_inference.infer_shapes(model)
        types, shapes = scopes.declared_types(inferred), scopes.declared_shapes(inferred)
        half = {n for n, t in types.items() if t == onnx.TensorProto.FLOAT16}
        graph = model.graph
        inside = fusion.interior(graph, half, shapes, scopes.readers(graph))
        chains = _chains(graph, inside)
        report = aot.engine_report(path, settings_of(model))
        kernel_of = {n: k["name"] for k in layers.kernels(report["layers"]) for n in k["onnx_nodes"]}
        together = sum(1 for c in chains if len({kernel_of.get(n) for n in c}) == 1 and kernel_of.get(c[0]))
        producer = {o: n.name for n in graph.node for o in n.output}
        rounded = [t for t in half if t in producer and t not in inside]
        split = sum(1 for t in rounded if any(kernel_of.get(producer[t]) == kernel_of.get(r.name) is not None
                                              for r in graph.node if t in r.input))
        print(f"| {Path(path).name} | {len(chains)} | {together} | {split} of {len(rounded)} | "
              f"{len(layers.kernels(report['layers']))} | {len(layers.fused_groups(report['layers']))} |")


def _chains(graph, inside):
    """Node-name groups strict numerics computes as one kernel: a node and the readers of its unrounded output."""
    producer = {o: n for n in graph.node for o in n.output}
    group = {}
    for node in graph.node:
        for i in node.input:
            if i in inside and i in producer:
                root = group.setdefault(producer[i].name, [producer[i].name])
                group[node.name] = root
                root.append(node.name)
    seen, out = set(), []
    for chain in group.values():
        if id(chain) not in seen:
            seen.add(id(chain))
            out.append(chain)
    return out


if __name__ == "__main__":
    {"lint": lint_table, "fusion": fusion_table}[sys.argv[1]](sys.argv[2:])
