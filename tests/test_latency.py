"""paritygate.latency: the harness on workloads of known cost, percentiles on known data, budgets per device
class, and the conformance check end to end (pytester, a real TF SavedModel and a real ONNX model).

Tests that time things carry the `latency` marker, so they never run beside other work under xdist.
"""

import json
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from paritygate.backend.base import BaseRunner
from paritygate.latency import (
    OVERHEAD_LIMIT,
    PROFILE_ENV,
    LatencyError,
    Profile,
    budgets_for,
    latency_row,
    load_profile,
    loop_overhead_ns,
    measure,
    measure_runner,
    overhead_failures,
    percentile,
    summarize,
)
from paritygate.latency.budgets import evaluate, unmeasurable
from tests.conftest import make_onnx, toy_spec, write_config

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
PLUGIN_ARGS = ("-p", "no:paritygate", "-p", "paritygate.plugin", "--strict-markers")
# Just enough samples for nearest-rank p99 not to be the maximum, and no time-based extension; 20 warm-up
# calls, so that the per-call estimate (the median of the last 10) survives a preempted call.
FIXED_100 = Profile("test", warmup_s=0.0, warmup_iterations=20, duration_s=0.0, min_iterations=100,
                    max_iterations=100)

SLEEP_S = 0.002
# time.sleep(0.002) on the harness clock. Below: never less than 2 ms, since sleep does not return early (PEP 475)
# and perf_counter is monotonic. Above: the timer fires within Linux's timer slack (50 us by default), then the
# woken thread needs a CPU: at once on an idle core (p50 ~2.06-2.1 ms measured here), but on a saturated machine
# only when the scheduler next preempts the running task, within one tick at the latest (4 ms at CONFIG_HZ=250,
# the common distribution setting). With two CPU hogs added to this busy 2-core machine (load 7) p50 was 4.0 ms.
# So p50 must stay within 2 + 0.05 + 4 ms, plus 0.45 ms of margin: past that, more than half of all wake-ups
# waited longer than a full tick, which no load explains, only a harness adding time.
SLEEP_P50_MAX_MS = 6.5
SPIN_NS = 50_000
# A 50 us busy-wait ends at the first clock read past its deadline: the loop iteration (~0.1 us), the call and
# the harness's clock read (~0.1 us) come on top. Preemption lands in a few percent of the samples at most (a
# scheduler slice is milliseconds), so it moves p99, not p50; 2 us covers a slow or steal-heavy VM.
SPIN_P50_SLACK_NS = 2_000


def _busy_wait(ns):
    """A callable that spins on the clock for ``ns`` nanoseconds (no sleep, no syscall)."""
    clock = time.perf_counter_ns

    def spin():
        end = clock() + ns
        while clock() < end:
            pass

    return spin


# -- percentiles ------------------------------------------------------------------------------------------
def test_percentile_is_nearest_rank_on_known_data():
    one_to_100 = np.arange(1, 101)
    assert [percentile(one_to_100, q) for q in (1, 50, 90, 99, 100)] == [1, 50, 90, 99, 100]
    assert percentile(np.arange(1, 11), 99) == 10  # rank ceil(9.9) = 10
    assert percentile(np.arange(1, 11), 50) == 5  # rank 5, not the midpoint 5.5
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0  # order does not matter
    assert percentile([7.5], 99) == 7.5
    assert summarize([1, 2, 3, 4]) == {"p50_ms": 2, "p90_ms": 4, "p99_ms": 4, "mean_ms": 2.5, "min_ms": 1,
                                       "max_ms": 4}


@pytest.mark.parametrize("n", [1, 2, 7, 100, 101, 999, 1000, 4321])
def test_percentile_agrees_with_the_nearest_rank_definition_and_numpy(n):
    data = np.random.default_rng(n).lognormal(size=n)
    for q in (0.1, 1, 25, 50, 90, 95, 99, 99.9, 100):
        # the definition, in exact arithmetic: the smallest sample with at least q% of all samples <= it
        wanted = min(x for x in data if Fraction(int((data <= x).sum()), n) >= Fraction(str(q)) / 100)
        assert percentile(data, q) == wanted, (n, q)
    for q in (1, 25, 50, 90, 95, 99, 100):  # numpy's rank is computed in floats: 99.9% of 1000 lands on 1000
        assert percentile(data, q) == np.percentile(data, q, method="inverted_cdf"), (n, q)


def test_percentile_rejects_what_it_cannot_answer():
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"\(0, 100\]"):
        percentile([1.0], 0)


