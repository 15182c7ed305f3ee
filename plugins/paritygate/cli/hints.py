"""What a model's graph tells ``paritygate init`` about an input's valid values, with the reason written beside
the range it proposes. Where nothing tells, ``init`` keeps its default and its ``# CONFIRM`` comment says what to
look for (``LOOK_FOR``).

Read, each where the model holds it:
- an Embedding (Keras layer) or a Gather over a weight table (the ONNX) that the input indexes: ids ``[0, rows-1]``
  (SentiToolKit 0.1.8: float32 token ids into 5,000 rows; [-1, 1] would only ever look up rows 0 and 1);
- a Rescaling layer reading the input (Keras; in the ONNX a Mul by a constant, then an optional Add): the raw range
  it maps onto [0, 1] or [-1, 1], i.e. pixels ``[0, 255]``;
- a Normalization layer reading the input (Keras): mean +- 3 standard deviations, over its channels;
- a Keras Applications VGG backbone (``block1_conv1`` among the graph's names: VGG16/19, and HED built on it), whose
  ``preprocess_input`` is Caffe mode (keras/applications/imagenet_utils.py): BGR pixels minus the ImageNet mean
  (103.939, 116.779, 123.68), so ``[-123.68, 151.061]``.
"""

import zipfile

import numpy as np

from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

CAFFE_MEAN = (103.939, 116.779, 123.68)  # keras/applications/imagenet_utils.py, mode "caffe" (BGR order)
CAFFE_RANGE = (round(-max(CAFFE_MEAN), 3), round(255 - min(CAFFE_MEAN), 3))  # (-123.68, 151.061)
VGG_NAME = b"block1_conv1"  # Keras Applications VGG16/VGG19's first layer
LOOK_FOR = ("the model's preprocessing: x/255 -> [0.0, 1.0]; (x-127.5)/127.5 -> [-1.0, 1.0]; raw pixels -> [0, 255]; "
            f"Caffe/VGG (BGR minus the ImageNet mean) -> [{CAFFE_RANGE[0]}, {CAFFE_RANGE[1]}]; ids/indices (e.g. "
            "token ids into an Embedding of N rows) -> [0, N-1]")


def input_hints(reference, keras, onnx_path=None, input_map=None):
    """{reference input name: (low, high, why)} from the Keras layers (``keras``: the reference is a Keras file), the
    candidate ONNX (``onnx_path``, its names paired through ``input_map``: ref -> (candidate, rule)) and the names
    in the reference's files; the first source that tells wins."""
    hints = {}
    if onnx_path is not None:
        back = {cand: ref for ref, (cand, _rule) in (input_map or {}).items()}
        hints.update({back.get(k, k): v for k, v in onnx_hints(onnx_path).items()})
    if keras:
        hints = {**keras_hints(reference), **hints}
    if VGG_NAME in _names(reference, onnx_path):
        why = ("a Keras Applications VGG backbone (block1_conv1): Caffe-mode input, BGR pixels minus the ImageNet "
               "mean (103.939, 116.779, 123.68)")
        return {"*": (*CAFFE_RANGE, why, "confirm"), **hints}  # a name, not the preprocessing itself: confirm  # "*": every float image input without a hint of its own
    return hints


# -- the ONNX ------------------------------------------------------------------------------------------------
def onnx_hints(path):
    """{graph input: (low, high, why)} from the top-level graph of the ONNX at ``path``."""
    model = onnx.load(str(path), load_external_data=False)
    graph, found = model.graph, {}
    consts = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Gather" and node.input[0] in consts and len(node.input) > 1:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            rows = int(consts[node.input[0]].dims[axis])
            for name in _roots(graph, node.input[1]):
                found.setdefault(name, (0, rows - 1, (f"indexes {rows} rows of a table (Gather '{node.name}', an "
                                                     f"Embedding): ids 0..{rows - 1}")))
    for inp in graph.input:
        scaled = _rescaled(graph, inp.name, consts)
        if scaled and inp.name not in found:
            found[inp.name] = scaled
    return found


