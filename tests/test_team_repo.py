"""examples/team-repo/, the template a team copies, runs green from a copy against the installed package: its
export step, then the CPU job's command (`paritygate run parity.toml ...`), with its conftest.py applied."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "examples" / "team-repo"
BIN = Path(sys.executable).parent


def _run(cmd, cwd, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "CI")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", HYPOTHESIS_PROFILE="smoke")  # the fewest derandomized draws
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    return done.returncode, done.stdout + done.stderr


def _export(repo):
    """The template's export step, run once per change of export_model.py (or of TensorFlow) and kept in the
    artifact cache: a SavedModel saved again differs in its bytes, and the suite caches by them."""
    from paritygate.backend.cache import cached_dir

    tf = pytest.importorskip("tensorflow")
    key = hashlib.sha256(((TEMPLATE / "export_model.py").read_text() + tf.__version__).encode()).hexdigest()[:16]

    def build(tmp):
        rc, out = _run([sys.executable, "export_model.py"], repo)
        assert rc == 0, out[-3000:]
        shutil.move(repo / "model", tmp / "model")

    kept = cached_dir("tests", f"team-repo-{key}", build)
    shutil.rmtree(repo / "model", ignore_errors=True)
    shutil.copytree(kept / "model", repo / "model")


@pytest.mark.slow
@pytest.mark.beam
def test_the_template_runs_green_from_a_copy(tmp_path):
    for module in ("tensorflow", "onnxruntime", "tf2onnx", "apache_beam"):
        pytest.importorskip(module)
    repo = shutil.copytree(TEMPLATE, tmp_path / "team-repo")
    _export(repo)
    rc, out = _run([BIN / "paritygate", "run", "parity.toml", "--report", "parity-report",
                    "-m", "not latency and not gpu", "-p", "no:xdist", "-p", "no:cacheprovider", "-q"], repo)
    assert rc == 0, out[-6000:]
    report = json.loads((repo / "parity-report" / "parity-report.json").read_text())
    statuses = {c["status"] for c in report["checks"]}
    assert statuses <= {"pass", "skip", "xfail"} and "pass" in statuses, statuses
    checks = {(c["precision"], c["check"]) for c in report["checks"] if c["status"] == "pass"}
    assert {("fp32", "matches_reference"), ("fp16", "matches_reference"), (None, "beam_exactly_once")} <= checks

    # its conftest.py marks every check `parity`: without them nothing is left to run
    rc, out = _run([BIN / "paritygate", "run", "parity.toml", "-m", "not parity", "-p", "no:xdist", "-q"], repo)
    assert rc == 5 and "deselected" in out, out[-3000:]
