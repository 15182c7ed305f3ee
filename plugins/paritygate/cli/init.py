"""``paritygate init``: inspect a model and write a starter config that runs unedited.

What the model says (input names, shapes, dtypes, output names, the candidate's names) is written as is. What it
cannot say is given a default that runs and marked ``# CONFIRM`` for a person to check: value ranges (float
[-1, 1], integers [0, 1], uint8 [0, 255]), a size for a dynamic non-batch dimension, ``max_batch``, the task,
and an output/input pairing found only by position.
"""

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paritygate.backend.tf.util import REFERENCE_KINDS, is_keras
from paritygate.cli.hints import LOOK_FOR
from paritygate.files import check_file, write_file
from paritygate.models import writer
from paritygate.models.config import ConfigError, check_model_value, load_config

DEFAULT_RANGES = {"f": (-1.0, 1.0), "u": (0, 255), "i": (0, 1), "b": (0, 1)}  # numpy dtype kind -> range
DYNAMIC_DIM = 16  # min size proposed for a dynamic dimension other than the batch (opt 2x, max 4x)
# an image's dynamic height/width: min, opt, max. opt 224: ImageNet's, the size most image backbones are trained at
# (HED's BSDS500 images are 321x481); max 320: HED's team ran 320x320; min 32: small and odd sizes catch shape bugs
IMAGE_SIZES = (32, 224, 320)
CONFIRM = "# CONFIRM"


@dataclass
class Inspected:
    """What ``init`` learned: the reference's tensors and, with ``--onnx``, the proposed pairing."""

    reference: Path
    signature: str
    inputs: dict  # name -> (np.dtype, shape with -1 for dynamic dims)
    outputs: list  # reference output names
    onnx: Path = None
    input_map: dict = field(default_factory=dict)  # ref -> (candidate, rule)
    output_map: dict = field(default_factory=dict)  # ref -> (candidate, rule)
    artifacts: dict = field(default_factory=dict)  # the team's own reduced-precision ONNX: precision -> Path


class InitError(ValueError):
    """The model cannot be inspected or the config cannot be written; the message names the file."""


def inspect_reference(path, signature="serving_default"):
    """Input metadata and output names of a SavedModel signature or a Keras file (loads it with TensorFlow)."""
    from paritygate.backend.base import RunnerError
    from paritygate.backend.tf.runner import TfRunner

    path = Path(path)
    if path.suffix == ".onnx":
        raise InitError(f"{path}: an ONNX file is the candidate, not the reference; pass the TensorFlow model "
                        f"({REFERENCE_KINDS}) as MODEL and this file with --onnx")
    if not path.exists():
        raise InitError(f"{path}: no such file or folder (expected {REFERENCE_KINDS})")
    check_file(path, f"the reference ({REFERENCE_KINDS})", "model", InitError, folder_ok=True)
    try:
        runner = TfRunner(path, signature).activate()
    except RunnerError as err:
        raise InitError(str(err)) from err
    try:
        return Inspected(path, signature, dict(runner.input_metadata()), list(_reference_outputs(path, signature,
                                                                                                 runner)))
    finally:
        runner.deactivate()


def _reference_outputs(path, signature, runner):
    if not is_keras(path):
        from paritygate.backend.iomap import signature_bindings

        outputs = signature_bindings(path, signature)[1]
        if outputs:
            return sorted(outputs)
    return runner.output_names


def onnx_names(path):
    """(input names, output names) of an ONNX file, initializers excluded."""
    import onnx

    check_file(path, "ONNX model", "onnx", InitError)
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as err:  # onnx raises DecodeError and others for a corrupt file
        raise InitError(f"{path}: cannot read ONNX model: {err}") from err
    weights = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in weights], [o.name for o in graph.output]


def propose_mapping(found, onnx_path):
    """Pair the reference's tensors with the ONNX file's (paritygate.backend.iomap's rules; by position when they
    cannot tell, marked for confirmation)."""
    from paritygate.backend import iomap

    cand_in, cand_out = onnx_names(onnx_path)
    bound_in, bound_out = ({}, {}) if is_keras(found.reference) else \
        iomap.signature_bindings(found.reference, found.signature)
    found.onnx = Path(onnx_path)
    for kind, refs, cands, bound, target in (("input", list(found.inputs), cand_in, bound_in, found.input_map),
                                             ("output", found.outputs, cand_out, bound_out, found.output_map)):
        try:
            target.update(iomap.map_names(kind, refs, cands, bound=bound, signature=found.signature))
        except iomap.MappingError as err:
            if len(refs) != len(cands):
                raise InitError(f"{onnx_path}: {err}") from err
            target.update({r: (c, "position") for r, c in zip(refs, cands)})
    return found


