"""Dynamic shapes over an optimization profile: the strategies draw one shape per batch across the profile (min,
opt and max always), the one input-set reader takes several shapes, and a tiny fully convolutional TF model with
any H, W runs the property checks and accepts_every_batch_size over at least three shapes (pytester)."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.inputspec import check_input_spec
from paritygate.inputs.sets import InputSetError, read_input_set
from paritygate.inputs.strategies import InputPool, corner_feeds, feeds, pool_feeds
from paritygate.models.config import ModelSpec, TensorSpec
from tests.conftest import write_config

# Before pytester snapshots sys.modules: importing onnx's or TensorFlow's extension a second time (in a later
# pytester test of this module) aborts the process.
for _module in ("onnx", "onnxruntime", "tensorflow"):
    try:
        __import__(_module)
    except ImportError:
        pass
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
PROFILE = ((1, 4, 4, 3), (2, 8, 8, 3), (2, 16, 12, 3))  # min, opt, max
INPUT = {"shape": [-1, -1, -1, 3], "dtype": "float32", "range": [-1.0, 1.0],
         "profile": {k: list(s) for k, s in zip(("min", "opt", "max"), PROFILE)}}


def _spec(tmp_path=Path("."), calibration=None):
    x = TensorSpec("x", (-1, -1, -1, 3), np.dtype("float32"), (-1.0, 1.0), profile=PROFILE)
    return ModelSpec(name="fcn", source=tmp_path / "parity.toml", reference=tmp_path, precisions=("fp32",),
                     max_batch=2, inputs={"x": x}, calibration=calibration)


def test_corner_examples_run_the_profiles_min_opt_and_max():
    shapes = {v["x"].shape for v in corner_feeds(_spec())}
    assert shapes == {(2, 4, 4, 3), (2, 8, 8, 3), (2, 16, 12, 3)}


def test_drawn_feeds_have_one_shape_each_within_the_profile():
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings

    seen = set()

    @settings(max_examples=40, derandomize=True, database=None)
    @given(feed=feeds(_spec()))
    def draw(feed):
        x = feed["x"]
        assert 1 <= x.shape[0] <= 2 and x.shape[3] == 3
        assert 4 <= x.shape[1] <= 16 and 4 <= x.shape[2] <= 12, x.shape
        seen.add(x.shape[1:])

    draw()
    assert {(4, 4, 3), (8, 8, 3), (16, 12, 3)} <= seen and len(seen) > 3, seen


def test_an_input_set_may_hold_several_shapes(tmp_path):
    path = tmp_path / "calib.npz"
    a, b = np.zeros((3, 4, 4, 3), np.float32), np.full((2, 9, 11, 3), 0.5, np.float32)
    np.savez(path, **{"x@4x4x3": a, "x@9x11x3": b})
    found = read_input_set(_spec(tmp_path), path)
    assert [g.inputs["x"].shape for g in found.groups] == [a.shape, b.shape] and found.rows == 5
    pool = InputPool()
    for g in found.groups:
        pool.add(_spec(tmp_path), "calibration", path, g.inputs)
    assert len(pool) == 5 and len(pool.parts()) == 2
    assert sorted(f["x"].shape for f in pool_feeds(_spec(tmp_path), pool)) == [(2, 4, 4, 3), (2, 9, 11, 3)]


@pytest.mark.parametrize("arrays, words", [
    ({"x": np.zeros((1, 20, 4, 3), np.float32)}, ["'x'", "[1, 20, 4, 3]", "max [2, 16, 12, 3]"]),
    ({"x@4x4x3": np.zeros((1, 4, 4, 3), np.float32), "x": np.zeros((1, 4, 4, 3), np.float32)}, ["mixes", "['x']"]),
    ({"x@4by4": np.zeros((1, 4, 4, 3), np.float32)}, ["'x@4by4'", "x@48x48x3"]),
])
def test_a_bad_multi_shape_input_set_names_the_array(tmp_path, arrays, words):
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    with pytest.raises(InputSetError) as err:
        read_input_set(_spec(tmp_path), path)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_a_fixed_dim_in_the_model_must_equal_the_profiles():
    meta = {"x": (np.dtype("float32"), (-1, 8, -1, 3))}
    with pytest.raises(RunnerError, match=r"inputs\.x\.profile'.*\[4, 8, 16\].*fixed at dimension 1 = 8"):
        check_input_spec(_spec(), meta, "model.onnx")
    pinned = replace(_spec().inputs["x"], profile=tuple((s[0], 8, *s[2:]) for s in PROFILE))
    check_input_spec(replace(_spec(), inputs={"x": pinned}), meta, "model.onnx")


def save_fully_convolutional_model(path, padding="SAME"):
    """A 3x3 convolution (3 -> 2 channels, 'same' padding) and a ReLU over any H, W: a SavedModel."""
    tf = pytest.importorskip("tensorflow")
    module = tf.Module()
    module.w = tf.Variable(np.random.default_rng(0).normal(0, 0.3, (3, 3, 3, 2)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32, name="x")])
    def serve(x):
        return {"y": tf.nn.relu(tf.nn.conv2d(x, module.w, 1, padding))}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return path


@pytest.fixture(scope="module")
def fcn(tmp_path_factory):
    """copy(folder) -> one SavedModel of the 'same' model, copied byte for byte: the suite converts it once for
    the tests of this module (a SavedModel saved again differs in its bytes, and its conversion is cached by them)."""
    saved = save_fully_convolutional_model(tmp_path_factory.mktemp("fcn") / "fcn")
    return lambda folder: Path(shutil.copytree(saved, folder / "fcn"))


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.slow
def test_a_dynamic_spatial_model_runs_its_checks_over_the_profile(pytester, fcn):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    reference = fcn(pytester.path)
    cfg = write_config(pytester.path, {"models": [{"name": "fcn", "reference": str(reference), "precisions": ["fp32"],
                                                   "max_batch": 2, "task": "regression", "inputs": {"x": INPUT}}]})
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE / "test_properties.py"), str(CONFORMANCE / "test_parity.py"),
                                           f"--parity-config={cfg}", f"--parity-report={report}", "-k",
                                           "property_parity or accepts_every_batch_size", "-p", "no:cacheprovider",
                                           "-p", "no:xdist")
    checks = {c["check"]: c for c in json.loads((report / "parity-report.json").read_text())["checks"]}
    assert checks["property_parity"]["status"] == "pass", result.stdout.str()[-3000:]
    ran = {tuple(s["shape"]["x"][1:]) for s in checks["property_parity"]["details"]["inputs"]["shapes"]}
    assert {(4, 4, 3), (8, 8, 3), (16, 12, 3)} <= ran and len(ran) >= 3, ran
    accepts = checks["accepts_every_batch_size"]
    assert accepts["status"] == "pass", accepts
    assert {tuple(s["x"]) for s in accepts["details"]["inputs"]["shapes"]} == {
        (b, *s[1:]) for b in (1, 2) for s in PROFILE}


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.slow
def test_goldens_of_a_dynamic_model_hold_the_profiles_min_opt_and_max(pytester, fcn):
    """--parity-update-goldens writes one group per profile corner (no input set: seeded samples); the next run
    reproduces them and matches_reference judges the candidate at every one of them."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    reference = fcn(pytester.path)
    cfg = write_config(pytester.path, {"models": [{"name": "fcn", "reference": str(reference), "precisions": ["fp32"],
                                                   "max_batch": 2, "task": "regression", "inputs": {"x": INPUT}}]})

    def run(*args):
        report = pytester.path / f"report{len(args)}"
        result = pytester.runpytest(str(CONFORMANCE / "test_goldens.py"), str(CONFORMANCE / "test_parity.py"),
                                               f"--parity-config={cfg}", f"--parity-report={report}", "-k",
                                               "goldens or matches_reference", "-p", "no:cacheprovider", "-p",
                                               "no:xdist", *args)
        checks = json.loads((report / "parity-report.json").read_text())["checks"]
        return result, {c["check"]: c for c in checks}

    result, checks = run("--parity-update-goldens")
    assert checks["goldens_reproduce"]["status"] == "regenerated", result.stdout.str()[-3000:]
    with np.load(pytester.path / "goldens" / "fcn.npz") as f:
        assert {"input:x@4x4x3", "input:x@8x8x3", "input:x@16x12x3", "output:y@16x12x3"} <= set(f.files), f.files
    result, checks = run()
    assert checks["goldens_reproduce"]["status"] == "pass", result.stdout.str()[-3000:]
    ran = [s["shape"]["x"][1:] for s in checks["matches_reference"]["details"]["inputs"]["shapes"]]
    assert checks["matches_reference"]["status"] == "pass" and sorted(ran) == [[4, 4, 3], [8, 8, 3], [16, 12, 3]], ran
    assert checks["matches_reference"]["details"]["samples"] == 48  # 16 seeded rows at each corner


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.slow
def test_a_profile_corner_the_model_cannot_take_is_one_validation_line(pytester):
    """A 3x3 'valid' convolution cannot take the profile's min 2x2: validation runs the reference and the fp32
    candidate at min and max and stops the run (exit code 4) with one line naming inputs.x.profile (measured:
    TensorFlow returns an empty [1, 0, 0, 2] map there, ONNX Runtime's Conv refuses the input)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    reference = save_fully_convolutional_model(pytester.path / "fcn", padding="VALID")
    small = dict(INPUT, profile={"min": [1, 2, 2, 3], "opt": [2, 8, 8, 3], "max": [2, 16, 12, 3]})
    cfg = write_config(pytester.path, {"models": [{"name": "fcn", "reference": str(reference), "precisions": ["fp32"],
                                                   "max_batch": 2, "inputs": {"x": small}}]})
    result = pytester.runpytest(str(CONFORMANCE / "test_parity.py"), f"--parity-config={cfg}",
                                           "-p", "no:cacheprovider", "-p", "no:xdist")
    assert result.ret == 4, result.stdout.str()[-3000:]
    lines = [line for line in result.outlines + result.errlines if "inputs.x.profile" in line]
    assert len(lines) == 1 and "the fp32 candidate fails at the profile's min [1, 2, 2, 3]" in lines[0], lines
