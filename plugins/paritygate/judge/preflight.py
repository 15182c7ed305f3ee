"""One validation pass over every model of the config, before any check runs.

A config that does not fit its models (a missing signature, an input of the wrong rank or dtype, a corrupt
ONNX file, outputs that cannot be paired, a handler module that does not import or a factory that raises)
would otherwise turn into a dozen failing checks with tracebacks each, and into passes of the checks it does
not touch. Here each problem becomes one line naming the config file, the model and the key; the plugin stops
the run with them (exit code 4) before any check runs.

What is checked, each part where its library is installed (else a note says what was not checked):

    reference     the SavedModel loads and has the signature (or the .keras, .h5 or .hdf5 file loads); the inputs' names,
                  ranks, dtypes and fixed dims match the config; the task finds its outputs on a sample batch
    profile       a dynamic input's profile min, opt and max: the reference runs a seeded sample at each before
                  anything is converted (a size it fails at, or returns an empty output for, is one line naming
                  the profile: the conversion would be blamed for it), then the fp32 candidate at min and max
    candidate     the fp32 ONNX (configured, or converted from the reference) passes onnx.checker and loads
                  in ONNX Runtime; its inputs match the config; reference and candidate names pair
                  (paritygate.backend.iomap); the mapping is recorded
    data files    the input set, held-out set, calibration set and goldens (with their manifest), each read
                  through ``paritygate.inputs.sets``: opens, names, dtypes, shapes, finite values, declared
                  ranges, label count and type (the goldens also against their manifest's hashes)
    engines       a prebuilt engine's TensorRT version (its sidecar) matches the installed TensorRT
    beam.handler  the handler module imports and the factory returns an unkeyed Beam ModelHandler

Runners are kept in the run's context (``RunContext``, paritygate.backend.runtimes), so the checks reuse what this
pass loaded. A tool the suite drives that fails here (tf2onnx converting the reference) is not a config problem: it
is noted, and the checks report it as ``error``. Anything else a file makes a library raise here (a truncated
protobuf, bytes that are no archive) is one problem line too, under the key that names the file, never a crash."""

from contextlib import contextmanager

import numpy as np

from paritygate.backend import inputspec, registry, runtimes
from paritygate.backend.base import RunnerError
from paritygate.backend.iomap import BindingsError
from paritygate.backend.onnx.artifacts.validate import ArtifactError
from paritygate.common import progress
from paritygate.common.escape import one_line
from paritygate.common.memo import Memo, ModelKey
from paritygate.judge import converting, declared
from paritygate.lazy import available, missing_reason
from paritygate.verdict import SuiteError

BARE_RUNNERS = Memo("preflight_runners", key=ModelKey, close=runtimes.release)  # a bare fp32 ONNX Runtime runner (_fp32_onnx_runner)


