"""A strict artifact run in ONNX Runtime's blocked NCHWc layout: the same values, fewer kernels (docs/numerics.md,
"Cost").

ONNX Runtime's CPU provider runs a chain of convolutions in its blocked layout (channels in blocks of the CPU's
vector width: 16 floats with AVX-512, 8 with AVX2). It cannot run a Cast there, so each Cast pair that strict
numerics put between two convolutions costs a ReorderOutput before it and a ReorderInput after it: mobilenet's
strict run had 16 and 15 of them, and cost 2.07-2.18x its FP32 run (1.55-1.61x as its twin).

A Cast, and an Add of two tensors of one shape, are elementwise: on a blocked tensor whose channels fill its
blocks (nothing padded) they give the values they give in NCHW, only in another order. So ``move`` (after ONNX
Runtime optimized the strict artifact, ``ORT_ENABLE_ALL``, saved) moves each Cast, and each such Add, that reads a
reordered convolution output onto the blocked tensor, reads the blocked result where a ReorderInput read it back,
and drops what nothing reads any more. ONNX Runtime runs the result with its optimizations off: the optimized
graph is what it would have run, and its Cast pairs stay (tests/backend/onnx/test_nchwc.py, at every session
setting the suite uses, bit for bit against the strict artifact, on the overflow too).

A tensor whose channels do not fill their blocks stays in NCHW. Its padded channels hold a convolution's 0 x input,
which is NaN where an input is inf; the next convolution, reading the blocked tensor directly, could carry that NaN
into its real channels where strict numerics give inf (and a Clip after it turns inf back into a finite value).

The saved graph holds this CPU's layout, so it is cached under this CPU's feature flags and ONNX Runtime's version,
never shared with another kind of machine; a build that fails leaves the strict artifact to run as it is.
"""

import json
import platform
import sys
from pathlib import Path

from paritygate.backend.onnx import scopes
from paritygate.backend.onnx.util import fresh_name
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")
ort = lazy_import("onnxruntime")

DOMAIN = "com.microsoft.nchwc"
BUILD = "nchwc-move-v1"  # part of the cache key: bump when the move changes
FLOATS = (1, 10)  # onnx.TensorProto.FLOAT, FLOAT16: the Casts a strict artifact holds


def runnable(path):
    """(file, optimization level) for ONNX Runtime's CPU provider to run the strict artifact ``path``: its blocked
    twin with optimizations off (``ort.GraphOptimizationLevel.ORT_DISABLE_ALL``) when a Cast moved, else
    (``path``, None)."""
    from paritygate.backend.cache import cached_file, hash_path, key_of, report_path

    path = Path(path)
    head = onnx.load(str(path), load_external_data=False)
    if not any(n.op_type == "Conv" for n in head.graph.node):
        return path, None
    key = key_of(src=hash_path(path), ort=ort.__version__, cpu=cpu_flags(), build=BUILD)
    try:
        target = cached_file("onnx", f"{path.stem}-nchwc-{key}", ".onnx", lambda out: _build(path, head, out))
        moved = json.loads(report_path(target).read_text())["moved"]
    except Exception as err:  # noqa: BLE001 - a speed-up only: the strict artifact gives the same values
        print(f"paritygate: {path}: its NCHWc twin could not be built ({type(err).__name__}: {str(err)[:300]}); "
              "ONNX Runtime runs the strict artifact as it is", file=sys.stderr)
        return path, None
    return (target, ort.GraphOptimizationLevel.ORT_DISABLE_ALL) if moved else (path, None)


def cpu_flags():
    """This CPU's feature flags (Linux ``/proc/cpuinfo``), else what ``platform`` says of it."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return sorted(line.split(":", 1)[1].split())
    except OSError:
        pass
    return [platform.machine(), platform.processor()]


def _build(path, source, out):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(out)
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    model = onnx.load(str(out))
    shapes = _shapes(source)
    report = move(model.graph, shapes)
    onnx.save(model, str(out))
    return {**report, "build": BUILD, "source": str(path), "onnxruntime": ort.__version__}


def _shapes(model):
    inferred = onnx.shape_inference.infer_shapes(model)
    return {v.name: tuple(d.dim_param or d.dim_value or None for d in v.type.tensor_type.shape.dim)
            for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
            if v.type.tensor_type.HasField("shape")}


def move(graph, shapes):
    """Move ``graph``'s Casts and Adds of reordered convolution outputs whose channels fill their blocks onto the
    blocked tensors (in place); ``shapes``: the NCHW tensors' shapes, by name. Returns the counts."""
    weights = {t.name: list(t.dims) for t in graph.initializer}
    held = {}  # blocked tensor -> the channels it holds, padding included (its convolution's reordered filters)
    for n in graph.node:
        if n.domain == DOMAIN and n.op_type == "Conv" and n.input[1] in weights:
            held[n.output[0]] = weights[n.input[1]][0]
    twin, rename, nodes = {}, {}, []  # NCHW tensor -> its blocked twin
    taken = ({t for n in graph.node for t in [*n.input, *n.output, n.name]} | set(weights)
             | {v.name for v in [*graph.input, *graph.output]})
    report = {"moved": 0, "left_padded": 0}
    for n in graph.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
        a = {k.name: onnx.helper.get_attribute_value(k) for k in n.attribute}
        if n.domain == DOMAIN and n.op_type == "ReorderOutput" and not a.get("channels_last"):
            if held.get(n.input[0]) == a.get("channels"):
                twin[n.output[0]] = n.input[0]
            elif n.input[0] in held:
                report["left_padded"] += 1
        elif (n.op_type == "Cast" and n.input[0] in twin and a.get("to") in FLOATS
              or n.op_type == "Add" and len(n.input) == 2 and all(i in twin for i in n.input)
              and shapes.get(n.input[0]) == shapes.get(n.input[1]) and None not in shapes.get(n.input[0], (None,))):
            blocked = fresh_name(f"{n.output[0]}__nchwc", taken)
            nodes.append(onnx.helper.make_node(n.op_type, [twin[i] for i in n.input], [blocked], **a,
                                               name=fresh_name(f"{n.name or n.output[0]}__nchwc", taken)))
            twin[n.output[0]] = blocked
        elif n.domain == DOMAIN and n.op_type == "ReorderInput" and not a.get("channels_last") and n.input[0] in twin:
            rename[n.output[0]] = twin[n.input[0]]
            report["moved"] += 1
            continue
        nodes.append(n)
    needed, kept = {o.name for o in graph.output}, []
    for n in reversed(nodes):  # drop what nothing reads any more
        if any(o in needed for o in n.output):
            kept.append(n)
            needed.update(i for m in [n, *(s for g in scopes.subgraphs(n) for s in scopes.nodes(g))] for i in m.input)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    return report
