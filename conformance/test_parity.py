"""The candidate (ONNX Runtime or TensorRT) against the goldens, per precision, with the full policy."""

import pytest

pytestmark = [pytest.mark.onnx, pytest.mark.usefixtures("parity_candidate_available")]


def test_engine_builds(parity_context, parity_case, parity_result):
    """TensorRT's parser and builder (TensorRT-RTX, ahead of time, no GPU needed: backend.trt.aot) turn the candidate's
    ONNX artifact into an engine over the model's optimization profile. A rejection is the candidate's ``fail`` (the
    suite's ``error`` for an artifact the suite built), and no numeric check of this precision can pass. A builder
    that cannot run here (a CUDA call on a CPU-only machine, a crash, a hang) is this row's ``error`` alone: the
    numeric checks judge the candidate without an engine (``--parity-engine-build=off`` turns the builder off). The details
    hold what the engine runs: its kernels, the ONNX nodes fused into each, its tensors' datatypes and the
    engine-side precision coverage; the builder's warnings are findings."""
    from paritygate.judge import coverage

    with coverage.judged(parity_context, *parity_case, parity_result):
        _engine_builds(parity_context, *parity_case, parity_result)


def _engine_builds(ctx, spec, precision, result):
    from paritygate.backend.base import CandidateFault
    from paritygate.backend.engines import builder_fault, built_once, engine_gate
    from paritygate.backend.onnx.artifacts.loader import artifact_report
    from paritygate.backend.trt import aot, layers
    from paritygate.verdict import SuiteError

    if ctx.runtime_entry.own_engine or precision in spec.engines:
        pytest.skip(f"the candidate runtime ({ctx.runtime}) builds or loads its own engine")
    if not ctx.runtime_entry.engine_gate:
        pytest.skip(f"the candidate runtime ({ctx.runtime}) runs the ONNX itself: no TensorRT engine is built, and "
                    "TensorRT's builder does not gate its checks (docs/gpu.md)")
    reason = aot.missing_reason() or (None if ctx.engine_build else "turned off (--parity-engine-build=off)")
    if reason:
        lint = built_once(ctx, spec, precision, lambda *_: artifact_report(spec, precision, ctx.fp16_keep_fp32))["lint"]
        result.details.update(lint=lint, builder=None)
        pytest.skip(f"TensorRT's builder is not here: {reason}; the lint stands in ({len(lint)} findings in the "
                    "details, not a verdict)")
    built = built_once(ctx, spec, precision)  # an artifact that could not be made: one error a run
    result.details.update(engine={k: built[k] for k in ("builder", "targets", "built", "error", "seconds",
                                                        "artifact", "coverage", "warnings", "layers")},
                          fused=layers.fused_groups(built["layers"]))
    for warning in built["warnings"]:
        result.finding("engine_warning", {"summary": f"{built['builder']} warned: {warning}",
                                          "builder": built["builder"], "message": warning})
    fault = builder_fault(spec, precision, built)
    if fault:  # the builder could not run: this row's error alone, the numeric checks run without the engine
        raise SuiteError(fault)
    try:
        engine_gate(ctx, spec, precision)  # a SuiteError (the suite's build) is the row's error
    except CandidateFault as err:
        pytest.fail(str(err), pytrace=False)


def test_matches_reference(parity_context, parity_case, parity_record):
    """The candidate at each precision matches the goldens (or the live TF reference): elementwise policy on every output, plus the task metric."""
    from paritygate.backend.runtimes import recorded_mapping
    from paritygate.judge.parity import candidate_parity

    spec, precision = parity_case
    result, ref = candidate_parity(parity_context, spec, precision)
    shapes = (result.inputs or {}).get("shapes")
    parity_record(result).details.update(
        reference=ref.source, samples=sum(s["rows"] for s in shapes) if shapes else len(next(iter(ref.inputs.values()))),
        candidate=_describe_candidate(parity_context, spec, precision),
        io_mapping=recorded_mapping(parity_context, spec))
    if not result.passed:
        _localize(parity_context, spec, precision, ref, result.details)
    assert result.passed, "\n".join(result.failures)
    if result.inconclusive:  # a NaN / Inf reference, or inputs that could not have shown a failure
        raise result.inconclusive_error()


def test_accepts_every_batch_size(parity_context, parity_case, parity_result):
    """The candidate must accept every batch size 1..max_batch (a rejection fails, it is not skipped), at each
    corner (min, opt, max) of a dynamic input's profile."""
    from paritygate.inputs.strategies import batch_feeds
    from paritygate.judge import coverage
    from paritygate.judge.parity import reference_set
    from paritygate.judge.runs import once

    spec, precision = parity_case
    with coverage.judged(parity_context, spec, precision, parity_result):
        runner = once(parity_context, spec, precision)  # a batch another check ran: its run is the evidence
        ref = reference_set(parity_context, spec)
        rejected, shapes = {}, []
        for batch in range(1, spec.max_batch + 1):
            for feed in batch_feeds(spec, ref.inputs, batch):
                label = f"{batch}: {_shape_of(feed)}" if shapes_vary(spec) else batch
                shapes.append({k: list(v.shape) for k, v in feed.items()})
                rejected.update(_rejection(runner, feed, batch, label))
        parity_result.details.update(max_batch=spec.max_batch, rejected=rejected)
        parity_result.inputs = {"shapes": shapes}
        assert not rejected, f"{spec.name} {precision}: batch sizes rejected by the candidate: {rejected}"


