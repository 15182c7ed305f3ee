"""Graphs inside graphs: the bodies of ``Loop`` / ``Scan`` and the branches of ``If`` (ONNX IR "Graphs" and
"Names Within a Graph": a subgraph may read any name of an enclosing graph, its *outer scope*, without declaring it;
names are unique across the model, so a read resolves to the nearest enclosing graph that defines the name).

The ONNX builders rewrite whole models, so every walk here goes through every subgraph: a rule that holds only in
the top-level graph would leave a body reading a tensor under a name or a type that no longer exists.
"""

from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")


def subgraphs(node):
    """The graphs held by ``node``'s attributes (``body``, ``then_branch``, ``else_branch``...)."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def graphs(graph):
    """``graph`` and every graph nested in it, each before the graphs it holds."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from graphs(sub)


def nodes(graph):
    """Every node of ``graph`` and of the graphs nested in it."""
    for g in graphs(graph):
        yield from g.node


def defined(graph):
    """The names ``graph`` itself defines: its inputs, initializers and node outputs (not its subgraphs')."""
    return ({i.name for i in graph.input} | {t.name for t in graph.initializer}
            | {t.values.name for t in graph.sparse_initializer} | {o for n in graph.node for o in n.output if o})


def free_names(graph):
    """The names ``graph`` reads from its outer scope, its own reads and those of the graphs nested in it."""
    read = {i for n in graph.node for i in n.input if i} | {o.name for o in graph.output}
    for node in graph.node:
        for sub in subgraphs(node):
            read |= free_names(sub)
    return read - defined(graph)


def readers(graph):
    """{tensor: [(node, input index), ...]} over ``graph``'s nodes, a node once per input it reads the tensor as; a
    tensor a subgraph reads gets a (None, None) entry."""
    out = {}
    for node in graph.node:
        for k, i in enumerate(node.input):
            if i:
                out.setdefault(i, []).append((node, k))
        for sub in subgraphs(node):
            for i in free_names(sub):
                out.setdefault(i, []).append((None, None))
    return out


def rename_reads(graph, old, new, outputs=False):
    """Read ``new`` wherever ``graph`` and its subgraphs read ``old`` from this scope; a nested graph that defines
    ``old`` itself is left as it is. ``outputs``: also rename graph outputs named ``old`` (a subgraph's outputs are
    matched by position, the top-level graph's by name)."""
    for node in graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
        for sub in subgraphs(node):
            if old not in defined(sub):
                rename_reads(sub, old, new, outputs=True)
    if outputs:
        for out in graph.output:
            if out.name == old:
                out.name = new


def declared_types(model):
    """Tensor name -> ONNX element type, over every graph, as declared (inputs, outputs, value_info,
    initializers, Constant values)."""
    types = {}
    for g in graphs(model.graph):
        types.update({v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]
                      if v.type.HasField("tensor_type")})
        types.update({t.name: t.data_type for t in g.initializer})
        types.update({n.output[0]: n.attribute[0].t.data_type for n in g.node
                      if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    return types


def declared_shapes(model):
    """Tensor name -> dims (an int each, None where not known), over every graph, as declared (inputs, outputs,
    value_info, initializers)."""
    shapes = {}
    for g in graphs(model.graph):
        shapes.update({v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
                       for v in [*g.input, *g.output, *g.value_info]
                       if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")})
        shapes.update({t.name: list(t.dims) for t in g.initializer})
    return shapes


# Initializers whose data shape inference never reads: float and 8-bit ones above this size. It reads an
# initializer's values only where they give a shape (Reshape, Expand, Slice, Pad: int64 / int32, never set aside)
# or a scale (Resize, Upsample: a few floats); a weight's dims, which it does read, stay.
BULK_BYTES = 1024
BULK_TYPES = (1, 2, 3, 10, 11, 16)  # FLOAT, UINT8, INT8, FLOAT16, DOUBLE, BFLOAT16


def inferred_types(model):
    """``declared_types`` of ``model`` after ONNX shape inference (non-strict: what cannot be inferred stays
    undeclared), run with its weights' bytes set aside meanwhile (``BULK_BYTES``): infer_shapes serializes and
    parses the whole model, and ResNet50's fp32 graph took 1.06 s with its 98 MB of weights, 0.02 s without them,
    the same types (issue 37; ``tests/backend/onnx/graph/test_scopes.py``)."""
    aside = [(t, t.raw_data) for g in graphs(model.graph) for t in g.initializer
             if t.data_type in BULK_TYPES and len(t.raw_data) > BULK_BYTES]
    for tensor, _ in aside:
        tensor.ClearField("raw_data")
    try:
        return declared_types(onnx.shape_inference.infer_shapes(model))
    finally:
        for tensor, data in aside:
            tensor.raw_data = data
