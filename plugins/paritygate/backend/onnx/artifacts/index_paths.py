"""Index paths: the float values a graph turns into indices (token ids before an Embedding's Gather, Slice and Range
bounds, shapes), which must not be rounded to FP16.

FP16 holds every integer exactly only up to 2048 (IEEE 754 binary16: 11 significant bits); above it, integers
round to multiples of 2, 4, ... So a float32 token id cast to float16 before the Cast to int64 that feeds a
Gather picks another row (SentiToolKit 0.1.8's LSTM: id 4999 became 5000, and ONNX Runtime stopped with
"idx=5000 must be within the inclusive range [-5000,4999]"; lower ids silently pick a wrong row). Such a value is
an index, not a float to round.

A path is walked back from each index input (``INDEX_INPUTS``) through the ops that carry a value unchanged or by
arithmetic (``CARRY``, each through the inputs that carry it); it stops at ops whose output is no longer the value
(a comparison, an arg-max, Shape: their result is exact whatever the rounding of their inputs). The nodes on it
that read or write a float tensor are the index path: the suite's fp16 build keeps them in FP32 (``keep_fp32``),
and a team's own fp16 file that computes one of them in float16 fails with one line naming it (``rounded``).
"""

from paritygate.backend.onnx.graph import scopes
from paritygate.backend.onnx.graph.dtypes import FLOAT_NAMES, INTEGERS
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

# op -> input positions read as indices, bounds or shapes (onnx/defs: Gather "indices", Slice "starts" ...)
INDEX_INPUTS = {"Gather": (1,), "GatherElements": (1,), "GatherND": (1,), "ScatterND": (1,),
                "ScatterElements": (1,), "Scatter": (1,), "Slice": (1, 2, 3, 4), "Range": (0, 1, 2),
                "OneHot": (0, 1), "Tile": (1,), "Expand": (1,), "Reshape": (1,), "ConstantOfShape": (0,),
                "TopK": (1,), "Pad": (1,), "Resize": (3,)}
# op -> the input positions whose value its output carries (None: all of them)
CARRY = {"Cast": (0,), "Floor": (0,), "Ceil": (0,), "Round": (0,), "Identity": (0,), "Reshape": (0,),
         "Squeeze": (0,), "Unsqueeze": (0,), "Flatten": (0,), "Transpose": (0,), "Slice": (0,), "Gather": (0,),
         "Expand": (0,), "Tile": (0,), "Split": (0,), "Concat": None, "Add": None, "Sub": None, "Mul": None,
         "Div": None, "Mod": None, "Sum": None, "Min": None, "Max": None, "Abs": (0,), "Neg": (0,),
         "Clip": None, "Where": (1, 2)}


def index_paths(model):
    """[{node, op, floats: {tensor: type}, index_of, index_op, index_input}] for every node of ``model`` (every
    graph) on a float path into an index input, nearest the index first; ``floats`` are the float tensors it reads
    or writes."""
    types = scopes.inferred_types(model)
    found, seen = [], set()
    for graph in scopes.graphs(model.graph):
        producer = {o: n for n in graph.node for o in n.output}
        for consumer in graph.node:
            for pos in INDEX_INPUTS.get(consumer.op_type, ()):
                if pos < len(consumer.input) and types.get(consumer.input[pos]) in INTEGERS:
                    _walk(consumer, pos, producer, types, found, seen)
    return found


def _walk(consumer, pos, producer, types, found, seen):
    stack = [consumer.input[pos]]
    while stack:
        node = producer.get(stack.pop())
        if node is None or node.op_type not in CARRY or node.name in seen:
            continue
        seen.add(node.name)
        carried = CARRY[node.op_type]
        reads = [t for i, t in enumerate(node.input) if t and (carried is None or i in carried)]
        floats = {t: FLOAT_NAMES[types[t]] for t in [*reads, *node.output] if types.get(t) in FLOAT_NAMES}
        if floats:
            found.append({"node": node.name, "op": node.op_type, "floats": floats, "index_of": consumer.name,
                          "index_op": consumer.op_type, "index_input": pos})
        stack.extend(reads)


def keep_fp32(model):
    """[{node, op, reason}]: the nodes the fp16 build keeps in FP32 so that no index is rounded."""
    return [{"node": p["node"], "op": p["op"],
             "reason": f"on the path into input {p['index_input']} of {p['index_op']} '{p['index_of']}' (an index, "
                       "not a float to round: FP16 holds integers exactly only up to 2048): kept in FP32"}
            for p in index_paths(model)]


def rounded(model):
    """One line per index that ``model`` rounds through float16 (a team's own fp16 file): the node nearest the
    index that reads or writes a float16 tensor on its path, and why that is wrong."""
    lines, named = [], set()
    for p in index_paths(model):
        half = [t for t, kind in p["floats"].items() if kind == "float16"]
        if half and p["index_of"] not in named:
            named.add(p["index_of"])
            lines.append(f"node '{p['node']}' ({p['op']}) carries an index in float16 (tensor '{half[0]}') into input "
                         f"{p['index_input']} of {p['index_op']} '{p['index_of']}' (indices, bounds or a shape): "
                         "FP16 holds integers exactly only up to 2048 (id 4999 becomes 5000), so a larger index picks "
                         "a wrong row or falls out of range; keep this path in float32 (onnxconverter-common: "
                         "node_block_list)")
    return lines


def check_own(spec, precision):
    """Raise CandidateFault (its checks: its checks fail) when the team's own file carries a value that
    becomes an index (token ids, Slice/Range bounds, a shape) through float16, which cannot hold it."""
    from paritygate.backend.base import CandidateFault

    path = spec.onnx_artifacts[precision]
    lines = rounded(onnx.load(str(path)))  # the validation pass loaded and checked it already
    if lines:
        raise CandidateFault(f"{spec.where(f'onnx.{precision}')}: {path} rounds an index to FP16: " + "; ".join(lines))
