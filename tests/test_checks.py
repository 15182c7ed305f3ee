"""paritygate.checks.reference_self_check and the property checks' uninformative examples: an input on which
the TF reference does not reproduce itself (alone vs in the batch) within the budget judges no candidate."""

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")  # before pytester snapshots sys.modules: re-importing onnx's extension aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("hypothesis")
tf = pytest.importorskip("tensorflow")

from paritygate.checks import reference_self_check
from tests.conftest import make_onnx, toy_spec, write_config

pytestmark = [pytest.mark.tf, pytest.mark.onnx]

PROPERTIES = Path(__file__).resolve().parents[1] / "conformance" / "test_properties.py"


def _saved_model(path, moves_where):
    """y = 5x (+ 1e-3 x the batch size where ``moves_where(x)``), z = 2x: a reference whose output depends on
    its batch companions on some inputs, as basic-pitch's does on silence (deterministically here)."""
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
    def serve(x):
        noise = 1e-3 * tf.cast(tf.shape(x)[0], tf.float32) * tf.cast(moves_where(x), tf.float32)
        return {"y": 5.0 * x + noise, "z": 2.0 * x}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return path


class _Runner:
    def __init__(self, fn):
        self.fn = fn

    def infer(self, feed):
        return {k: np.asarray(v) for k, v in self.fn(**{k: tf.constant(v) for k, v in feed.items()}).items()}


def test_reference_self_check_finds_a_reference_that_moves_on_its_own(tmp_path):
    path = _saved_model(tmp_path / "sm", lambda x: tf.abs(x) < 1e-3)
    runner = _Runner(tf.saved_model.load(str(path)).signatures["serving_default"])
    spec = toy_spec(max_batch=4)
    quiet, loud = np.zeros((3, 1), np.float32), np.full((3, 1), 0.5, np.float32)
    assert reference_self_check(spec, "fp32", runner, {"x": loud}, runner.infer({"x": loud})) == []
    noise = reference_self_check(spec, "fp32", runner, {"x": quiet}, runner.infer({"x": quiet}))
    assert len(noise) == 1 and noise[0].startswith("toy fp32: output 'y': ")
    one = quiet[:1]  # a batch of one is run again as a batch of two
    assert reference_self_check(spec, "fp32", runner, {"x": one}, runner.infer({"x": one}))


@pytest.mark.slow
def test_uninformative_examples_are_listed_and_none_judged_is_inconclusive(pytester, parity_cache):
    folder = pytester.path
    _saved_model(folder / "silence", lambda x: tf.reduce_all(tf.abs(x) < 1e-3, axis=1, keepdims=True))
    _saved_model(folder / "noisy", lambda x: tf.ones_like(x, dtype=tf.bool))
    make_onnx(folder / "toy.onnx")
    base = {"onnx": "toy.onnx", "precisions": ["fp32"], "max_batch": 3,
            "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    config = write_config(folder, {"models": [{"name": "silence", "reference": "silence", **base},
                                              {"name": "noisy", "reference": "noisy", **base}]})
    result = pytester.runpytest(str(PROPERTIES), "-k", "property_parity", f"--parity-config={config}",
                                f"--parity-report={folder / 'report'}", "-p", "no:xdist", "-p", "no:cacheprovider")
    checks = {c["model"]: c for c in json.loads((folder / "report" / "parity-report.json").read_text())["checks"]}
    # silence: the all-zero corner batch is not judged (the reference moves with the batch size on it), the rest pass
    assert checks["silence"]["status"] == "pass", checks["silence"]["details"].get("message")
    skipped = checks["silence"]["details"]["uninformative_examples"]
    assert {"shape": [3, 1], "range": [0.0, 0.0]} in [s["inputs"]["x"] for s in skipped]
    assert all(s["reference_vs_itself"][0].startswith("silence fp32: output 'y'") for s in skipped)
    # noisy: no example can judge the candidate
    assert checks["noisy"]["status"] == "inconclusive"
    assert "no example could judge the candidate" in checks["noisy"]["details"]["message"]
    assert result.ret == 1
