"""paritygate.verdict through the plugin: SuiteError and Inconclusive get their own word in pytest's terminal,
in the exit code and in the report, and an allowed Inconclusive keeps its word without failing the run."""

import json

import pytest

from paritygate.verdict import FAILING, STATUSES

TESTS = """
import pytest
from paritygate.verdict import Inconclusive, SuiteError

def test_tool_broke(parity_model):
    raise SuiteError("tf2onnx failed on node X: unsupported op")

def test_constant_reference(parity_model):
    raise Inconclusive("the reference output is constant over 25 inputs")

def test_constant_but_allowed(parity_model):
    raise Inconclusive("the reference output is constant over 25 inputs", allowed=True)

def test_wrong(parity_model):
    assert 1 == 2

def test_right(parity_model):
    pass
"""


def _config(pytester):
    """A one-model config: the checks above are parametrized over it (its files are never loaded)."""
    (pytester.path / "sm").mkdir()
    (pytester.path / "parity.toml").write_text(
        '[[models]]\nname = "m"\nreference = "sm"\nprecisions = ["fp32"]\nmax_batch = 1\n'
        '[models.inputs.x]\nshape = [-1, 1]\ndtype = "float32"\nrange = [0.0, 1.0]\n')
    return pytester.path / "parity.toml"


def test_statuses_are_the_documented_words():
    assert STATUSES == ("pass", "fail", "error", "inconclusive", "skip", "xfail", "regenerated")
    assert set(FAILING) <= set(STATUSES)


def test_each_status_reaches_terminal_exit_code_and_report(pytester):
    pytester.makepyfile(test_verdicts=TESTS)
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-rA", "-v",
                                           f"--parity-report={report}", f"--parity-config={_config(pytester)}")
    assert result.ret == 1
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1 and outcomes.get("inconclusive") == 2, outcomes
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 1, outcomes
    result.stdout.fnmatch_lines(["*test_constant_reference*INCONCLUSIVE*", "ERROR *test_tool_broke*SuiteError*"])
    checks = {c["check"]: c for c in json.loads((report / "parity-report.json").read_text())["checks"]}
    assert {k: c["status"] for k, c in checks.items()} == {
        "tool_broke": "error", "constant_reference": "inconclusive", "constant_but_allowed": "inconclusive",
        "wrong": "fail", "right": "pass"}
    assert checks["constant_but_allowed"]["details"]["allow_uninformative"] is True
    assert "tf2onnx failed" in checks["tool_broke"]["details"]["message"]


@pytest.mark.parametrize("body, code", [("raise SuiteError('x')", 1), ("raise Inconclusive('x', allowed=True)", 0)])
def test_exit_code(pytester, body, code):
    pytester.makepyfile(test_one=f"from paritygate.verdict import Inconclusive, SuiteError\n\ndef test_it():\n    {body}\n")
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist").ret == code
