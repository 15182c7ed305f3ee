"""The files fixtures/zoo/train.py commits: weights, input sets and calibration sets, and their
agreement with fixtures/parity.toml and fixtures/zoo/models.py. No TensorFlow needed."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from fixtures.zoo import models

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "fixtures" / "zoo"
CONFIG = {m["name"]: m for m in tomllib.loads((ROOT / "fixtures" / "parity.toml").read_text())["models"]}
NAMES = list(models.MODEL_NAMES)


def load(path):
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def test_config_validates_against_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "plugins" / "paritygate" / "models" / "config_schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(
        tomllib.loads((ROOT / "fixtures" / "parity.toml").read_text()))


@pytest.mark.parametrize("name", NAMES)
def test_config_matches_model_specs(name):
    config = CONFIG[name]
    assert config["reference"] == f"zoo/models/{name}/saved_model"
    assert config["calibration"] == f"zoo/calibration/{name}.npz"
    assert config["beam"]["handler"] == f"zoo_handlers:{name}"
    specs = models.SPECS[name].inputs
    assert list(config["inputs"]) == [s.name for s in specs]
    for spec in specs:
        table = config["inputs"][spec.name]
        assert (table["shape"], table["dtype"], table["range"]) == (list(spec.shape), spec.dtype, list(spec.range))


def test_weights_load_without_pickle_and_are_small():
    total = 0
    for name in NAMES:
        path = ZOO / "weights" / f"{name}.npz"
        weights = load(path)
        assert list(weights) == [f"w{i:03d}" for i in range(len(weights))]
        assert all(w.dtype == np.float32 and np.isfinite(w).all() for w in weights.values())
        total += path.stat().st_size
    assert total < 2 * 1024 * 1024


@pytest.mark.parametrize("kind, count", [("inputs", 16), ("calibration", 64)])
@pytest.mark.parametrize("name", NAMES)
def test_input_sets_match_config(name, kind, count):
    arrays = load((ZOO.parent if kind == "inputs" else ZOO) / kind / f"{name}.npz")
    inputs = {k: v for k, v in arrays.items() if not k.startswith("__")}
    assert list(inputs) == list(CONFIG[name]["inputs"])
    for key, table in CONFIG[name]["inputs"].items():
        value = inputs[key]
        assert value.dtype == np.dtype(table["dtype"]) and value.shape == (count, *table["shape"][1:])
        assert table["range"][0] <= value.min() and value.max() <= table["range"][1]
    for key in set(arrays) - set(inputs):
        assert key == "__labels__" and arrays[key].dtype == np.int64 and arrays[key].shape == (count,)


def test_mobilenet_heldout_set():
    arrays = load(ZOO.parent / "inputs" / "mobilenet_heldout.npz")
    assert arrays["image"].dtype == np.float32 and arrays["image"].shape[1:] == (16, 16, 3)
    assert arrays["__labels__"].dtype == np.int64 and len(arrays["__labels__"]) == len(arrays["image"]) > 300
    golden = load(ZOO.parent / "inputs" / "mobilenet.npz")
    np.testing.assert_array_equal(golden["image"], arrays["image"][:16])
    assert (ZOO.parent / "inputs" / "mobilenet_heldout.npz").stat().st_size < 400 * 1024


def test_import_does_not_load_tensorflow():
    code = ("import sys, fixtures.zoo.build, fixtures.zoo.models, fixtures.zoo.data; "
            "print([m for m in ('tensorflow', 'keras') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_built_models_are_gitignored():
    assert "/models/" in (ZOO / ".gitignore").read_text().split()
