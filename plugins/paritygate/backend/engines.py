"""The engine in the loop (docs/engine.md): TensorRT-RTX's ahead-of-time build of each candidate's ONNX artifact
(``backend.trt.aot``), once per process, and the gate every numeric check passes through: no engine, no numeric
verdict. Pure bookkeeping over ``aot`` and ``layers``; nothing heavy is imported until a build is asked for."""

from paritygate.backend.base import CandidateFault, RunnerError
from paritygate.common import progress
from paritygate.common.memo import ArtifactKey, Memo, PrecisionKey
from paritygate.verdict import SuiteError

ENGINE_BUILDS = Memo("engine_builds", key=PrecisionKey)  # backend.trt.aot.engine_report with its coverage
# The candidate's build failure, raised again to every later check of it: the engine gate's rejection, or the
# error building the candidate raised (backend.runtimes.candidate_runner)
FAILED_CANDIDATES = Memo("failed_candidates", key=ArtifactKey)


def engine_build(ctx, spec, precision):
    """TensorRT-RTX's ahead-of-time build of the candidate's ONNX artifact at ``precision``
    (``backend.trt.aot.engine_report``) with its engine-side ``coverage``, once per process; None where its builder
    is not installed or turned off, where the candidate is a prebuilt engine, or where the candidate runtime builds
    its own engines (``backend.registry``: a runtime without ``engine_gate``). The profile is the config's, under the
    artifact's own input names."""
    from paritygate.backend.trt import aot

    if not ctx.engine_build:
        return None  # --parity-engine-build=off
    if not ctx.runtime_entry.engine_gate or precision in spec.engines or aot.missing_reason():
        return None
    return ENGINE_BUILDS.get(ctx, PrecisionKey(spec.name, precision), lambda: _engine_build(ctx, spec, precision))


def _engine_build(ctx, spec, precision):
    import onnx

    from paritygate.backend import iomap
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.trt import aot, layers
    from paritygate.backend.trt.util import build_settings

    path = onnx_artifact(spec, precision, ctx.fp16_keep_fp32)
    names = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
    try:
        renamed = iomap.input_map(spec, names)
    except (iomap.MappingError, iomap.BindingsError) as err:
        raise RunnerError(f"{spec.where('inputs')}: {err}") from None
    settings = build_settings(spec)
    settings["profile"] = {renamed.get(k, k): v for k, v in settings["profile"].items()}
    try:
        with progress.step(f"TensorRT-RTX engine build of {spec.name} {precision}"):
            report = aot.engine_report(path, settings)
    except RuntimeError as err:  # the child crashed or hung: the builder could not run, once per artifact
        report = {"builder": aot.builder_name(), "targets": aot.TARGETS, "built": False, "seconds": None,
                  "warnings": [], "layers": [], "error": {"message": str(err), "node": None, "op": None,
                                                          "cannot_run": "the builder crashed or did not finish"}}
    return {**report, "artifact": str(path), "coverage": layers.coverage(report["layers"], precision)}


def engine_gate(ctx, spec, precision):
    """Raise when TensorRT-RTX could not build the candidate at ``precision``: ``CandidateFault`` (the candidate's
    ``fail``) for the team's own file, ``SuiteError`` for an artifact the suite built, unless the suite built it from
    an fp32 ONNX the builder rejects too: then the rejection is inherited, and the fp32 file's blame (as the lint's
    policy: a problem the source already had is the source's). Every check of the precision passes through here
    (``engine_builds``, and the numeric ones through ``candidate_runner``): no engine, nothing to judge numerically.
    The error is kept as the candidate's build failure (``FAILED_CANDIDATES``), so a file found wrong is one
    ``fail``, in the first check that meets it, and the later checks of that model x precision skip naming it
    (conformance/conftest.py)."""
    key = ArtifactKey(ctx.runtime, spec.name, precision)
    failed = FAILED_CANDIDATES.peek(ctx, key)
    if failed is not None:
        raise failed.with_traceback(None)
    rejected = cannot_build(spec, precision, built_once(ctx, spec, precision))
    if not rejected:
        return
    blamed = precision
    if precision != "fp32" and suite_built(ctx, spec, precision):
        source = cannot_build(spec, "fp32", engine_build(ctx, spec, "fp32"))
        if source:
            rejected, blamed = f"{rejected}; inherited: the fp32 ONNX it was built from is rejected too", "fp32"
    if suite_built(ctx, spec, blamed):
        fault = SuiteError(f"the {blamed} artifact the suite built for '{spec.name}': {rejected}")
    else:
        fault = CandidateFault(rejected)
    raise FAILED_CANDIDATES.put(ctx, key, fault)


