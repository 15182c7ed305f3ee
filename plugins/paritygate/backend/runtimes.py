"""Build (once per process) the reference and candidate runners for a model, checking the input spec.

The candidate runner is fed by reference input names (``MappedRunner`` renames them); its outputs keep the
candidate's names, paired with the reference's through ``resolved_spec(ctx, spec).outputs``: the config's
``[models.outputs]`` completed with the mapping ``paritygate.backend.iomap`` resolved (explicit, name, signature,
decorated or single), kept in the run's context (``paritygate.context.RunContext``); the spec is not written to.
Each runner is kept in this module's memos (``paritygate.common.memo``), once per run."""

from pathlib import Path

from paritygate.backend.base import RunnerError
from paritygate.backend.engines import FAILED_CANDIDATES, artifact_failure
from paritygate.backend.inputspec import MappedRunner, check_input_spec, declared_casts, half_inputs, input_names
from paritygate.common import progress
from paritygate.common.memo import ArtifactKey, Memo, ModelKey
from paritygate.common.numerics import NUMERICS
from paritygate.verdict import SuiteError


def release(runner):
    """Deactivate ``runner`` and every runner it wraps (a MappedRunner's, a CachedReference's TensorFlow): the
    memos' ``close``, when the run is done with them (``RunContext.release``)."""
    while runner is not None:
        runner.deactivate()
        runner = runner.__dict__.get("runner")


# each released when the run's last check of its model (x precision) is done (common.memo, Store.release)
REFERENCES = Memo("references", key=ModelKey, close=release)  # the ReferenceRunner every check sees (behind the output cache)
LIVE_REFERENCES = Memo("live_references", key=ModelKey, close=release)  # the reference running TensorFlow, never the cache
TIMED_REFERENCES = Memo("timed_references", key=ModelKey, close=release)  # latency's: TensorFlow in this process
CANDIDATES = Memo("candidates", key=ArtifactKey, close=release)  # the candidate runner, fed by reference input names
MAPPINGS = Memo("mappings", key=ModelKey)  # the resolved input/output mapping (backend.iomap)


def load_reference(ctx, spec):
    """The TF reference, checked against the input spec (once per run, ``REFERENCES``). Raises RunnerError: a
    SavedModel without the signature or a spec that does not fit it is a config problem, which the validation pass
    (paritygate.judge.preflight) reports before any check runs. Behind the reference-output cache
    (paritygate.backend.reference_cache) unless the context turns it off: nothing loads until a batch misses it."""
    return REFERENCES.get(ctx, ModelKey(spec.name), lambda: _load_reference(spec, ctx.reference_cache))


def tensorflow_runner(spec, here=False):
    """The TensorFlow runner of ``spec``'s reference, here (``TfRunner``) or, for a SavedModel of ``APART_BYTES`` or
    more, in a process of its own started on first use (``TfProcessRunner``): the same code on the same machine, the
    same outputs, none of its weights, graphs or TensorFlow's buffers in the run's process. A Keras file stays here:
    its custom objects may be registered by a conftest in this process. ``here``: in this process, whatever its size
    (latency times the call itself, never a pipe to another process)."""
    from paritygate.backend.tf.util import is_keras
    from paritygate.common.apart import large

    name = f"tensorflow:{spec.name}"
    folder = Path(spec.reference)
    if not here and not is_keras(folder) and folder.is_dir() and large(folder):
        from paritygate.backend.tf.process import TfProcessRunner

        return TfProcessRunner(folder, spec.signature, name=name, lazy=True)
    from paritygate.backend.tf.runner import TfRunner

    return TfRunner(spec.reference, spec.signature, name=name)


def _load_reference(spec, cached):
    with progress.step(f"loading the TensorFlow reference of {spec.name}"):  # BERT-base: 14 s, nothing else shown
        return _loaded_reference(spec, cached)


def _loaded_reference(spec, cached):
    runner = tensorflow_runner(spec)
    runner.time_as = "reference"
    if cached:
        from paritygate.backend.reference_cache import CachedReference

        runner, counted = CachedReference(runner), None
    else:
        counted = "computed"
    runner.activate()
    check_input_spec(spec, runner.input_metadata(), runner.describe(), side="reference")
    return ReferenceRunner(runner, declared_casts(spec, "reference"), counted=counted)


