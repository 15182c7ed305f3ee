"""FP16 conversion with onnxconverter-common that yields a valid graph on real models, or says why not.

Repairs around ``float16.convert_float_to_float16``, each found on a real graph:

- **Graph outputs that other nodes also read** (basic-pitch 0.4.0's ``StatefulPartitionedCall:0`` feeds an
  ``Unsqueeze``): with ``keep_io_types`` the converter casts the output back to float32 under its own name, so the
  consumer now reads float32 while its ``value_info`` still says float16, and ONNX Runtime refuses the model
  ("Type (tensor(float16)) of output arg ... does not match expected type (tensor(float))"). Each such output is
  produced by an ``Identity`` of an internal tensor before conversion, so that no node reads a graph output.
- **Nodes the validators reject in FP16** (an op whose schema has no float16, e.g. ``Celu`` at opset 17): the
  node named by the checker / runtime goes on ``node_block_list`` (kept in FP32) and the conversion is retried,
  at most ``MAX_RETRIES`` times; the blocked nodes are reported.
- **Constants**: ``max_finite_val=65504`` (FP16's largest finite value, IEEE 754 binary16) and
  ``min_positive_val=2**-24`` (its smallest subnormal) instead of the converter's 1e4 / 1e-7 defaults, so that
  every constant FP16 can represent keeps its value (up to rounding). A constant FP16 cannot hold is reported;
  when it would change materially (overflow, or a tensor wholly below 2**-24: ``must_stay_exact``) the nodes that
  produce or read it stay in FP32 so that it keeps its value (basic-pitch's log epsilon 1e-10
  would otherwise become 6e-8: max abs error 0.157 instead of 0.052 against its fp32 ONNX on the calibration
  rows). Where the converter still turns it into FP16 (a tensor also read by an FP16 node), the report says so.
- **Index paths** (SentiToolKit 0.1.8: float32 token ids cast to FP16 before its Embedding's Gather, id 4999 became
  5000): every node on a float path into indices, bounds or a shape stays in FP32 (``index_paths.keep_fp32``).
- **Subgraphs** (``Loop`` / ``Scan`` bodies, ``If`` branches; nakdimon 0.2.1's BiLSTM holds four ``Loop`` nodes): the
  converter turns a body to FP16 with its node, or leaves it FP32 when the node is blocked, but never looks at the
  outer-scope tensors a body reads, which are float16 or float32 by what the *outer* graph became (nakdimon: the
  blocked ``Loop``'s body ``Gather`` read an fp16 outer tensor while its value_info said float32). Rule: every
  float32 tensor a subgraph reads from an outer scope enters it through a ``Cast`` at the top of that subgraph
  (``route_captures``), so the subgraph's own precision decides the type, whatever the outer graph's.
- **Casts to float32** (nakdimon's ``Cast(to=FLOAT)`` of its int32 ids and loop counters): the converter changes
  tensor types but not a node's target type (``Cast.to``, ``dtype``), so a Cast in an FP16 graph still produces
  float32 under a float16 ``value_info``. Each such node whose output the converted graph declares float16 is
  retargeted to float16 (``retarget_casts``), in every graph; the routing Casts above are retargeted the same way
  in converted bodies and stay float32 in blocked ones.
- **Initializers shared by FP32 and FP16 readers** (nakdimon: a blocked ``Loop`` takes the LSTM kernels that a
  ``MatMul`` outside it also reads): the converter keeps an initializer float32 when any blocked node reads it, so
  its FP16 readers read float32; the blocked readers get their own float32 copy (``split_shared_initializers``)
  and the others the float16 original.
"""

import re
import warnings

import numpy as np

from paritygate.backend.onnx.artifacts import index_paths, validate
from paritygate.backend.onnx.graph import scopes
from paritygate.backend.onnx.graph.dtypes import type_attribute
from paritygate.backend.onnx.graph.names import fresh_name, tensor_names
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

FP16_MAX = 65504.0  # IEEE 754 binary16 largest finite value
FP16_MIN_SUBNORMAL = 2.0 ** -24  # IEEE 754 binary16 smallest positive subnormal (5.96e-8)
MAX_RETRIES = 16  # nodes blocked one at a time; a graph needing more is reported, not looped over
CONVERTER = "onnxconverter-common float16.convert_float_to_float16"


