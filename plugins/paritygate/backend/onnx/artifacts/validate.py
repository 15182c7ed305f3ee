"""Validation of every ONNX artifact the suite builds, before it is cached.

An artifact is cached only after all four steps pass; the first that fails raises ``ArtifactError`` naming the
converter, the node and the message, and the build leaves no file behind (``paritygate.backend.cache.cached_file``):

1. ``onnx.checker.check_model(full_check=True)``: the graph, its types and opsets are valid ONNX;
2. ``onnx.shape_inference.infer_shapes(strict_mode=True, check_type=True)``: every node's inferred type and
   shape agree with the declared ``value_info`` (where onnxconverter-common and quantize_static go wrong);
3. an ONNX Runtime session (CPU): the runtime accepts every node with its types;
4. one smoke run on a sample input (a calibration row, else a seeded sample inside the spec's ranges).
"""

import re

import numpy as np

from paritygate.inputs.sampling import valid_rows
from paritygate.lazy import lazy_import
from paritygate.verdict import SuiteError

onnx = lazy_import("onnx")

# Where the validators name the node: onnx "(op_type:Celu, node name: celu)", ONNX Runtime "... in node (celu)",
# "of node (celu)", "Node (celu) Op (Transpose)", "node with name 'celu'", "running Mul node. Name:'celu'".
_NODE_PATTERNS = (r"node name: ([^)]*)\)", r"(?:in|of) node \(([^)]*)\)", r"Node \(([^)]*)\) Op",
                  r"node with name '([^']*)'", r"node\. Name:'([^']*)'")

_NP_OF_ONNX = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
               10: np.float16, 11: np.float64}


class ArtifactError(SuiteError):
    """An artifact the suite built is invalid: a converter's (or the suite's) failure, never the candidate's.

    ``converter`` built it, ``node`` is the node the validator named (None when it named none), ``step`` the
    validation step that failed. A known converter gap (``gaps.json``) the message matches is named first, with
    its fix (``gap``: its id). ``lasting``: the failure depends on nothing but the artifact's cache key (the
    converter's own exit, the checker), so it is recorded in the cache (``failures``) and not computed again."""

    def __init__(self, converter, step, message, node=None, path=None, lasting=False):
        from paritygate.backend.onnx.artifacts.gaps import gap_line, known_gap

        self.converter, self.step, self.node, self.path, self.lasting = converter, step, node, path, lasting
        self.message = message
        where = f" at node '{node}'" if node else ""
        said = f"{step} failed{where}: {message}"
        gap = known_gap(converter, said)
        self.gap = gap["id"] if gap else None
        if gap:
            super().__init__(f"{converter} cannot convert this model{f' ({path})' if path else ''}: {gap_line(gap)} "
                             f"(its own error: {said})")
        else:
            super().__init__(f"{converter} built an invalid artifact{f' {path}' if path else ''}: {said}")

    def __reduce__(self):  # made again from its fields: a build run apart (common.apart) raises it across processes
        return type(self), (self.converter, self.step, self.message, self.node, self.path, self.lasting)


def node_of(message):
    """The node a checker / runtime message names, or None."""
    for pattern in _NODE_PATTERNS:
        match = re.search(pattern, message)
        if match:
            return match.group(1)
    return None


def _first_lines(err, n=3, width=600):
    text = " ".join(line.strip() for line in str(err).strip().splitlines()[:n])
    return text if len(text) <= width else text[:width] + " …"


def check_graph(model, converter, path=None):
    """Steps 1 and 2 on an in-memory ModelProto."""
    for step, run in (("onnx.checker.check_model(full_check=True)",
                       lambda: onnx.checker.check_model(model, full_check=True)),
                      ("onnx.shape_inference.infer_shapes(strict_mode=True)",
                       lambda: onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True))):
        try:
            run()
        except Exception as err:  # onnx raises ValidationError, InferenceError and others
            raise ArtifactError(converter, step, _first_lines(err), node_of(str(err)), path) from err


def check_runtime(model_bytes, feeds, converter, path=None):
    """Steps 3 and 4: an ONNX Runtime session on the serialized model, and one run on ``feeds``."""
    import onnxruntime as ort

    from paritygate.backend.onnxrt.options import session_options

    options = session_options()  # warnings (e.g. lenient shape merges) are not the verdict; errors are
    try:
        session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ArtifactError(converter, "onnxruntime.InferenceSession", _first_lines(err), node_of(str(err)),
                            path) from err
    from paritygate.backend.deadline import bounded
    from paritygate.backend.onnxrt.runner import terminate

    run_options = ort.RunOptions()  # a Loop that never ends is stopped at the inference time limit
    try:
        bounded(lambda: session.run(None, feeds, run_options), f"{path or converter}: smoke run", in_thread=False,
                cancel=lambda: terminate(run_options))
    except Exception as err:
        shapes = {k: (v.dtype.name, list(v.shape)) for k, v in feeds.items()}
        raise ArtifactError(converter, f"smoke run on {shapes}", _first_lines(err), node_of(str(err)),
                            path) from err


def validate(model, feeds, converter, path=None):
    """All four steps; ``model`` is a ModelProto."""
    check_graph(model, converter, path)
    check_runtime(model.SerializeToString(), feeds, converter, path)


def smoke_feeds(spec, model, names, calibration=None):
    """One batch-1 feed for ``model`` by its own input names: the first calibration row where the model has
    calibration data, else a seeded uniform sample inside each input's ``range`` from the spec.

    ``names`` maps reference input name -> this model's input name (``paritygate.backend.iomap.input_map``); the values
    take the model's declared element type, so that a spec mistake surfaces in the spec check, not here."""
    declared = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    rng = np.random.default_rng(0)
    feeds = {}
    for ref, tensor in spec.inputs.items():
        dtype = _NP_OF_ONNX.get(declared.get(names[ref]), tensor.dtype)
        if calibration is not None and ref in calibration:
            value = calibration[ref][:1]
        else:
            low, high = tensor.range
            shape = tensor.with_batch(1)
            if np.issubdtype(tensor.dtype, np.integer) or tensor.dtype == np.bool_:
                value = rng.integers(int(low), int(high) + 1, size=shape)
            else:
                value = rng.uniform(float(low), float(high), size=shape)
        feeds[names[ref]] = valid_rows(tensor, np.asarray(value).astype(dtype))  # inputs.<name>.not_all
    return feeds
