"""Input and output names: which candidate tensor answers to which reference tensor.

Converters decorate names: tf2onnx names a SavedModel's input ``serving_default_input_2:0`` and its outputs
``StatefulPartitionedCall:0..n``, where the signature says ``input_2`` and ``contour``/``note``/``onset``. The
mapping is resolved once per model, by the first rule that applies, and recorded in the report:

1. ``explicit``: ``[models.inputs.NAME] candidate = "..."`` / ``[models.outputs] ref = "cand"`` in the config;
2. ``name``: the same name on both sides (names win, so outputs swapped under their own names are caught);
3. ``signature``: the SavedModel's own SignatureDef binds each signature key to a graph tensor
   (``outputs["note"].name == "StatefulPartitionedCall:1"``), the name tf2onnx gives the ONNX tensor;
4. ``decorated``: the same name once ``<signature>_`` / ``serving_default_`` prefixes and ``:N`` suffixes go;
5. ``single``: one tensor left on each side.

Anything left over is ambiguous: a ``MappingError`` naming both lists and the config lines to write.
"""

import re
from pathlib import Path

_SUFFIX = re.compile(r":\d+$")


class MappingError(ValueError):
    """The reference and candidate names cannot be paired unambiguously; the message says what to write."""


class BindingsError(ValueError):
    """saved_model.pb cannot be read for its SignatureDef; the message names the file."""