# -- the TOML: every string the model or a file name gives is written by paritygate.models.writer -------------
def _path(target, config_dir):
    try:
        return Path(os.path.relpath(Path(target).resolve(), config_dir.resolve())).as_posix()
    except ValueError:  # another drive (Windows)
        return Path(target).resolve().as_posix()


def _image_like(shape):
    """NHWC or NCHW with 1, 3 or 4 channels."""
    return len(shape) == 4 and (shape[3] in (1, 3, 4) or shape[1] in (1, 3, 4))


def _profile_line(shape, max_batch):
    """``profile = { min, opt, max }`` for the dynamic dims of ``shape`` (batch 1, max_batch, max_batch): an image's
    height and width at IMAGE_SIZES, any other dimension at DYNAMIC_DIM x 1, 2, 4."""
    dynamic = [i for i, d in enumerate(shape) if i > 0 and d == -1]
    image = _image_like(shape)
    sizes = IMAGE_SIZES if image else (DYNAMIC_DIM, 2 * DYNAMIC_DIM, 4 * DYNAMIC_DIM)
    table = ", ".join(f"{k} = {json.dumps([b] + [size if d == -1 else int(d) for d in shape[1:]])}"
                      for k, b, size in zip(("min", "opt", "max"), (1, max_batch, max_batch), sizes))
    why = ("image sizes; opt 224 is ImageNet's: use the sizes your pipeline feeds" if image else
           f"{sizes[0]}..{sizes[2]} proposed")
    return (f"profile = {{ {table} }}  {CONFIRM}: dimension(s) {', '.join(map(str, dynamic))} dynamic in the model: "
            f"the sizes it must take, min <= opt <= max ({why}; TensorRT builds this optimization profile)")


def _input_lines(name, dtype, shape, mapped, max_batch=4, hint=None):
    dims = [-1] + [int(d) for d in shape[1:]]
    low, high = DEFAULT_RANGES.get(np.dtype(dtype).kind, (0, 1))
    if hint:  # the graph tells: (low, high, why); a float input's bounds written as floats
        low, high = (float(v) for v in hint[:2]) if np.dtype(dtype).kind == "f" else (int(v) for v in hint[:2])
    rule = (f"{CONFIRM if hint[3:] else '#'} from the model: {writer.comment(hint[2])}" if hint else f"{CONFIRM}: the inclusive bounds of valid values (default "
            f"for {np.dtype(dtype).name}; generated inputs stay inside); look for {LOOK_FOR}")
    lines = [f"[models.inputs.{writer.key(name)}]", f"shape = {json.dumps(dims)}",
             *([_profile_line(shape, max_batch)] if -1 in dims[1:] else []),
             f"dtype = {writer.string(np.dtype(dtype).name)}", f"range = [{low!r}, {high!r}]  {rule}"]
    if mapped:
        cand, rule = mapped
        lines.append(f"candidate = {writer.string(cand)}" + (f"  {CONFIRM}: paired by {rule}" if rule == "position"
                                                          else f"  # paired by {rule}"))
    return lines


def render(found, name, config_dir, max_batch=4, config_name="parity.toml", hints=None):
    """The starter config's text (the caller validates it by loading it). ``hints``: what the graph tells about
    the inputs' values (paritygate.cli.hints.input_hints)."""
    hints = hints or {}
    lines = ["# " + writer.comment(f"Starter config written by `paritygate init` from {writer.string(found.reference.name)}"
                                   + (f" and {writer.string(found.onnx.name)}" if found.onnx else "") + "."),
             f"# Lines marked {CONFIRM} hold defaults the model cannot tell; check them, then run:",
             "#     " + writer.comment(f"paritygate run {config_name}   (or: pytest --pyargs paritygate.conformance "
                                    f"--parity-config={config_name})"),
             "", "[[models]]", f"name = {writer.string(name)}",
             f"reference = {writer.string(_path(found.reference, config_dir))}"]
    if not is_keras(found.reference):
        lines.append(f"signature = {writer.string(found.signature)}")
    files = {**({"fp32": found.onnx} if found.onnx else {}), **found.artifacts}
    if found.artifacts:  # the team's own fp16/int8 files: judged as they are (the fp32 one, or tf2onnx's, is fp32)
        table = ", ".join(f"{p} = {writer.string(_path(f, config_dir))}" for p, f in files.items())
        lines.append(f"onnx = {{ {table} }}")
    elif found.onnx:
        lines.append(f"onnx = {writer.string(_path(found.onnx, config_dir))}")
    else:
        lines.append("# onnx = \"model.onnx\"                # absent: converted from the reference with tf2onnx")
    lines.append(f"precisions = {writer.array(['fp32', *found.artifacts])}" if found.artifacts else
                 'precisions = ["fp32"]                  # add "fp16"; "int8" needs calibration = "<inputs>.npz"')
    lines += [
              f"max_batch = {max_batch}                          {CONFIRM}: every batch size 1..max_batch is checked",
              f'task = "generic"                       {CONFIRM}: classification | regression | detection | generic',
              ""]
    for inp, (dtype, shape) in found.inputs.items():
        image = np.dtype(dtype).kind == "f" and _image_like(shape)
        hint = hints.get(inp) or (hints.get("*") if image else None)
        lines += _input_lines(inp, dtype, shape, found.input_map.get(inp), max_batch, hint) + [""]
    lines.append("# reference output -> candidate output" if found.output_map else
                 "# " + writer.comment(f"reference outputs: {', '.join(map(writer.string, found.outputs))} (paired "
                                       "with the candidate's by name when converted here)"))
    if found.output_map:
        lines.append("[models.outputs]")
        for ref, (cand, rule) in found.output_map.items():
            note = f"  {CONFIRM}: paired by position" if rule == "position" else f"  # paired by {rule}"
            lines.append(f"{writer.key(ref)} = {writer.string(cand)}{note}")
    lines += ["", "# RunInference checks: a factory returning your unkeyed Beam ModelHandler over numpy, e.g.",
              "# paritygate.beam.tf_handler.TFNumpyHandler(path, min_batch_size=..., max_batch_size=...)",
              "# [models.beam]", '# handler = "my_handlers:make"       # a module beside this file']
    return "\n".join(lines) + "\n"


