"""paritygate.judge.runs: the candidate's outputs per input, run once per precision, on a real ONNX Runtime session."""

import numpy as np
import pytest

from tests.conftest import make_onnx, write_config


@pytest.fixture
def counted(tmp_path):
    """(a runner over a real ONNX file (y = 5x, z = 2x) that notes each feed's rows in ``calls``, ``calls``)."""
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    runner = OnnxrtRunner(make_onnx(tmp_path / "cand.onnx")).activate()
    calls = []

    class Counted:
        name = "counted"

        def infer(self, feed):
            calls.append(feed["x"].tolist())
            return runner.infer(feed)

    return Counted(), calls


def test_an_identical_feed_is_answered_by_its_earlier_run_and_again_always_runs(counted):
    from paritygate.judge.runs import Once, Runs

    runner, calls = counted
    once = Once(runner, Runs())
    feed = {"x": np.array([[1.0], [2.0]], np.float32)}
    first = once.infer(feed)
    np.testing.assert_array_equal(first["y"], feed["x"] * 5)
    assert once.infer({"x": feed["x"].copy()}) is first and len(calls) == 1  # the same names, dtype, shape, bytes
    once.infer({"x": feed["x"][:1]})
    once.infer({"x": feed["x"] + 1})
    assert len(calls) == 3  # another shape, other bytes: runs
    again = once.again(feed)
    assert len(calls) == 4 and again is not first  # determinism's second run is a run
    np.testing.assert_array_equal(again["y"], first["y"])


def test_runs_keep_at_most_max_bytes_and_run_again_beyond(counted, monkeypatch):
    from paritygate.judge import runs

    runner, calls = counted
    monkeypatch.setattr(runs, "MAX_BYTES", 16)  # one feed of 2 rows: y and z, 2 x 4 bytes each
    once = runs.Once(runner, runs.Runs())
    small, large = {"x": np.ones((2, 1), np.float32)}, {"x": np.ones((3, 1), np.float32)}
    once.infer(small)
    once.infer(large)
    once.infer(small)
    once.infer(large)
    assert [len(c) for c in calls] == [2, 3, 3] and once.runs.size == 16  # the large one was not kept


def test_the_runs_are_one_per_model_and_precision_and_released_with_it(toy_saved_model):
    from paritygate.context import RunContext
    from paritygate.judge.runs import once
    from tests.conftest import toy_spec

    ctx, spec = RunContext(), toy_spec(toy_saved_model)
    try:
        feed = {"x": np.array([[1.0]], np.float32)}
        fp32 = once(ctx, spec, "fp32")
        out = fp32.infer(feed)
        assert once(ctx, spec, "fp32").infer(feed) is out  # another check of the same precision: its run
        assert once(ctx, spec, "fp32").runs is fp32.runs
        ctx.release(spec.name, "fp32")
        assert not fp32.runs.outputs and once(ctx, spec, "fp32").runs is not fp32.runs
    finally:
        ctx.close()


def test_determinism_takes_an_earlier_run_of_an_input_as_its_first(tmp_path, counted):
    """determinism draws property_parity's inputs (ci's draws are the same): an input an earlier check ran through
    the candidate session (property_parity's run, or batch_invariance's where parity stopped at a failure) is run
    once more, not twice; one no check ran is run twice. A candidate whose outputs change between runs still fails."""
    from paritygate.judge.properties import _companions, determinism_check, invariance_check, parity_check
    from paritygate.judge.reference_noise import Ledger, ReferenceRuns
    from paritygate.judge.runs import Once, Runs
    from paritygate.models.config import load_config

    x = {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-10.0, 10.0]}}
    (spec,) = load_config(write_config(tmp_path, {"models": [{"name": "m", "reference": "cand.onnx", "onnx": "cand.onnx",
                                                              "precisions": ["fp32"], "max_batch": 2, "inputs": x}]}))
    runner, calls = counted
    feed = {"x": np.array([[1.0], [2.0]], np.float32)}
    profile = ReferenceRuns({"y": feed["x"] * 5, "z": feed["x"] * 2}, {}, "seen")
    candidate = Once(runner, Runs())
    parity_check(spec, "fp32", candidate, Ledger())(feed, profile)
    assert len(calls) == 1 and set(candidate.runs.outputs) == {"seen"}
    determinism_check(spec, "fp32", candidate, Ledger())(feed, profile)
    assert len(calls) == 2  # one more run of the input property_parity ran
    determinism_check(spec, "fp32", candidate, Ledger())(feed, ReferenceRuns(profile.outputs, {}, "unseen"))
    assert len(calls) == 4
    other, ledger = {"x": np.array([[3.0], [4.0]], np.float32)}, Ledger(counts=_companions)
    other_profile = ReferenceRuns({"y": other["x"] * 5, "z": other["x"] * 2}, {}, "invariance")
    ledger.add(other, other_profile)
    invariance_check(spec, "fp32", candidate, ledger)(other, other_profile)  # parity never ran it
    del calls[:]
    determinism_check(spec, "fp32", candidate, Ledger())(other, other_profile)
    assert calls == [[[3.0], [4.0]]]  # batch_invariance's run of the whole batch is run 1
    candidate.runs.outputs["seen"] = {"y": feed["x"] * 5 + 1e-6, "z": feed["x"] * 2}  # a run 1 that differs: fails
    with pytest.raises(AssertionError, match="outputs changed between identical runs"):
        determinism_check(spec, "fp32", candidate, Ledger())(feed, profile)
