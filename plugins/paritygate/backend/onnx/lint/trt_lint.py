"""Static TensorRT-compatibility lint of an ONNX graph: what onnx-tensorrt's parser would refuse, found without a GPU.

The rules read onnx-tensorrt's own support matrix, ``docs/operators.md``, stored as ``data/trt_operators.json`` with
the commit it came from (``release/10.1-GA``, 96e781103cfc; regenerate with ``data/make_trt_operators.py``). That
table is the oldest TensorRT 10 parser this suite targets: an op it supports is supported by every later 10.x
parser (onnx-tensorrt's changelog only adds operators and types through 10.15), so a graph that passes targets
TensorRT >= 10.1. TensorRT 11.x publishes no operators.md in what was available here: not covered.

Rules (each finding names its ``rule``, the ``node``, the ``op`` and its ``source``):

- ``opset``: the default-domain opset lies in the table's range (header line "opset 9 to opset 20").
- ``domain``: only ai.onnx operators are in the table; another domain needs a TensorRT plugin.
- ``operator``: the op is in the table and marked ``Y``.
- ``type``: the node's first input has one of the types the table lists for the op (DOUBLE is accepted: "limited
  support ... cast DOUBLE down to FLOAT"). This is the rule an INT32 ``DequantizeLinear`` breaks (table row
  "DequantizeLinear | Y | INT8, FP8, INT4").
- ``zero_point``: Q/DQ zero points are constant zeros (rows "`x_zero_point` must be zero", "`y_zero_point` must
  be 0").
- ``quantized_type``: QuantizeLinear produces a quantized type TensorRT has (note "INT8, INT4, and FP8 are
  treated as Quantized Types"); without a zero point ONNX defaults to UINT8, which TensorRT allows only as a
  network input or output ("UINT8 is only supported as network input or output tensor types").
- ``placement``: quantized tensors exist only between a quantizer and a dequantizer (same note: "support is
  available only through quantization from a floating-point type"): a DequantizeLinear reads a constant or a
  QuantizeLinear, and a QuantizeLinear's output is read only by DequantizeLinear nodes.

Every rule applies in every graph: onnx-tensorrt's ``Loop`` and ``If`` importers parse the body / the taken
branch with the same ``onnx2trt::parseGraph(ctx, body)`` as the top-level graph (``builtin_op_importers.cpp``),
node by node through the same importer table, so an op it refuses there fails the parse too (``Scan`` bodies are
linted the same way). A finding inside a subgraph names its ``graph``: the path of the nodes that hold
it and their attribute (``loop/body``); ``None`` for the top-level graph.
"""

import functools
import json
from pathlib import Path

import numpy as np

from paritygate.backend.onnx.graph import scopes
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

TABLE_PATH = Path(__file__).with_name("data") / "trt_operators.json"
DEFAULT_DOMAINS = ("", "ai.onnx")
# ONNX TensorProto element type -> the names operators.md uses
TYPE_NAMES = {1: "FP32", 2: "UINT8", 3: "INT8", 6: "INT32", 7: "INT64", 9: "BOOL", 10: "FP16", 11: "DOUBLE",
              16: "BF16", 17: "FP8", 18: "FP8", 19: "FP8", 20: "FP8", 22: "INT4"}
QUANTIZED = ("INT8", "FP8", "INT4")


@functools.lru_cache(maxsize=1)
def table():
    return json.loads(TABLE_PATH.read_text())


def _source(row=None):
    src = table()["source"]
    where = f"{src['repo']} {src['path']} @ {src['tag']} ({src['commit'][:12]})"
    return f"{where}, row {row}" if row else where


def _finding(rule, message, node=None, source=None):
    return {"rule": rule, "node": node.name if node is not None else None,
            "op": node.op_type if node is not None else None, "message": message, "source": source or _source()}


def _scoped(graph, path=None):
    """(graph, path) for ``graph`` and every graph nested in it; ``path`` is "node/attribute/..." or None."""
    yield graph, path
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for k, sub in enumerate(subs):
                where = f"{node.name or node.op_type}/{attr.name}" + (f"[{k}]" if len(subs) > 1 else "")
                yield from _scoped(sub, f"{path}/{where}" if path else where)