def name_nodes(model):
    """The converter names its Casts after nodes: unnamed nodes would collide (subgraphs' nodes included)."""
    for i, node in enumerate(scopes.nodes(model.graph)):
        node.name = node.name or f"{node.op_type}__{i}"
    return model


def isolate_outputs(model):
    """Let an Identity produce every graph output that another node also reads; returns the names isolated."""
    outputs = {o.name for o in model.graph.output}
    read = outputs & {i for n in scopes.nodes(model.graph) for i in n.input}
    taken = tensor_names(model)
    for name in sorted(read):
        inner = fresh_name(f"{name}__internal", taken)
        scopes.rename_reads(model.graph, name, inner)
        for node in model.graph.node:
            node.output[:] = [inner if o == name else o for o in node.output]
        for info in model.graph.value_info:
            if info.name == name:
                info.name = inner
        model.graph.node.append(onnx.helper.make_node("Identity", [inner], [name], name=fresh_name(f"{name}__out", taken)))
    return sorted(read)


def restore_float32_outputs(model, names):
    """keep_io_types leaves a graph output float16 when a kept-FP32 op (e.g. the final Softmax) produces it:
    cast those outputs back to float32, so that every artifact's I/O stay float32."""
    for out in model.graph.output:
        if out.name in names and out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16:
            half = f"{out.name}_fp16"
            for node in model.graph.node:
                node.input[:] = [half if i == out.name else i for i in node.input]
                node.output[:] = [half if o == out.name else o for o in node.output]
            model.graph.node.append(onnx.helper.make_node("Cast", [half], [out.name], to=onnx.TensorProto.FLOAT))
            out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return model


def constants_out_of_range(model):
    """Float32 constants of ``model`` that FP16 cannot hold: {tensor: finding}, one per tensor, with how many
    values and the largest / smallest magnitude."""
    findings = {}
    for name, values in _float_constants(model):
        magnitude = np.abs(values[np.isfinite(values)])
        over, under = magnitude > FP16_MAX, (magnitude > 0) & (magnitude < FP16_MIN_SUBNORMAL)
        if over.any():
            findings[name] = {"tensor": name, "kind": "overflow", "count": int(over.sum()),
                              "max_abs": float(magnitude.max()),
                              "message": f"{int(over.sum())} value(s) above FP16's largest finite value 65504 "
                                         f"(largest {float(magnitude.max()):g})"}
        elif under.any():
            smallest = float(magnitude[under].min())
            findings[name] = {"tensor": name, "kind": "underflow", "count": int(under.sum()), "min_abs": smallest,
                              "whole": bool(under.sum() == (magnitude > 0).sum()),
                              "message": f"{int(under.sum())} nonzero value(s) below FP16's smallest subnormal "
                                         f"2**-24 (smallest {smallest:g})"}
    return findings


def must_stay_exact(finding):
    """Overflow always (clamping to 65504 changes a value without bound); underflow when every nonzero value of
    the tensor is below FP16 (an epsilon, e.g. basic-pitch's log(x + 1e-10)). A weight tensor with a few values
    below 2**-24 beside values FP16 holds is raised by at most 2**-24 per element: reported, converted."""
    return finding["kind"] == "overflow" or finding["whole"]


def keep_exact(model, findings):
    """Nodes to keep in FP32 so that the constants in ``findings`` keep their values: the Constant nodes that
    produce them and every node that reads them. Returns [{node, op, reason}]."""
    exact = {name for name, f in findings.items() if must_stay_exact(f)}
    blocked = []
    for node in scopes.nodes(model.graph):
        read = [t for t in [*node.input, *(node.output if node.op_type == "Constant" else [])] if t in exact]
        if read:
            blocked.append({"node": node.name, "op": node.op_type,
                            "reason": f"reads constant '{read[0]}' that FP16 cannot hold "
                                      f"({findings[read[0]]['message']}): kept in FP32 so that it keeps its value"})
    return blocked