def _hints(found):
    """What the graph tells about the inputs' values; a model it cannot read tells nothing (init still writes)."""
    from paritygate.cli.hints import input_hints

    try:
        return input_hints(found.reference, is_keras(found.reference), found.onnx, found.input_map)
    except Exception:  # noqa: BLE001 - a hint is a proposal: never a reason for init to fail
        return {}


def _name_of(path):
    if path.stem in ("saved_model", "model") and path.parent.name:  # zoo/models/linear/saved_model -> linear
        path = path.parent
    return re.sub(r"[^A-Za-z0-9_]+", "_", path.stem).strip("_")[:64] or "model"  # the schema's name rule


def write_starter(model, output, onnx=None, name=None, signature="serving_default", max_batch=4, force=False,
                  artifacts=None):
    """Inspect ``model`` (and ``onnx``), write the config to ``output`` and load it back; returns the path."""
    output = Path(output)
    if output.exists() and not force:
        raise InitError(f"{output}: already exists; pass --force to overwrite it")
    if output.exists() and not output.is_file():
        raise InitError(f"{output}: exists and is not a regular file; expected a path for the config")
    for option, key, value in (("--name", "name", name), ("--max-batch", "max_batch", max_batch)):
        why = None if value is None else check_model_value(key, value)
        if why:
            raise InitError(f"{option} {value!r}: {why}")
    _check_writable(output)
    for path in (onnx, *(artifacts or {}).values()):  # named now, before the reference loads (a FIFO: no hang)
        if path is not None:
            check_file(path, "ONNX model", "onnx", InitError)
    found = inspect_reference(model, signature)
    if onnx is not None:
        propose_mapping(found, onnx)
    for precision, path in (artifacts or {}).items():
        if path is not None:
            onnx_names(path)  # a file that does not load is named now, not at the first run
            found.artifacts[precision] = Path(path)
    name = name or _name_of(Path(model).absolute())
    try:
        text = render(found, name, output.parent, max_batch, output.name, _hints(found))
    except ValueError as err:  # a name TOML cannot hold (paritygate.models.writer)
        raise InitError(f"{model}: {err}") from err
    draft = write_file(output.with_name(f".{output.name}.draft"), text, "the config", InitError)  # loaded back first
    try:
        load_config(draft)
    except ConfigError as err:
        draft.unlink()
        raise InitError(f"{output}: the config it would write does not load ({err}); please report this") from err
    try:
        os.replace(draft, output)  # a symlink at ``output`` is replaced, never followed
    except OSError as err:
        draft.unlink()
        raise InitError(f"{output}: cannot write the config: {err.strerror or err}") from None
    return output


def _check_writable(output):
    """Before the model loads: the config's folder exists (or is made) and takes a file."""
    import tempfile

    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output.parent, prefix=".write-test-"):
            pass
    except (FileExistsError, NotADirectoryError):
        file = next(p for p in output.parents if p.exists())
        raise InitError(f"{output}: cannot write the config there: {file} is a file, not a folder") from None
    except OSError as err:
        raise InitError(f"{output}: cannot write the config there: {err.strerror or err}") from None
