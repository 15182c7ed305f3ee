"""paritygate.judge.plans: the evidence a plan must pass, its reference profiles made in a thread while a search
ranks and rebuilds (``Evidence.profiled_ahead``), on a real ONNX Runtime session standing in for the reference as a
search without a session uses one (``divergence._standalone_book``)."""

import threading
import time

import numpy as np

from tests.conftest import make_onnx, toy_spec


def _evidence(tmp_path, delay=0.0):
    """(an Evidence over 6 feeds of the toy model's y = 5x, z = 2x, the profile calls as (thread, feed's first
    value) in order); ``delay``: seconds each profile takes (a slow reference)."""
    from paritygate.backend.onnxrt.runner import OnnxrtRunner
    from paritygate.judge.plans import Evidence
    from paritygate.judge.reference_noise import ReferenceNoise

    noise = ReferenceNoise(OnnxrtRunner(make_onnx(tmp_path / "ref.onnx")).activate())
    calls, busy = [], threading.Lock()

    def profile(feed):
        assert busy.acquire(blocking=False), "two threads asked the reference at once"
        try:
            key = round(float(np.asarray(feed["x"]).ravel()[0]), 3)
            if key not in {k for _, k in calls}:
                calls.append((threading.current_thread().name, key))
                time.sleep(delay)
            return noise.profile(feed)
        finally:
            busy.release()

    evidence = Evidence(toy_spec(), "int8", profile)
    evidence.add_feeds("fresh_sample", [{"x": np.full((2, 1), v, np.float32)} for v in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)])
    return evidence, calls


def test_the_evidence_is_profiled_in_a_thread_in_judges_order_and_judge_waits_for_it(tmp_path):
    evidence, calls = _evidence(tmp_path, delay=0.05)

    def run(feed):
        return {"y": feed["x"] * 5, "z": feed["x"] * 2}

    with evidence.profiled_ahead():
        assert evidence.judge(run) == []  # waits for the thread, then asks for nothing new
    assert [k for _, k in calls] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert {t for t, _ in calls} == {"paritygate-evidence"}


def test_leaving_the_block_stops_the_thread_between_two_feeds(tmp_path):
    evidence, calls = _evidence(tmp_path, delay=0.2)
    with evidence.profiled_ahead():
        time.sleep(0.05)
    assert 1 <= len(calls) < 6  # the feed under way was finished, no other started
    assert not any(t.name == "paritygate-evidence" for t in threading.enumerate())
    evidence.judge(lambda feed: {"y": feed["x"] * 5, "z": feed["x"] * 2})  # the rest: in judge's thread, in order
    assert [k for _, k in calls] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert calls[-1][0] == threading.current_thread().name
