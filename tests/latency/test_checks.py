"""paritygate.latency.checks: the conformance check end to end (pytester, a real TF SavedModel and a real ONNX
model), and every bundled budget failing a candidate slowed by its margin.

Tests that time things carry the `latency` marker, so they never run beside other work under xdist.
"""

import json
import time
from pathlib import Path

import numpy as np
import pytest

from paritygate.backend.base import BaseRunner
from paritygate.backend.runtimes import CANDIDATES
from paritygate.common.memo import ArtifactKey
from paritygate.latency import (
    OVERHEAD_LIMIT,
    PROFILE_ENV,
    budgets_for,
)
from paritygate.latency.checks import REFERENCE_LATENCY, LatencyKey
from tests.conftest import make_onnx, write_config

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
PLUGIN_ARGS = ("-p", "no:paritygate", "-p", "paritygate.plugin", "--strict-markers")

@pytest.fixture(scope="module")
def latency_models(toy_saved_model, tmp_path_factory):
    """The toy SavedModel and its ONNX twin; both runtimes are run once here, so that in-process inner runs
    find TensorFlow and ONNX Runtime fully imported (pytester removes modules an inner run imports)."""
    pytest.importorskip("onnxruntime")
    from paritygate.backend.onnxrt.runner import OnnxrtRunner
    from paritygate.backend.tf.runner import TfRunner

    onnx_path = make_onnx(tmp_path_factory.mktemp("latency") / "toy.onnx")
    feed = {"x": np.ones((2, 1), np.float32)}
    for runner in (TfRunner(toy_saved_model), OnnxrtRunner(onnx_path)):
        with runner:
            runner.infer(feed)
    return toy_saved_model, onnx_path


def _model(name, reference, onnx_path, latency):
    return {"name": name, "reference": str(reference), "onnx": str(onnx_path), "precisions": ["fp32"],
            "max_batch": 4, "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}},
            "latency": latency}


