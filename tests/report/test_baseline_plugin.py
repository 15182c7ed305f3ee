"""--parity-baseline through the plugin (pytester, the real conformance tests on a toy SavedModel and ONNX
candidates made in code): a regressed candidate's new failure is listed in JSON and Markdown and fails the run;
drift alone is reported and fails the run only under --parity-baseline-fail; each check's key numbers reach the
JUnit XML as properties; a bad baseline or gate fails the run before any test."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from paritygate.lazy import available
from tests.conftest import make_onnx, scale, write_config

pytest.importorskip("onnx")  # before any test: pytester restores sys.modules, and re-importing onnx after TF aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance" / "test_parity.py"
KEY = {"model": "toy", "precision": "fp32", "check": "matches_reference"}


def _run(pytester, toy_saved_model, name, y_scale, *args):
    """Run the parity conformance tests on a candidate computing y = y_scale * x; returns (result, report dir)."""
    onnx_path = make_onnx(pytester.path / f"{name}.onnx", scale("y", y_scale), scale("z", 2.0))
    cfg = write_config(pytester.path, {"models": [{
        "name": "toy", "reference": str(toy_saved_model), "onnx": onnx_path.name, "precisions": ["fp32"],
        "max_batch": 4, "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]},
        name=f"{name}.toml")
    report = pytester.path / name
    result = pytester.runpytest(str(CONFORMANCE), f"--parity-config={cfg}", f"--parity-report={report}",
                                           "-p", "no:cacheprovider", "-p", "no:xdist", *args)
    return result, report


def _baseline(pytester, toy_saved_model):
    result, report = _run(pytester, toy_saved_model, "good", 5.0)
    assert result.ret == pytest.ExitCode.OK, result.outlines
    return report / "parity-report.json"


def test_a_regressed_candidate_lists_its_new_failure_and_fails(pytester, toy_saved_model):
    baseline = _baseline(pytester, toy_saved_model)
    junit = pytester.path / "junit.xml"
    result, report = _run(pytester, toy_saved_model, "regressed", 5.01, f"--parity-baseline={baseline}",
                          f"--junitxml={junit}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    section = json.loads((report / "parity-report.json").read_text())["baseline"]
    assert section["path"] == str(baseline)
    assert section["new_failures"] == [dict(KEY, status="fail", baseline_status="pass")]
    assert section["fixed"] == [] and section["existing_failures"] == []
    md = (report / "parity-report.md").read_text()
    changes = md[md.index("## Changes since baseline"):md.index("## Failures")]
    assert changes.index("**New failures** (1):") < changes.index("**Drift**")  # new failures first
    assert "- ❌ fail toy fp32 matches_reference (baseline: pass)" in changes
    result.stdout.fnmatch_lines(["paritygate: vs baseline *: 1 new failure(s), 0 fixed, 0 still failing, *",
                                 "paritygate: new failure vs baseline: toy fp32 matches_reference (fail; baseline: pass)"])
    # the failing output's worst element carries the inputs that produced it, read back from the reproducer
    check = next(c for c in json.loads((report / "parity-report.json").read_text())["checks"]
                 if c["check"] == "matches_reference")
    y = next(o for o in check["details"]["outputs"] if o["output"] == "y")
    (x,) = y["worst"]["inputs"]["x"]["values"]
    assert y["worst"]["reference"] == pytest.approx(5 * x, rel=1e-6) and abs(x) > 0.9  # largest |x| errs most
    # JUnit XML: the check's numbers as <property> elements of its test case
    case = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == "test_matches_reference[toy-fp32]")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["paritygate.status"] == "fail" and props["paritygate.y.mismatches"].endswith("/" + str(
        y["elements"])) and float(props["paritygate.y.max_abs"]) == pytest.approx(y["max_abs"], rel=1e-5)
    assert "paritygate.z.cosine" in props


def test_drift_alone_is_reported_and_gates_only_when_asked(pytester, toy_saved_model):
    baseline = _baseline(pytester, toy_saved_model)
    # y = 5.00002 x errs by up to 2e-5, within fp32's atol 1e-5 + rtol 1e-5 * |5x|: every check passes
    result, report = _run(pytester, toy_saved_model, "drifted", 5.00002, f"--parity-baseline={baseline}")
    assert result.ret == pytest.ExitCode.OK, result.outlines
    section = json.loads((report / "parity-report.json").read_text())["baseline"]
    assert section["new_failures"] == [] and section["gates"] == []
    drift = [d for d in section["drift"] if d["check"] == "matches_reference" and d["where"] == "output y"]
    assert {d["field"] for d in drift} >= {"max_abs"} and not any(d["gating"] for d in drift)
    assert "| reported | toy fp32 matches_reference | output y | max_abs |" in (report / "parity-report.md").read_text()

    gated, report = _run(pytester, toy_saved_model, "gated", 5.00002, f"--parity-baseline={baseline}",
                         "--parity-baseline-fail=max_abs:100%")
    assert gated.ret == pytest.ExitCode.TESTS_FAILED
    rtx = int(available("tensorrt_rtx"))  # engine_builds passes with TensorRT-RTX's builder, skips without it
    gated.assert_outcomes(passed=2 + rtx, skipped=2 - rtx)  # every check passed: the gate alone fails the run
    gated.stdout.fnmatch_lines([("paritygate: drift past --parity-baseline-fail max_abs:100%: toy fp32 "
                                "matches_reference output y max_abs *")])
    assert "| **gates** | toy fp32 matches_reference | output y | max_abs |" in (report / "parity-report.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--parity-baseline=nowhere.json"], "*--parity-baseline=*nowhere.json: cannot read --parity-baseline (a parity-report.json): file not found*"),
    (["--parity-baseline-fail=max_abs:100%"], "*--parity-baseline-fail needs --parity-baseline=PATH*"),
    (["--parity-baseline=old.json", "--parity-baseline-fail=speed:5%"], "*expected FIELD:VALUE*"),
])
def test_a_bad_baseline_or_gate_fails_before_any_test(pytester, args, message):
    (pytester.path / "old.json").write_text(json.dumps({"schema": 1, "checks": []}))
    pytester.makepyfile("def test_never(): raise AssertionError('ran')")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "test_never" not in result.stdout.str()


def test_help_describes_the_baseline_options(pytester):
    result = pytester.runpytest("--help")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*--parity-baseline=PATH*", "*--parity-baseline-fail=EXPR*",
                                 "*FIELD:VALUE% (relative growth)*"])
