"""paritygate.backend.tf.runner: the native TF reference over a SavedModel signature or a .keras file; every
error names the model file. Also checks the shared `toy_saved_model` fixture itself."""

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.tf.runner import TfRunner
from tests.conftest import save_toy_model

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")

X = np.array([[-1.0], [0.0], [0.5], [1.0]], np.float32)


def test_toy_saved_model_computes_5x_and_2x(toy_saved_model):
    with TfRunner(toy_saved_model) as runner:
        assert runner.is_active and runner.name == "tf:saved_model"
        assert runner.input_metadata() == {"x": (np.dtype(np.float32), (-1, 1))}
        assert runner.output_names == ["y", "z"]
        out = runner.infer({"x": X})
        assert runner.last_inference_time > 0
    assert not runner.is_active
    assert set(out) == {"y", "z"} and all(isinstance(v, np.ndarray) for v in out.values())
    np.testing.assert_array_equal(out["y"], 5 * X)
    np.testing.assert_array_equal(out["z"], 2 * X)


def test_missing_signature_lists_the_available_ones(tmp_path):
    path = save_toy_model(tmp_path / "serve_only", signature="serve")
    with pytest.raises(RunnerError, match=rf"^{path}: SavedModel has no signature 'serving_default'; "
                                          r"it has \['serve'\]"):
        TfRunner(path).activate()
    with TfRunner(path, signature="serve") as runner:
        np.testing.assert_array_equal(runner.infer({"x": X})["y"], 5 * X)


def test_not_a_saved_model_directory(tmp_path):
    with pytest.raises(RunnerError, match=rf"^{tmp_path}: not a TensorFlow SavedModel \(no saved_model.pb\)"):
        TfRunner(tmp_path).activate()
    with pytest.raises(RunnerError, match="not a TensorFlow SavedModel"):
        TfRunner(tmp_path / "missing").activate()


def test_corrupt_saved_model(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"\x01\x02 not a proto")
    with pytest.raises(RunnerError, match=rf"^{tmp_path}: cannot load SavedModel"):
        TfRunner(tmp_path).activate()


def test_infer_errors_name_the_model(toy_saved_model):
    runner = TfRunner(toy_saved_model)
    with pytest.raises(RunnerError, match=r"infer\(\) called before activate\(\)"):
        runner.infer({"x": X})
    with runner:
        with pytest.raises(RunnerError, match=rf"^{toy_saved_model}: feed is missing input\(s\) \['x'\]"):
            runner.infer({"w": X})
        with pytest.raises(RunnerError, match=rf"^{toy_saved_model} \(signature 'serving_default'\): failed on inputs "
                                              r".*'x': \('float32', \(4, 3\)\)"):
            runner.infer({"x": np.zeros((4, 3), np.float32)})
        with pytest.raises(TypeError, match="dict of input name -> numpy.ndarray"):
            runner.infer({"x": [[1.0]]})


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory):
    keras = pytest.importorskip("keras")
    x = keras.Input(shape=(1,), name="x")
    y = keras.layers.Dense(1, use_bias=False, kernel_initializer=keras.initializers.Constant(5.0), name="y")(x)
    path = tmp_path_factory.mktemp("keras") / "times5.keras"
    keras.Model(x, y).save(path)
    return path


def test_keras_model_loads_and_runs(keras_model):
    with TfRunner(keras_model) as runner:
        assert runner.input_metadata() == {"x": (np.dtype(np.float32), (-1, 1))}
        assert runner.output_names == ["y"]
        out = runner.infer({"x": X})
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], 5 * X)


def test_corrupt_keras_file(tmp_path):
    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"not a zip")
    with pytest.raises(RunnerError, match=rf"^{bad}: not a Keras archive"):
        TfRunner(bad).activate()


@pytest.mark.tf
def test_weights_sha256_is_stable_across_saves_and_sees_a_changed_weight(tmp_path):
    """SavedModel files differ between two saves of the same weights; the weights fingerprint does not."""
    from paritygate.backend.cache import hash_path
    from paritygate.backend.tf.runner import TfRunner
    from tests.conftest import save_toy_model

    a, b = save_toy_model(tmp_path / "a"), save_toy_model(tmp_path / "b")
    c = save_toy_model(tmp_path / "c", y_scale=5.001)
    fingerprints = [TfRunner(p).activate().weights_sha256() for p in (a, b, c)]
    assert hash_path(a) != hash_path(b), "premise: the saved files are not byte-reproducible"
    assert fingerprints[0] == fingerprints[1]
    assert fingerprints[0] != fingerprints[2]


def test_a_keras_file_is_read_once_per_process_until_it_changes(tmp_path, monkeypatch):
    """A Beam handler over a Keras file loads it in every pipeline: the file is read and traced once per process,
    and read again when it changes (its size or mtime)."""
    import os

    from paritygate.backend.tf import runner as module
    from paritygate.backend.tf.util import load_keras
    from tests.backend.tf.test_loader import two_output_classifier

    reads = []
    monkeypatch.setattr(module, "load_keras", lambda path: reads.append(path) or load_keras(path))
    path = two_output_classifier(tmp_path / "m.keras")
    feed = {"features": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)}
    first, second = TfRunner(path).activate(), TfRunner(path).activate()
    assert len(reads) == 1 and second.output_names == first.output_names == ["logits", "probs"]
    np.testing.assert_array_equal(first.infer(feed)["probs"], second.infer(feed)["probs"])
    second.output_names.append("mutated")
    assert TfRunner(path).activate().output_names == ["logits", "probs"], "each runner has its own list"
    with pytest.raises(RunnerError, match="failed on inputs"):  # a string input: an error, and no lock left held
        first.infer({"features": np.full((2, 4), "poison")})
    np.testing.assert_array_equal(second.infer(feed)["probs"], first.infer(feed)["probs"])
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    TfRunner(path).activate()
    assert len(reads) == 2
