"""Where a team's own fp16 ONNX breaks, named by the nodes of that file.

The suite's own fp16 artifact keeps the FP32 graph's node names (``localize``, Matching), so a break there is named
by the FP32 node. A team's own fp16 file is a graph of its own: it may compute a softmax as Exp / ReduceSum / Div
where the FP32 source holds one Softmax. Paired with the source, the diagnosis named the source's ``Softmax__2`` (a
node not in the team's file) and advised keeping it in FP32, while the team's ``Exp`` overflowed (issue 41).

So a team's fp16 file is localized against its own FP32 twin (``fp32_twin``: the same graph, every float16 type,
initializer, constant and cast made float32): the same nodes computed in FP32 from the same (float16-valued)
weights. The error each node adds is then the float16 arithmetic's, named by the team's node (an unnamed one as
``<op>__<index>``: its op and its position in the file's node list). Where the twin matches the candidate (nothing
float16 breaks; the file differs from the source in FP32 too), the comparison with the source stands, each row
named by the team's node that produces the tensor (``named_in``).
"""

import numpy as np

from paritygate.backend.onnx.graph import scopes
from paritygate.backend.onnx.graph.dtypes import FLOAT, FLOAT16, type_attribute
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

def fp32_twin(model):
    """A copy of ``model`` computing every float16 tensor in float32, its inputs and outputs included (localization
    feeds the reference's float32 inputs); node names as in ``model`` (unnamed ones ``<op>__<index>``)."""
    from paritygate.backend.onnx.diagnosis.localize import named_nodes

    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    named_nodes(twin)
    for graph in scopes.graphs(twin.graph):
        for i, init in enumerate(graph.initializer):
            if init.data_type == FLOAT16:
                graph.initializer[i].CopyFrom(_widened(init))
        for node in graph.node:
            _widen_node(node)
        for info in [*graph.value_info, *graph.output, *graph.input]:
            _widen_type(info.type)
    return twin


def _widened(tensor):
    from onnx import numpy_helper

    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)


def _widen_node(node):
    attr = type_attribute(node)
    if attr is not None and attr.i == FLOAT16:
        attr.i = FLOAT
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == FLOAT16:
            a.t.CopyFrom(_widened(a.t))


def _widen_type(type_proto):
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type" and type_proto.tensor_type.elem_type == FLOAT16:
        type_proto.tensor_type.elem_type = FLOAT
    elif kind in ("sequence_type", "optional_type"):
        _widen_type(getattr(type_proto, kind).elem_type)


def self_divergence(team, candidate, feed, atol, rtol):
    """``localize.divergence`` of ``candidate`` (the team's file as the check ran it) against the team file's FP32
    twin: rows named by the team's nodes."""
    from paritygate.backend.onnx.diagnosis.localize import divergence

    return divergence(fp32_twin(team), candidate, feed, atol, rtol)


def named_in(div, fp32_model, team):
    """``div`` (the candidate against the FP32 source) with each row named by the node of ``team`` that produces
    the row's tensor, where the source's node name is not in the team's file; returns ``div``."""
    from paritygate.backend.onnx.diagnosis.localize import named_nodes, pair_tensors

    named = named_nodes(_copy(team))
    mine = {n.name for n in named.graph.node}
    producer = {o: n for n in named.graph.node for o in n.output if o}
    pairs = pair_tensors(fp32_model, named)
    for row in div.rows:
        node = producer.get(pairs.get(row.tensor))
        if row.node not in mine and node is not None:
            row.node, row.op_type = node.name, node.op_type
    return div


def _copy(model):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out