def reference_runner(ctx, spec):
    """The reference for a check: whatever goes wrong with it is the suite's ``error``, never the candidate's
    ``fail`` (its load errors were reported by the validation pass when the run started)."""
    try:
        return load_reference(ctx, spec)
    except RunnerError as err:
        raise SuiteError(f"the TensorFlow reference of model '{spec.name}' cannot be used: {err}") from err


def live_reference(ctx, spec, here=False):
    """The reference running TensorFlow on every call, never the cache: for the checks whose point is running it
    (``goldens_reproduce``, latency). Its runs are counted as live in the summary. ``here`` (latency): in this
    process, also where the checks' reference runs apart (``tensorflow_runner``): latency times the call itself,
    never a pipe to another process."""
    from paritygate.backend.tf.process import TfProcessRunner

    cached = reference_runner(ctx, spec)
    if here and isinstance(getattr(cached.runner, "runner", cached.runner), TfProcessRunner):
        return TIMED_REFERENCES.get(ctx, ModelKey(spec.name),
                                    lambda: _live(spec, tensorflow_runner(spec, here=True), cached.casts))

    def live():
        return _live(spec, cached.runner.live() if hasattr(cached.runner, "live") else cached.runner, cached.casts)

    return LIVE_REFERENCES.get(ctx, ModelKey(spec.name), live)


def _live(spec, runner, casts):
    try:
        runner.activate()
    except RunnerError as err:
        raise SuiteError(f"the TensorFlow reference of model '{spec.name}' cannot be used: {err}") from err
    return ReferenceRunner(runner, casts, counted="live")


def goldens_reference(ctx, spec):
    """The reference the goldens check runs: live TensorFlow, in the process
    ``backend.tf.process.start_goldens_reference`` started when there is one, else ``live_reference``."""
    from paritygate.backend.tf.process import REFERENCE_PROCESSES

    child = REFERENCE_PROCESSES.peek(ctx, ModelKey(spec.name))
    if child is None:
        return live_reference(ctx, spec)
    try:
        child.activate()
    except RunnerError as err:
        raise SuiteError(f"the TensorFlow reference of model '{spec.name}' cannot be used: {err}") from err
    return ReferenceRunner(child, reference_runner(ctx, spec).casts, counted="live")


def recorded_mapping(ctx, spec):
    """The input/output mapping resolved for ``spec`` in this process (None before any candidate was built)."""
    return MAPPINGS.peek(ctx, ModelKey(spec.name))


def candidate_runner(ctx, spec, precision, engine=True):
    """The candidate at ``precision``, built once per process. A build that failed is not retried by every
    check of the model (a tf2onnx conversion that fails costs its full time on each try): they all report the
    same error. ``engine``: first the engine gate (``engine_gate``); the validation pass, which checks that the
    candidate loads and pairs with the config, asks without it (a rejection is a check's verdict, not a config
    error)."""
    if engine:
        from paritygate.backend.engines import engine_gate

        engine_gate(ctx, spec, precision)
    key = ArtifactKey(ctx.runtime, spec.name, precision)
    failed = artifact_failure(ctx, spec, precision)  # its own, or the fp32 conversion's it would be built from
    if failed is not None:
        raise failed.with_traceback(None)

    def build():
        try:
            runner = _build_candidate(ctx, spec, precision)
        except (SuiteError, RunnerError) as err:
            FAILED_CANDIDATES.put(ctx, key, err)
            raise
        names = {r: m["candidate"] for r, m in io_mapping(ctx, spec, runner)["inputs"].items()}
        return _fed(runner, names, {**declared_casts(spec, "candidate"), **half_inputs(spec, precision, runner)})

    return CANDIDATES.get(ctx, key, build)


def io_mapping(ctx, spec, runner):
    """Resolve (once per model, ``MAPPINGS``) which candidate tensor answers to which reference tensor;
    ``output_names(ctx, spec)`` then pairs outputs for every comparison. The spec is not written to."""
    from paritygate.backend import iomap

    def resolve():
        ref_outputs = reference_output_names(ctx, spec)
        try:
            return iomap.resolve(spec, ref_outputs, list(runner.input_metadata()), list(runner.output_names))
        except iomap.MappingError as err:
            raise RunnerError(str(err)) from None
        except iomap.BindingsError as err:
            raise RunnerError(f"{spec.where('reference')}: {err}") from err

    return MAPPINGS.get(ctx, ModelKey(spec.name), resolve)


