"""paritygate.known: [[known_failures]] beside the config become strict xfails of exactly the named checks."""

import json
from pathlib import Path

import pytest

from paritygate.config import ConfigError
from paritygate.known import load_known_failures
from tests.conftest import make_onnx, scale, write_config

pytest.importorskip("onnx")  # before any test: pytester restores sys.modules, and re-importing onnx after TF aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tf, pytest.mark.onnx]

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance" / "test_parity.py"
KNOWN = """
[[known_failures]]
model = "toy"
check = "matches_reference"
precision = "fp32"
reason = "drifted weight, tracked in TICKET-1"
"""


def _reshape_to(n, out):
    """out = Reshape(x, [n, 1]): ONNX Runtime raises on every batch of another size."""
    import onnx

    shape = onnx.helper.make_tensor(f"{out}_shape", onnx.TensorProto.INT64, [2], [n, 1])
    return [onnx.helper.make_node("Constant", [], [f"{out}_shape"], value=shape),
            onnx.helper.make_node("Reshape", ["x", f"{out}_shape"], [out])]


def _run(pytester, toy_saved_model, y_scale):
    onnx_path = pytester.path / "cand.onnx"
    if y_scale is None:  # the check crashes: a candidate that loads (and passes validation) but cannot run a batch
        make_onnx(onnx_path, _reshape_to(7, "y"), scale("z", 2.0))
    else:
        make_onnx(onnx_path, scale("y", y_scale), scale("z", 2.0))
    cfg = write_config(pytester.path, {"models": [{
        "name": "toy", "reference": str(toy_saved_model), "onnx": onnx_path.name, "precisions": ["fp32"],
        "max_batch": 4, "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    (pytester.path / "expectations.toml").write_text(KNOWN)
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess(str(CONFORMANCE), f"--parity-config={cfg}", f"--parity-report={report}",
                                           "-p", "no:cacheprovider", "-p", "no:xdist")
    checks = {c["check"]: c for c in json.loads((report / "parity-report.json").read_text())["checks"]}
    return result, checks


def test_a_known_failure_is_an_xfail_with_its_reason(pytester, toy_saved_model):
    result, checks = _run(pytester, toy_saved_model, 5.01)
    result.assert_outcomes(passed=1, xfailed=1, skipped=1)  # accepts_every_batch_size passes; no task metric
    assert checks["matches_reference"]["status"] == "xfail"
    assert "TICKET-1" in checks["matches_reference"]["details"]["reason"]


def test_a_known_failure_that_passes_fails_the_run(pytester, toy_saved_model):
    result, checks = _run(pytester, toy_saved_model, 5.0)
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    assert checks["matches_reference"]["status"] == "fail"


def test_a_crash_of_a_known_failures_check_is_not_the_known_failure(pytester, toy_saved_model):
    """raises=AssertionError: only the candidate being wrong is the recorded failure; an exception is itself."""
    result, checks = _run(pytester, toy_saved_model, None)
    assert result.ret == 1
    assert checks["matches_reference"]["status"] in ("fail", "error"), checks["matches_reference"]
    assert "reason" not in checks["matches_reference"]["details"]  # no known-failure reason: not an xfail
    assert "cand.onnx" in checks["matches_reference"]["details"]["message"]
    assert result.parseoutcomes().get("xfailed") is None


def test_malformed_entries_name_the_file_and_key(tmp_path):
    (tmp_path / "expectations.toml").write_text('[[known_failures]]\nmodel = "m"\nchek = "x"\nreason = "r"\n')
    with pytest.raises(ConfigError, match=r"expectations.toml: known_failures\[0\]: unknown key\(s\) \['chek'\], "
                                          r"missing key\(s\) \['check'\]"):
        load_known_failures(tmp_path / "parity.toml")


def test_a_known_failure_can_name_the_numerics_it_happens_under():
    """`numerics = "strict"`: the entry marks the check under strict numerics only, not under ONNX Runtime's own."""
    from paritygate.known import mark_known_failures

    class Item:
        originalname, markers = "test_property_parity", []

        def add_marker(self, marker):
            self.markers.append(marker)

    entry = {"model": "bert", "check": "property_parity", "precision": "fp16", "numerics": "strict", "reason": "r",
             "source": "expectations.toml known_failures[0]"}
    for numerics, marked in (("ort", 0), ("strict", 1)):
        item = Item()
        item.markers = []
        mark_known_failures(item, "bert", "fp16", "onnxruntime", [entry], numerics)
        assert len(item.markers) == marked
