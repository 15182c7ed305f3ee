"""paritygate.report.baseline: new failures, fixed and still-failing checks, drift of error statistics and latency
percentiles against a previous report, gates in --benchmark-compare-fail style, and clear errors for a bad
baseline file or gate expression. (The whole run through the plugin: tests/report/test_baseline_plugin.py.)"""

import json

import pytest

from paritygate.report.baseline import BaselineError, compare, load_baseline, parse_gates, parse_threshold


def check(model, status, precision="fp32", name="matches_reference", outputs=(), latency=()):
    return {"model": model, "precision": precision, "check": name, "status": status,
            "details": {"outputs": list(outputs), "latency": list(latency)}}


def out(name="y", **stats):
    return {"output": name, "max_abs": 1e-6, "p99_abs": 1e-7, "cosine": 0.99999, "mismatches": 0, **stats}


def report(*checks, **env):
    return {"schema": 1, "runtime": "onnxruntime", "device_class": "cpu",
            "environment": {"onnxruntime": "1.31.1", "tensorflow": "2.21.0", **env}, "checks": list(checks)}


def test_new_fixed_and_still_failing_are_told_apart():
    before = report(check("a", "pass"), check("b", "fail"), check("c", "fail"), check("e", "xfail"))
    now = report(check("a", "fail"), check("b", "pass"), check("c", "fail"), check("d", "error"), check("e", "fail"))
    b = compare(now, before, "old.json")
    assert [(f["model"], f["baseline_status"]) for f in b["new_failures"]] == [("a", "pass"), ("d", None),
                                                                               ("e", "xfail")]
    assert [f["model"] for f in b["fixed"]] == ["b"]
    assert [f["model"] for f in b["existing_failures"]] == ["c"]
    assert b["new_failures"][0] == {"model": "a", "precision": "fp32", "check": "matches_reference",
                                    "status": "fail", "baseline_status": "pass"}


def test_identical_failures_are_existing_not_new():
    failing = report(check("a", "fail"), check("b", "error"))
    b = compare(failing, failing, "same.json")
    assert b["new_failures"] == [] and len(b["existing_failures"]) == 2 and b["drift"] == []


def test_an_allowed_inconclusive_is_not_a_failure():
    allowed = check("a", "inconclusive")
    allowed["details"]["allow_uninformative"] = True
    assert compare(report(allowed), report(check("a", "pass")), "b.json")["new_failures"] == []


def test_error_statistics_drift_past_the_default_thresholds_is_reported_not_gating():
    before = report(check("a", "pass", outputs=[out(max_abs=1e-6, cosine=1.0)]))
    now = report(check("a", "pass", outputs=[out(max_abs=2.5e-6, cosine=0.9985)]))
    b = compare(now, before, "b.json")
    assert {(d["field"], d["change"], d["threshold"], d["gating"]) for d in b["drift"]} == {
        ("max_abs", "+150%", "max_abs:100%", False), ("cosine", "-0.0015", "cosine:0.001", False)}
    same = compare(report(check("a", "pass", outputs=[out(max_abs=1.9e-6)])), before, "b.json")
    assert same["drift"] == []  # x1.9 is within the default x2


def test_a_gate_sets_the_threshold_of_its_statistic_and_gates_it():
    before = report(check("a", "pass", outputs=[out(max_abs=1e-6)],
                          latency=[{"role": "candidate", "runtime": "onnxruntime", "batch": 8, "p50_ms": 1.0,
                                    "p99_ms": 2.0}]))
    now = report(check("a", "pass", outputs=[out(max_abs=1.2e-6)],
                       latency=[{"role": "candidate", "runtime": "onnxruntime", "batch": 8, "p50_ms": 1.05,
                                 "p99_ms": 2.3}]))
    b = compare(now, before, "b.json", parse_gates(["max_abs:10%", "p99_ms:10%"]))
    assert sorted((d["field"], d["where"], d["gating"]) for d in b["drift"]) == [
        ("max_abs", "output y", True), ("p99_ms", "candidate onnxruntime batch 8", True)]
    assert b["gates"] == ["max_abs:10%", "p99_ms:10%"]