@pytest.fixture
def latency_run(pytester, latency_models, monkeypatch):
    """Run conformance/test_latency.py over four toy models in-process; returns (result, checks by model)."""
    from paritygate.latency import checks as check
    from paritygate.latency import machine

    monkeypatch.setenv(PROFILE_ENV, "quick")
    for module in (check, machine):  # an idle machine: a loaded one turns budget misses inconclusive
        monkeypatch.setattr(module, "load_average", lambda: [0.5, 0.5, 0.5])
    reference, onnx_path = latency_models
    cfg = write_config(pytester.path, {"models": [
        _model("unbudgeted", reference, onnx_path, {"t4": {"fp32_batch1_p99_ms": 1e-6}}),
        _model("over_budget", reference, onnx_path, {"cpu": {"fp32_batch1_p99_ms": 1e-6}}),
        _model("slow_candidate", reference, onnx_path, {"cpu": {"fp32_speedup_vs_reference_min": 1000}}),
        # ONNX Runtime runs y = 5x ~30x faster than a TF signature call: 0.01x holds on any machine
        _model("fast_enough", reference, onnx_path, {"cpu": {"fp32_speedup_vs_reference_min": 0.01,
                                                             "fp32_batch3_p50_ms": 1e4,
                                                             "reference_batch2_p99_ms": 1e4}}),
    ]})

    def run(*args):
        report = pytester.path / "report"
        result = pytester.runpytest_inprocess(str(CONFORMANCE / "test_latency.py"), f"--parity-config={cfg}",
                                              f"--parity-report={report}", "-p", "no:cacheprovider",
                                              *PLUGIN_ARGS, *args)
        assert (report / "parity-report.json").exists(), "\n".join(result.outlines[-40:] + result.errlines[-40:])
        data = json.loads((report / "parity-report.json").read_text())
        return result, cfg, {c["model"]: c for c in data["checks"]}, (report / "parity-report.md").read_text()

    return run


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.latency
def test_check_gates_on_the_device_class_budgets(latency_run):
    result, cfg, checks, markdown = latency_run("--parity-device-class=cpu")
    result.assert_outcomes(passed=1, failed=2, skipped=1)
    assert {m: c["status"] for m, c in checks.items()} == {
        "unbudgeted": "skip", "over_budget": "fail", "slow_candidate": "fail", "fast_enough": "pass"}

    unbudgeted = checks["unbudgeted"]["details"]  # nothing gated it: a skip with its numbers, never a pass
    assert unbudgeted["note"].startswith("no budget for class cpu (")
    assert unbudgeted["reason"].startswith("Skipped: measured, no budget: no budget for class cpu (")
    assert "candidate b1 p50 " in unbudgeted["reason"] and "reference b4 p50 " in unbudgeted["reason"]
    assert [(r["role"], r["batch"]) for r in unbudgeted["latency"]] == [
        ("candidate", 1), ("candidate", 4), ("reference", 1), ("reference", 4)]
    for row in unbudgeted["latency"]:
        assert row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"] and row["iterations"] >= 100
        assert row["budget"] is None and 0 < len(row["samples_ms"]) <= 500
        assert row["overhead_fraction"] <= OVERHEAD_LIMIT
    machine = unbudgeted["machine"]
    assert {"cpu_model", "logical_cores", "usable_cores", "load_average", "gpu", "python", "onnxruntime",
            "tensorflow"} <= set(machine) and machine["device_class"] == "cpu"

    [over] = checks["over_budget"]["details"]["failures"]
    assert over.startswith("over_budget fp32 batch 1: onnxruntime (candidate) p99 = ")
    assert over.endswith(f"ms exceeds budget fp32_batch1_p99_ms = 1e-06 ms (from {cfg}: model 'over_budget': "
                         "key 'latency.cpu.fp32_batch1_p99_ms')")
    slow = checks["slow_candidate"]["details"]["failures"]
    assert [m.split(":")[0] for m in slow] == ["slow_candidate fp32 batch 1", "slow_candidate fp32 batch 4"]
    slow = slow[0]
    assert over in checks["over_budget"]["details"]["message"]  # the pytest failure shows the same text
    assert slow.startswith("slow_candidate fp32 batch 1: onnxruntime is ")
    assert "below budget fp32_speedup_vs_reference_min = 1000x (from" in slow

    fast = checks["fast_enough"]["details"]["latency"]
    assert [(r["role"], r["batch"]) for r in fast if r["role"] == "candidate"] == [
        ("candidate", 1), ("candidate", 2), ("candidate", 3), ("candidate", 4)]  # batch 2: reference key
    batch3 = next(r for r in fast if r["role"] == "candidate" and r["batch"] == 3)
    assert batch3["budget"] == "fp32_batch3_p50_ms = 10000 ms; fp32_speedup_vs_reference_min = 0.01x"
    assert batch3["within_budget"] is True and batch3["speedup_vs_reference"] > 0.01
    assert "## Latency" in markdown and "fp32_batch3_p50_ms = 10000 ms" in markdown


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.latency
def test_device_class_option_picks_its_table(latency_run):
    result, cfg, checks, _ = latency_run("--parity-device-class=t4", "-k", "unbudgeted or over_budget")
    result.assert_outcomes(failed=1, skipped=1)
    assert checks["unbudgeted"]["status"] == "fail"
    [failure] = checks["unbudgeted"]["details"]["failures"]
    assert failure.endswith(
        f"(from {cfg}: model 'unbudgeted': key 'latency.t4.fp32_batch1_p99_ms')")
    assert checks["over_budget"]["status"] == "skip"
    assert checks["over_budget"]["details"]["note"].startswith("no budget for class t4 (")


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.latency
def test_a_budget_missed_on_a_loaded_machine_is_inconclusive(latency_run, monkeypatch):
    from paritygate.latency import checks as check

    monkeypatch.setattr(check, "load_average", lambda: [64.0, 8.0, 2.0])  # busier than any core count here
    result, _, checks, _ = latency_run("--parity-device-class=cpu", "-k", "over_budget or fast_enough")
    assert result.ret == 1 and result.parseoutcomes().get("inconclusive") == 1
    assert checks["over_budget"]["status"] == "inconclusive"
    assert "the machine was loaded while measuring (1-minute load average 64.0" in \
        checks["over_budget"]["details"]["message"]
    assert checks["fast_enough"]["status"] == "pass"  # load only slows things down: a pass stands


@pytest.mark.onnx
@pytest.mark.latency
def test_without_tensorflow_the_candidate_is_still_measured(latency_run, monkeypatch):
    from paritygate.latency import checks as check

    monkeypatch.setattr(check, "available", lambda name: name != "tensorflow")  # as if it were not installed
    result, _, checks, _ = latency_run("--parity-device-class=cpu", "-k", "fast_enough or unbudgeted")
    result.assert_outcomes(skipped=1, errors=1)
    unbudgeted = checks["unbudgeted"]["details"]
    assert "TF reference not measured: tensorflow is not installed" in unbudgeted["note"]
    assert {r["role"] for r in unbudgeted["latency"]} == {"candidate"}
    fast = checks["fast_enough"]
    assert fast["status"] == "error", "budgets needing the reference are not judged: an error, not a failure"
    errors = fast["details"]["errors"]
    assert errors and all("needs the TF reference, which could not run: tensorflow is not installed" in e
                          for e in errors)
    assert any("reference_batch2_p99_ms" in e for e in errors)  # a reference budget: once skipped silently


# -- the bundled budgets can fail ---------------------------------------------------------------------------
P_MARGIN, SPEEDUP_MARGIN = 5, 2  # fixtures/parity.toml: percentile budgets 5x the median, speedup half of it


