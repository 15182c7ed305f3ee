"""paritygate.backend.tf.loader: a .keras reference becomes a cached SavedModel that tf2onnx converts, with the
Keras model's own input and output names; and a .keras model passes the conformance parity checks from a config
alone (a classifier with two outputs: logits and probabilities)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paritygate.backend.cache import STATS
from tests.conftest import toy_spec

pytestmark = [pytest.mark.tf, pytest.mark.onnx]
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
CONFORMANCE = Path(__file__).resolve().parents[3] / "conformance"


def two_output_classifier(path):
    """features float32 [N, 4] -> logits [N, 3] and probs = softmax(logits), seeded weights."""
    keras.utils.set_random_seed(0)
    x = keras.Input(shape=(4,), name="features")
    # Weights large enough that the probabilities span [0, 1] over the input range: with default initialisation
    # they stay near 1/3, which an int8 candidate's atol 0.3 could match with a constant (inconclusive, rightly).
    init = keras.initializers.RandomNormal(stddev=3.0, seed=0)
    h = keras.layers.Dense(8, activation="relu", name="hidden", kernel_initializer=init)(x)
    logits = keras.layers.Dense(3, name="logits", kernel_initializer=init)(h)
    probs = keras.layers.Softmax(name="probs")(logits)
    keras.Model(x, [logits, probs]).save(path)
    return path


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory):
    return two_output_classifier(tmp_path_factory.mktemp("keras") / "classifier.keras")


def keras_spec(path, **fields):
    return toy_spec(reference=path, source=path.parent / "parity.toml",
                    inputs={"features": ((-1, 4), "float32", (-1.0, 1.0))}, **fields)


def test_keras_file_exports_once_to_a_saved_model_with_its_own_names(keras_file, parity_cache):
    from paritygate.backend.tf.loader import saved_model_of

    spec = keras_spec(keras_file)
    before = dict(STATS)
    folder, signature = saved_model_of(spec)
    assert signature == "serving_default" and folder.parent == parity_cache / "saved_model"
    assert STATS["builds"] == before["builds"] + 1
    fn = tf.saved_model.load(str(folder)).signatures["serving_default"]
    assert list(fn.structured_input_signature[1]) == ["features"]
    assert sorted(fn.structured_outputs) == ["logits", "probs"]
    x = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
    model = keras.saving.load_model(str(keras_file), compile=False)
    np.testing.assert_allclose(fn(features=tf.constant(x))["probs"].numpy(), model(x)[1].numpy(), rtol=1e-6)
    again = dict(STATS)
    assert saved_model_of(spec) == (folder, signature) and STATS["builds"] == again["builds"]


def test_keras_file_converts_to_onnx_with_the_same_names(keras_file, parity_cache):
    import onnx

    from paritygate.backend.onnx.artifacts import loader

    path = loader.fp32_onnx(keras_spec(keras_file))
    model = onnx.load(str(path))
    assert [i.name for i in model.graph.input] == ["features"]
    assert sorted(o.name for o in model.graph.output) == ["logits", "probs"]
    report = loader.artifact_report(keras_spec(keras_file), "fp32")
    assert report["built_by_suite"] and report["report"]["converter"] == "tf2onnx" and report["lint"] == []


def test_keras_reference_messages_do_not_name_a_signature(keras_file):
    from paritygate.backend.base import RunnerError
    from paritygate.backend.tf.runner import TfRunner

    with TfRunner(keras_file) as runner:
        assert runner.describe() == f"{keras_file} (Keras file, read with keras {keras.__version__})"
        with pytest.raises(RunnerError, match=rf"^{keras_file} \(Keras file, read with keras [0-9.]+\): failed on "
                                              "inputs") as err:
            runner.infer({"features": np.zeros((2, 5), np.float32)})
    assert "signature" not in str(err.value)


@pytest.mark.slow
def test_keras_model_passes_the_conformance_parity_checks_from_a_config_alone(keras_file, tmp_path):
    folder = keras_file.parent
    np.savez(folder / "calib.npz", features=np.random.default_rng(1).uniform(-1, 1, (32, 4)).astype(np.float32))
    (folder / "parity.toml").write_text(f"""
[[models]]
name = "keras_classifier"
reference = "{keras_file.name}"
precisions = ["fp32", "fp16", "int8"]
max_batch = 4
task = "generic"
calibration = "calib.npz"
[models.inputs.features]
shape = [-1, 4]
dtype = "float32"
range = [-1.0, 1.0]
""")
    report = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(CONFORMANCE / "test_parity.py"), f"--parity-config={folder / 'parity.toml'}",
         f"--parity-report={report}", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", f"--rootdir={folder}"],
        check=False, capture_output=True, text=True, cwd=folder,
        env={**os.environ, "PARITYGATE_CACHE": str(tmp_path / "cache")})
    checks = json.loads((report / "parity-report.json").read_text())["checks"]
    status = {(c["precision"], c["check"]): c["status"] for c in checks}
    assert proc.returncode == 0, proc.stdout[-3000:]
    for precision in ("fp32", "fp16", "int8"):
        assert status[(precision, "matches_reference")] == "pass"
        assert status[(precision, "accepts_every_batch_size")] == "pass"
    details = {c["precision"]: c["details"] for c in checks if c["check"] == "matches_reference"}
    assert details["int8"]["candidate"]["lint"] == [] and details["int8"]["candidate"]["built_by_suite"]
