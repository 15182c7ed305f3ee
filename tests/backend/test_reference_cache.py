"""paritygate.backend.reference_cache: the TF reference's outputs for an exact batch come back from the cache on a warm
run (TensorFlow neither loaded nor imported), and never across other weights, another TensorFlow version or
another batch; goldens and latency run TensorFlow live; ``--parity-cache=off`` turns it off.

Real TF SavedModels (tests/conftest.py's toy model: y = 5x, z = 2x) and real ONNX candidates."""

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")  # before TF: pytester restores sys.modules, and re-importing onnx after TF aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.backend import reference_cache as rc
from paritygate.backend.runtimes import live_reference, reference_runner
from paritygate.backend.tf.runner import TfRunner
from paritygate.context import RunContext
from tests.conftest import make_onnx, save_toy_model, toy_spec, write_config

pytestmark = [pytest.mark.tf]

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
X = np.array([[0.5], [-1.0], [0.25]], dtype=np.float32)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    for k in rc.STATS:
        monkeypatch.setitem(rc.STATS, k, 0)
    return tmp_path / "cache"


def _cached(path):
    return rc.CachedReference(TfRunner(path, "serving_default")).activate()


def test_batch_digest_follows_bytes_dtype_shape_name_and_composition():
    base = rc.batch_digest({"x": X})
    assert base == rc.batch_digest({"x": X.copy()})
    others = [{"x": X + np.float32(1e-7)}, {"x": X.astype(np.float64)}, {"x": X.reshape(1, 3)}, {"y": X},
              {"x": X[:1]}, {"x": X[[1, 0, 2]]}, {"x": X, "m": np.zeros(3, np.int32)}]
    assert len({base, *(rc.batch_digest(o) for o in others)}) == len(others) + 1


def test_a_batch_run_once_is_served_without_loading_tensorflow(cache, toy_saved_model):
    first = _cached(toy_saved_model)
    computed = first.infer({"x": X})
    assert rc.STATS == {"computed": 1, "reused": 0, "live": 0} and first.runner.is_active
    warm = _cached(toy_saved_model)  # a new process's runner: metadata and outputs from the cache
    again = warm.infer({"x": X})
    assert not warm.runner.is_active, "a cache hit must not load the SavedModel"
    assert rc.STATS["reused"] == 1 and rc.STATS["computed"] == 1
    assert warm.input_metadata() == first.runner.input_metadata() and warm.output_names == ["y", "z"]
    for k in computed:
        assert again[k].dtype == computed[k].dtype and np.array_equal(again[k], computed[k])
    np.testing.assert_allclose(again["y"], 5 * X, rtol=1e-6)
    warm.infer({"x": X[:2]})  # another batch composition: computed
    assert rc.STATS["computed"] == 2


def test_other_weights_or_tensorflow_version_are_never_served(cache, tmp_path, monkeypatch):
    path = save_toy_model(tmp_path / "m", y_scale=2.0)
    assert np.allclose(_cached(path).infer({"x": X})["y"], 2 * X)
    save_toy_model(path, y_scale=3.0)  # same folder, new weights
    rc._FILES.clear()  # a new process: the fingerprint is read again
    assert np.allclose(_cached(path).infer({"x": X})["y"], 3 * X)
    assert rc.STATS["computed"] == 2 and rc.STATS["reused"] == 0
    real = rc.dist_version
    monkeypatch.setattr(rc, "dist_version", lambda *d: "0.0.1" if "tensorflow" in d else real(*d))
    _cached(path).infer({"x": X})
    assert rc.STATS["computed"] == 3 and rc.STATS["reused"] == 0


def test_an_unreadable_entry_is_recomputed_and_replaced(cache, toy_saved_model):
    _cached(toy_saved_model).infer({"x": X})
    [entry] = list((cache / "reference").rglob("*.npz"))
    entry.write_bytes(b"not an npz")
    out = _cached(toy_saved_model).infer({"x": X})
    assert rc.STATS["computed"] == 2 and np.allclose(out["y"], 5 * X)
    assert not [p for p in (cache / "reference").rglob(".*")], "temporary files are renamed into place or removed"
    assert _cached(toy_saved_model).infer({"x": X}) and rc.STATS["reused"] == 1


def test_a_repeat_is_its_own_sample_and_goldens_run_live(cache, toy_saved_model):
    settings = RunContext(reference_cache=True)
    spec = toy_spec(toy_saved_model)
    ref = reference_runner(settings, spec)
    ref.infer({"x": X}), ref.again({"x": X})
    assert rc.STATS["computed"] == 2, "the noise floor's repeat is a second live sample, cached apart"
    ref.again({"x": X})
    assert rc.STATS["reused"] == 1
    live = live_reference(settings, spec)
    live.infer({"x": X}), live.infer({"x": X})
    assert rc.STATS == {"computed": 2, "reused": 1, "live": 2}
    assert len(live.weights_sha256()) == 64


