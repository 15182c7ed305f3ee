"""FP16 conversion with onnxconverter-common that yields a valid graph on real models, or says why not.

Three repairs around ``float16.convert_float_to_float16``, each found on a real graph:

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
"""

import warnings

import numpy as np

from paritygate.backend.onnx import validate
from paritygate.backend.onnx.util import fresh_name, tensor_names
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

FP16_MAX = 65504.0  # IEEE 754 binary16 largest finite value
FP16_MIN_SUBNORMAL = 2.0 ** -24  # IEEE 754 binary16 smallest positive subnormal (5.96e-8)
MAX_RETRIES = 16  # nodes blocked one at a time; a graph needing more is reported, not looped over
CONVERTER = "onnxconverter-common float16.convert_float_to_float16"


def name_nodes(model):
    """The converter names its Casts after nodes: unnamed nodes would collide."""
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}__{i}"
    return model


def isolate_outputs(model):
    """Let an Identity produce every graph output that another node also reads; returns the names isolated."""
    outputs = {o.name for o in model.graph.output}
    read = outputs & {i for n in model.graph.node for i in n.input}
    taken = tensor_names(model)
    for name in sorted(read):
        inner = fresh_name(f"{name}__internal", taken)
        for node in model.graph.node:
            node.input[:] = [inner if i == name else i for i in node.input]
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
    for node in model.graph.node:
        read = [t for t in [*node.input, *(node.output if node.op_type == "Constant" else [])] if t in exact]
        if read:
            blocked.append({"node": node.name, "op": node.op_type,
                            "reason": f"reads constant '{read[0]}' that FP16 cannot hold "
                                      f"({findings[read[0]]['message']}): kept in FP32 so that it keeps its value"})
    return blocked


def stored_as(findings, converted):
    """Complete each finding with how the artifact stores the constant: float32 (kept), or clamped FP16."""
    half = {t.name for t in converted.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}
    half |= {n.output[0] for n in converted.graph.node if n.op_type == "Constant" and n.attribute
             and n.attribute[0].t.data_type == onnx.TensorProto.FLOAT16}
    clamp = {"overflow": "float16 ±65504 (clamped)", "underflow": "float16 ±2**-24 (raised)"}
    return [{**f, "stored_as": clamp[f["kind"]] if name in half else "float32"} for name, f in findings.items()]


def _float_constants(model):
    from onnx import numpy_helper

    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            yield t.name, numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value" \
                and n.attribute[0].t.data_type == onnx.TensorProto.FLOAT:
            yield n.output[0], numpy_helper.to_array(n.attribute[0].t)


def convert(source, keep_fp32, feeds, keep_nodes=()):
    """(fp16 ModelProto, report) for the float32 ModelProto ``source``: op types ``keep_fp32`` and node names
    ``keep_nodes`` stay in FP32. Raises ArtifactError when the result is still invalid after blocking the nodes
    the validators named."""
    from onnxconverter_common import float16

    model = onnx.ModelProto()
    model.CopyFrom(source)
    name_nodes(model)
    isolated = isolate_outputs(model)
    floats = {o.name for o in model.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    ops = list(keep_fp32) + list(float16.DEFAULT_OP_BLOCK_LIST)
    original = {n.name: n.op_type for n in model.graph.node}
    out_of_range = constants_out_of_range(model)
    blocked, retries = keep_exact(model, out_of_range), 0
    while True:
        with warnings.catch_warnings():  # clamped constants are reported as findings, not warned about
            warnings.filterwarnings("ignore", r"the float32 number .* will be truncated to", UserWarning)
            half = float16.convert_float_to_float16(
                model, keep_io_types=True, max_finite_val=FP16_MAX, min_positive_val=FP16_MIN_SUBNORMAL,
                op_block_list=ops, node_block_list=list(keep_nodes) + [b["node"] for b in blocked])
        half = restore_float32_outputs(half, floats)
        try:
            validate.validate(half, feeds, CONVERTER)
            break
        except validate.ArtifactError as err:
            if err.node not in original or any(b["node"] == err.node for b in blocked) or retries >= MAX_RETRIES:
                raise
            blocked.append({"node": err.node, "op": original[err.node], "reason": str(err)})
            retries += 1
    report = {"converter": CONVERTER, "keep_fp32_ops": sorted(keep_fp32), "isolated_outputs": isolated,
              "fp16_blocked": blocked, "constants_out_of_range": stored_as(out_of_range, half)}
    return half, report
