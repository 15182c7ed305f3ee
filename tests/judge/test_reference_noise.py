"""paritygate.judge.reference_noise: the reference's spread is per input (batch row), not per element; the repeat
runs while it can show something."""

import numpy as np

from paritygate.judge.reference_noise import ReferenceRuns


def test_the_spread_is_the_largest_drift_over_each_inputs_elements():
    outputs = {"y": np.zeros((2, 3))}
    drifted = np.array([[0.0, 0.05, 0.0], [0.0, 0.0, 0.001]])  # TF drifts on one element of each row
    spread = ReferenceRuns(outputs, {"batch1": {"y": drifted}}, "d").spread()["y"]
    # every element of row 0 may drift by 0.05 (TF did, next door); row 1 keeps its own, smaller spread
    np.testing.assert_array_equal(spread, [[0.05] * 3, [0.001] * 3])


def test_a_rank_one_output_keeps_its_elementwise_spread():
    spread = ReferenceRuns({"y": np.zeros(3)}, {"repeat": {"y": np.array([0.0, 0.1, 0.0])}}, "d").spread()["y"]
    np.testing.assert_array_equal(spread, [0.0, 0.1, 0.0])


def test_the_kernel_order_counts_only_where_fp32_parity_asks_for_it():
    outputs = {"y": np.array([[1.0, 2.0]])}
    runs = ReferenceRuns(outputs, {"batch1": {"y": np.array([[1.0, 2.001]])},
                                   "kernel_order": {"y": np.array([[1.0, 2.5]])}}, "d")
    np.testing.assert_allclose(runs.spread()["y"], 0.001)  # batch and within-candidate checks: not their noise
    np.testing.assert_allclose(runs.spread(kernel_order=True)["y"], 0.5)  # property_parity at fp32
    assert runs.cosine_floors(2.0)["y"] > runs.cosine_floors(2.0, kernel_order=True)["y"]


def test_each_row_alone_and_the_other_kernel_order_run_only_when_a_check_completes_the_runs_and_once():
    """The whole batch and its repeat are run for every input; each row alone and TensorFlow's other kernel order
    only when a check that would fail without them asks (``complete``), each once, the kernel order only for FP32's
    checks (``kernel_order=True``). No spread or cosine floor starts one."""
    asked = []

    def run(name, y):
        return lambda: asked.append(name) or {"y": np.array([y])}

    runs = ReferenceRuns({"y": np.array([[1.0, 2.0]])}, {"repeat": {"y": np.array([[1.0, 2.0]])}}, "d",
                         run("kernel_order", [1.0, 2.5]), alone=run("batch1", [1.0, 2.25]))
    runs.spread("repeat"), runs.spread(), runs.spread(kernel_order=True), runs.cosine_floors(2.0, kernel_order=True)
    assert asked == [] and set(runs.configs) == {"repeat"} and runs.pending() and runs.pending(kernel_order=True)
    assert runs.complete() and asked == ["batch1"] and not runs.pending() and runs.pending(kernel_order=True)
    np.testing.assert_allclose(runs.spread()["y"], 0.25)
    np.testing.assert_allclose(runs.spread(kernel_order=True)["y"], 0.25)  # not run yet: not counted
    assert runs.complete(kernel_order=True) and asked == ["batch1", "kernel_order"]
    np.testing.assert_allclose(runs.spread(kernel_order=True)["y"], 0.5)
    assert not runs.complete(kernel_order=True) and asked == ["batch1", "kernel_order"]


def test_a_check_is_judged_again_with_every_configuration_only_where_it_would_fail_without_them():
    """``properties.completing``: an input the check passes on the configurations run so far is not completed; one
    it would fail is completed, what the first try recorded is taken back, and the second judgement stands."""
    from paritygate.judge.properties import completing
    from paritygate.judge.reference_noise import Incomplete, Ledger

    ledger, seen = Ledger(), []

    def check(feed, profile):
        ledger.unstable.append(feed["x"])  # a record the first try must not leave behind
        spread = float(np.max(profile.spread()["y"]))
        seen.append(spread)
        if abs(feed["x"] - 2.0) > 2 * spread:
            if profile.pending():
                raise Incomplete
            raise AssertionError(f"off by {feed['x'] - 2.0}")

    judged = completing(check, ledger)

    def runs():
        return ReferenceRuns({"y": np.array([[2.0]])}, {}, "d", alone=lambda: {"y": np.array([[2.5]])})

    close, far, wrong = runs(), runs(), runs()
    judged({"x": 2.0}, close)
    assert close.pending() and seen == [0.0]
    judged({"x": 2.9}, far)  # within 2 x 0.5 once each row alone has run
    assert not far.pending() and seen == [0.0, 0.0, 0.5] and ledger.unstable == [2.0, 2.9]
    import pytest

    with pytest.raises(AssertionError, match="off by"):
        judged({"x": 3.5}, wrong)


def test_the_repeat_runs_for_the_first_inputs_of_a_shape_and_for_all_once_it_moved(tmp_path):
    """A deterministic TensorFlow reference is run twice for its first REPEAT_FIRST inputs of each shape, then once;
    a reference with a stateful random op moves on its first repeat, and every input is run twice from then on
    (its noise floor keeps measuring it). Real SavedModels through TfRunner."""
    import pytest

    tf = pytest.importorskip("tensorflow")
    from paritygate.backend.tf.runner import TfRunner
    from paritygate.judge.reference_noise import REPEAT_FIRST, ReferenceNoise

    def save(path, noisy):
        module = tf.Module()

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(x):
            return {"y": 2.0 * x + (tf.random.uniform(tf.shape(x)) if noisy else 0.0)}

        module.serve = serve
        tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
        return path

    for noisy in (False, True):
        calls = []
        runner = TfRunner(save(tmp_path / f"m{noisy}", noisy)).activate()
        real = runner.infer
        runner.infer = lambda feed, real=real, calls=calls: calls.append(len(feed["x"])) or real(feed)
        noise = ReferenceNoise(runner)
        feeds = [{"x": np.full((1, 2), float(i), np.float32)} for i in range(REPEAT_FIRST + 2)]
        repeated = ["repeat" in noise.profile(feed).configs for feed in feeds]
        assert repeated == [True] * len(feeds) if noisy else [True] * REPEAT_FIRST + [False, False], (noisy, repeated)
        assert len(calls) == len(feeds) + sum(repeated)
        assert noise.repeat_moved == noisy
        if noisy:  # its spread is measured on every input
            assert all(noise.profile(feed).spread("repeat")["y"].max() > 0 for feed in feeds)