def test_replay_and_cache_off_run_tensorflow_every_time(cache, toy_saved_model):
    ref = reference_runner(RunContext(), toy_spec(toy_saved_model))
    ref.infer({"x": X}), ref.infer({"x": X})
    assert rc.STATS == {"computed": 2, "reused": 0, "live": 0}
    assert not (cache / "reference").exists()


# -- end to end: the conformance suite twice on the same config --------------------------------------------------
PROBE = """
import json, os, sys
def probe(when):
    with open(os.environ["TF_PROBE"], "a") as fh:
        fh.write(json.dumps([when, "tensorflow" in sys.modules]) + "\\n")
def pytest_runtest_setup(item):  # whether TensorFlow is imported when the goldens check (run last) begins
    if item.originalname == "test_goldens_reproduce":
        probe("goldens")
def pytest_sessionfinish(session):  # and whether this process imported it at all
    probe("end")
"""


def _suite(pytester, cfg, report, *args):
    files = [str(CONFORMANCE / f) for f in ("test_properties.py", "test_parity.py", "test_goldens.py")]
    return pytester.runpytest_subprocess(*files, f"--parity-config={cfg}", f"--parity-report={report}",
                                         "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "tfprobe", *args)


def _with_goldens(folder, reference):
    """A config for the toy model (y = 5x, z = 2x) and its goldens, written here from the live reference."""
    from paritygate.inputs import goldens
    from paritygate.models.config import load_config

    make_onnx(folder / "toy.onnx")
    model = {"name": "toy", "reference": str(reference), "onnx": "toy.onnx", "precisions": ["fp32"],
             "max_batch": 4, "task": "regression",
             "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    cfg = write_config(folder, {"models": [model]})
    [spec] = load_config(cfg)
    runner = TfRunner(reference, "serving_default").activate()
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(-1, 1)
    goldens.write_golden(spec, {"x": x}, runner.infer({"x": x}), runner.weights_sha256())
    return cfg


def test_a_warm_rerun_computes_nothing_and_runs_tensorflow_only_for_goldens(pytester, toy_saved_model, tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    monkeypatch.setenv("TF_PROBE", str(tmp_path / "probe"))
    pytester.makepyfile(tfprobe=PROBE)  # a plugin (-p tfprobe): the suite's files live outside this folder
    cfg = _with_goldens(pytester.path, toy_saved_model)
    runs = []
    for i, args in enumerate([(), (), ("--parity-cache=off", "-k", "determinism or goldens")]):
        result = _suite(pytester, cfg, tmp_path / f"r{i}", *args)
        assert result.ret == 0, result.stdout.str()[-3000:]
        runs.append((result.stdout.str(), json.loads((tmp_path / f"r{i}" / "parity-report.json").read_text())))
    cold, warm, off = (data["reference_cache"] for _, data in runs)
    assert cold["computed"] > 20 and cold["enabled"] and cold["live"] > 0
    assert warm["computed"] == 0 and warm["reused"] >= cold["computed"] and warm["live"] == cold["live"]
    assert (f"paritygate: reference cache: 0 computed, {warm['reused']} reused; {warm['live']} live TensorFlow "
            "runs (goldens_reproduce, latency)") in runs[1][0]
    assert not off["enabled"] and off["reused"] == 0 and off["computed"] > 0
    assert "paritygate: reference cache: off:" in runs[2][0]
    statuses = [{(c["check"], c["status"]) for c in data["checks"]} for _, data in runs[:2]]
    assert statuses[0] == statuses[1], "a warm run reaches the same verdicts"
    assert ("goldens_reproduce", "pass") in statuses[1] and len(statuses[1]) >= 5
    cold_time = runs[0][1]["time"]  # where the time went (paritygate.common.timeline), in the JSON and one terminal line
    assert cold_time["reference"] > 0 and cold_time["candidate"] > 0 and cold_time["checks"] > 0
    assert cold_time["conversion"] == 0, "the configured ONNX file is used as is: nothing was converted"
    assert any(line.startswith("paritygate: time: ") and "conversion 0.0 s, reference " in line
               for line in runs[0][0].splitlines())
    imported = [tuple(json.loads(line)) for line in (tmp_path / "probe").read_text().splitlines()]
    # warm, the goldens check runs TensorFlow in a process of its own, started at collection
    # (paritygate.backend.tf.process): the pytest process never imports it
    assert imported == [("goldens", True), ("end", True), ("goldens", False), ("end", False), ("goldens", True),
                        ("end", True)], imported
