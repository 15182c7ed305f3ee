"""paritygate.common.commands: every command the suite prints runs, as printed, from the folder holding the user's
config (a tmp_path outside this checkout), through the installed ``paritygate`` command."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paritygate.common import commands
from tests.conftest import make_onnx, scale, write_config


def test_paths_below_the_config_are_relative_and_others_absolute(tmp_path):
    config = tmp_path / "team" / "parity.toml"
    assert commands.where(tmp_path / "team" / "report" / "r.npz", config) == "report/r.npz"
    assert commands.where("/elsewhere/r.npz", config) == "/elsewhere/r.npz"
    assert commands.rerun(config, "conformance/test_parity.py::test_matches_reference[pnet_odd-int8]") == (
        "paritygate run parity.toml -k 'test_matches_reference[pnet_odd-int8]'")
    assert commands.replay(config, tmp_path / "team" / "r r.npz") == "paritygate replay 'r r.npz'"
    assert commands.regenerate_goldens(config, "fer") == (
        "paritygate run parity.toml -k 'test_goldens_reproduce[fer]' --update-goldens")


def _paritygate():
    found = Path(sys.executable).parent / "paritygate"
    return str(found) if found.is_file() else shutil.which("paritygate") or pytest.skip("paritygate not installed")


def _run(line, cwd):
    """A printed command, run as a person would type it in ``cwd`` (``paritygate`` is the installed one)."""
    argv = shlex.split(line)
    assert argv[0] == "paritygate", line
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci"}
    return subprocess.run([_paritygate(), *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=600,
                          check=False, env=env)


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.slow
def test_printed_rerun_and_replay_commands_run_from_the_users_folder(tmp_path, toy_saved_model):
    pytest.importorskip("hypothesis")
    team = tmp_path / "team"  # the user's repository: outside the checkout, no conformance/ folder in sight
    team.mkdir()
    wrong = make_onnx(team / "wrong.onnx", scale("y", 5.5), scale("z", 2.0))  # y off by 10%: fails
    write_config(team, {"models": [{"name": "toy", "reference": str(toy_saved_model), "onnx": wrong.name,
                                    "precisions": ["fp32"], "max_batch": 2,
                                    "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    first = _run("paritygate run parity.toml --report report -p no:xdist -k 'property_parity or determinism' "
                 "--parity-localize=off", team)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
    checks = {c["check"]: c for c in json.loads((team / "report" / "parity-report.json").read_text())["checks"]}
    failing, passing = checks["property_parity"]["details"], checks["determinism"]["details"]
    assert failing["rerun"] == "paritygate run parity.toml -k 'test_property_parity[toy-fp32]'"
    assert failing["reproducer"]["command"].startswith("paritygate replay report/reproducers/toy-fp32-")

    rerun = _run(failing["rerun"] + " -p no:xdist --parity-localize=off", team)
    assert rerun.returncode == 1 and "1 failed" in rerun.stdout, rerun.stdout[-3000:] + rerun.stderr[-2000:]
    again = _run(passing["rerun"] + " -p no:xdist", team)
    assert again.returncode == 0 and "1 passed" in again.stdout, again.stdout[-3000:] + again.stderr[-2000:]
    replay = _run(failing["reproducer"]["command"], team)
    assert replay.returncode == 1 and "reproduced: the candidate still fails" in replay.stdout, replay.stdout[-3000:] + replay.stderr[-2000:]
