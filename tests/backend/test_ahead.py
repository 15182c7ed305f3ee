"""paritygate.backend.ahead: a serial run's fp16 and int8 builds, made beside the checks, are the builds the checks
would make (a check then builds nothing, or waits for the one under way); a build that fails is kept for its checks,
once; the run's end waits for the build under way."""

import pytest

from paritygate.backend import ahead, registry
from paritygate.backend.cache import STATS
from paritygate.backend.engines import FAILED_CANDIDATES, built_once
from paritygate.backend.onnx.artifacts.loader import onnx_artifact
from paritygate.common.memo import ArtifactKey
from paritygate.context import RunContext
from tests.conftest import toy_spec

pytestmark = [pytest.mark.tf, pytest.mark.onnx]


@pytest.fixture
def spec(toy_saved_model):
    for module in ("tf2onnx", "onnxconverter_common", "onnxruntime"):
        pytest.importorskip(module)
    return toy_spec(toy_saved_model, precisions=("fp32", "fp16", "int8"))  # no calibration: int8 cannot be made


def _check(ctx, spec):
    """What the fp16 checks ask first: the engine build (with its artifact), then what ONNX Runtime opens."""
    built_once(ctx, spec, "fp16")
    return onnx_artifact(spec, "fp16"), registry.get(ctx.runtime).files(ctx, spec, "fp16")


def test_the_checks_find_the_builds_made_ahead(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    ctx = RunContext()
    onnx_artifact(spec, "fp32")  # the validation's
    before = STATS["builds"]
    made = ctx.ahead = ahead.start(ctx, [(spec, "fp16"), (spec, "int8")])
    made.thread.join(120)
    built = STATS["builds"] - before
    assert built >= 2, "the fp16 artifact and its strict file"
    artifact, opened = _check(ctx, spec)
    assert STATS["builds"] - before == built, "the check built nothing more"
    assert opened.artifact != artifact and opened.path.exists(), "the strict file ONNX Runtime runs, made ahead"
    failed = FAILED_CANDIDATES.peek(ctx, ArtifactKey(ctx.runtime, "toy", "int8"))
    assert failed is not None and "calibration" in str(failed)
    with pytest.raises(type(failed)) as raised:
        built_once(ctx, spec, "int8")  # the int8 check: the same error, not a second attempt
    assert raised.value is failed
    ctx.close()


def test_a_check_asking_meanwhile_waits_for_the_same_builds(spec, tmp_path, monkeypatch):
    """The builds of a run whose check asks while the thread builds are the builds of one that waited."""
    counts = []
    for run, meanwhile in (("alone", False), ("meanwhile", True)):
        monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / run))
        ctx = RunContext()
        onnx_artifact(spec, "fp32")
        before = STATS["builds"]
        made = ctx.ahead = ahead.start(ctx, [(spec, "fp16")])
        if not meanwhile:
            made.thread.join(120)
        _check(ctx, spec)
        ctx.close()  # waits for the thread
        assert not made.thread.is_alive()
        counts.append(STATS["builds"] - before)
    assert counts[0] == counts[1] >= 2


def test_the_runs_end_stops_the_thread_between_builds(spec, tmp_path, monkeypatch):
    """``RunContext.close`` right after the start: the build under way (the first model's, its own tf2onnx conversion
    included: seconds) is finished, the next one is not begun."""
    import dataclasses

    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    ctx = RunContext()
    ctx.ahead = ahead.start(ctx, [(dataclasses.replace(spec, name="first"), "fp16"), (spec, "fp16")])
    ctx.close()
    assert not ctx.ahead.thread.is_alive()
    assert not list((tmp_path / "cache" / "onnx").glob("toy-fp16-*.onnx")), "the build after the stop was not made"
