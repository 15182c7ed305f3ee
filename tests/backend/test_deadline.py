"""paritygate.backend.deadline: every runner's inference call is bounded in time, whatever the runtime (issue 38:
an ONNX Loop with a trip count of 10**12 passed validation and hung the first check)."""

import time

import numpy as np
import pytest

from paritygate.backend import deadline
from paritygate.backend.base import BaseRunner, InferenceTimeout, RunnerError

X = {"x": np.ones((2, 3), np.float32)}


def loop_onnx(path, trips):
    """x [N, 3] -> y = 2x, then a Loop of ``trips`` iterations adding 0 (onnx.checker accepts any trip count)."""
    onnx = pytest.importorskip("onnx")
    h, T = onnx.helper, onnx.TensorProto
    body = h.make_graph([h.make_node("Identity", ["cond_in"], ["cond_out"]),
                         h.make_node("Add", ["v_in", "zero"], ["v_out"])], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                         h.make_tensor_value_info("v_in", T.FLOAT, None)],
                        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, None)],
                        [h.make_tensor("zero", T.FLOAT, [], [0.0])])
    graph = h.make_graph([h.make_node("Mul", ["x", "two"], ["x2"]), h.make_node("Loop", ["M", "c", "x2"], ["y"], body=body)],
                         "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 3])],
                         [h.make_tensor("two", T.FLOAT, [], [2.0]), h.make_tensor("M", T.INT64, [], [trips]),
                          h.make_tensor("c", T.BOOL, [], [True])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


class Sleeper(BaseRunner):
    """A runner whose calls take ``seconds`` (no runtime can cancel them) or raise ``error``."""

    def __init__(self, seconds=0.0, error=None):
        super().__init__("sleeper")
        self.seconds, self.error = seconds, error

    def activate_impl(self):
        pass

    def infer_impl(self, feed):
        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        return feed


@pytest.fixture
def one_second(monkeypatch):
    monkeypatch.setenv(deadline.ENV, "1")


@pytest.mark.onnx
def test_an_onnx_loop_of_10_to_the_12_iterations_stops_at_the_limit_and_the_runner_works_on(tmp_path, one_second):
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    pytest.importorskip("onnxruntime")
    runner = OnnxrtRunner(loop_onnx(tmp_path / "loop.onnx", 10**12)).activate()
    start = time.monotonic()
    with pytest.raises(InferenceTimeout, match=r"loop\.onnx: one inference call ran longer than 1 s and was stopped.*"
                                               r"PARITYGATE_MAX_INFER_S=<seconds>"):
        runner.infer(X)
    assert time.monotonic() - start < 1 + 4 * deadline.POLL_S + 1  # stopped, not left running
    short = OnnxrtRunner(loop_onnx(tmp_path / "short.onnx", 10)).activate()
    np.testing.assert_array_equal(short.infer(X)["y"], 2 * X["x"])


def test_a_call_no_runtime_can_cancel_is_left_in_its_worker_and_the_caller_goes_on(one_second):
    start = time.monotonic()
    with pytest.raises(InferenceTimeout, match="sleeper: one inference call ran longer than 1 s"):
        Sleeper(30).activate().infer(X)
    assert time.monotonic() - start < 2
    assert Sleeper(0).activate().infer(X) is X  # a fresh worker serves the next call
    with pytest.raises(RunnerError, match="its own"):  # a call's own error reaches the caller as it is
        Sleeper(0, RunnerError("its own")).activate().infer(X)


@pytest.mark.tf
def test_a_tensorflow_while_loop_that_never_ends_stops_at_the_limit(tmp_path, one_second):
    tf = pytest.importorskip("tensorflow")
    from paritygate.backend.tf.runner import TfRunner

    class Forever(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            step = (tf.constant(0, tf.int64), x)
            return {"y": tf.while_loop(lambda i, v: i < 10**12, lambda i, v: (i + 1, v + 0.0), step)[1]}

    module = Forever()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.serve})
    start = time.monotonic()
    with pytest.raises(InferenceTimeout, match="sm: one inference call ran longer than 1 s"):
        TfRunner(tmp_path / "sm").activate().infer(X)
    assert time.monotonic() - start < 1 + 4 * deadline.POLL_S + 1


def test_the_limit_is_a_positive_number_of_seconds(monkeypatch):
    monkeypatch.delenv(deadline.ENV, raising=False)
    assert deadline.infer_limit_s() == deadline.DEFAULT_S
    for bad in ("abc", "0", "-3", "inf", "nan"):
        with pytest.raises(ValueError, match=f"--parity-max-infer-s='{bad}': expected a positive number of seconds"):
            deadline.configure(bad)
        monkeypatch.setenv(deadline.ENV, bad)
        with pytest.raises(ValueError, match=f"PARITYGATE_MAX_INFER_S='{bad}'"):
            deadline.infer_limit_s()
    deadline.configure("2.5")
    assert deadline.infer_limit_s() == 2.5