def lint(model):
    """Findings for the ModelProto ``model``, in every graph (an empty list: nothing TensorRT's parser is known to
    refuse)."""
    findings = _opset(model)
    types = _types(model)
    consts = _constants(model)
    every = list(scopes.nodes(model.graph))  # names are unique across a model's graphs (ONNX IR)
    readers, producers = {}, {o: n.op_type for n in every for o in n.output}
    for node in every:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for g in scopes.graphs(model.graph) for o in g.output}
    for graph, path in _scoped(model.graph):
        for node in graph.node:
            found = _operator(node, types)
            if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.domain in DEFAULT_DOMAINS:
                found += _qdq(node, types, consts, readers, producers, outputs)
            findings += [{**f, "graph": path} for f in found]
    return findings


def _opset(model):
    low, high = table()["opset"]
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    return [_finding("opset", f"default-domain opset {v} is outside TensorRT {table()['tensorrt']}'s range "
                              f"{low}..{high}", source=_source("header")) for v in versions if not low <= v <= high]


def _operator(node, types):
    if node.domain not in DEFAULT_DOMAINS:
        return [_finding("domain", f"op {node.domain}.{node.op_type} is not an ONNX operator; TensorRT needs a "
                                   "plugin for it", node)]
    row = table()["operators"].get(node.op_type)
    if row is None or not row["supported"]:
        return [_finding("operator", f"{node.op_type} is not supported by TensorRT's ONNX parser "
                                     f"({'marked N' if row else 'not in the table'})", node, _source(node.op_type))]
    first = node.input[0] if node.input else ""
    have = TYPE_NAMES.get(types.get(first)) if first else None
    if have is None or not row["types"] or have in row["types"] or have == "DOUBLE":
        return []
    return [_finding("type", f"{node.op_type} input '{first}' is {have}; TensorRT supports {', '.join(row['types'])}",
                     node, _source(node.op_type))]


def _qdq(node, types, consts, readers, producers, outputs):
    findings = []
    zero = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if zero is not None:
        value = consts.get(zero)
        if value is None or np.any(value != 0):
            what = "not a constant" if value is None else f"nonzero (max |zp| {int(np.abs(value).max())})"
            findings.append(_finding("zero_point", f"{node.op_type} zero point '{zero}' is {what}; TensorRT needs 0",
                                     node, _source(node.op_type)))
    if node.op_type == "QuantizeLinear":
        produced = TYPE_NAMES.get(types.get(zero)) if zero else "UINT8"
        if produced not in QUANTIZED:
            findings.append(_finding("quantized_type", f"QuantizeLinear produces {produced}; TensorRT quantizes to "
                                                       f"{', '.join(QUANTIZED)}", node, _source("note")))
        bad = [r for r in readers.get(node.output[0], []) if r.op_type != "DequantizeLinear"]
        if bad or node.output[0] in outputs:
            who = ", ".join(f"{r.op_type} '{r.name}'" for r in bad) or "a graph output"
            findings.append(_finding("placement", f"QuantizeLinear output '{node.output[0]}' is read by {who}, not "
                                                  "only by DequantizeLinear", node, _source("note")))
    elif node.input[0] not in consts and producers.get(node.input[0]) != "QuantizeLinear":
        findings.append(_finding("placement", f"DequantizeLinear input '{node.input[0]}' is neither a constant nor "
                                              "a QuantizeLinear output", node, _source("note")))
    return findings


def _types(model):
    """Tensor name -> ONNX elem type (inferred where the graph does not declare it)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - an invalid graph is the validator's finding; lint what is declared
        inferred = model.graph
    types = {v.name: v.type.tensor_type.elem_type for g in scopes.graphs(inferred)
             for v in [*g.value_info, *g.input, *g.output]}
    types.update(scopes.declared_types(model))  # initializers and Constant values, as stored
    return types


def _constants(model):
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for g in scopes.graphs(model.graph) for t in g.initializer}
    for node in scopes.nodes(model.graph):
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return consts


def new_findings(before, after):
    """Findings of ``after`` that ``before`` (the graph it was built from) did not have, by (rule, graph, node)."""
    seen = {(f["rule"], f.get("graph"), f["node"]) for f in before}
    return [f for f in after if (f["rule"], f.get("graph"), f["node"]) not in seen]