def output_names(ctx, spec):
    """Reference output name -> candidate output name for ``spec``: the config's ``[models.outputs]`` completed
    with the mapping resolved when the candidate was built (the spec itself is never written to)."""
    mapping = recorded_mapping(ctx, spec)
    if mapping is None:
        return dict(spec.outputs)
    return {**spec.outputs, **{r: m["candidate"] for r, m in mapping["outputs"].items() if m["rule"] != "name"}}


def resolved_spec(ctx, spec):
    """``spec`` with ``outputs`` completed by the mapping resolved when its candidate was built (a copy: a loaded
    ModelSpec is never written to), so every comparison pairs outputs the same way; ``spec`` itself before any
    candidate was built or when the config's mapping is already complete."""
    import dataclasses

    outputs = output_names(ctx, spec)
    return spec if outputs == spec.outputs else dataclasses.replace(spec, outputs=outputs)


def reference_output_names(ctx, spec):
    """The reference's output names: from the SignatureDef when it has them (no TensorFlow run), else the runner."""
    from paritygate.backend import iomap

    try:
        outputs = iomap.bindings_of(spec)[1]
    except iomap.BindingsError as err:
        raise RunnerError(f"{spec.where('reference')}: {err}") from err
    return sorted(outputs) if outputs else list(load_reference(ctx, spec).output_names)


def _fed(runner, names, casts):
    """The runner itself when fed as is (latency then measures no extra layer), else a MappedRunner."""
    renamed = {r: c for r, c in names.items() if r != c}
    return MappedRunner(runner, renamed, casts) if renamed or casts else runner


class ReferenceRunner(MappedRunner):
    """The TF reference as every check sees it (inputs cast where the config declares ``reference_dtype``): a
    failure to run a valid input is a ``SuiteError``. ``counted``: the reference cache's counter its runs add to
    (``computed`` with the cache off, ``live`` for goldens and latency; a CachedReference counts its own)."""

    def __init__(self, runner, casts=None, counted=None):
        super().__init__(runner, {}, casts)
        self.counted = counted

    def infer_impl(self, feed):
        try:
            outputs = super().infer_impl(feed)
        except RunnerError as err:
            raise SuiteError(f"the TensorFlow reference failed: {err}") from err
        if self.counted:
            from paritygate.backend.reference_cache import STATS

            STATS[self.counted] += 1
        return outputs

    def again(self, feed):
        """A second run of ``feed`` (the noise floor's ``repeat``): live, or the cache's second sample of it."""
        if not hasattr(self.runner, "infer_sample"):
            return self.infer(feed)
        try:
            return self.runner.infer_sample({k: v.astype(self.casts[k]) if k in self.casts else v
                                             for k, v in feed.items()}, 1)
        except RunnerError as err:
            raise SuiteError(f"the TensorFlow reference failed: {err}") from err


def _build_candidate(ctx, spec, precision):
    from paritygate.backend.engines import suite_built

    try:
        return _build(ctx, spec, precision)
    except RunnerError as err:
        if not suite_built(ctx, spec, precision):
            raise  # the configured file itself: the candidate's fault (the validation pass reports it first)
        raise SuiteError(f"the {precision} candidate of model '{spec.name}' that the suite builds "
                         f"({ctx.runtime}) failed: {err}") from err


def _build(ctx, spec, precision):
    """The candidate from its runtime's entry (``backend.registry``), its inputs checked against the config."""
    from paritygate.backend.onnx.artifacts.index_paths import check_own

    entry = ctx.runtime_entry
    if precision in spec.onnx_artifacts and not (entry.own_engine and precision in spec.engines):
        check_own(spec, precision)  # a static fault of the team's own file: the candidate's fail
    runner, what = entry.load(ctx, spec, precision)
    check_input_spec(spec, MappedRunner(runner, input_names(spec, runner)).input_metadata(), what, side="candidate",
                     half=half_inputs(spec, precision, runner))
    return runner


def computed_artifact(path, numerics):
    """The file ONNX Runtime runs for the artifact ``path`` under ``numerics`` (``--parity-numerics``, one of
    ``common.numerics.NUMERICS``): under strict numerics (the default) an artifact with float16 tensors is run as its
    strict FP16 emulation (``backend.onnx.strict.loader``; the checks, localization and the repair search all run this
    one file: docs/numerics.md, "Fused kernels"); under ``ort``, ``path`` itself."""
    if numerics not in NUMERICS:
        raise ValueError(f"numerics {numerics!r}: expected one of {', '.join(NUMERICS)} (--parity-numerics)")
    from paritygate.backend.onnx.strict.loader import computed

    return computed(path, numerics).artifact
