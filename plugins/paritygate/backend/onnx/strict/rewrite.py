"""Strict FP16 numerics on ONNX Runtime's CPU provider: an FP16 artifact computed the way a strongly typed
engine computes it (docs/numerics.md).

ONNX Runtime's CPU provider runs most float16-typed ops in FP32 and drops the FP16 rounding between them, at
every optimization level (ORT 1.31: y = ((x*300)*(x*300))*(1/90000) typed float16 gives 3.99 at x = 2, where
FP16 arithmetic overflows to inf). So the artifact is rewritten into an FP32 graph that keeps the rounding:

- every tensor the artifact types float16 is float32, rounded to FP16 where it is produced: the producing node
  writes ``<t>__fp32``, then ``Cast(to=FLOAT16)`` and ``Cast(to=FLOAT)`` give ``<t>`` back to its readers (a
  top-level float16 graph output stays float16; a float16 graph input is read through ``Cast(to=FLOAT)``);
- float16 initializers and Constant values become float32 exactly as stored (every FP16 value is an FP32 value);
- a node whose attribute names float16 as its output type (``Cast.to``, ``dtype``) names float32 instead, its
  output rounded like any other float16 tensor;
- so each op reads FP16 values and computes in FP32 inside the op (FP32 accumulation, as tensor-core kernels
  do), and its result is rounded to FP16 where the artifact says FP16.

ONNX Runtime keeps such a Cast pair at every graph optimization level (measured, and asserted by
tests/backend/onnx/strict/test_rewrite.py at every session setting the suite uses: the graph above gives inf).

Cost (docs/numerics.md, "Cost"): a rounding is left out where it changes no value, and moved where that lets ONNX
Runtime fuse. Rounding to FP16 is monotone and keeps every FP16 value, so it commutes with Relu and with a Clip
whose bounds are FP16 values: Relu(round(x)) == round(Relu(x)). A float16 tensor read only by such ops (``DEFER_OPS``)
is rounded after them (``defer=True``), so Conv+Relu / Conv+Clip / Gemm+Relu stay fusable; the values are the
same as without deferral (tests/backend/onnx/strict/test_rewrite.py compares them bit for bit).

Fused kernels (``fusion``, docs/numerics.md "Fused kernels"): a Conv / ConvTranspose / Gemm / MatMul and the
pointwise epilogues a TensorRT engine fuses into it (scale and shift by constants, batch norm, activation, a
Conv's residual sum) are one kernel: only the chain's output is stored, so only it is rounded (``fuse=True``, the
default; this changes values against rounding every tensor, unlike deferral). The checks, localization and the
repair search all run this one artifact: localization must explain the failure the check saw, and a view that
rounds inside a fused kernel can overflow where the engine (and the check) does not.
"""

from paritygate.backend.onnx.graph import scopes
from paritygate.backend.onnx.graph.dtypes import type_attribute
from paritygate.backend.onnx.graph.names import fresh_name, tensor_names
from paritygate.backend.onnx.strict import fusion
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

# Ops that only move, select or negate values: fed FP16 values, their outputs are FP16 values already, so the
# rounding after them would change nothing and is left out (it only costs time).
EXACT_OPS = {"Relu", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Slice", "Gather",
             "GatherElements", "GatherND", "MaxPool", "Identity", "Max", "Min", "Neg", "Abs", "Split", "Expand",
             "Tile", "DepthToSpace", "SpaceToDepth", "ReduceMax", "ReduceMin", "Where", "TopK", "Clip", "GlobalMaxPool",
             "Floor", "Ceil", "Round", "Sign"}  # Clip: exact when its bounds are float16 (the rule below)
# Monotone ops that commute with the FP16 rounding (an FP16-rounded Clip bound is an FP16 value, so rounding
# x below lo gives at most lo): a float16 tensor read only as their input 0 is rounded after them instead.
DEFER_OPS = {"Relu", "Clip"}
BUILD = "strict-fp16-fused-v4"  # part of the cache key: bump when the rewrite changes
ROUND = "__round_fp16"  # suffix of the Cast(to=FLOAT16) nodes the rewrite adds


def float16_tensors(model):
    """Names of the tensors ``model`` types float16 (inputs, initializers, node outputs; every graph)."""
    return sorted(n for n, t in scopes.inferred_types(model).items() if t == onnx.TensorProto.FLOAT16)


