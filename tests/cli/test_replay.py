"""paritygate.cli.replay: the CLI replays the check a reproducer was saved by (not always reference vs candidate),
with argparse usage and the documented exit statuses. Real TF SavedModel and real ONNX candidates."""

import subprocess
import sys

import numpy as np
import pytest

from paritygate.cli.replay import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_USAGE, load_reproducer, main, save_reproducer
from tests.conftest import make_onnx, scale, write_config


def test_help_and_usage_errors(capsys):
    assert main(["--help"]) == EXIT_PASS
    out = capsys.readouterr().out
    assert "usage: python -m paritygate.cli.replay" in out and "--check" in out and "3 error" in out
    assert main([]) == EXIT_USAGE
    assert "the following arguments are required: FILE" in capsys.readouterr().err
    assert main(["x.npz", "--check", "nonsense"]) == EXIT_USAGE


def test_a_missing_or_foreign_file_is_an_error(tmp_path, capsys):
    assert main([str(tmp_path / "missing.npz")]) == EXIT_ERROR
    assert "missing.npz: not a paritygate reproducer" in capsys.readouterr().err
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    assert main([str(tmp_path / "other.npz")]) == EXIT_ERROR
    assert "other.npz: not a paritygate reproducer" in capsys.readouterr().err


def test_the_module_runs_as_a_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "paritygate.cli.replay", str(tmp_path / "missing.npz")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == EXIT_ERROR and "not a paritygate reproducer" in proc.stderr


# -- replaying each check ------------------------------------------------------------------------------------
def _coupled(path):
    """y = 5x + 1e-3 * mean(x over the batch): exact at batch 1, wrong in a batch (batch_coupling)."""
    from onnx import helper

    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1), *scale("me", 1e-3, src="m"),
             *scale("y5", 5.0), helper.make_node("Add", ["y5", "me"], ["y"]), *scale("z", 2.0)]
    return make_onnx(path, nodes)


