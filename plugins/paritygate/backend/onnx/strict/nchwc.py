"""A strict artifact's roundings moved into ONNX Runtime's blocked NCHWc layout: the same values, fewer kernels
(docs/numerics.md, "Cost"; ``twin.runnable`` applies it).

ONNX Runtime's CPU provider runs a chain of convolutions in its blocked layout (channels in blocks of the CPU's
vector width: 16 floats with AVX-512, 8 with AVX2). It cannot run a Cast there, so each Cast pair that strict
numerics put between two convolutions costs a ReorderOutput before it and a ReorderInput after it: mobilenet's
strict run had 16 and 15 of them, and cost 2.07-2.18x its FP32 run (1.55-1.61x with them moved, before Round16).

A rounding (a Cast, or ``Round16``), and an Add of two tensors of one shape, are elementwise: on a blocked tensor
whose channels fill its blocks (nothing padded) they give the values they give in NCHW, only in another order. So
``move`` (after ONNX Runtime optimized the strict artifact, ``ORT_ENABLE_ALL``, saved) moves each rounding, and each
such Add, that reads a reordered convolution output onto the blocked tensor, reads the blocked result where a
ReorderInput read it back, and drops what nothing reads any more (tests/backend/onnx/strict/test_twin.py, at every
session setting the suite uses, bit for bit against the strict artifact, on the overflow too).

A tensor whose channels do not fill their blocks stays in NCHW. Its padded channels hold a convolution's 0 x input,
which is NaN where an input is inf; the next convolution, reading the blocked tensor directly, could carry that NaN
into its real channels where strict numerics give inf (and a Clip after it turns inf back into a finite value).
"""

from paritygate.backend.onnx.graph import scopes
from paritygate.backend.onnx.graph.dtypes import FLOATS
from paritygate.backend.onnx.graph.names import fresh_name, tensor_names
from paritygate.backend.onnx.strict import round16
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

DOMAIN = "com.microsoft.nchwc"


def move(model, shapes):
    """Move ``model``'s roundings (Casts, ``Round16``) and Adds of reordered convolution outputs whose channels fill
    their blocks onto the blocked tensors (in place); ``shapes``: the NCHW tensors' shapes, by name. Returns the
    counts."""
    graph = model.graph
    weights = {t.name: list(t.dims) for t in graph.initializer}
    held = {}  # blocked tensor -> the channels it holds, padding included (its convolution's reordered filters)
    for n in graph.node:
        if n.domain == DOMAIN and n.op_type == "Conv" and n.input[1] in weights:
            held[n.output[0]] = weights[n.input[1]][0]
    twin, rename, nodes = {}, {}, []  # NCHW tensor -> its blocked twin
    taken = tensor_names(model)
    report = {"moved": 0, "left_padded": 0}
    for n in graph.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
        a = {k.name: onnx.helper.get_attribute_value(k) for k in n.attribute}
        if n.domain == DOMAIN and n.op_type == "ReorderOutput" and not a.get("channels_last"):
            if held.get(n.input[0]) == a.get("channels"):
                twin[n.output[0]] = n.input[0]
            elif n.input[0] in held:
                report["left_padded"] += 1
        elif (n.input and n.input[0] in twin and (n.op_type == "Cast" and a.get("to") in FLOATS
                                                   or (n.domain, n.op_type) == (round16.DOMAIN, round16.OP))
              or n.op_type == "Add" and len(n.input) == 2 and all(i in twin for i in n.input)
              and shapes.get(n.input[0]) == shapes.get(n.input[1]) and None not in shapes.get(n.input[0], (None,))):
            blocked = fresh_name(f"{n.output[0]}__nchwc", taken)
            nodes.append(onnx.helper.make_node(n.op_type, [twin[i] for i in n.input], [blocked], **a, domain=n.domain,
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
