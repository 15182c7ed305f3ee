"""The validation pass's checks of what a model's config declares beside its reference and fp32 candidate, read
without running the model (``judge.preflight`` runs them, each under its key): the team's own fp16/int8 ONNX, the
data files, prebuilt engines' TensorRT version, the Beam handler. Each adds problem lines, notes and what it checked
to the model's ``preflight.ModelValidation``."""

from pathlib import Path

from paritygate.backend.base import RunnerError
from paritygate.files import present
from paritygate.lazy import available, missing_reason
from paritygate.verdict import SuiteError


def own_artifacts(spec, v):
    """The team's own fp16/int8 ONNX (``onnx = { fp16 = ..., int8 = ... }``): each is what its key says and pairs
    with the reference (paritygate.backend.onnx.artifacts.own)."""
    if not spec.onnx_artifacts:
        return
    if not (available("onnx") and available("onnxruntime")):
        v.note("onnx", "own fp16/int8 artifacts not checked: " + missing_reason("onnxruntime"))
        return
    from paritygate.backend.onnx.artifacts import own

    outputs = [m["candidate"] for m in ((v.io_mapping or {}).get("outputs") or {}).values()]
    for precision in sorted(spec.onnx_artifacts):
        try:
            own.check_artifact(spec, precision, outputs)
        except RunnerError as err:
            v.problem(f"onnx.{precision}", err)
            continue
        v.checked.append(f"own {precision} ONNX")


def data_files(ctx, spec, v):
    """Every data file of the model through the one reader (paritygate.inputs.sets); the goldens also against their
    manifest (not under --update-goldens, which rewrites them)."""
    from paritygate.inputs import goldens
    from paritygate.inputs.sets import InputSetError, check_class_labels, read_input_set
    from paritygate.models.known import ExpectationError, known_failure_feeds

    files = [(None, goldens.input_set_path(spec), "input set"), (None, goldens.heldout_set_path(spec), "held-out set")]
    if spec.calibration is not None:
        files.append(("calibration", spec.calibration, "calibration set"))
    for key, path, what in files:
        if not present(path):
            continue
        with v.guard(key, path):
            try:
                found = read_input_set(spec, path, what)
                if v.classes:
                    check_class_labels(path, found, *v.classes)
            except InputSetError as err:
                v.problem(key, err)
                continue
            v.checked.append(what)
    with v.guard(None):
        try:
            if known_failure_feeds(spec):
                v.checked.append("known failures' reproducers")
        except ExpectationError:
            pass  # a malformed expectations.toml is one line already: the plugin reads it before any check
        except InputSetError as err:
            v.problem(None, err)
    if present(goldens.golden_path(spec)) and not ctx.update_goldens:
        with v.guard(None, goldens.golden_path(spec)):
            try:
                golden = goldens.load_golden(spec)
                if v.classes:
                    check_class_labels(goldens.golden_path(spec), golden, *v.classes)
            except SuiteError as err:  # GoldenError, InputSetError
                v.problem(None, err)
                return
            v.checked.append("goldens")


def data_left_behind(spec, v):
    """A note when the model has none of the data files the suite finds by its name (``inputs/<name>.npz``,
    ``inputs/<name>_heldout.npz``, ``goldens/<name>.npz``) while files there name no model of its config: a model
    renamed in the config leaves its input set and goldens behind, and its checks would quietly fall back to
    seeded samples from the spec (issue 41). A note, not a problem: a folder may hold the files of another
    config's models (a CPU and a GPU config side by side), which are not this config's to refuse."""
    from paritygate.inputs import goldens
    from paritygate.models.config import load_config

    if any(present(p) for p in (goldens.input_set_path(spec), goldens.heldout_set_path(spec), goldens.golden_path(spec))):
        return
    folder = Path(spec.source).parent
    names = {m.name for m in load_config(spec.source, check_files=False)}
    others = sorted(str(p.relative_to(folder)) for sub in ("inputs", "goldens") for p in (folder / sub).glob("*.npz")
                    if _model_of(p) not in names)
    if others:
        v.note("name", f"no input set, held-out set or goldens are named for '{spec.name}' (expected "
                       f"inputs/{spec.name}.npz, goldens/{spec.name}.npz beside {Path(spec.source).name}); "
                       f"{', '.join(others[:5])}{' ...' if len(others) > 5 else ''} name no model of the config: "
                       f"if '{spec.name}' was renamed, rename its files to its new name (goldens: regenerate them with "
                       "--update-goldens), else its checks run on seeded samples from the spec")


def _model_of(path):
    """The model a data file is named for: ``inputs/m.npz``, ``inputs/m_heldout.npz``, ``goldens/m.npz`` -> m."""
    return path.stem.removesuffix("_heldout")


def engines(spec, v):
    for precision, path in spec.engines.items():
        key = f"engines.{precision}"
        if path.is_file() and path.stat().st_size == 0:
            v.problem(key, f"{path}: TensorRT engine file is empty")
        elif not available("tensorrt"):
            v.note(key, f"{path}: TensorRT version not checked: {missing_reason('tensorrt')}")
        else:
            import tensorrt

            from paritygate.backend.trt import util

            built = util.read_sidecar(path)
            if built is None:
                v.note(key, f"{path}: no build sidecar ({util.sidecar_path(path).name}) records its TensorRT "
                            "version; TensorRT checks it when the engine is deserialized")
            elif built["tensorrt"] != tensorrt.__version__:
                v.problem(key, f"{path}: built by TensorRT {built['tensorrt']}, this is TensorRT "
                               f"{tensorrt.__version__}; engines run only on the version that built them "
                               "(TensorRT developer guide, 'Engine compatibility')")
            else:
                v.checked.append(f"{key} TensorRT version")


def handler(spec, v):
    if not spec.beam:
        return
    if not available("apache_beam"):
        v.note("beam.handler", f"not checked: {missing_reason('apache_beam')}")
        return
    from paritygate.beam.contract import HandlerContractError, declared_precision, load_factory, make_handler

    try:
        factory = load_factory(spec)
        declared_precision(spec, make_handler(spec, factory, 1, spec.max_batch), factory)
    except HandlerContractError as err:
        v.problem("beam.handler", err)
        return
    v.checked.append("beam handler")
