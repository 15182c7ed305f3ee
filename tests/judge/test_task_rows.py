"""paritygate.judge.task_rows: in-distribution rows get the task metric whatever file holds them; noise and corner
rows do not; each source is judged and reported on its own."""

import numpy as np

from paritygate.inputs.strategies import Feed
from paritygate.judge.task_rows import TaskRows, in_distribution
from tests.conftest import toy_spec


def _scores(top):
    out = np.full((len(top), 3), 0.1, np.float32)
    out[np.arange(len(top)), top] = 0.8
    return {"y": out}


def test_the_same_flip_fails_whichever_source_holds_it():
    spec = toy_spec(task="classification", inputs={"x": ((-1, 2), "float32", (-1.0, 1.0))})
    rows = TaskRows(spec, "int8")
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    sources = ["calibration", "calibration", "noise", "corner:low"]
    rows.add(Feed({"x": x}, sources), _scores([0, 1, 2, 0]), _scores([0, 2, 1, 1]))  # rows 1..3 flip
    rows.add(Feed({"x": x}, sources), _scores([0, 1, 2, 0]), _scores([0, 2, 1, 1]))  # a replay: counted once
    by_source, failures, inputs = rows.judge()
    assert set(by_source) == {"calibration"}, "noise and corner rows keep the elementwise policy only"
    assert by_source["calibration"]["samples"] == 2 and by_source["calibration"]["top1_agreement"] == 0.5
    assert failures == [("toy int8: task metric on the 2 'calibration' rows: top-1 agreement 0.500 < 0.99 on 'y': "
                         "rows [1] flip (row 1: reference class 1 by margin 0.7 [0.8, 0.1] vs candidate class 2 "
                         "[0.1, 0.8]); source: MLPerf Inference rules: 99% of the FP32 reference accuracy")]
    np.testing.assert_array_equal(inputs["x"], x[1:2])  # the flipped row, for a matches_reference reproducer


def test_agreeing_rows_pass_and_are_reported_per_source():
    spec = toy_spec(task="classification", inputs={"x": ((-1, 1), "float32", (-1.0, 1.0))})
    rows = TaskRows(spec, "fp16")
    x = np.array([[0.1], [0.2], [0.3]], np.float32)
    rows.add(Feed({"x": x}, ["input_set", "heldout", "heldout~perturbed"]), _scores([0, 1, 2]), _scores([0, 1, 2]))
    by_source, failures, inputs = rows.judge()
    assert sorted(by_source) == ["heldout", "heldout~perturbed", "input_set"]
    assert all(m["passed"] and m["top1_agreement"] == 1.0 for m in by_source.values())
    assert failures == [] and inputs is None
    assert [in_distribution(s) for s in ("golden", "calibration~perturbed", "noise", "corner:zero")] == [
        True, True, False, False]
