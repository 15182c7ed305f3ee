"""paritygate.beam.overlap: the first two batches of a multi-worker pipeline meet inside the handler, so model copies
sharing one staging buffer fail beam_multi_process and beam_model_copies every run, even with no device time; the
correct handler passes; a runner that never runs two batches at once fails, saying so.

How often, repeated (10 runs each at 0, 2 and 50 ms of device time): tests/beam/probe_overlap.py, numbers in
docs/beam.md ("Two batches at once")."""

import functools
import threading

import pytest

from paritygate.beam.overlap import AtFirstUse, Rendezvous, overlap_failures

pytest.importorskip("apache_beam")
from paritygate.beam.handlers import BatchTrace
from paritygate.beam.pipeline import Case, PipelineRun


def test_two_batches_meet_and_a_third_passes(tmp_path):
    meet, got = Rendezvous(tmp_path / "o", timeout=10), []
    threads = [threading.Thread(target=lambda: got.append(meet.enter())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(m.slot for m in got) == [0, 1] and all(m.met for m in got)
    assert meet.enter() is None, "later batches pass straight through"


def test_a_lone_batch_times_out_and_the_check_says_why(tmp_path):
    meeting = Rendezvous(tmp_path / "o", timeout=0.05).enter()
    assert meeting.slot == 0 and not meeting.met and meeting.waited_s >= 0.05
    assert meeting.wrap(model := object()) is model, "no meeting at the model after a timed-out entry"
    trace = BatchTrace(4, 4, 0.0, 16, (), pid=7, overlap=meeting.record())
    run = PipelineRun(Case(9, 1, 4, workers=2), [], traces=[trace, BatchTrace(4, 4, 0.0, 16, ())])
    (failure,) = overlap_failures(run)
    assert failure.startswith("the runner never ran two batches at once: the batch in slot 0") and "2 worker" in failure
    assert overlap_failures(PipelineRun(Case(9, 1, 4), [], error="boom")) == []


def test_the_model_is_met_at_its_first_use_and_otherwise_untouched():
    calls = []
    model = AtFirstUse({"a": 1}, lambda: calls.append(1))
    assert isinstance(model, dict) and model["a"] == 1 and len(model) == 1 and "a" in model
    assert list(model) == ["a"] and model.get("a") == 1
    assert calls == [1] * 5 + [1], "each use calls first(); Meeting.at_model acts on the first only"


@pytest.mark.beam
@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.slow
def test_copies_sharing_a_staging_buffer_fail_both_checks(toy_subject):
    """No device time at all: the race window is the few microseconds between staging and the model call, which
    two worker processes hit by luck only; met at the model, both batches have staged before either model runs.
    The correct handlers pass through the same meeting (tests/beam/test_multiprocess.py, test_copies.py)."""
    pytest.importorskip("onnxruntime")
    from paritygate.beam.copies import model_copies
    from paritygate.beam.multiprocess import multi_process
    from tests.beam import toy_handlers as toys

    bound = functools.partial(toys.shares_staging, device_seconds=0.0)
    bound.__name__ = "shares_staging"
    subject = toy_subject(bound)
    mp, mc = multi_process(subject), model_copies(subject)
    assert [m["met"] and m["model_met"] for m in mp.details["overlap"]] == [True, True], mp.details["overlap"]
    assert any("matches the reference of element" in f for f in mp.failures), mp.failures
    shared = [f for f in mc.failures if f.startswith("model_copies=1: ")]  # the run on one shared copy
    assert shared and any("outside atol" in f for f in shared), mc.failures
    assert any(not f.startswith("model_copies=") and "outside atol" in f for f in mc.failures), mc.failures