class SlowedRunner(BaseRunner):
    """The real candidate runner, plus a sleep per call that depends on the batch size (a regression)."""

    def __init__(self, runner, delay_ms):
        super().__init__(f"slowed:{runner.name}")
        self.runner, self.delay_ms = runner, delay_ms

    def activate_impl(self):
        self.runner.activate()

    def infer_impl(self, feed):
        time.sleep(self.delay_ms.get(len(next(iter(feed.values()))), 0.0) / 1e3)  # at least that long (PEP 475)
        return self.runner.infer(feed)


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.latency
@pytest.mark.slow
def test_each_bundled_budget_fails_a_candidate_slowed_by_its_margin(monkeypatch):
    """Each [models.latency.cpu] budget is its measured median times a margin: a candidate slowed by that margin
    (a sleep of margin x the measured median per call, on top of the real ONNX Runtime call) fails it. The speedup
    is judged against the reference measured in the same run (whose speed follows the machine's load), so its
    slowed candidate sleeps this run's reference p50 / speedup_min: the measured speedup divided by its margin."""
    pytest.importorskip("tensorflow")
    from paritygate.backend.runtimes import candidate_runner
    from paritygate.context import RunOptions
    from paritygate.latency import latency_check

    monkeypatch.setenv(PROFILE_ENV, "quick")
    session = RunOptions(runtime="onnxruntime", device_class="cpu")
    for spec in session.models:
        budgets = budgets_for(spec, "cpu", "fp32")
        assert budgets.percentiles and budgets.speedups, f"{spec.name}: the bundled model has cpu budgets"
        real, key = candidate_runner(session.context, spec, "fp32"), ArtifactKey("onnxruntime", spec.name, "fp32")
        kinds = {f"p{q}": {b.batch: b.limit_ms for b in budgets.percentiles if b.percentile == q} for q in (50, 90, 99)}
        kinds["speedup"] = None  # set from the reference rows the runs above measured (and cached)
        for kind, delay_ms in kinds.items():
            if kind == "speedup":
                [minimum] = [b.minimum for b in budgets.speedups]
                reference = {b: REFERENCE_LATENCY.peek(session.context, LatencyKey(spec.name, b, "quick"))["p50_ms"]
                             for b in (1, spec.max_batch)}
                # the measured speedup divided by its margin, on top of the real call: S/2 of this run's reference
                delay_ms = {b: ref / minimum for b, ref in reference.items()}
            if not delay_ms:
                continue
            CANDIDATES.put(session.context, key, SlowedRunner(real, delay_ms).activate())
            result = latency_check(session.context, spec, "fp32")
            text = "\n".join(result.failures)
            wanted = [b.key for b in budgets.speedups] if kind == "speedup" else \
                [b.key for b in budgets.percentiles if f"p{b.percentile}" == kind]
            assert wanted and all(k in text for k in wanted), (spec.name, kind, wanted, result.failures)
            assert not result.errors
        CANDIDATES.put(session.context, key, real)


# -- a check without a budget is bounded --------------------------------------------------------------------
@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.latency
def test_an_unbudgeted_check_of_a_slow_model_costs_seconds_not_minutes(tmp_path, toy_saved_model, monkeypatch):
    """Nothing gates it (its check is a skip that reports the numbers), so it takes the probe profile: one warm-up
    call and 3 samples a row. A candidate whose call takes 0.2 s would cost >= 100 x 0.2 s = 20 s a row in the ci
    profile (HED: 725 s for one precision); here 4 rows of 4 calls, about 3 s."""
    pytest.importorskip("onnxruntime")
    from paritygate.backend.runtimes import candidate_runner
    from paritygate.context import RunOptions
    from paritygate.latency import latency_check

    monkeypatch.delenv(PROFILE_ENV, raising=False)
    cfg = write_config(tmp_path, {"models": [_model("slow", toy_saved_model, make_onnx(tmp_path / "toy.onnx"), {})]})
    session = RunOptions(config_path=cfg, runtime="onnxruntime", device_class="cpu")
    [spec] = session.models
    real = candidate_runner(session.context, spec, "fp32")
    CANDIDATES.put(session.context, ArtifactKey("onnxruntime", spec.name, "fp32"),
                   SlowedRunner(real, {1: 200.0, 4: 200.0}).activate())
    start = time.perf_counter()
    result = latency_check(session.context, spec, "fp32")
    took = time.perf_counter() - start
    assert took < 10, f"an unbudgeted check took {took:.1f} s"
    candidate = [r for r in result.latency if r["role"] == "candidate"]
    assert [r["batch"] for r in candidate] == [1, 4] and all(3 <= r["iterations"] <= 5 for r in candidate), candidate
    assert all(r["p50_ms"] >= 200 for r in candidate)  # it measured the slow call
    assert result.details["profile"]["name"] == "probe" and result.details["unbudgeted"]
    assert "measured briefly (profile probe" in result.details["note"]