def built_once(ctx, spec, precision, make=engine_build):
    """``make(ctx, spec, precision)`` (``engine_build``), where an artifact that could not be made (a failed
    conversion) is one error a run: the error this run met first is raised again (``artifact_failure``), and the one
    met now is kept for later checks."""
    failed = artifact_failure(ctx, spec, precision)
    if failed is not None:
        raise failed.with_traceback(None)
    try:
        return make(ctx, spec, precision)
    except (SuiteError, RunnerError) as err:
        raise FAILED_CANDIDATES.put(ctx, ArtifactKey(ctx.runtime, spec.name, precision), err) from None


def artifact_failure(ctx, spec, precision):
    """The error this run already met making the candidate at ``precision`` (``FAILED_CANDIDATES``), or the fp32
    conversion's when the suite builds this precision from it (an fp16 or int8 artifact cannot be made from an
    fp32 ONNX that could not): None when there is none."""
    from paritygate.backend.onnx.artifacts.validate import ArtifactError

    failed = FAILED_CANDIDATES.peek(ctx, ArtifactKey(ctx.runtime, spec.name, precision))
    if failed is None and precision != "fp32" and precision not in spec.onnx_artifacts:
        source = FAILED_CANDIDATES.peek(ctx, ArtifactKey(ctx.runtime, spec.name, "fp32"))
        failed = source if isinstance(source, ArtifactError) else None
    return failed


def builder_fault(spec, precision, report):
    """The one-line reason TensorRT-RTX's builder could not run on the candidate's artifact (a CUDA call on a
    CPU-only machine, a crash, a hang), or None: not a verdict on the artifact, the suite's ``error`` on
    ``engine_builds`` alone; the numeric checks run without the engine (docs/engine.md)."""
    if report is None or report["built"] or not (report["error"] or {}).get("cannot_run"):
        return None
    error = report["error"]
    return (f"{report['builder']} could not run its build of {report['artifact']} ({spec.name} {precision}): "
            f"{error['cannot_run']}: {error.get('message')}. Not a verdict on the artifact: its numeric checks run "
            "without an engine (docs/troubleshooting.md, 'The engine builder'; --parity-engine-build=off turns the "
            "builder off)")


def cannot_build(spec, precision, report):
    """The one-line reason a candidate whose engine TensorRT-RTX could not build fails (None when it built, or
    when the builder could not run at all: ``builder_fault``)."""
    if report is None or report["built"] or builder_fault(spec, precision, report):
        return None
    from paritygate.backend.trt import layers

    error = report["error"] or {}
    return (f"TensorRT cannot build this artifact: {report['builder']}'s parser/builder rejected {report['artifact']} "
            f"({spec.name} {precision}){layers.where(error)}: {error.get('message')} (TensorRT 11's own parser may differ; "
            "docs/engine.md)")


def suite_built(ctx, spec, precision):
    """Whether the candidate at ``precision`` is an artifact the suite made (converted, quantized, or an engine
    it builds), not a file the config names: the artifact's faults are then the suite's (``error``)."""
    own_engine = ctx.runtime_entry.own_engine
    if own_engine and precision in spec.engines:
        return False
    if precision in spec.onnx_artifacts:
        return False  # the team's own fp16/int8 ONNX (or an engine built from it): its faults are the candidate's
    return precision != "fp32" or spec.onnx is None or own_engine
