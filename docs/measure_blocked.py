"""Issue 15, cost: the strict rewrite's Cast pairs run in ONNX Runtime's blocked NCHWc layout. Measured, not
taken (docs/numerics.md, "Cost").

ONNX Runtime cannot run a Cast in NCHWc, so each Cast pair of a strict artifact between two NCHWc Convs costs a
ReorderOutput before it and a ReorderInput after it. A Cast, and an Add of two tensors blocked alike, are
elementwise, so they give the same values in either layout. This script lets ONNX Runtime optimize the strict
artifact (ORT_ENABLE_ALL, saved: the saved graph holds this CPU's NCHWc kernels), then moves each Cast pair and
each residual Add onto the blocked tensors, drops the reorders that become unused, and runs the result with
optimizations off. It prints whether the outputs equal the strict artifact's bit for bit on random inputs, and
the median of 200 calls at batch 8 of the FP32 artifact, the strict one and the moved one (three rounds).

    .venv/bin/python docs/measure_blocked.py STRICT.onnx FP32.onnx [BLOCK]   # e.g. mobilenet's, from $PARITYGATE_CACHE/onnx

BLOCK (16 on an AVX-512 CPU, 8 on AVX2): move only tensors whose channel count is a multiple of it (none padded).

Why it is not taken yet: the equality is measured on finite values only. A blocked tensor pads its channels to
the block size; ReorderInput zero-fills the padding, while a Conv's padded output channels hold 0 x input, which
is NaN where an input is inf. Read directly, that NaN would reach the next Conv's real channels (0 x NaN), so
after an FP16 overflow the moved graph could give NaN where the strict artifact gives inf. Not observed on
mobilenet (its Relu6 clamps an overflow back to 6: equal bit for bit up to inputs scaled by 6e4), not ruled out
elsewhere. Moving only tensors whose channel count is a multiple of the block size (no padding) would rule it out.
"""
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper


def _attr(node, name, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def blocked(strict, out, block=None):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath, options.log_severity_level = str(out), 3
    ort.InferenceSession(str(strict), options, providers=["CPUExecutionProvider"])
    model = onnx.load(str(out))
    twin, rename, nodes = {}, {}, []  # NCHW tensor -> (its blocked twin, channels)
    for n in model.graph.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
        if n.op_type == "ReorderOutput" and not _attr(n, "channels_last", 0):
            if block is None or _attr(n, "channels") % block == 0:
                twin[n.output[0]] = (n.input[0], _attr(n, "channels"))
        elif n.op_type == "Cast" and n.input[0] in twin:
            name = n.output[0] + "__blocked"
            nodes.append(helper.make_node("Cast", [twin[n.input[0]][0]], [name], to=_attr(n, "to"), name=name))
            twin[n.output[0]] = (name, twin[n.input[0]][1])
        elif n.op_type == "Add" and all(i in twin for i in n.input) and len({twin[i][1] for i in n.input}) == 1:
            name = n.output[0] + "__blocked"
            nodes.append(helper.make_node("Add", [twin[i][0] for i in n.input], [name], name=name))
            twin[n.output[0]] = (name, twin[n.input[0]][1])
        elif n.op_type == "ReorderInput" and not _attr(n, "channels_last", 0) and n.input[0] in twin:
            rename[n.output[0]] = twin[n.input[0]][0]
            continue
        nodes.append(n)
    needed, kept = {o.name for o in model.graph.output}, []
    for n in reversed(nodes):  # drop what nothing reads any more
        if any(o in needed for o in n.output):
            kept.append(n)
            needed.update(n.input)
    del model.graph.node[:]
    model.graph.node.extend(reversed(kept))
    onnx.save(model, str(out))
    return out


def session(path, level):
    options = ort.SessionOptions()
    options.graph_optimization_level, options.log_severity_level = level, 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def main(strict, fp32, block=None):
    moved = blocked(strict, Path(tempfile.mkdtemp()) / "blocked.onnx", int(block) if block else None)
    runs = {"fp32": session(fp32, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
            "strict": session(strict, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
            "blocked": session(moved, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)}
    shape = [8, *runs["strict"].get_inputs()[0].shape[1:]]
    x = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
    feeds = {k: {s.get_inputs()[0].name: x} for k, s in runs.items()}
    outs = {k: s.run(None, feeds[k]) for k, s in runs.items()}
    print("blocked equals strict bit for bit:", all(np.array_equal(a, b) for a, b in zip(outs["strict"], outs["blocked"])))
    for _ in range(3):
        ms = {}
        for k, s in runs.items():
            for _ in range(20):
                s.run(None, feeds[k])
            times = []
            for _ in range(200):
                start = time.perf_counter()
                s.run(None, feeds[k])
                times.append(time.perf_counter() - start)
            ms[k] = float(np.median(times)) * 1e3
        print({k: round(v, 4) for k, v in ms.items()}, f"strict/fp32 {ms['strict'] / ms['fp32']:.2f}",
              f"blocked/fp32 {ms['blocked'] / ms['fp32']:.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
