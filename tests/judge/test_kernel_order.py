"""paritygate.judge.kernel_order: at FP32 the policy widens to 2x what TensorFlow's own two kernel orders (oneDNN on
and off) differ by on the very inputs compared; never for a model whose outputs do not move, never below FP32."""

import numpy as np
import pytest

from paritygate.context import RunContext
from paritygate.inputs.goldens import Golden
from paritygate.judge import kernel_order
from tests.conftest import toy_spec

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")

DEEP_X = np.random.default_rng(1).uniform(-1, 1, (4, 16, 16, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def deep_saved_model(tmp_path_factory):
    """A 3x3 convolution (72 terms an output) and a 8192-term matmul: sums whose order the kernels choose."""
    rng, m = np.random.default_rng(0), tf.Module()
    m.w1 = tf.Variable(rng.standard_normal((3, 3, 8, 32)).astype(np.float32) / 8)
    m.w2 = tf.Variable(rng.standard_normal((32 * 16 * 16, 16)).astype(np.float32) / 90)

    @tf.function(input_signature=[tf.TensorSpec([None, 16, 16, 8], tf.float32, name="x")])
    def serve(x):
        h = tf.nn.relu(tf.nn.conv2d(x, m.w1, 1, "SAME"))
        return {"y": tf.matmul(tf.reshape(h, [-1, 32 * 16 * 16]), m.w2)}

    path = tmp_path_factory.mktemp("deep") / "sm"
    tf.saved_model.save(m, str(path), signatures={"serving_default": serve})
    return path


def _floors(spec, inputs, precision="fp32"):
    ctx = RunContext()
    try:
        return kernel_order.floors(ctx, spec, precision, [Golden(inputs, None)])
    finally:
        ctx.close()


def test_a_deep_model_widens_by_twice_its_own_order_spread_per_row(deep_saved_model):
    spec = toy_spec(deep_saved_model, inputs={"x": ((-1, 16, 16, 8), "float32", (-1.0, 1.0))})
    (floors,), details = _floors(spec, {"x": DEEP_X})
    y = floors["y"]
    assert y.shape == (4, 16) and np.all(y == y[:, :1]), "one floor per batch row, over its elements"
    assert details["max_spread"]["y"] > 0, "oneDNN's and Eigen's FP32 sums differ in their last bits here"
    assert details["max_spread"]["y"] < 1e-5, "by round-off, not by another function: 2x it stays this small"
    np.testing.assert_allclose(y.max(), 2 * details["max_spread"]["y"])
    assert details["configuration"].startswith("TF_ENABLE_ONEDNN_OPTS=") and details["k"] == 2


def test_a_model_whose_outputs_do_not_move_keeps_the_policy_exactly(toy_saved_model):
    (floors,), details = _floors(toy_spec(toy_saved_model), {"x": np.linspace(-1, 1, 6, dtype=np.float32)[:, None]})
    assert details["max_spread"] == {"y": 0.0, "z": 0.0}
    assert not any(np.any(f) for f in floors.values())  # y = 5x has no sum to reorder: the defects stay caught


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_reduced_precision_is_not_widened_and_starts_no_child(precision, toy_saved_model):
    assert _floors(toy_spec(toy_saved_model), {"x": np.zeros((1, 1), np.float32)}, precision) == ([None], None)


@pytest.fixture(scope="module")
def custom_keras_file(tmp_path_factory):
    """A .keras model with a layer class registered in this process only: a child process cannot rebuild it."""
    keras = pytest.importorskip("keras")

    @keras.saving.register_keras_serializable(package="paritygate_test_kernel_order")
    class Times5(keras.layers.Layer):
        def call(self, x):
            return 5.0 * x

    inputs = keras.Input((1,), name="x")
    path = tmp_path_factory.mktemp("custom") / "times5.keras"
    keras.Model(inputs, {"y": Times5()(inputs)}).save(path)
    return path


def test_a_second_order_that_cannot_run_leaves_the_policy_and_says_why(custom_keras_file):
    (floor,), details = _floors(toy_spec(custom_keras_file), {"x": np.ones((2, 1), np.float32)})
    assert floor is None and "TF_ENABLE_ONEDNN_OPTS" in details["unavailable"], details
