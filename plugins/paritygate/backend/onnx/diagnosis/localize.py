"""Where precision breaks: the FP32 ONNX and its FP16/INT8 artifact run on one input with every intermediate
tensor exposed (Polygraphy's ``--onnx-outputs mark all``), compared node by node in topological order.

Matching. Both artifacts derive from the same FP32 graph and keep its node names: onnxconverter-common adds
``Cast`` nodes (``<node>_input_castN`` / ``<node>_output_castN``, renaming a kept node's output to
``<node>_output_cast_N``) and quantize_static adds ``QuantizeLinear``/``DequantizeLinear`` nodes (renaming a
quantized graph output to ``<out>_QuantizeLinear_Input``). So an FP32 node is paired with the candidate node
of the same name and op type, output by output position; the inserted Cast and Q/DQ nodes have no FP32
counterpart and are not compared themselves (their effect shows in the consumer's output). A node without a
same-named counterpart is paired by output tensor name.

Tolerance per tensor (``tensor_tolerance``): an element fails when
``|cand - ref| > atol * max|ref| + rtol * |ref|``, with atol/rtol the failing check's own tolerance
(``comparator.tolerance.tolerance_for``: TF-TRT's 1e-2 for FP16, 3e-1/1e-1 for INT8). It is the check's
``numpy.isclose`` rule with the absolute term scaled to the tensor's magnitude: floating-point and
quantization errors are relative to the values (FP16 rounds each value to 2^-11 of itself; a symmetric INT8
tensor steps by max|x|/127), so an intermediate of magnitude 1e3 may carry 1e3 times the absolute error of an
O(1) output, and the normwise (max) scale rather than a purely elementwise one tolerates the cancellation
near zero where elementwise relative error is unbounded (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., section 1.2 and 7.1: normwise vs componentwise error).

Ranking (``added_errors``): the first tensor out of tolerance is often not where the error comes from (a final
Softmax only propagates its logits' error). Each FP32 node is therefore also run alone on the candidate's own
values of its inputs (one graph holding every node, each fed from graph inputs), and its candidate output is
compared with that: the error the node adds itself, given what it was fed, as a multiple of the same
magnitude-scaled bound (``added_ratio``; above 1, the node alone leaves the tolerance). Nodes are ranked by it.
For INT8 the candidate's input values are taken before the Q/DQ pair its consumer reads, so the rounding of a
quantized activation is added by the node that reads it: the node ``int8_exclude`` leaves unquantized.
"""

import re
from dataclasses import dataclass, field

import numpy as np

from paritygate.backend.onnxrt.options import session_options
from paritygate.common import apart
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")
ort = lazy_import("onnxruntime")


def named_nodes(model):
    """Give unnamed nodes the names the fp16 loader gives them (``<op>__<index>``), in place; returns model."""
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}__{i}"
    return model


def depths(model):
    """Node name -> depth: 1 + the deepest producer of its inputs (graph inputs and initializers are 0).
    ONNX requires graph.node in topological order (IR spec, "Graphs"), so one pass suffices."""
    tensor_depth, out = {}, {}
    for node in model.graph.node:
        d = 1 + max((tensor_depth.get(i, 0) for i in node.input if i), default=0)
        out[node.name] = d
        for o in node.output:
            tensor_depth[o] = d
    return out


def pair_tensors(fp32_model, cand_model):
    """FP32 tensor name -> candidate tensor name, for every FP32 node output that has a counterpart."""
    cand_nodes = {n.name: n for n in cand_model.graph.node if n.name}
    cand_tensors = {o for n in cand_model.graph.node for o in n.output} | {i.name for i in cand_model.graph.input}
    pairs = {}
    for node in fp32_model.graph.node:
        twin = cand_nodes.get(node.name)
        if twin is not None and twin.op_type == node.op_type and len(twin.output) == len(node.output):
            pairs.update({o: c for o, c in zip(node.output, twin.output) if o and c})
        else:
            pairs.update({o: o for o in node.output if o in cand_tensors})
    return pairs


def run_marked(model, feed, names):
    """Run ``model`` (a ModelProto) on ``feed`` with the tensors ``names`` exposed as graph outputs."""
    return _Marked(model, names).run(feed)


class _Marked:
    """``model`` with the tensors ``names`` exposed as graph outputs: one session, run on any rows."""

    def __init__(self, model, names):
        marked = _copy(model)
        have = {o.name for o in marked.graph.output}
        for name in names:
            if name not in have:
                marked.graph.output.append(onnx.ValueInfoProto(name=name))  # type left to ONNX Runtime's inference
        self.sess = ort.InferenceSession(marked.SerializeToString(), sess_options=_lean(session_options()),
                                         providers=["CPUExecutionProvider"])
        self.wanted = [o.name for o in self.sess.get_outputs() if o.name in set(names)]

    def run(self, feed):
        return dict(zip(self.wanted, self.sess.run(self.wanted, feed)))