def emulate(source, defer=True, fuse=True):
    """(float32 ModelProto with the FP16 rounding explicit, report) for the ModelProto ``source`` (unchanged).
    A model without float16 tensors comes back as a copy with ``report["rounded"] == 0``. ``defer``: round a
    tensor read only by ``DEFER_OPS`` after them (same values; lets ONNX Runtime fuse Conv+Relu and the like).
    ``fuse``: the engine model's fused kernels (``fusion.interior``): a tensor inside a Conv/Gemm/MatMul chain
    with pointwise epilogues is not rounded, only the chain's output is (other values than ``fuse=False``)."""
    model = onnx.ModelProto()
    model.CopyFrom(source)
    inferred, taken = onnx.shape_inference.infer_shapes(model), tensor_names(model)
    types, shapes = scopes.declared_types(inferred), scopes.declared_shapes(inferred)
    half = {n for n, t in types.items() if t == onnx.TensorProto.FLOAT16}
    report = {"build": BUILD, "float16_tensors": len(half), "rounded": 0, "deferred": 0, "unread": 0,
              "initializers": 0, "retyped_nodes": 0, "fused": 0, "exact_ops": sorted(EXACT_OPS), "defer_ops": sorted(DEFER_OPS)}
    # innermost graphs first: rebuilding a graph's node list copies its nodes, and the subgraphs they hold with them
    for graph in reversed(list(scopes.graphs(model.graph))):
        top = graph is model.graph
        report["initializers"] += _widen_constants(graph)
        if top:
            _read_inputs_as_float(graph, taken)
        else:
            _retype(graph.input)
        outputs = {o.name for o in graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
        readers, unrounded, rebuilt = scopes.readers(graph), set(), []
        inside = fusion.interior(graph, half, shapes, readers) if fuse else set()
        for node in list(graph.node):
            report["retyped_nodes"] += _retarget(node)
            rebuilt.append(node)
            if node.op_type == "Constant":
                continue
            exact = node.op_type in EXACT_OPS and all(
                (types.get(i) != onnx.TensorProto.FLOAT or i in half) and i not in unrounded for i in node.input if i)
            for k, out in enumerate(node.output):
                if not out or out not in half or (exact and out not in outputs):
                    continue
                if out in inside:
                    unrounded.add(out)
                    report["fused"] += 1  # inside a fused kernel: its FP32 value goes on to the epilogue
                elif defer and out not in outputs and not readers.get(out):
                    report["unread"] += 1  # read by no node and no graph output: no reader sees its rounding
                elif defer and out not in outputs and _deferrable(readers.get(out), out, half):
                    unrounded.add(out)
                    report["deferred"] += 1
                else:
                    rebuilt += _round(graph, node, k, out, top and out in outputs, taken)
                    report["rounded"] += 1
        del graph.node[:]
        graph.node.extend(rebuilt)
        _retype(graph.value_info)
        if not top:
            _retype(graph.output)
    return model, report


def _deferrable(readers, out, half):
    """Whether every reader of ``out`` reads it only as input 0 of a ``DEFER_OPS`` node whose other inputs (Clip's
    bounds) are float16 values: then rounding those readers' outputs gives the values rounding ``out`` gives."""
    return bool(readers) and all(
        node is not None and node.op_type in DEFER_OPS and k == 0 and list(node.input).count(out) == 1
        and all(i in half for i in node.input[1:] if i) for node, k in readers)


def _widen_constants(graph):
    from onnx import numpy_helper

    n = 0
    for t in graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype("float32"), t.name))
            n += 1
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == onnx.TensorProto.FLOAT16:
                attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype("float32"), attr.t.name))
                n += 1
    return n


def _read_inputs_as_float(graph, taken):
    """A float16 graph input keeps its type; the graph reads it through ``Cast(to=FLOAT)``."""
    casts = []
    for inp in graph.input:
        if inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16:
            wide = fresh_name(f"{inp.name}__fp32", taken)
            scopes.rename_reads(graph, inp.name, wide)
            casts.append(onnx.helper.make_node("Cast", [inp.name], [wide], to=onnx.TensorProto.FLOAT,
                                               name=fresh_name(f"{inp.name}__widen", taken)))
    if casts:
        rest = list(graph.node)
        del graph.node[:]
        graph.node.extend([*casts, *rest])


def _retype(infos):
    for info in infos:
        if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16:
            info.type.tensor_type.elem_type = onnx.TensorProto.FLOAT


def _retarget(node):
    attr = type_attribute(node)
    if attr is not None and attr.i == onnx.TensorProto.FLOAT16:
        attr.i = onnx.TensorProto.FLOAT
        return 1
    return 0


def _round(graph, node, k, out, is_graph_output, taken):
    """Let ``node`` write output ``k`` (``out``) in FP32 and round it to FP16 for its readers; the Cast nodes."""
    raw = fresh_name(f"{out}__fp32", taken)
    node.output[k] = raw
    if is_graph_output:  # the graph output stays float16; the graph's own readers read its float32 value
        narrow = [onnx.helper.make_node("Cast", [raw], [out], to=onnx.TensorProto.FLOAT16,
                                        name=fresh_name(f"{node.name or out}{ROUND}", taken))]
        if out not in {i for n in scopes.nodes(graph) for i in n.input}:
            return narrow
        wide = fresh_name(f"{out}__rounded", taken)
        scopes.rename_reads(graph, out, wide)
        return narrow + [onnx.helper.make_node("Cast", [out], [wide], to=onnx.TensorProto.FLOAT,
                                               name=fresh_name(f"{node.name or out}__widen", taken))]
    narrow = fresh_name(f"{out}__fp16", taken)
    return [onnx.helper.make_node("Cast", [raw], [narrow], to=onnx.TensorProto.FLOAT16,
                                  name=fresh_name(f"{node.name or out}{ROUND}", taken)),
            onnx.helper.make_node("Cast", [narrow], [out], to=onnx.TensorProto.FLOAT,
                                  name=fresh_name(f"{node.name or out}__widen", taken))]


def rounded_of(model):
    """{raw FP32 tensor: its FP16-rounded tensor} in an emulated model: localization compares the rounded value,
    which is what the artifact's readers see (the raw one may still be finite where FP16 overflows)."""
    widen = {n.input[0]: n.output[0] for n in scopes.nodes(model.graph) if n.op_type == "Cast" and "__widen" in n.name}
    out = {}
    for g in scopes.graphs(model.graph):
        for n in g.node:
            if n.op_type == "Cast" and ROUND in n.name:
                narrow = n.output[0]
                is_output = narrow in {o.name for o in g.output}
                out[n.input[0]] = narrow if is_output else widen.get(narrow, narrow)
    return out