def _roots(graph, tensor):
    """The graph inputs whose value reaches ``tensor`` through ops that carry it (index_paths.CARRY)."""
    from paritygate.backend.onnx.artifacts.index_paths import CARRY

    producer = {o: n for n in graph.node for o in n.output}
    inputs, roots, stack, seen = {i.name for i in graph.input}, set(), [tensor], set()
    while stack:
        name = stack.pop()
        if name in inputs:
            roots.add(name)
        node = producer.get(name)
        if node is None or node.op_type not in CARRY or node.name in seen:
            continue
        seen.add(node.name)
        stack += [t for i, t in enumerate(node.input) if t and (CARRY[node.op_type] is None or i in CARRY[node.op_type])]
    return roots


def _scalar(consts, name):
    if name in consts and int(np.prod(consts[name].dims)) == 1:
        return float(onnx.numpy_helper.to_array(consts[name]).ravel()[0])
    return None


def _rescaled(graph, name, consts):
    """A Rescaling: the input's only reader multiplies it by a constant s (or divides), then maybe adds b."""
    readers = [n for n in graph.node if name in n.input]
    if len(readers) != 1 or readers[0].op_type not in ("Mul", "Div"):
        return None
    node = readers[0]
    k = _scalar(consts, node.input[1] if node.input[0] == name else node.input[0])
    if not k:
        return None
    s = 1 / k if node.op_type == "Div" else k
    after = [n for n in graph.node if node.output[0] in n.input]
    b = _scalar(consts, after[0].input[1]) if len(after) == 1 and after[0].op_type in ("Add", "Sub") else None
    b = (-b if after[0].op_type == "Sub" else b) if b is not None else 0.0
    return _rescaling_range(s, b, f"the graph rescales it (x * {s:.6g} + {b:g}, node '{node.name}')")


def _rescaling_range(scale, offset, why):
    """Raw pixels [0, 255] when x * scale + offset maps them onto [0, 1] or [-1, 1]; else None."""
    for low, high in ((0.0, 1.0), (-1.0, 1.0)):
        if abs(offset - low) < 1e-3 and abs(255 * scale + offset - high) < 1e-3:
            return 0, 255, f"{why}: maps raw pixels 0..255 onto [{low:g}, {high:g}]"
    return None


# -- Keras -------------------------------------------------------------------------------------------------
def keras_hints(path):
    """{model input name: (low, high, why)} from the layers that read a model input directly."""
    from paritygate.backend.tf.util import load_keras

    model = load_keras(path)  # refuses a file with code in it, as the reference runner does
    inputs, found = {id(t): t.name for t in model.inputs}, {}
    for layer in model.layers:
        try:
            name = inputs.get(id(layer.input))
        except (AttributeError, ValueError):  # a layer called more than once has no single input
            continue
        hint = _layer_hint(layer) if name else None
        if hint:
            found.setdefault(name, hint)
    return found


def _layer_hint(layer):
    kind = type(layer).__name__
    if kind == "Embedding":
        rows = int(layer.input_dim)
        return 0, rows - 1, f"feeds Embedding '{layer.name}' of {rows} rows: ids 0..{rows - 1}"
    if kind == "Rescaling":
        scale, offset = (float(np.mean(v)) for v in (layer.scale, layer.offset))
        return _rescaling_range(scale, offset, f"Rescaling '{layer.name}' (scale {scale:.6g}, offset {offset:g})")
    if kind == "Normalization" and getattr(layer, "mean", None) is not None:
        mean, std = np.asarray(layer.mean).ravel(), np.sqrt(np.asarray(layer.variance).ravel())
        low, high = float(np.min(mean - 3 * std)), float(np.max(mean + 3 * std))
        return round(low, 4), round(high, 4), f"Normalization '{layer.name}': its mean +- 3 standard deviations"
    return None


def _names(reference, onnx_path):
    """The bytes that hold the model's layer and node names: the SavedModel's graph, the .keras config, the .h5
    file, the ONNX."""
    from pathlib import Path

    reference, blobs = Path(reference), []
    if reference.is_dir():
        blobs.append((reference / "saved_model.pb").read_bytes() if (reference / "saved_model.pb").exists() else b"")
    elif zipfile.is_zipfile(reference):
        with zipfile.ZipFile(reference) as archive:
            blobs += [archive.read(n) for n in archive.namelist() if n.endswith(".json")]
    elif reference.is_file():
        blobs.append(reference.read_bytes())
    if onnx_path is not None:
        blobs.append(b" ".join(n.name.encode() for n in onnx.load(str(onnx_path), load_external_data=False).graph.node))
    return b"\n".join(blobs)