def _lean(options):
    """``options`` without ONNX Runtime's CPU arena, which would keep every intermediate beside its copy as an array
    (ResNet50's int8 localization: 2.2 -> 3.3 GiB with it, issue 37)."""
    options.enable_cpu_mem_arena = False
    return options


def tensor_error(ref, cand, atol, rtol, scale=None):
    """(max abs error, max rel error, passed) of one tensor under the magnitude-scaled rule (module doc);
    ``scale``: max|ref| over the whole tensor when ``ref`` holds some of its rows (None: ``ref``'s own)."""
    r, c = np.asarray(ref, np.float64), np.asarray(cand, np.float64)
    if r.shape != c.shape:
        return float("inf"), float("inf"), False
    if r.size == 0:
        return 0.0, 0.0, True
    scale = _scale(r) if scale is None else scale
    same_nonfinite = (r == c) | (np.isnan(r) & np.isnan(c))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # inf - inf, x / 0: handled below
        err = np.where(same_nonfinite, 0.0, np.abs(c - r))
        err = np.where(np.isnan(err), np.inf, err)
        rel = np.where(err == 0, 0.0, err / np.abs(r))
    bound = atol * scale + rtol * np.abs(r)
    return float(err.max()), float(rel.max()), bool(np.all(err <= bound))


@dataclass
class NodeError:
    node: str
    op_type: str
    depth: int
    tensor: str
    max_abs: float
    max_rel: float
    passed: bool
    added_abs: float = None  # the error this node adds given the candidate's own inputs (module doc, Ranking)
    added_ratio: float = None  # added_abs as a multiple of the magnitude-scaled bound (> 1: out of tolerance)

    def as_dict(self):
        return {"node": self.node, "op_type": self.op_type, "depth": self.depth, "tensor": self.tensor,
                "max_abs": self.max_abs, "max_rel": self.max_rel, "passed": self.passed,
                "added_abs": self.added_abs, "added_ratio": self.added_ratio}


@dataclass
class Divergence:
    rows: list = field(default_factory=list)  # NodeError per compared node output, topological order
    unmatched: list = field(default_factory=list)  # FP32 node outputs with no candidate counterpart

    @property
    def first(self):
        return next((r for r in self.rows if not r.passed), None)

    ranking_error: str = None  # why the added-error ranking could not be computed (then: first out of tolerance)

    def failing(self):
        return [r for r in self.rows if not r.passed]

    def ranked(self):
        """Node outputs that add error, most first (ties: shallower first); without a ranking, the failing ones
        in topological order."""
        if self.ranking_error is not None:
            return self.failing()
        adding = [r for r in self.rows if r.added_ratio]
        return sorted(adding, key=lambda r: (-r.added_ratio, r.depth))

    @property
    def top(self):
        ranked = self.ranked()
        return ranked[0] if ranked else self.first


def _is_float(arr):
    return np.asarray(arr).dtype.kind == "f"


# Intermediates held at once: a feed whose FP32, candidate and node-alone intermediates would take more runs a few rows
# at a time (a BERT-base layer stack holds about 100 MB of them a row; issue 37's memory budget)
ROWS_BYTES = 256 * 2**20


def divergence(fp32_model, cand_model, feed, atol, rtol):
    """``_divergence`` of the models (ModelProtos or their files' paths); from ``APART_BYTES`` on, in the worker of
    ``common.apart``, which reads the files itself: both graphs' intermediates, three sessions and their weights
    are held there (issue 37: ResNet50's int8 localization took the run's process from 1.0 to 2.1 GiB)."""
    proto = isinstance(fp32_model, onnx.ModelProto)
    large = fp32_model.ByteSize() >= apart.APART_BYTES if proto else apart.large(fp32_model)
    if large:
        return apart.apart(_divergence, fp32_model, cand_model, feed, atol, rtol)
    return _divergence(fp32_model, cand_model, feed, atol, rtol)