def stored_as(findings, converted):
    """Complete each finding with how the artifact stores the constant: float32 (kept), or clamped FP16."""
    half = {t.name for g in scopes.graphs(converted.graph) for t in g.initializer
            if t.data_type == onnx.TensorProto.FLOAT16}
    half |= {n.output[0] for n in scopes.nodes(converted.graph) if n.op_type == "Constant" and n.attribute
             and n.attribute[0].t.data_type == onnx.TensorProto.FLOAT16}
    clamp = {"overflow": "float16 ±65504 (clamped)", "underflow": "float16 ±2**-24 (raised)"}
    return [{**f, "stored_as": clamp[f["kind"]] if name in half else "float32"} for name, f in findings.items()]


def _float_constants(model):
    from onnx import numpy_helper

    for t in (t for g in scopes.graphs(model.graph) for t in g.initializer):
        if t.data_type == onnx.TensorProto.FLOAT:
            yield t.name, numpy_helper.to_array(t)
    for n in scopes.nodes(model.graph):
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value" \
                and n.attribute[0].t.data_type == onnx.TensorProto.FLOAT:
            yield n.output[0], numpy_helper.to_array(n.attribute[0].t)


def route_captures(model):
    """Let every float32 tensor a subgraph reads from an outer scope enter it through a ``Cast(to=FLOAT)`` at the
    top of that subgraph, read under a fresh name (nested subgraphs each get their own). Returns (routed, untyped):
    [{tensor, into, as}] and the captured names whose type shape inference could not tell, left as they are."""
    types, taken = scopes.inferred_types(model), tensor_names(model)
    routed, untyped = [], []

    def route(graph, owner):
        for name in sorted(scopes.free_names(graph)):
            if types.get(name) is None:
                untyped.append({"tensor": name, "into": owner.name})
            if types.get(name) != onnx.TensorProto.FLOAT:
                continue
            inner = fresh_name(f"{name}__in_{owner.name}", taken)
            scopes.rename_reads(graph, name, inner, outputs=True)
            cast = onnx.helper.make_node("Cast", [name], [inner], to=onnx.TensorProto.FLOAT,
                                         name=fresh_name(f"{inner}__cast", taken))
            rest = list(graph.node)
            del graph.node[:]
            graph.node.extend([cast, *rest])
            graph.value_info.append(onnx.helper.make_tensor_value_info(inner, onnx.TensorProto.FLOAT, None))
            types[inner] = onnx.TensorProto.FLOAT
            routed.append({"tensor": name, "into": owner.name, "as": inner})
        for node in graph.node:  # after the rewrite above: these are the live nested graphs
            for sub in scopes.subgraphs(node):
                route(sub, node)

    for node in model.graph.node:
        for sub in scopes.subgraphs(node):
            route(sub, node)
    return routed, untyped


def retarget_casts(model):
    """In every graph, a node whose attribute names its output type (``dtypes.TYPE_ATTRS``) that targets float32
    while the graph declares its output float16 (the converter converted the graph around it) targets float16.
    Returns the names of the nodes retargeted."""
    retargeted = []
    for graph in scopes.graphs(model.graph):
        declared = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.output]}
        for node in graph.node:
            attr = type_attribute(node)
            if attr is not None and attr.i == onnx.TensorProto.FLOAT and node.output \
                    and declared.get(node.output[0]) == onnx.TensorProto.FLOAT16:
                attr.i = onnx.TensorProto.FLOAT16
                retargeted.append(node.name)
    return retargeted