def test_profile_comes_from_the_environment(monkeypatch):
    assert load_profile().name == "ci"
    monkeypatch.setenv(PROFILE_ENV, "nightly")
    assert load_profile().duration_s == 3.0
    monkeypatch.setenv(PROFILE_ENV, "fastest")
    with pytest.raises(LatencyError, match="unknown latency profile 'fastest'.*quick, ci, nightly"):
        load_profile()


# -- the harness on known workloads ------------------------------------------------------------------------
@pytest.mark.latency
def test_sleeping_callable_measures_its_sleep():
    timing = measure(lambda: time.sleep(SLEEP_S), FIXED_100)
    stats = summarize(timing.wall_ns / 1e6)
    assert timing.iterations == 100 and timing.calls_per_sample == 1
    assert stats["min_ms"] >= SLEEP_S * 1e3
    assert stats["p50_ms"] <= SLEEP_P50_MAX_MS, stats
    assert stats["p50_ms"] <= stats["p90_ms"] <= stats["p99_ms"] <= stats["max_ms"]
    assert timing.overhead_fraction < OVERHEAD_LIMIT / 100  # ~70 ns against 2 ms


@pytest.mark.latency
def test_busy_wait_is_measured_tightly_and_overhead_is_small_against_it():
    overhead = loop_overhead_ns(1)
    assert 0 < overhead < 5_000  # a clock read and a call: ~70 ns here; 5 us would be a broken clock
    timing = measure(_busy_wait(SPIN_NS), FIXED_100)
    assert timing.calls_per_sample == 1
    assert timing.overhead_fraction <= OVERHEAD_LIMIT
    assert timing.wall_ns.min() >= SPIN_NS
    assert percentile(timing.wall_ns, 50) <= SPIN_NS + SPIN_P50_SLACK_NS


@pytest.mark.latency
def test_short_calls_are_grouped_so_overhead_stays_within_the_limit():
    timing = measure(_busy_wait(6_000), FIXED_100)  # ~6 us: the clock read alone is ~1% of it
    assert timing.calls_per_sample > 1
    assert timing.overhead_fraction <= OVERHEAD_LIMIT
    assert np.median(timing.wall_ns) >= 6_000


@pytest.mark.latency
def test_overhead_over_the_limit_after_calibration_regroups_once():
    """Calibration sees 100 us calls (one per sample), the loop then 3 us calls: ~2% overhead, so the loop is
    run again with the next grouping (2 calls per sample), once."""
    slow, fast, calls = _busy_wait(100_000), _busy_wait(3_000), []

    def changes_speed():
        calls.append(None)
        (slow if len(calls) <= FIXED_100.warmup_iterations else fast)()

    timing = measure(changes_speed, FIXED_100)
    assert timing.calls_per_sample == 2
    assert len(calls) == FIXED_100.warmup_iterations + 100 + 2 * 100


@pytest.mark.latency
def test_overhead_above_the_limit_fails_the_check():
    """Timing the empty callable itself: the harness overhead is all there is, and the check says so."""
    row = latency_row("candidate", "onnxruntime", 1, measure(lambda: None, FIXED_100))
    assert row["overhead_fraction"] > OVERHEAD_LIMIT
    [message] = overhead_failures(toy_spec(), "fp32", [row])
    assert message.startswith("toy fp32 batch 1: the harness's own overhead (")
    assert "of the onnxruntime (candidate) median, above the 1% limit" in message


class SleepRunner(BaseRunner):
    """A runner that reports its own timings as backend/trt/runner.py does: compute apart from end to end."""

    def __init__(self):
        super().__init__("sleep")
        self.last_compute_ms = self.last_e2e_ms = None

    def activate_impl(self):
        pass

    def infer_impl(self, feed):
        start = time.perf_counter()
        time.sleep(0.001)  # "compute"
        self.last_compute_ms = (time.perf_counter() - start) * 1e3
        time.sleep(0.0005)  # "copies"
        self.last_e2e_ms = (time.perf_counter() - start) * 1e3
        return dict(feed)


@pytest.mark.latency
def test_runner_timings_are_reported_apart_from_wall_time():
    with SleepRunner() as runner:
        row = latency_row("candidate", "sleep", 1, measure_runner(runner, {"x": np.zeros((1, 1))}, FIXED_100))
    assert row["metric"].startswith("e2e") and row["calls_per_sample"] == 1
    assert row["p99_ms"] == row["e2e_p99_ms"]  # the budgeted metric is the runner's end to end
    assert 1.0 <= row["compute_p50_ms"] < row["e2e_p50_ms"] <= row["wall_p50_ms"]
    assert row["e2e_p50_ms"] >= 1.5 and "compute_p99_ms" in row and len(row["samples_ms"]) == 100


