"""paritygate.backend.onnxrt.runner: runs ONNX on the CPU execution provider; errors name the file. Also
checks the shared `make_onnx` / `scale` helpers themselves."""

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.onnxrt.runner import OnnxrtRunner
from tests.conftest import make_onnx, scale

pytestmark = pytest.mark.onnx
pytest.importorskip("onnxruntime")

X = np.array([[-1.0], [0.0], [0.5], [1.0]], np.float32)


def test_runs_the_default_toy_graph(toy_onnx):
    with OnnxrtRunner(toy_onnx, threads=1) as runner:
        assert runner.name == "onnxruntime:toy.onnx"
        assert runner.input_metadata() == {"x": (np.dtype(np.float32), (-1, 1))}
        out = runner.infer({"x": X})
        assert runner.last_inference_time > 0
    assert list(out) == ["y", "z"]
    np.testing.assert_array_equal(out["y"], 5 * X)
    np.testing.assert_array_equal(out["z"], 2 * X)


def test_y_equals_5x_variants(tmp_path):
    path = make_onnx(tmp_path / "off.onnx", scale("y", 5.01), outputs=("y",))
    with OnnxrtRunner(path) as runner:
        np.testing.assert_allclose(runner.infer({"x": X})["y"], np.float32(5.01) * X)
    path = make_onnx(tmp_path / "chain.onnx", scale("t", 5.0), scale("y", 1.0, src="t"), scale("w", -1.0),
                     outputs=("y", "w"), width=3)
    with OnnxrtRunner(path) as runner:
        x = np.ones((2, 3), np.float32)
        out = runner.infer({"x": x})
        assert runner.input_metadata() == {"x": (np.dtype(np.float32), (-1, 3))}
    np.testing.assert_array_equal(out["y"], 5 * x)
    np.testing.assert_array_equal(out["w"], -x)


def test_missing_file_names_it(tmp_path):
    path = tmp_path / "missing.onnx"
    with pytest.raises(RunnerError, match=rf"^{path}: ONNX Runtime cannot load the model"):
        OnnxrtRunner(path).activate()


def test_corrupt_file_names_it(tmp_path):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(b"garbage")
    with pytest.raises(RunnerError, match=rf"^{path}: ONNX Runtime cannot load the model"):
        OnnxrtRunner(path).activate()


def test_infer_errors_name_the_file_and_the_feed(toy_onnx):
    runner = OnnxrtRunner(toy_onnx)
    with pytest.raises(RunnerError, match=r"onnxruntime:toy.onnx: infer\(\) called before activate\(\)"):
        runner.infer({"x": X})
    with runner:
        with pytest.raises(RunnerError, match=rf"^{toy_onnx}: ONNX Runtime failed on inputs "
                                              r"\{'x': \('float64', \[4, 1\]\)\}"):
            runner.infer({"x": X.astype(np.float64)})
        with pytest.raises(RunnerError, match=rf"^{toy_onnx}: ONNX Runtime failed on inputs \{{'w'"):
            runner.infer({"w": X})
        with pytest.raises(RunnerError, match=rf"^{toy_onnx}: ONNX Runtime failed on inputs .*\[4, 2\]"):
            runner.infer({"x": np.zeros((4, 2), np.float32)})
    assert not runner.is_active


def test_deactivate_is_idempotent(toy_onnx):
    runner = OnnxrtRunner(toy_onnx).activate()
    assert runner.activate() is runner  # a second activate is a no-op
    runner.deactivate()
    runner.deactivate()
    assert not runner.is_active


def test_in_an_xdist_worker_threads_do_not_spin_and_outputs_are_the_same(toy_onnx, monkeypatch):
    x = {"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(8, 1)}
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    alone = OnnxrtRunner(toy_onnx).activate()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    worker = OnnxrtRunner(toy_onnx).activate()
    told = OnnxrtRunner(toy_onnx, threads=2, spin=True).activate()
    options = {r: r._sess.get_session_options() for r in (alone, worker, told)}
    def spin(o):
        try:
            return o.get_session_config_entry("session.intra_op.allow_spinning")
        except RuntimeError:  # not set: ONNX Runtime's default, spinning
            return "1"

    spins = {r: spin(o) for r, o in options.items()}
    assert (spins[alone], spins[worker], spins[told]) == ("1", "0", "1")
    assert (options[alone].intra_op_num_threads, options[worker].intra_op_num_threads,
            options[told].intra_op_num_threads) == (0, 0, 2)  # 0: ONNX Runtime's default, a thread per core
    for k, v in alone.infer(x).items():
        assert np.array_equal(v, worker.infer(x)[k])
