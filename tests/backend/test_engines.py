"""paritygate.backend.engines: the builder failing is not the artifact failing (issue 37). A TensorRT-RTX build that
cannot run (a CUDA call on this CPU-only machine, a child that hangs) is one ``error`` on ``engine_builds`` and the
numeric checks still judge the candidate; ``--parity-engine-build=off`` turns the builder off, and the report says so.
Real TensorFlow, ONNX Runtime and TensorRT-RTX; the team's own ONNX, so nothing is converted."""

import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")  # before TF: pytester restores sys.modules, and re-importing onnx after TF aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorrt_rtx")
tf = pytest.importorskip("tensorflow")

from tests.backend.trt.test_aot import pads_of_a_shape
from tests.conftest import write_config

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]
CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"


def save_padding_model(path):
    """The reference of ``pads_of_a_shape``: x [N, L, 4] padded with zeros at the end of L by L % 4."""
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.float32, name="x")])
    def serve(x):
        return {"y": tf.pad(x, [[0, 0], [0, tf.shape(x)[1] % 4], [0, 0]])}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return path


def run(folder, checks="engine_builds or matches_reference", *args):
    pytester, reference = folder
    cfg = write_config(pytester.path, {"models": [{
        "name": "pads", "reference": str(reference), "onnx": str(pads_of_a_shape(pytester.path / "pads.onnx")),
        "precisions": ["fp32"], "max_batch": 2, "task": "regression",
        "inputs": {"x": {"shape": [-1, -1, 4], "dtype": "float32", "range": [-1.0, 1.0],
                         "profile": {"min": [1, 5, 4], "opt": [2, 6, 4], "max": [2, 8, 4]}}}}]})
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE / "test_parity.py"), "-k", checks, f"--parity-config={cfg}",
                                f"--parity-report={report}", "-p", "no:cacheprovider", "-p", "no:xdist", *args)
    data = json.loads((report / "parity-report.json").read_text())
    return result, data, {c["check"]: c for c in data["checks"]}


@pytest.fixture
def folder(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))  # the builder's reports: not an earlier test's
    return pytester, save_padding_model(tmp_path / "reference")


def test_a_builder_that_cannot_run_is_one_error_and_the_numeric_checks_judge(folder):
    """SpliceAI's case: TensorRT-RTX's CPU-only build of a Pad whose pads come from a shape calls CUDA. The
    ``engine_builds`` row is the suite's error, saying so once; the checks that run the candidate pass."""
    result, data, checks = run(folder)
    if checks["engine_builds"]["status"] == "pass":
        pytest.skip("this machine has a CUDA driver: TensorRT-RTX built the graph")
    status = {k: c["status"] for k, c in checks.items()}
    assert status == {"engine_builds": "error", "matches_reference": "pass"}, result.stdout.str()[-3000:]
    message = checks["engine_builds"]["details"]["message"]
    assert "could not run its build" in message and "cudaError 35" in message and "Not a verdict" in message
    body = result.stdout.str().split("short test summary info")[0]  # the summary line's length follows the terminal's width
    assert body.count("cudaError 35: CUDA driver version is insufficient") == 1, "said once"
    assert data["engine_build"] == "on"
    engine = checks["engine_builds"]["details"]["engine"]
    assert not engine["built"] and engine["error"]["cannot_run"]


def test_the_builder_turned_off_is_recorded(folder):
    result, data, checks = run(folder, "engine_builds", "--parity-engine-build=off")
    assert checks["engine_builds"]["status"] == "skip", result.stdout.str()[-3000:]
    assert "turned off (--parity-engine-build=off)" in checks["engine_builds"]["details"]["reason"]
    assert data["engine_build"] == "off"
    markdown = (folder[0].path / "report" / "parity-report.md").read_text()
    assert "TensorRT-RTX builder" in markdown and "(turned off: --parity-engine-build=off)" in markdown


def test_a_builder_that_hangs_is_ended_and_is_one_error(folder, monkeypatch):
    """A build that does not finish in ``aot.TIMEOUT_S`` ends its child: the suite's error on ``engine_builds``,
    not a rejection (which the numeric checks would skip after, as the first test shows they do not)."""
    from paritygate.backend.trt import aot

    monkeypatch.setattr(aot, "TIMEOUT_S", 0.01)  # no child starts Python with TensorRT-RTX that fast
    monkeypatch.setattr(aot, "_BUILDER", [])  # a new child (this process's may be warm, and answer in time)
    result, _data, checks = run(folder, "engine_builds")
    assert checks["engine_builds"]["status"] == "error", result.stdout.str()[-3000:]
    message = checks["engine_builds"]["details"]["message"]
    assert "the builder crashed or did not finish" in message and "did not finish building" in message
