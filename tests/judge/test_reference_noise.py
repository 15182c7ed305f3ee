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


def test_the_other_kernel_order_runs_only_when_asked_and_once():
    """TensorFlow's other kernel order runs for a feed only when a check asks for it (FP32 parity), once: the batch,
    batch-1 and repeat checks of the same feed never start it."""
    asked = []

    def other_order():
        asked.append(1)
        return {"y": np.array([[1.0, 2.5]])}

    runs = ReferenceRuns({"y": np.array([[1.0, 2.0]])}, {"repeat": {"y": np.array([[1.0, 2.0]])}}, "d", other_order)
    runs.spread("repeat"), runs.spread(), runs.cosine_floors(2.0)
    assert asked == [] and "kernel_order" not in runs.configs
    np.testing.assert_allclose(runs.spread(kernel_order=True)["y"], 0.5)
    runs.cosine_floors(2.0, kernel_order=True)
    assert asked == [1] and "kernel_order" in runs.configs


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