def undecorated(name, signature="serving_default"):
    name = _SUFFIX.sub("", name)
    for prefix in (f"{signature}_", "serving_default_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def map_names(kind, ref_names, cand_names, explicit=None, bound=None, signature="serving_default"):
    """Reference name -> (candidate name, rule) for ``kind`` ("input"/"output").

    ``explicit``: ref -> cand from the config; ``bound``: ref -> graph tensor name from the SignatureDef."""
    explicit, bound = dict(explicit or {}), dict(bound or {})
    cands = list(cand_names)
    pairs = {}
    unknown = sorted(r for r in explicit if r not in ref_names)
    if unknown:
        raise MappingError(f"{kind}(s) {unknown} are mapped to candidate names, but the reference has no such "
                           f"{kind}; reference {kind}s are {sorted(ref_names)}")
    for ref, cand in explicit.items():
        if cand not in cands:
            raise MappingError(f"{kind} '{ref}' is mapped to candidate {kind} '{cand}', which does not exist; "
                               f"candidate {kind}s are {sorted(cands)}")
        pairs[ref] = (cand, "explicit")
    rules = (("name", lambda r, c: c == r), ("signature", lambda r, c: c == bound.get(r)),
             ("decorated", lambda r, c: undecorated(c, signature) == r))
    for rule, matches in rules:
        for ref in [r for r in ref_names if r not in pairs]:
            hits = [c for c in _free(cands, pairs) if matches(ref, c)]
            if len(hits) == 1:
                pairs[ref] = (hits[0], rule)
    left_ref, left_cand = [r for r in ref_names if r not in pairs], _free(cands, pairs)
    if len(left_ref) == 1 and len(left_cand) == 1:
        pairs[left_ref[0]] = (left_cand[0], "single")
    elif left_ref or left_cand:
        raise MappingError(_ambiguous(kind, ref_names, cands, left_ref, left_cand))
    return {r: pairs[r] for r in ref_names}


def _free(cands, pairs):
    taken = {c for c, _ in pairs.values()}
    return [c for c in cands if c not in taken]


def _ambiguous(kind, ref_names, cand_names, left_ref, left_cand):
    if not left_ref:
        lines = f"nothing: candidate {kind}(s) {left_cand} answer to no reference {kind}; remove them from the candidate"
    elif kind == "input":
        lines = "; ".join(f'[models.inputs.{r}] candidate = "<one of {left_cand}>"' for r in left_ref)
    else:
        lines = "[models.outputs] " + ", ".join(f'{r} = "<one of {left_cand}>"' for r in left_ref)
    return (f"cannot pair {kind}s: reference {kind}s {sorted(ref_names)}, candidate {kind}s {sorted(cand_names)}; "
            f"unpaired reference {left_ref}, unpaired candidate {left_cand}; write: {lines}")


def signature_bindings(saved_model_dir, signature):
    """(inputs, outputs): signature key -> graph tensor name, read from saved_model.pb's SignatureDef.

    Read from the protobuf wire format itself (``_signature_defs``), so that naming tensors imports no
    TensorFlow (a warm run whose reference outputs come from the cache imports none); TensorFlow's own parser
    is the fallback for a file the reader does not understand. Empty dicts when the file has no such signature
    (the runner reports that with its own message)."""
    from paritygate.files import read_bytes

    data = read_bytes(Path(saved_model_dir) / "saved_model.pb", "SavedModel graph", "onnx", BindingsError)
    try:
        return _signature_defs(memoryview(data)).get(signature, ({}, {}))
    except (ValueError, IndexError):
        pass
    from tensorflow.core.protobuf import saved_model_pb2

    path = saved_model_dir / "saved_model.pb"
    proto = saved_model_pb2.SavedModel()
    try:
        proto.ParseFromString(data)
    except Exception as err:
        raise BindingsError(f"{path}: cannot read the SavedModel's SignatureDef: not a SavedModel protobuf "
                            f"({type(err).__name__}: {err})") from err
    for graph in proto.meta_graphs:
        if signature in graph.signature_def:
            sig = graph.signature_def[signature]
            return ({k: v.name for k, v in sig.inputs.items()}, {k: v.name for k, v in sig.outputs.items()})
    return {}, {}


# SavedModel.meta_graphs = 2; MetaGraphDef.signature_def = 5 (map entry: key = 1, value = 2); SignatureDef.inputs
# = 1, .outputs = 2 (maps of TensorInfo); TensorInfo.name = 1 (tensorflow/core/protobuf/{saved_model,meta_graph}.proto)
def _signature_defs(buf):
    """signature key -> (inputs, outputs) from a serialized SavedModel, the first meta graph holding each."""
    found, graphs = {}, 0
    for number, graph in _fields(buf):
        if number != 2:
            continue
        graphs += 1
        for entry_number, entry in _fields(graph):
            if entry_number == 5:
                key, sig = _map_entry(entry)
                found.setdefault(key, ({}, {}))
                for part, tensors in _fields(sig):
                    if part in (1, 2):
                        name, info = _map_entry(tensors)
                        found[key][part - 1][name] = next(
                            (bytes(v).decode() for n, v in _fields(info) if n == 1), "")
    if not graphs:
        raise ValueError("no MetaGraphDef: not a SavedModel protobuf")  # TensorFlow's parser says what it is
    return found


def _map_entry(entry):
    fields = dict(_fields(entry))
    return bytes(fields.get(1, b"")).decode(), fields.get(2, memoryview(b""))


def _fields(buf):
    """(field number, value) of one protobuf message: an int for a varint, a memoryview slice otherwise."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        wire = tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if pos > len(buf):
            raise ValueError("truncated protobuf message")
        yield tag >> 3, value


def _varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        result |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return result, pos
        shift += 7


def bindings_of(spec):
    """The SignatureDef bindings of a SavedModel reference (empty for a Keras file)."""
    from paritygate.backend.tf.util import is_keras

    if is_keras(spec.reference) or not (spec.reference / "saved_model.pb").exists():
        return {}, {}
    return signature_bindings(spec.reference, spec.signature)


def input_map(spec, cand_inputs, bound=None):
    """Reference input name (the config's) -> candidate input name."""
    bound = bindings_of(spec)[0] if bound is None else bound
    explicit = {n: t.candidate for n, t in spec.inputs.items() if t.candidate}
    pairs = map_names("input", list(spec.inputs), cand_inputs, explicit, bound, spec.signature)
    return {r: c for r, (c, _) in pairs.items()}


def resolve(spec, ref_outputs, cand_inputs, cand_outputs):
    """The whole mapping of a model, as recorded in the report: {"inputs": {ref: {candidate, rule}}, "outputs": ...}.

    Raises MappingError with the model and config key named."""
    bound_in, bound_out = bindings_of(spec)
    explicit_in = {n: t.candidate for n, t in spec.inputs.items() if t.candidate}
    try:
        ins = map_names("input", list(spec.inputs), cand_inputs, explicit_in, bound_in, spec.signature)
    except MappingError as err:
        raise MappingError(f"{spec.where('inputs')}: {err}") from None
    try:
        outs = map_names("output", list(ref_outputs), cand_outputs, spec.outputs, bound_out, spec.signature)
    except MappingError as err:
        raise MappingError(f"{spec.where('outputs')}: {err}") from None
    return {"inputs": {r: {"candidate": c, "rule": rule} for r, (c, rule) in ins.items()},
            "outputs": {r: {"candidate": c, "rule": rule} for r, (c, rule) in outs.items()}}