class ModelValidation:
    """What the pass found for one model: problems (stop the run), notes (what was not checked) and the
    resolved input/output mapping."""

    def __init__(self, spec):
        self.spec = spec
        self.problems = []
        self.notes = []
        self.checked = []
        self.io_mapping = None
        self.classes = None  # (classes, output) of a classification model, once the reference ran a sample

    def problem(self, key, err):
        """One line: the config file, the model, the key (None: a data file the message names) and ``err``."""
        text = one_line(err)  # one line, no ANSI colour codes of a tool's message
        if text.startswith(f"{self.spec.source}: model "):
            self.problems.append(text)
        else:
            where = self.spec.where(key) if key else f"{self.spec.source}: model '{self.spec.name}'"
            self.problems.append(f"{where}: {text}")

    @contextmanager
    def guard(self, key, path=None):
        """Whatever a part raises becomes a problem under ``key`` (naming ``path``), never a crash of pytest."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - a corrupt file makes libraries raise anything
            text = f"{type(err).__name__}: {err}"
            self.problem(key, f"{path}: {text}" if path else text)

    def note(self, key, text):
        self.notes.append(f"{key}: {text}")

    def as_dict(self):
        return {"checked": self.checked, "io_mapping": self.io_mapping, "notes": self.notes,
                "problems": self.problems}


def validate_models(ctx, models, config_path, ahead=()):
    """Validate every model of the config at ``config_path`` with the run's context; returns {"config",
    "models": {name: {...}}, "problems": [lines]} (the report's ``validation`` entry). ``ahead``: the models whose
    fp32 checks a serial run selected; their validation makes the reference's first runs while it waits for their
    conversion (``judge.converting``). tf2onnx's conversions run meanwhile (``judge.converting.Conversions``)."""
    with converting.Conversions(models) as conversions:
        def converted(spec):
            conversions.wait(spec, converting.reference_runs(ctx, spec) if spec.name in ahead else ())

        found = []
        with progress.step("validating models", total=len(models)) as shown:
            for spec in models:
                shown.advance(0, detail=spec.name)
                found.append(validate_model(ctx, spec, converted))
                shown.advance()
    return {"config": str(config_path), "models": {v.spec.name: v.as_dict() for v in found},
            "problems": [p for v in found for p in v.problems]}


def validate_model(ctx, spec, converted=lambda spec: None):
    """``converted(spec)`` returns once a conversion of ``spec``'s reference started earlier is done."""
    v = ModelValidation(spec)
    reference = None
    with v.guard("reference"):
        reference = _reference(ctx, spec, v)
        if reference is not None:
            _task_outputs(spec, reference, v)
    corners = {}
    with v.guard("profile"):  # before the conversion: a size the model cannot take is the config's to fix
        corners = _reference_corners(spec, v, reference)
    if corners is None:
        v.note("onnx", "candidate not checked: the reference cannot take the profile (above)")
    else:
        converted(spec)
        with v.guard("onnx"):
            _candidate(ctx, spec, v, reference_ok=reference is not None)
        with v.guard("onnx"):
            declared.own_artifacts(spec, v)
        with v.guard("profile"):
            _profile_corners(ctx, spec, v, corners)
    declared.data_files(ctx, spec, v)
    with v.guard(None):
        declared.data_left_behind(spec, v)
    with v.guard("engines"):
        declared.engines(spec, v)
    with v.guard("beam.handler"):
        declared.handler(spec, v)
    return v


# -- reference ------------------------------------------------------------------------------------------
def _reference(ctx, spec, v):
    if not available("tensorflow"):
        v.note("reference", f"not checked: {missing_reason('tensorflow')}")
        return None
    try:
        runner = runtimes.load_reference(ctx, spec)
    except (RunnerError, SuiteError) as err:
        v.problem("signature" if "has no signature" in str(err) else "reference", err)
        return None
    v.checked.append("reference")
    return runner


def _task_outputs(spec, reference, v):
    """The task's outputs exist (classification: a [batch, classes] output or ``task_output``; detection:
    boxes/scores/classes/num_detections), read from the reference's outputs on one sample."""
    if spec.task not in ("classification", "detection"):
        return
    from paritygate.comparator.task import TaskSpecError, classification_outputs, detection_outputs
    from paritygate.inputs.sampling import sample_inputs

    try:
        outputs = reference.infer(sample_inputs(spec, 1, np.random.default_rng(0)))
    except SuiteError as err:
        v.problem("reference", f"the reference fails on a sample input within the config's ranges: {err}")
        return
    try:
        names = (classification_outputs if spec.task == "classification" else detection_outputs)(spec, outputs)
    except TaskSpecError as err:
        v.problem("task", err)
        return
    scored = [(int(np.shape(outputs[n])[-1]), n) for n in names if np.ndim(outputs[n]) > 1]
    if spec.task == "classification" and scored:  # the data files' labels are checked against the fewest classes
        v.classes = min(scored)
    v.checked.append("task outputs")


def _corners(spec):
    """(label, batch, feed, where) at a dynamic input's profile min, opt and max: one seeded sample each, the
    other inputs at their declared dims; [] without a dynamic input."""
    from paritygate.inputs.sampling import sample_inputs

    dynamic = [k for k, t in spec.inputs.items() if t.profile]
    found = []
    for corner, label in ((0, "min"), (1, "opt"), (2, "max")) if dynamic else ():
        shapes = {k: t.profile[corner] if t.profile else t.with_batch(1) for k, t in spec.inputs.items()}
        batch, at = spec.inputs[dynamic[0]].profile[corner][0], f"the profile's {label} {list(shapes[dynamic[0]])}"
        feed = sample_inputs(spec, batch, np.random.default_rng(corner), {k: s[1:] for k, s in shapes.items()})
        found.append((label, batch, feed, at))
    return found


def _reference_corners(spec, v, reference):
    """The reference's outputs at the profile's min, opt and max ({label: outputs}), before anything is converted;
    None when it cannot take one: it fails there, or returns an output with no element (SpliceAI crops 5,000
    bases each side: below 10,001 its output is empty), which is a size the config must not ask for, not a
    converter's fault. A detector may find nothing: ``task = "detection"`` outputs may be empty."""
    outs = {}
    key = next((f"inputs.{k}.profile" for k, t in spec.inputs.items() if t.profile), None)
    for label, batch, feed, at in _corners(spec) if reference is not None else ():
        outs[label] = out = _ran(v, key, "reference", reference, feed, batch, at)
        if out is None:
            return None
        empty = {k: list(np.shape(o)) for k, o in out.items() if np.size(o) == 0}
        if empty and spec.task != "detection":
            v.problem(key, f"the reference returns an empty output at {at}: {empty}; the model cannot take this "
                           f"size (a crop or an unpadded convolution needs a longer input): raise the profile's {label} "
                           "to a size whose outputs hold values (`paritygate init` proposes the least a Keras "
                           "model's layers take)")
            return None
    return outs


def _ran(v, key, side, runner, feed, batch, at):
    """``side``'s outputs on ``feed`` (a profile corner), or None with a problem under ``key``: it fails there, or
    an output's batch dimension is not ``batch`` (None: not checked, the candidate's outputs are compared with the
    reference's instead, ``_unlike_outputs``)."""
    try:
        out = runner.infer(feed)
    except Exception as err:  # noqa: BLE001 - each runtime raises its own types: one line either way
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        v.problem(key, f"the {side} fails at {at}: {first.strip()[:300]}; expected it to run every shape within "
                       "the profile")
        return None
    wrong = {k: list(np.shape(o)) for k, o in out.items() if batch is not None and np.shape(o)[:1] != (batch,)}
    if wrong:
        v.problem(key, f"the {side} at {at} returns outputs {wrong}, expected batch dimension {batch}")
        return None
    return out


def _profile_corners(ctx, spec, v, reference_outputs):
    """The fp32 candidate at the profile's min and max, against the reference's outputs there (``_reference_corners``)."""
    if not reference_outputs:
        return
    runners = {}
    if "candidate inputs and outputs" in v.checked and ctx.runtime_entry.validated and "fp32" in spec.precisions:
        runners["fp32 candidate"] = runtimes.candidate_runner(ctx, spec, "fp32", engine=False)
    key = next(f"inputs.{k}.profile" for k, t in spec.inputs.items() if t.profile)
    for label, _batch, feed, at in _corners(spec):
        if label == "opt":
            continue
        outs = {"reference": reference_outputs[label]}
        for side, runner in runners.items():
            outs[side] = _ran(v, key, side, runner, feed, None, at)
            if outs[side] is None:
                return
        unlike = _unlike_outputs(ctx, spec, outs, at)
        if unlike:  # the conversion's fault, not the profile's: say which output and how
            v.problem("outputs", unlike)
            return
    v.checked.append("profile min and max on " + " and ".join(["reference", *runners]))


def _unlike_outputs(ctx, spec, outs, at):
    """One line when an fp32 candidate output has another shape than the reference output it pairs with (tf2onnx
    emitted one of HED's side outputs at rank 5, [1, 2, 320, 320, 1], for the reference's [2, 320, 320, 1])."""
    if len(outs) < 2:
        return None
    pairs, ref, cand = runtimes.output_names(ctx, spec), outs["reference"], outs["fp32 candidate"]
    for name, value in ref.items():
        other = cand.get(pairs.get(name, name))
        if other is not None and np.shape(other) != np.shape(value):
            return (f"the fp32 candidate's output '{pairs.get(name, name)}' has shape {list(np.shape(other))} (rank "
                    f"{np.ndim(other)}) where the reference's '{name}' has {list(np.shape(value))} (rank "
                    f"{np.ndim(value)}), at {at}; expected the same shape: check how the model was exported and "
                    "converted (e.g. tf2onnx's output shapes), or pair another output in [models.outputs]")
    return None


# -- candidate ------------------------------------------------------------------------------------------
def _candidate(ctx, spec, v, reference_ok):
    missing = registry.candidate_missing([spec], fp16=False)
    if missing:
        v.note("onnx", "candidate not checked: " + missing)
        return
    if not reference_ok and spec.onnx is None:
        v.note("onnx", "candidate not checked: it is converted from the reference, which did not load")
        return
    try:
        runner = _fp32_onnx_runner(ctx, spec, reference_ok)
        if reference_ok:
            v.io_mapping = runtimes.recorded_mapping(ctx, spec) or runtimes.io_mapping(ctx, spec, runner)
    except SuiteError as err:  # a converter's failure is said once, by the first check that meets it
        said = f"{err.converter} could not make it" if isinstance(err, ArtifactError) else str(err)
        v.note("onnx", f"candidate not checked: {said} (its checks report this as error)")
        return
    except RunnerError as err:
        if not reference_ok and isinstance(err.__cause__, BindingsError):  # said once, by the reference's line
            v.note("onnx", "candidate not checked: its names pair with the reference's, which did not load")
            return
        v.problem("outputs" if "cannot pair outputs" in str(err) else "onnx", err)
        return
    v.checked.append("candidate inputs" + (" and outputs" if reference_ok else ""))
    _returns_in_time(spec, v, runner)


def _returns_in_time(spec, v, runner):
    """One seeded batch-1 sample through the fp32 candidate: a graph that never returns (an ONNX Loop of 10**12
    iterations passes onnx.checker and loads) is one line here, at the inference time limit (backend.deadline), not
    a hung first check. Any other failure is the checks' to judge (a candidate failing on valid inputs fails)."""
    from paritygate.backend.base import InferenceTimeout
    from paritygate.inputs.sampling import sample_inputs

    if not isinstance(runner, inputspec.MappedRunner):
        runner = inputspec.MappedRunner(runner, inputspec.input_names(spec, runner))
    try:
        runner.infer(sample_inputs(spec, 1, np.random.default_rng(0)))
    except InferenceTimeout as err:
        v.problem("onnx", err)
    except Exception:  # noqa: BLE001, S110 - judged by the checks, each with its own verdict
        pass


def _fp32_onnx_runner(ctx, spec, reference_ok):
    """An ONNX Runtime runner over the fp32 ONNX, its inputs checked: the fp32 candidate itself when the
    checks will run it (cached, so they reuse it; it resolves the mapping, which needs the reference), else a
    bare one kept for this pass."""
    if reference_ok and ctx.runtime_entry.validated and "fp32" in spec.precisions:
        return runtimes.candidate_runner(ctx, spec, "fp32", engine=False)

    def bare():
        from paritygate.backend.onnx.artifacts.loader import fp32_onnx
        from paritygate.backend.onnxrt.runner import OnnxrtRunner

        try:
            path = fp32_onnx(spec)
            runner = OnnxrtRunner(path, name=f"onnxruntime:{spec.name}:fp32").activate()
        except RunnerError as err:
            if spec.onnx is None:  # the suite converted it: a tool failure, not the config's
                raise SuiteError(f"the fp32 ONNX converted from {spec.reference} is not usable: {err}") from err
            raise
        mapped = inputspec.MappedRunner(runner, inputspec.input_names(spec, runner))
        inputspec.check_input_spec(spec, mapped.input_metadata(), str(path))
        return runner

    return BARE_RUNNERS.get(ctx, ModelKey(spec.name), bare)


def summary_lines(validation):
    """Terminal lines: what was validated, and every mapping that is not name for name."""
    if not validation or not validation["models"]:
        return []
    if validation["problems"]:
        found = len(validation["problems"])
        return [f"paritygate: validation found {found} problem(s) in {validation['config']}; no check ran"]
    lines = [f"paritygate: validated {len(validation['models'])} model(s) before the checks"]
    for name, found in validation["models"].items():
        mapping = found.get("io_mapping") or {}
        renamed = [f"{kind} {r} -> {m['candidate']} ({m['rule']})" for kind in ("inputs", "outputs")
                   for r, m in mapping.get(kind, {}).items() if m["rule"] != "name"]
        if renamed:
            lines.append(f"paritygate: {name}: mapped " + ", ".join(renamed))
        lines += [f"paritygate: {name}: {note}" for note in found["notes"]]
    return lines