# -- budgets ---------------------------------------------------------------------------------------------
BUDGETED = {"cpu": {"fp32_batch1_p99_ms": 5.0, "reference_batch1_p50_ms": 9.0},
            "t4": {"fp16_batch1_p99_ms": 0.5, "fp16_batch8_p50_ms": 2.0, "fp32_batch1_p99_ms": 1.0,
                   "fp16_speedup_vs_reference_min": 3.0, "reference_batch1_p99_ms": 4.0}}


def test_device_class_selects_the_budget_table():
    spec = toy_spec(source="/cfg/parity.toml", max_batch=8, latency=BUDGETED)
    t4 = budgets_for(spec, "t4", "fp16")
    assert t4.table == "latency.t4"
    assert {b.key for b in t4.percentiles} == {"fp16_batch1_p99_ms", "fp16_batch8_p50_ms", "reference_batch1_p99_ms"}
    assert [b.describe() for b in t4.speedups] == ["fp16_speedup_vs_reference_min = 3x"]
    assert t4.batches == [1, 8]
    p99 = next(b for b in t4.percentiles if b.key == "fp16_batch1_p99_ms")
    assert p99.source == "/cfg/parity.toml: model 'toy': key 'latency.t4.fp16_batch1_p99_ms'"
    assert budgets_for(spec, "T4", "fp16").table == "latency.t4"
    assert [b.key for b in budgets_for(spec, "cpu", "fp32").percentiles] == ["fp32_batch1_p99_ms",
                                                                             "reference_batch1_p50_ms"]
    a100 = budgets_for(spec, "a100", "fp32")
    assert a100.table is None and not a100.percentiles
    assert a100.note(spec, "fp32").startswith("no budget for class a100 (")
    assert "classes with budgets: cpu, t4" in a100.note(spec, "fp32")
    assert budgets_for(spec, "cpu", "int8").note(spec, "int8") is None  # the reference's budget still applies
    fp32_only = toy_spec(latency={"cpu": {"fp32_batch1_p99_ms": 5.0}})
    assert budgets_for(fp32_only, "cpu", "int8").note(fp32_only, "int8").startswith(
        "no budget for class cpu at int8 (parity.toml: model 'toy': key 'latency.cpu' has no int8_* or reference_* key)")


def _rows(cand_p50, ref_p50, batch=1):
    stats = lambda p50: {"p50_ms": p50, "p90_ms": p50 * 1.5, "p99_ms": p50 * 2}
    return [{"batch": batch, "role": "candidate", "runtime": "onnxruntime", **stats(cand_p50),
             "speedup_vs_reference": round(ref_p50 / cand_p50, 3)},
            {"batch": batch, "role": "reference", "runtime": "tensorflow", **stats(ref_p50)}]


def test_budget_failures_name_model_precision_batch_percentile_key_and_source():
    spec = toy_spec(source="/cfg/parity.toml", max_batch=8, latency=BUDGETED)
    rows = _rows(cand_p50=0.4, ref_p50=0.8)  # p99 0.8 ms > 0.5; speedup 2x < 3x; reference p99 1.6 <= 4
    failures, errors = evaluate(spec, "fp16", budgets_for(spec, "t4", "fp16"), rows)
    assert errors == []
    over_p99 = ("toy fp16 batch 1: onnxruntime (candidate) p99 = 0.8 ms exceeds budget fp16_batch1_p99_ms = 0.5 ms "
                "(from /cfg/parity.toml: model 'toy': key 'latency.t4.fp16_batch1_p99_ms')")
    too_slow = ("toy fp16 batch 1: onnxruntime is 2x as fast as the TF reference (p50 0.8 ms / 0.4 ms), below "
                "budget fp16_speedup_vs_reference_min = 3x (from /cfg/parity.toml: model 'toy': key "
                "'latency.t4.fp16_speedup_vs_reference_min')")
    assert failures == [over_p99, too_slow]
    assert rows[0]["budget"] == "fp16_batch1_p99_ms = 0.5 ms; fp16_speedup_vs_reference_min = 3x"
    assert rows[0]["within_budget"] is False
    assert rows[1]["budget"] == "reference_batch1_p99_ms = 4 ms" and rows[1]["within_budget"] is True


def test_speedup_budget_is_met_at_every_batch_size():
    spec = toy_spec(max_batch=8, latency=BUDGETED)
    rows = _rows(cand_p50=0.1, ref_p50=0.5) + _rows(cand_p50=0.3, ref_p50=0.6, batch=8)
    failures, _ = evaluate(spec, "fp16", budgets_for(spec, "t4", "fp16"), rows)
    [failure] = failures  # batch 1: 5x; batch 8: 2x, and its p50 of 0.3 ms is within fp16_batch8_p50_ms = 2 ms
    assert failure.startswith("toy fp16 batch 8: onnxruntime is 2x as fast as the TF reference (p50 0.6 ms / 0.3 ms)")