def split_shared_initializers(model, ops, block):
    """Keep float32 initializers float32 for the FP32 (blocked) nodes that read them, without changing what the
    FP16 nodes read. The converter keeps an initializer float32 only when a blocked node reads it directly, and
    then for every reader (it casts only value_info inputs), which leaves its FP16 readers reading float32
    (nakdimon: a blocked ``Loop`` takes the LSTM kernels that the first step's ``MatMul`` outside it also reads);
    and it converts an initializer that a blocked node's body reads from the outer scope. So: the blocked direct
    readers of a shared initializer get their own float32 copy, and a blocked node's subgraph that reads an outer
    initializer gets its own float32 copy inside (the converter never enters a blocked node's subgraphs).
    Returns [{tensor, copy, readers}]."""
    taken, split = tensor_names(model), []
    kept_node = lambda n: n.op_type in ops or n.name in block
    for graph in scopes.graphs(model.graph):
        floats = {t.name: t for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
        kept = [n for n in graph.node if kept_node(n)]
        shared = {i for n in kept for i in n.input if i in floats} & {
            i for n in graph.node if not kept_node(n) for i in n.input}
        for name in sorted(shared):
            copy = _copy_initializer(graph, floats[name], taken)
            for node in kept:
                node.input[:] = [copy.name if i == name else i for i in node.input]
            split.append({"tensor": name, "copy": copy.name, "readers": [n.name for n in kept if copy.name in n.input]})
        for node in kept:
            for sub in scopes.subgraphs(node):
                for name in sorted(scopes.free_names(sub) & floats.keys()):
                    copy = _copy_initializer(sub, floats[name], taken)
                    scopes.rename_reads(sub, name, copy.name, outputs=True)
                    split.append({"tensor": name, "copy": copy.name, "readers": [f"{node.name}/{sub.name}"]})
    return split


def _copy_initializer(graph, tensor, taken):
    copy = graph.initializer.add()
    copy.CopyFrom(tensor)
    copy.name = fresh_name(f"{tensor.name}__fp32", taken)
    return copy


def _convert_once(source, ops, block):
    """One conversion of ``source`` (not modified) with nodes ``block`` and op types ``ops`` kept in FP32:
    (fp16 model, casts retargeted, initializers split)."""
    from onnxconverter_common import float16

    model = onnx.ModelProto()
    model.CopyFrom(source)
    split = split_shared_initializers(model, set(ops), set(block))
    with warnings.catch_warnings():  # clamped constants are reported as findings, not warned about
        warnings.filterwarnings("ignore", r"the float32 number .* will be truncated to", UserWarning)
        half = float16.convert_float_to_float16(
            model, keep_io_types=True, max_finite_val=FP16_MAX, min_positive_val=FP16_MIN_SUBNORMAL,
            op_block_list=ops, node_block_list=block)
    return half, retarget_casts(half), split


def innermost(model, err):
    """The node to keep in FP32 for ``err``: the node it names or, when that node holds subgraphs and the message
    goes on to name a node inside them (the checker's "(op_type:Loop, node name: loop): ... (op_type:Celu, node
    name: celu)"), that inner node, recursively; so that one body node, not the whole body, stays FP32."""
    named = re.findall(r"node name: ([^)]*)\)", str(err))
    current = next((n for n in scopes.nodes(model.graph) if n.name == err.node), None)
    for name in named[named.index(err.node) + 1:] if err.node in named else []:
        inner = {n.name: n for sub in scopes.subgraphs(current) for n in sub.node} if current is not None else {}
        if name not in inner:
            break
        current = inner[name]
    return current.name if current is not None else err.node


def convert(source, keep_fp32, feeds, keep_nodes=()):
    """(fp16 ModelProto, report) for the float32 ModelProto ``source``: op types ``keep_fp32`` and node names
    ``keep_nodes`` stay in FP32. Raises ArtifactError when the result is still invalid after blocking the nodes
    the validators named."""
    from onnxconverter_common import float16

    model = onnx.ModelProto()
    model.CopyFrom(source)
    name_nodes(model)
    isolated = isolate_outputs(model)
    routed, untyped = route_captures(model)
    floats = {o.name for o in model.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    ops = list(keep_fp32) + list(float16.DEFAULT_OP_BLOCK_LIST)
    original = {n.name: n.op_type for n in scopes.nodes(model.graph)}
    out_of_range = constants_out_of_range(model)
    blocked, retries = keep_exact(model, out_of_range), 0
    blocked += [b for b in index_paths.keep_fp32(model) if all(b["node"] != k["node"] for k in blocked)]
    while True:
        half, retargeted, split = _convert_once(model, ops, list(keep_nodes) + [b["node"] for b in blocked])
        half = restore_float32_outputs(half, floats)
        try:
            validate.validate(half, feeds, CONVERTER)
            break
        except validate.ArtifactError as err:
            node = innermost(model, err)
            if node not in original or any(b["node"] == node for b in blocked) or retries >= MAX_RETRIES:
                raise
            blocked.append({"node": node, "op": original[node], "reason": str(err)})
            retries += 1
    report = {"converter": CONVERTER, "keep_fp32_ops": sorted(keep_fp32), "isolated_outputs": isolated,
              "fp16_blocked": blocked, "constants_out_of_range": stored_as(out_of_range, half),
              "captures_routed": routed, "captures_untyped": untyped, "casts_retargeted": retargeted,
              "initializers_split": split}
    return half, report