@pytest.fixture
def reproducer(tmp_path, toy_saved_model, parity_cache):
    """save(candidate_nodes_factory, check) -> path of a reproducer of the toy model with that candidate."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tensorflow")
    from paritygate.models.config import load_config

    def save(candidate, check):
        folder = tmp_path / check
        folder.mkdir()
        onnx_path = candidate(folder / "cand.onnx")
        cfg = write_config(folder, {"models": [{
            "name": "toy", "reference": str(toy_saved_model), "onnx": onnx_path.name, "precisions": ["fp32"],
            "max_batch": 4, "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
        [spec] = load_config(cfg)
        feed = {"x": np.array([[0.5], [-0.25], [1.0]], np.float32)}
        return save_reproducer(folder / "repro", spec, "fp32", check, "onnxruntime", feed, ["it failed"])["npz"]

    return save


@pytest.mark.tf
@pytest.mark.onnx
def test_each_check_is_replayed_as_itself(reproducer, capsys):
    drifted = lambda p: make_onnx(p, scale("y", 5.01), scale("z", 2.0))  # wrong, but deterministic and invariant
    repro = reproducer(drifted, "determinism")
    assert load_reproducer(repro)[0]["check"] == "determinism"
    assert main([repro]) == EXIT_PASS, "determinism replays determinism, not reference vs candidate"
    out = capsys.readouterr().out
    assert "check: determinism" in out and "PASS output 'y'" in out and "not reproduced: the candidate passes" in out
    assert main([repro, "--check", "property_parity"]) == EXIT_FAIL  # the same inputs, against the reference
    out = capsys.readouterr().out
    assert "check: property_parity" in out and "candidate differs from the TF reference" in out
    assert "output 'y'" in out and "reproduced: the candidate still fails" in out
    assert main([repro, "--check", "reference_unstable"]) == EXIT_PASS  # y = 5x: TF agrees with itself
    assert "not reproduced: the reference passes" in capsys.readouterr().out

    repro = reproducer(_coupled, "batch_invariance")
    assert main([repro]) == EXIT_FAIL
    out = capsys.readouterr().out
    assert "check: batch_invariance" in out
    assert "batch invariance: element 0 of a batch of 3 differs from the same element alone" in out

    repro = reproducer(lambda p: make_onnx(p), "matches_reference")
    assert main([repro]) == EXIT_PASS
    assert "PASS output 'y'" in capsys.readouterr().out


@pytest.mark.tf
@pytest.mark.onnx
def test_an_unloadable_candidate_is_an_error_not_a_failure(reproducer, capsys):
    def broken(path):
        path.write_bytes(b"not onnx")
        return path

    assert main([reproducer(broken, "property_parity")]) == EXIT_ERROR
    assert "error:" in capsys.readouterr().err


@pytest.mark.tf
@pytest.mark.onnx
def test_a_candidate_that_crashes_on_the_saved_inputs_fails_as_in_the_run(reproducer, capsys):
    """One word for one outcome: the run calls a candidate that crashes on valid inputs `fail` (SentiToolKit's fp16
    file: "idx=5000 must be within [-5000,4999]"); its replay reproduces that failure (exit 1), not an error (3)."""
    from onnx import TensorProto, helper

    def crashing(path):  # y = table[int(x)] with a one-row table: x = 1.0 indexes past it
        table = helper.make_tensor("table", TensorProto.FLOAT, [1], [5.0])
        nodes = [helper.make_node("Cast", ["x"], ["idx"], to=TensorProto.INT64),
                 helper.make_node("Gather", ["table", "idx"], ["y"], axis=0), *scale("z", 2.0)]
        return make_onnx(path, nodes, initializers=[table])

    for check in ("matches_reference", "property_parity"):
        assert main([reproducer(crashing, check)]) == EXIT_FAIL, capsys.readouterr()
        out = capsys.readouterr().out
        assert "FAIL the candidate: " in out and "ONNX Runtime failed on inputs" in out
        assert "reproduced: the candidate still fails" in out


def test_a_check_without_replay_is_an_error(tmp_path, capsys):
    from tests.conftest import toy_spec

    spec = toy_spec(source=tmp_path / "parity.toml")
    repro = save_reproducer(tmp_path, spec, "fp32", "goldens_reproduce", "onnxruntime", {"x": np.zeros((1, 1))}, [])
    assert main([repro["npz"]]) == EXIT_ERROR
    assert "check 'goldens_reproduce' has no replay; replayable checks: matches_reference" in capsys.readouterr().err


@pytest.mark.parametrize(("tamper", "words"), [
    (lambda x: np.full_like(x, np.nan), "holds 3 non-finite value(s)"),
    (lambda x: x * 100, "holds values in [-25.0, 100.0] (3 outside), expected values in the declared range"),
    (lambda x: x.astype(np.float64), "is float64[3, 1], expected float32"),
])
def test_a_reproducer_edited_outside_its_config_is_an_error_not_judged(reproducer, capsys, tamper, words):
    """Issue 33: a reproducer edited to NaN or to 100x the range was judged anyway ("reproduced")."""
    path = reproducer(lambda p: make_onnx(p), "determinism")
    with np.load(path) as data:
        arrays = dict(data)
    arrays["input:x"] = tamper(arrays["input:x"])
    np.savez(path, **arrays)
    assert main([path]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: array 'x' ") and words in err, err


def test_a_reproducer_of_another_schema_version_or_with_junk_meta_is_an_error(tmp_path, capsys):
    import json

    meta = {"schema": 2, "config": "c.toml", "model": "toy", "precision": "fp32", "check": "determinism",
            "runtime": "onnxruntime"}
    path = tmp_path / "r.npz"
    np.savez(path, **{"input:x": np.zeros((1, 1), np.float32), "__meta__": np.array(json.dumps(meta))})
    assert main([str(path)]) == EXIT_ERROR
    assert "r.npz: reproducer has schema version 2; this paritygate reads schema version(s) 1" in capsys.readouterr().err
    np.savez(path, **{"input:x": np.zeros((1, 1), np.float32), "__meta__": np.array(json.dumps({**meta, "schema": 1,
                                                                                               "model": ["x"]}))})
    assert main([str(path)]) == EXIT_ERROR
    assert "reproducer's __meta__ key(s) ['model']: expected strings" in capsys.readouterr().err


# -- the runtime and numerics replayed ------------------------------------------------------------------------
def test_replay_honours_the_runtime_and_numerics_the_run_recorded(tmp_path):
    """A reproducer records the run's runtime and --parity-numerics; replay runs under both (a file written
    before numerics were recorded: the default), or under --runtime / --numerics when given."""
    from paritygate.cli.replay import _context
    from paritygate.context import RunContext
    from tests.conftest import toy_spec

    spec = toy_spec(precisions=("fp32", "fp16"))
    saved = RunContext(numerics="ort", reproducer_dir=tmp_path).save_reproducer(
        spec, "fp16", "matches_reference", {"x": np.zeros((1, 1), np.float32)}, ["failed"])
    meta, _ = load_reproducer(saved["npz"])
    assert (meta["runtime"], meta["numerics"]) == ("onnxruntime", "ort")
    pytest.importorskip("onnxruntime")
    assert (_context("f", meta, spec, None, None).numerics, _context("f", meta, spec, None, None).runtime) == \
        ("ort", "onnxruntime")
    assert _context("f", meta, spec, None, "strict").numerics == "strict"
    assert _context("f", {**meta, "numerics": None}, spec, None, None).numerics == "strict"


def test_replay_knows_every_registered_runtime_and_says_why_one_cannot_run_here(monkeypatch):
    from paritygate.backend import registry
    from paritygate.cli.replay import ReplayError, _context, parser
    from paritygate.gpu import device
    from tests.conftest import toy_spec

    monkeypatch.setenv("POLYGRAPHY_USE_TENSORRT_RTX", "0")  # replaying tensorrt-rtx sets it; restored after
    assert parser().parse_args(["f.npz", "--runtime", "tensorrt-rtx", "--numerics", "ort"]).runtime == "tensorrt-rtx"
    meta = {"runtime": "tensorrt-rtx", "numerics": "strict"}
    with pytest.raises(ReplayError, match=r"runtime 'onnx': expected one of \['onnxruntime', 'onnxruntime-cuda', "):
        _context("f.npz", {**meta, "runtime": "onnx"}, toy_spec(), None, None)
    if device.probe().available:
        pytest.skip("a GPU is here")
    for name in ("onnxruntime-cuda", "tensorrt", "tensorrt-rtx"):
        with pytest.raises(ReplayError, match=f"f.npz: runtime {name} cannot run here: "):
            _context("f.npz", {**meta, "runtime": name}, toy_spec(), None, None)
    assert set(registry.names()) >= {"tensorrt-rtx"}
