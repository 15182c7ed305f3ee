"""Injected candidate defects: each must make the suite fail, with a report naming model, output and input.

The reference is a real TF SavedModel (y = 5x, z = 2x); each candidate is a real ONNX model run by ONNX
Runtime with exactly one defect. The conformance tests run end to end through pytester.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")
pytest.importorskip("hypothesis")
from onnx import TensorProto, helper

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, TensorProto.FLOAT, np.shape(value), np.ravel(value).astype(np.float32)))


def _model(path, nodes, batch="N", y="y5", z="z2"):
    """y = 5x and z = 2x unless ``nodes`` say otherwise; graph outputs named y and z."""
    base = [_const("five", 5.0), _const("two", 2.0),
            helper.make_node("Mul", ["x", "five"], ["y5"]), helper.make_node("Mul", ["x", "two"], ["z2"])]
    tail = [helper.make_node("Identity", [y], ["y"]), helper.make_node("Identity", [z], ["z"])]
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, 1])
    graph = helper.make_graph(base + nodes + tail, "candidate", [io("x")], [io("y"), io("z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


DEFECTS = {
    "correct": ([], {}),
    "drifted_weight": ([_const("drift", 5.001), helper.make_node("Mul", ["x", "drift"], ["yd"])], {"y": "yd"}),
    "swapped_outputs": ([], {"y": "z2", "z": "y5"}),
    "batch_coupling": ([helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1),
                        _const("eps", 1e-3), helper.make_node("Mul", ["m", "eps"], ["me"]),
                        helper.make_node("Add", ["y5", "me"], ["yc"])], {"y": "yc"}),
    "saturates_near_bound": ([_const("lo", -9.9), _const("hi", 9.9), helper.make_node("Clip", ["x", "lo", "hi"], ["xc"]),
                              helper.make_node("Mul", ["xc", "five"], ["ys"])], {"y": "ys"}),
    "nan_at_zero": ([_const("zero", 0.0), _const("nan", np.nan), helper.make_node("Equal", ["x", "zero"], ["is0"]),
                     helper.make_node("Where", ["is0", "nan", "y5"], ["yn"])], {"y": "yn"}),
    "batch_frozen_to_1": ([], {"batch": 1}),
}


def _model_table(name, reference, onnx_path):
    return f"""
[[models]]
name = "{name}"
reference = "{reference}"
onnx = "{onnx_path.name}"
precisions = ["fp32"]
max_batch = 4
task = "regression"
[models.inputs.x]
shape = [-1, 1]
dtype = "float32"
range = [-10.0, 10.0]
"""


@pytest.fixture(scope="module")
def defect_run(tmp_path_factory, toy_saved_model):
    """One suite run over a config holding every defective candidate (and a correct one) as a model."""
    folder = tmp_path_factory.mktemp("defects")
    tables = []
    for name, (nodes, wiring) in DEFECTS.items():
        tables.append(_model_table(name, toy_saved_model, _model(folder / f"{name}.onnx", nodes, **wiring)))
    (folder / "parity.toml").write_text("".join(tables))
    report = folder / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(CONFORMANCE / "test_parity.py"), str(CONFORMANCE / "test_properties.py"),
         f"--parity-config={folder / 'parity.toml'}", f"--parity-report={report}", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-q", f"--rootdir={folder}"],
        check=False, capture_output=True, text=True, cwd=folder, env={**os.environ, "PARITYGATE_CACHE": str(folder / "cache")})
    data = json.loads((report / "parity-report.json").read_text())
    checks = {}
    for c in data["checks"]:
        checks.setdefault(c["model"], {})[c["check"]] = c
    return proc, checks


def test_correct_candidate_passes(defect_run):
    proc, checks = defect_run
    assert proc.returncode == 1, "the defective candidates fail the run"
    status = {name: c["status"] for name, c in checks["correct"].items()}
    assert status == {"matches_reference": "pass", "accepts_every_batch_size": "pass", "property_parity": "pass",
                      "batch_invariance": "pass", "determinism": "pass",
                      "task_on_heldout": "skip"}  # a regression model has no task metric


@pytest.mark.parametrize("defect, failing_check", [
    ("drifted_weight", "matches_reference"),
    ("swapped_outputs", "matches_reference"),
    ("batch_coupling", "batch_invariance"),
    ("saturates_near_bound", "property_parity"),
    ("nan_at_zero", "property_parity"),
    ("batch_frozen_to_1", "accepts_every_batch_size"),
])
def test_defect_is_caught(defect_run, defect, failing_check):
    _, checks = defect_run
    failed = {name: c for name, c in checks[defect].items() if c["status"] in ("fail", "error")}
    assert failing_check in failed, f"{defect}: expected {failing_check} to fail; checks: {checks[defect]}"
    check = failed[failing_check]
    assert check["precision"] == "fp32"
    if failing_check == "accepts_every_batch_size":
        assert check["details"]["rejected"], "the rejected batch sizes are named"
        return
    assert "output 'y'" in check["details"]["message"], "the report names the output"
    repro = check["details"]["reproducer"]
    with np.load(repro["npz"], allow_pickle=False) as saved:
        assert "input:x" in saved.files, "the reproducer holds the failing input"
    assert Path(repro["polygraphy_inputs"]).exists()


def test_reproducer_replays(defect_run):
    """The printed one-line command, run from the folder holding the config, replays the shrunk failing example
    and fails again."""
    _, checks = defect_run
    repro = checks["nan_at_zero"]["property_parity"]["details"]["reproducer"]
    with np.load(repro["npz"], allow_pickle=False) as saved:
        assert 0.0 in saved["input:x"], "Hypothesis shrank the failing input to the defect's trigger value"
    folder = Path(repro["npz"]).resolve().parents[2]  # <config folder>/report/reproducers/<file>.npz
    proc = subprocess.run(repro["command"], check=False, shell=True, capture_output=True, text=True, cwd=folder,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "reproduced: the candidate still fails" in proc.stdout


def test_the_replay_command_is_printed(defect_run):
    proc, checks = defect_run
    command = checks["nan_at_zero"]["property_parity"]["details"]["reproducer"]["command"]
    assert f"nan_at_zero fp32 property_parity failed; replay: {command}" in proc.stdout