def _rejection(runner, feed, batch, label):
    """{label: why} when the candidate rejects ``feed`` (a batch of ``batch``), else {}."""
    try:
        out = runner.infer(feed)
    except Exception as err:  # noqa: BLE001 - each runtime raises its own types; any error is a rejection
        return {label: str(err).splitlines()[0][:300]}
    wrong = {k: list(v.shape) for k, v in out.items() if v.shape[:1] != (batch,)}
    return {label: f"outputs {wrong} do not have batch dimension {batch}"} if wrong else {}


def shapes_vary(spec):
    return any(t.dynamic for t in spec.inputs.values())


def _shape_of(feed):
    return ", ".join(f"{k} {list(v.shape)}" for k, v in feed.items())


def test_task_on_heldout(parity_context, parity_case, parity_result):
    """The task metric on the model's full held-out set (``inputs/<model>_heldout.npz`` beside the config):
    e.g. accuracy >= 99% of the reference's on real held-out data (MLPerf's rule)."""
    from paritygate.judge import coverage

    with coverage.judged(parity_context, *parity_case, parity_result):
        _task_on_heldout(parity_context, *parity_case, parity_result)


def _task_on_heldout(ctx, spec, precision, result):
    from paritygate.backend.runtimes import reference_runner, resolved_spec
    from paritygate.comparator.task import task_metrics
    from paritygate.inputs import goldens
    from paritygate.inputs.sets import read_input_set
    from paritygate.judge.parity import run_batched
    from paritygate.judge.runs import once
    from paritygate.lazy import available, missing_reason

    if not available("tensorflow"):  # checked without importing it: the reference cache may need no TensorFlow
        pytest.skip(missing_reason("tensorflow"))
    path = goldens.heldout_set_path(spec)
    if spec.task not in ("classification", "detection"):
        pytest.skip(f"model '{spec.name}' has task '{spec.task}': no task metric beyond the elementwise policy")
    if not path.exists():
        pytest.skip(f"model '{spec.name}' has no held-out set ({path})")
    heldout = read_input_set(spec, path, "held-out set")
    inputs, labels = heldout.inputs, heldout.labels
    ref = run_batched(reference_runner(ctx, spec), inputs, spec.max_batch)
    cand = run_batched(once(ctx, spec, precision), inputs, spec.max_batch)
    result.task = task_metrics(resolved_spec(ctx, spec), precision, ref, cand, labels)
    result.details["heldout"] = str(path)
    assert result.task["passed"], f"{spec.name} {precision}: task metric on {path.name} failed: {result.task}"


def _describe_candidate(ctx, spec, precision):
    """What ran as the candidate: runtime, artifact, for fp16 the ops kept in FP32, and the ONNX artifact's report
    (TensorRT lint findings, FP16 nodes blocked, constants FP16 cannot hold:
    paritygate.backend.onnx.artifacts.loader)."""
    from paritygate.backend.engines import engine_build
    from paritygate.backend.onnx.artifacts.loader import FP16_KEEP_FP32, artifact_report
    from paritygate.backend.runtimes import candidate_runner

    runner = candidate_runner(ctx, spec, precision)
    out = {"runtime": ctx.runtime, "runner": runner.name, "artifact": str(getattr(runner, "path", "") or "")}
    if getattr(runner, "providers", None):  # ONNX Runtime's, with their options (the CUDA provider's use_tf32)
        out["providers"] = [list(p) if isinstance(p, tuple) else p for p in runner.providers]
    if precision == "fp16":
        out["fp16_keep_fp32"] = list(ctx.fp16_keep_fp32 or FP16_KEEP_FP32)
    if precision not in spec.engines:  # a prebuilt engine has no ONNX artifact
        report = artifact_report(spec, precision, ctx.fp16_keep_fp32)
        out.update({k: report[k] for k in ("lint", "fp16_blocked", "constants_out_of_range", "built_by_suite")})
    built = engine_build(ctx, spec, precision)  # cached: the engine_builds row holds its whole layer report
    if built is not None:
        out["engine"] = {"builder": built["builder"], "built": built["built"], "coverage": built["coverage"],
                         "warnings": len(built["warnings"])}
    return out


def _localize(ctx, spec, precision, ref, details):
    """A failing fp16/int8 check: where precision breaks and a verified plan (``--parity-localize=off``: none)."""
    from paritygate.judge.divergence import localize_failure

    found = localize_failure(ctx, spec, precision, ref.inputs, reference_outputs=ref.outputs, labels=ref.labels,
                             compare_task=True, check="matches_reference")
    if found is not None:
        details["divergence"] = found