def test_budget_naming_a_batch_beyond_max_batch_is_reported():
    spec = toy_spec(max_batch=4, latency=BUDGETED)
    [message] = unmeasurable(spec, budgets_for(spec, "t4", "fp16"))
    assert message.startswith("toy: budget fp16_batch8_p50_ms = 2 ms names batch 8, but the model takes batch "
                              "sizes 1..4 (max_batch)")


# -- the conformance check end to end -----------------------------------------------------------------
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
    from paritygate.latency import check, machine

    monkeypatch.setenv(PROFILE_ENV, "quick")
    for module in (check, machine):  # an idle machine: a loaded one turns budget misses inconclusive
        monkeypatch.setattr(module, "load_average", lambda: [0.5, 0.5, 0.5])
    reference, onnx_path = latency_models
    cfg = write_config(pytester.path, {"models": [
        _model("unbudgeted", reference, onnx_path, {"t4": {"fp32_batch1_p99_ms": 1e-6}}),
        _model("over_budget", reference, onnx_path, {"cpu": {"fp32_batch1_p99_ms": 1e-6}}),
        _model("slow_candidate", reference, onnx_path, {"cpu": {"fp32_speedup_vs_reference_min": 1e6}}),
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
    assert "below budget fp32_speedup_vs_reference_min = 1e+06x (from" in slow

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


def test_budgets_needing_a_reference_that_could_not_run_are_errors():
    spec = toy_spec(max_batch=8, latency=BUDGETED)
    rows = _rows(cand_p50=0.1, ref_p50=0.5)[:1]  # the candidate's row only: the reference could not run
    failures, errors = evaluate(spec, "fp16", budgets_for(spec, "t4", "fp16"), rows, "tensorflow is not installed")
    assert failures == []
    assert errors == [
        ("toy fp16 batch 1: budget reference_batch1_p99_ms = 4 ms needs the TF reference, which could not run: "
        "tensorflow is not installed (from parity.toml: model 'toy': key 'latency.t4.reference_batch1_p99_ms')"),
        ("toy fp16 batch 1: budget fp16_speedup_vs_reference_min = 3x needs the TF reference, which could not run: "
        "tensorflow is not installed (from parity.toml: model 'toy': key 'latency.t4.fp16_speedup_vs_reference_min')")]


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.latency
def test_a_budget_missed_on_a_loaded_machine_is_inconclusive(latency_run, monkeypatch):
    from paritygate.latency import check

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
    from paritygate.latency import check

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
    from paritygate.latency import latency_check
    from paritygate.runtimes import candidate_runner
    from paritygate.session import ParitySession

    monkeypatch.setenv(PROFILE_ENV, "quick")
    session = ParitySession(runtime="onnxruntime", device_class="cpu")
    for spec in session.models:
        budgets = budgets_for(spec, "cpu", "fp32")
        assert budgets.percentiles and budgets.speedups, f"{spec.name}: the bundled model has cpu budgets"
        real = candidate_runner(session, spec, "fp32")
        kinds = {f"p{q}": {b.batch: b.limit_ms for b in budgets.percentiles if b.percentile == q} for q in (50, 90, 99)}
        kinds["speedup"] = None  # set from the reference rows the runs above measured (and cached)
        for kind, delay_ms in kinds.items():
            if kind == "speedup":
                [minimum] = [b.minimum for b in budgets.speedups]
                reference = {b: session.cache[("latency_reference", spec.name, b, "quick")]["p50_ms"]
                             for b in (1, spec.max_batch)}
                # the measured speedup divided by its margin, on top of the real call: S/2 of this run's reference
                delay_ms = {b: ref / minimum for b, ref in reference.items()}
            if not delay_ms:
                continue
            session.cache[("candidate", "onnxruntime", spec.name, "fp32")] = SlowedRunner(real, delay_ms).activate()
            result = latency_check(session, spec, "fp32")
            text = "\n".join(result.failures)
            wanted = [b.key for b in budgets.speedups] if kind == "speedup" else \
                [b.key for b in budgets.percentiles if f"p{b.percentile}" == kind]
            assert wanted and all(k in text for k in wanted), (spec.name, kind, wanted, result.failures)
            assert not result.errors
        session.cache[("candidate", "onnxruntime", spec.name, "fp32")] = real
