"""The fused kernels of the engine model (docs/numerics.md, "Fused kernels"): a Conv / ConvTranspose / Gemm / MatMul
followed by pointwise ops with constant operands runs as one kernel, and only the chain's final output is stored,
so only it is rounded to FP16; the tensors inside the chain stay FP32, as in the kernel's epilogue.

TensorRT's documented fusions (NVIDIA TensorRT documentation, "Layer Fusion Catalog",
https://docs.nvidia.com/deeplearning/tensorrt/latest/performance/fusion-catalog.html): a convolution followed by a
ReLU is computed "in one step directly from the convolution kernel without requiring a second kernel call"; a
MatrixMultiply fused with a ReLU becomes one layer (``ip1 + relu1``); the catalog's table lists Convolution + Scale
(uniform or per-channel: folded into the convolution), Convolution + Activation (ReLU, GELU, Clip, and after
pointwise fusion any single-input pointwise layer) and the fusion of adjacent pointwise layers (Activation,
ElementWise, uniform Scale, Unary) into one kernel. A GEMM's bias and activation are cuBLASLt epilogues (NVIDIA
nvmath-python, "Epilogs": BIAS adds a bias broadcast along the result's columns, RELU_BIAS / GELU_BIAS then
activate). So a chain here is: an anchor, then one reader at a time, each the only reader of the tensor before it:

- ``Mul`` / ``Add`` / ``Sub`` by a constant, ``Div`` by a constant, with one value per output channel or one value
  for all (Conv: channel axis 1; Gemm / MatMul: the last axis, a bias over columns);
- after a Conv / ConvTranspose, an ``Add`` of another tensor of the same shape (a residual sum; broadcasting at most
  over the batch axis): the catalog's Convolution + ElementWise sum;
- ``BatchNormalization`` after a Conv / ConvTranspose, all its parameters constant (a per-channel scale and shift);
- a single-input activation (``ACTIVATIONS``; Clip with constant bounds);
- after a Gemm / MatMul, a shape-only op (Reshape, Flatten, Squeeze, Unsqueeze): it moves no value (Keras Dense
  layers export as MatMul -> Reshape -> bias Add, the bias still one value per last-axis entry after it). That
  TensorRT fuses across such a reshape is an assumption of this model, not a catalog entry (docs/numerics.md).

Not fused here although TensorRT may fuse them: Min / Max sums into a Conv, attention and normalization blocks. Strict numerics stay stricter than the engine there.
"""

from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

ANCHORS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
AFFINE = {"Mul", "Add", "Sub", "Div"}
ACTIVATIONS = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu",
               "Softplus", "Gelu", "PRelu"}  # PRelu: its slope is a constant operand like an affine one's
SHAPE_ONLY = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}


def constants(graph):
    """{name: dims} of ``graph``'s initializers and Constant values."""
    dims = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            dims[node.output[0]] = list(node.attribute[0].t.dims)
    return dims


def interior(graph, half, shapes, readers=None):
    """The float16 tensors of ``graph`` computed inside a fused chain (module doc): never stored, never rounded.
    ``shapes``: {tensor: dims} after shape inference (a dim not known is None), for the residual sum; ``readers``:
    ``scopes.readers(graph)`` (a tensor read twice by one node, or inside a subgraph, is stored: the chain ends)."""
    from paritygate.backend.onnx.graph import scopes

    consts, outputs = constants(graph), {o.name for o in graph.output}
    readers = scopes.readers(graph) if readers is None else readers
    inside = set()
    for node in graph.node:
        if node.op_type not in ANCHORS or not node.output or node.output[0] not in half:
            continue
        axis, tensor = _channel_axis(node, consts), node.output[0]
        while tensor not in outputs and len(readers.get(tensor, [])) == 1:
            nxt = readers[tensor][0][0]
            if nxt is None or not nxt.output or nxt.output[0] not in half or not _epilogue(nxt, tensor, node, axis,
                                                                                           consts, shapes):
                break
            inside.add(tensor)
            tensor = nxt.output[0]
    return inside


def _channel_axis(anchor, consts):
    """(index, rank) of the anchor's output channels: Conv / ConvTranspose axis 1 of an output as deep as its
    weight ((None, None) when the weight is not constant); Gemm / MatMul the last axis, (-1, None)."""
    if anchor.op_type in ("Conv", "ConvTranspose"):
        weight = consts.get(anchor.input[1])
        return (1, len(weight)) if weight else (None, None)
    return (-1, None)


def _per_channel(dims, axis):
    """Whether a constant of shape ``dims`` holds one value, or one per output channel (``axis``: (index, rank))."""
    index, rank = axis
    if index is None or dims is None:
        return False
    if index == -1:
        return all(d == 1 for d in dims[:-1])
    padded = [1] * (rank - len(dims)) + list(dims)
    return len(dims) <= rank and all(d == 1 for k, d in enumerate(padded) if k != index)


def _residual(node, tensor, anchor, shapes):
    """An Add of ``tensor`` (a Conv chain's) and another tensor of its shape, batch axis aside (module doc)."""
    other = next(i for i in node.input if i != tensor)
    a, b = shapes.get(tensor), shapes.get(other)
    return (node.op_type == "Add" and anchor.op_type in ("Conv", "ConvTranspose") and a is not None and b is not None
            and len(a) == len(b) and None not in a[1:] and a[1:] == b[1:])


def _epilogue(node, tensor, anchor, axis, consts, shapes):
    """Whether ``node``, reading ``tensor`` once from the chain of ``anchor``, joins the chain (module doc)."""
    others = [i for i in node.input if i and i != tensor]  # ``tensor`` is read once (interior's readers)
    if node.op_type in AFFINE:
        # c / x is no epilogue (a reciprocal of the accumulator); c - x is (-1 * x + c)
        return (node.op_type != "Div" or node.input[0] == tensor) and all(_per_channel(consts.get(i), axis)
                                                                          for i in others) or (
            len(others) == 1 and others[0] not in consts and _residual(node, tensor, anchor, shapes))
    if node.op_type == "BatchNormalization":
        return anchor.op_type in ("Conv", "ConvTranspose") and len(node.output) == 1 and all(i in consts for i in others)
    if node.op_type in ACTIVATIONS:
        return node.input[0] == tensor and all(_per_channel(consts.get(i), axis) for i in others)
    return node.op_type in SHAPE_ONLY and axis[0] == -1 and node.input[0] == tensor