def _divergence(fp32_model, cand_model, feed, atol, rtol):
    """Compare every matched float intermediate of ``cand_model`` with ``fp32_model``'s on ``feed``. Rows that would
    hold more than ``ROWS_BYTES`` of intermediates at once run a few at a time: each tensor's numbers are then the
    maxima over them and its pass is judged with max|ref| of the whole tensor (read in a first pass over the rows),
    as one run over all the rows gives them."""
    from paritygate.backend.onnx.strict.rewrite import rounded_of

    fp32_model = named_nodes(_copy(fp32_model) if isinstance(fp32_model, onnx.ModelProto) else onnx.load(str(fp32_model)))
    cand_model = cand_model if isinstance(cand_model, onnx.ModelProto) else onnx.load(str(cand_model))
    rounded = rounded_of(cand_model)  # a strict artifact: compare the FP16-rounded value its readers see
    pairs = {k: rounded.get(v, v) for k, v in pair_tensors(fp32_model, cand_model).items()}
    fp32 = _Marked(fp32_model, [o for n in fp32_model.graph.node for o in n.output if o])
    cand = _Marked(cand_model, sorted(set(pairs.values())))
    chunks = _chunks(feed, fp32)
    scales = _scales(fp32, chunks) if len(chunks) > 1 else {}
    result, found, local = Divergence(), {}, None
    for rows in chunks:
        ref, out = fp32.run(rows), cand.run(rows)
        values = {**rows, **{t: out[c] for t, c in pairs.items() if c in out}}  # the candidate's, by FP32 names
        added = {}
        if result.ranking_error is None:
            try:
                local = local or _Local(fp32_model, ref, values)
                added = local.errors(ref, values, atol, rtol, scales)
            except Exception as err:  # noqa: BLE001 - ONNX Runtime refusing the per-node graph: rank by first failure
                found = {k: v[:3] + (None, None) for k, v in found.items()}
                result.ranking_error = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        for tensor in ref:
            if _is_float(ref[tensor]) and pairs.get(tensor) in out:
                new = (*tensor_error(ref[tensor], out[pairs[tensor]], atol, rtol, scales.get(tensor)),
                       *added.get(tensor, (None, None)))
                found[tensor] = _worse(found.get(tensor), new)
    depth = depths(fp32_model)
    for node in fp32_model.graph.node:
        for tensor in node.output:
            if tensor and tensor in found:
                result.rows.append(NodeError(node.name, node.op_type, depth[node.name], tensor, *found[tensor]))
            elif tensor and tensor in ref and _is_float(ref[tensor]):
                result.unmatched.append(tensor)
    return result


def _chunks(feed, fp32):
    """``feed`` itself, or its rows a few at a time where all at once would hold more than ``ROWS_BYTES``."""
    n = len(next(iter(feed.values())))
    if n == 1:
        return [feed]
    row = sum(np.asarray(v).nbytes for v in fp32.run({k: v[:1] for k, v in feed.items()}).values())
    size = max(1, ROWS_BYTES // max(3 * row, 1))  # FP32, the candidate's and the nodes' alone
    return [feed] if size >= n else [{k: v[i:i + size] for k, v in feed.items()} for i in range(0, n, size)]


def _scales(fp32, chunks):
    """FP32 tensor -> max|value| over every row of ``chunks``: the bound's absolute term, as one run would see it."""
    scales = {}
    for rows in chunks:
        for tensor, value in fp32.run(rows).items():
            if _is_float(value):
                scales[tensor] = max(scales.get(tensor, 0.0), _scale(np.asarray(value, np.float64)))
    return scales


def _worse(old, new):
    """(max_abs, max_rel, passed, added_abs, added_ratio) over the rows seen so far."""
    if old is None:
        return new
    return (max(old[0], new[0]), max(old[1], new[1]), old[2] and new[2],
            *(None if a is None or b is None else max(a, b) for a, b in zip(old[3:], new[3:])))


LOCAL = "__paritygate_local"


def _local_graph(fp32_model, values):
    """(model, feed): every node of ``fp32_model`` whose inputs have candidate values, each computing alone from
    graph inputs carrying those values; node outputs renamed ``<name>__paritygate_local``."""
    model = _copy(fp32_model)
    g = model.graph
    inits = {i.name for i in g.initializer}
    constants = {o for n in g.node if n.op_type == "Constant" for o in n.output}
    nodes, fed = [], {}
    for node in g.node:
        if node.op_type == "Constant":
            nodes.append(node)
            continue
        outer = [i for i in node.input if i and i not in inits and i not in constants]
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute) \
                or not all(i in values for i in outer):
            continue  # a control-flow node, or one fed by a tensor the candidate does not expose
        fed.update({i: values[i] for i in outer})
        local = onnx.NodeProto()
        local.CopyFrom(node)
        del local.output[:]
        local.output.extend(o + LOCAL if o else "" for o in node.output)
        nodes.append(local)
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:], g.output[:], g.value_info[:]
    g.input.extend(onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), None)
                   for n, v in fed.items())
    g.output.extend(onnx.ValueInfoProto(name=o) for n in nodes if n.op_type != "Constant" for o in n.output if o)
    return model, fed


def added_errors(fp32_model, ref, values, atol, rtol):
    """FP32 tensor -> (max abs error, ratio to the magnitude-scaled bound) that its node adds: the candidate's
    value against the FP32 node run alone on the candidate's values of its inputs (module doc, Ranking)."""
    return _Local(fp32_model, ref, values).errors(ref, values, atol, rtol)


