"""Precision coverage of a reduced-precision artifact (``details.precision_coverage``): how much of it computes in
the precision its row names. An "fp16" artifact whose matrix products all run in FP32 proves nothing about FP16.

- ``mac_share``: multiply-accumulates of Conv, ConvTranspose, MatMul, Gemm and Einsum (and their QLinear /
  Integer forms) computed in the stated precision, over all of theirs, counted from the tensor shapes of one
  sample batch (an ONNX Runtime run of the artifact with those tensors exposed);
- ``node_share``: compute nodes (all but Cast, Constant, Identity, Q/DQ) computed in the stated precision.

"Computed in" fp16: the node writes a float16 tensor. int8: every float input of a MAC node is a
DequantizeLinear output (explicit Q/DQ, which TensorRT fuses into an INT8 kernel), or the node is a QLinear /
Integer op; for other nodes, their float inputs all come from DequantizeLinear.
"""

import numpy as np

from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

MAC_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "QLinearConv", "QLinearMatMul", "ConvInteger",
           "MatMulInteger"}
NOT_COMPUTE = {"Cast", "Constant", "Identity", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
INT8_OPS = {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"}
WEIGHT = {"QLinearConv": 3, "QLinearMatMul": 3, "ConvInteger": 1, "MatMulInteger": 1}  # index of the 2nd operand
# The default minimum MAC share for a pass (a model may set `min_precision_coverage`): see README "Precision
# coverage" for the measurement it comes from.
MIN_MAC_SHARE = 0.5


def macs(node, shapes):
    """Multiply-accumulates of one MAC node from its operand and result shapes, or None when a shape is unknown."""
    shape = lambda i: shapes.get(node.input[i]) if len(node.input) > i and node.input[i] else None
    out = shapes.get(node.output[0])
    second = WEIGHT.get(node.op_type, 1)
    a, b = shape(0), shape(second)
    if out is None or a is None or b is None:
        return None
    if node.op_type in ("Conv", "QLinearConv", "ConvInteger"):
        return int(np.prod(out)) * int(np.prod(b[1:]))  # W: [C_out, C_in/group, k...]
    if node.op_type == "ConvTranspose":
        return int(np.prod(a)) * int(np.prod(b[1:]))  # W: [C_in, C_out/group, k...]
    if node.op_type == "Einsum":
        return _einsum_macs(node, shapes)
    trans_a = any(x.name == "transA" and x.i for x in node.attribute)
    k = a[0] if node.op_type == "Gemm" and trans_a else a[-1]
    return int(np.prod(out)) * int(k)


def _einsum_macs(node, shapes):
    eq = next(x.s.decode() for x in node.attribute if x.name == "equation").replace(" ", "")
    terms = eq.split("->")[0].split(",")
    sizes = {}
    for term, name in zip(terms, node.input):
        shape = shapes.get(name)
        if shape is None or "." in term:
            return None
        sizes.update(dict(zip(term, shape)))
    return int(np.prod(list(sizes.values()))) if sizes else 0


def _in_precision(node, precision, types, dq_outputs):
    if precision == "fp16":
        return any(types.get(o) == onnx.TensorProto.FLOAT16 for o in node.output)
    if node.op_type in INT8_OPS:
        return True
    floats = [i for i in node.input if i and types.get(i) in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)]
    operands = floats[:2] if node.op_type in MAC_OPS else floats
    return bool(operands) and all(i in dq_outputs for i in operands)


def coverage(model, precision, shapes):
    """{mac_share, node_share, macs_total, macs_in_precision, nodes_total, nodes_in_precision, unknown_shapes}
    of the top-level graph of ``model`` (a ModelProto), with ``shapes``: tensor name -> shape."""
    from paritygate.backend.onnx.graph.scopes import inferred_types

    types = inferred_types(model)
    dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    total = inside = nodes = nodes_in = 0
    unknown = []
    for node in model.graph.node:
        if node.op_type in NOT_COMPUTE:
            continue
        yes = _in_precision(node, precision, types, dq)
        nodes, nodes_in = nodes + 1, nodes_in + yes
        if node.op_type in MAC_OPS:
            n = macs(node, shapes)
            if n is None:
                unknown.append(node.name)
                continue
            total, inside = total + n, inside + (n if yes else 0)
    return {"precision": precision, "mac_share": inside / total if total else None,
            "node_share": nodes_in / nodes if nodes else None, "macs_total": total, "macs_in_precision": inside,
            "nodes_total": nodes, "nodes_in_precision": nodes_in, "unknown_shapes": unknown,
            "rule": "MACs of Conv/ConvTranspose/MatMul/Gemm/Einsum at one sample batch; "
                    "paritygate/backend/onnx/lint/coverage.py"}


def measure(path, precision, feed):
    """``coverage`` of the ONNX file ``path`` with shapes from one run on ``feed`` (its own input names)."""
    from paritygate.backend.onnx.diagnosis.localize import run_marked

    model = onnx.load(str(path))
    wanted = sorted({t for n in model.graph.node if n.op_type in MAC_OPS for t in [*n.input, *n.output] if t})
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    values = run_marked(model, feed, [t for t in wanted if t not in inits])
    shapes = {**inits, **{k: list(np.shape(v)) for k, v in values.items()}}
    return coverage(model, precision, shapes)