def test_growth_from_zero_is_drift_and_nonfinite_statistics_are_not_compared():
    before = report(check("a", "pass", outputs=[out(max_abs=0.0), out("z", max_abs="nan")]))
    now = report(check("a", "pass", outputs=[out(max_abs=1e-7), out("z", max_abs=5.0)]))
    (d,) = compare(now, before, "b.json")["drift"]
    assert (d["where"], d["change"]) == ("output y", "from 0")


def test_environment_differences_are_listed():
    b = compare(report(onnxruntime="1.31.1"), report(onnxruntime="1.20.0", gpu={"name": "Tesla T4"}), "b.json")
    assert b["environment_differs"] == ["onnxruntime: 1.20.0 -> 1.31.1", "gpu: Tesla T4 -> None"]


@pytest.mark.parametrize("text, field, value, percent", [
    ("max_abs:100%", "max_abs", 100.0, True), ("cosine:0.001", "cosine", 0.001, False),
    ("p99_ms:10%", "p99_ms", 10.0, True), ("mismatches:0", "mismatches", 0.0, False), ("max_rel:1e-3", "max_rel", 1e-3, False)])
def test_gate_expressions(text, field, value, percent):
    t = parse_threshold(text)
    assert (t.field, t.value, t.percent) == (field, value, percent)


@pytest.mark.parametrize("text", ["max:5%", "max_abs", "max_abs:-1", "max_abs:5%%", "p99_ms:ten%"])
def test_bad_gate_expressions_say_the_syntax(text):
    with pytest.raises(BaselineError, match=r"expected FIELD:VALUE .* FIELD one of max_abs, p99_abs"):
        parse_threshold(text)


def test_gates_split_on_commas_and_spaces():
    assert [t.expression for t in parse_gates(["max_abs:100%, p99_ms:10%", "cosine:0.001"])] == [
        "max_abs:100%", "p99_ms:10%", "cosine:0.001"]


def test_bad_baseline_files_name_the_file_and_what_was_expected(tmp_path):
    with pytest.raises(BaselineError, match=r"--parity-baseline=.*missing.json: cannot read --parity-baseline .*: file not found"):
        load_baseline(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BaselineError, match=r"bad.json: cannot read --parity-baseline \(a parity-report.json\): not valid JSON"):
        load_baseline(bad)
    bad.write_text(json.dumps({"schema": 2, "checks": []}))
    with pytest.raises(BaselineError, match=r"bad.json: --parity-baseline \(a parity-report.json\) has schema version 2; this paritygate reads "
                                               r"schema version\(s\) 1"):
        load_baseline(bad)
    bad.write_text(json.dumps({"schema": 1, "checks": [{"model": "a"}]}))
    with pytest.raises(BaselineError, match=r"checks\[0\] lacks \['check', 'precision', 'status'\]"):
        load_baseline(bad)


def test_shared_reference_latency_rows_drift_once():
    def lat(p50):
        return [{"role": "reference", "runtime": "tensorflow", "batch": 1, "p50_ms": p50},
                {"role": "candidate", "runtime": "onnxruntime", "batch": 1, "p50_ms": p50}]

    before = report(*(check("a", "pass", p, "latency", latency=lat(1.0)) for p in ("fp32", "fp16")))
    now = report(*(check("a", "pass", p, "latency", latency=lat(2.0)) for p in ("fp32", "fp16")))
    drift = compare(now, before, "b.json")["drift"]
    assert sorted((d["precision"], d["where"]) for d in drift) == [
        ("fp16", "candidate onnxruntime batch 1"), ("fp32", "candidate onnxruntime batch 1"),
        ("fp32", "reference tensorflow batch 1")]