def _as_reference(ref, values):
    """``values`` in the FP32 tensors' dtypes (a candidate's float16 values as float32)."""
    return {k: np.asarray(v).astype(ref[k].dtype, copy=False) if k in ref else np.asarray(v)
            for k, v in values.items()}  # no copy where the dtypes agree: a full set of intermediates (issue 37)


class _Local:
    """The graph of every FP32 node run alone on given values of its inputs (``_local_graph``), one session."""

    def __init__(self, fp32_model, ref, values):
        model, fed = _local_graph(fp32_model, _as_reference(ref, values))
        self.inputs = list(fed)
        options = _lean(session_options())
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # each node as written
        self.sess = ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                         providers=["CPUExecutionProvider"])

    def errors(self, ref, values, atol, rtol, scales=None):
        """As ``added_errors``, on the rows ``ref`` and ``values`` hold (``scales``: as ``tensor_error``'s)."""
        values = _as_reference(ref, values)
        names = [o.name for o in self.sess.get_outputs()]
        local = dict(zip(names, self.sess.run(names, {i: values[i] for i in self.inputs})))
        out = {}
        for name, alone in local.items():
            tensor = name[:-len(LOCAL)]
            if tensor in ref and tensor in values and _is_float(ref[tensor]):
                out[tensor] = _added(ref[tensor], alone, values[tensor], atol, rtol, (scales or {}).get(tensor))
        return out


def _added(ref, alone, cand, atol, rtol, scale=None):
    """(max |cand - alone|, max of that over atol * max|ref| + rtol * |alone|): the bound of ``tensor_error``
    around the node's own FP32 result, its absolute term scaled by the reference tensor's magnitude (``scale``,
    as ``tensor_error``'s)."""
    r, a, c = (np.asarray(x, np.float64) for x in (ref, alone, cand))
    if a.shape != c.shape or a.size == 0:
        return (float("inf"), float("inf")) if a.shape != c.shape else (0.0, 0.0)
    scale = _scale(r) if scale is None else scale
    same = (a == c) | (np.isnan(a) & np.isnan(c))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        err = np.where(same, 0.0, np.abs(c - a))
        err = np.where(np.isnan(err), np.inf, err)
        bound = atol * scale + rtol * np.nan_to_num(np.abs(a), posinf=0.0)
        ratio = np.where(err == 0, 0.0, err / bound)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    return float(err.max()), float(ratio.max())


def _scale(r):
    finite = np.isfinite(r)
    return float(np.abs(r[finite]).max()) if finite.any() else 0.0


def _copy(model):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def upstream(model, node_name, eligible, exclude=()):
    """The nearest nodes upstream of ``node_name`` (through its inputs) for which ``eligible(node)`` holds and
    that are not in ``exclude``: where to look when keeping the divergent node itself did not help."""
    producer = {o: n for n in model.graph.node for o in n.output}
    by_name = {n.name: n for n in model.graph.node}
    found, seen = [], set()
    frontier = [by_name[node_name]] if node_name in by_name else []
    while frontier:
        nxt = []
        for node in frontier:
            for i in node.input:
                p = producer.get(i)
                if p is None or p.name in seen:
                    continue
                seen.add(p.name)
                (found if eligible(p) and p.name not in exclude else nxt).append(p)
        if found:
            return [p.name for p in found]
        frontier = nxt
    return []


CRASHED_NODE = re.compile(r"Name:'([^']+)'")  # ONNX Runtime: "... while running Gather node. Name:'<node>' ..."


def crash_site(cand_model, message):
    """Where a candidate that crashes on the failing inputs broke: the node ONNX Runtime names in ``message`` and,
    when the artifact carries an index through float16 (``index_paths.rounded``), that path's node as the cause
    (SentiToolKit: token id 4999 rounded to 5000 before its Embedding's Gather). A dict for the report."""
    from paritygate.backend.onnx.artifacts import index_paths
    from paritygate.backend.onnx.graph import scopes

    named = CRASHED_NODE.search(message)
    crashed = named.group(1) if named else None
    ops = {n.name: n.op_type for n in scopes.nodes(cand_model.graph)}
    paths = [p for p in index_paths.index_paths(cand_model) if "float16" in p["floats"].values()]
    cause = next((p for p in paths if p["index_of"] == crashed), paths[0] if paths else None)
    first = cause["node"] if cause else crashed
    text = next((line.strip() for line in message.splitlines() if line.strip()), message)
    return {"first_node": first, "op_type": ops.get(first), "crashed_node": crashed, "crash": text[-400:],
            "cause": next((line for line in index_paths.rounded(cand_model) if f"'{cause['index_of']}'" in line),
                          None) if cause else None, "verified": None}
