"""paritygate.latency.budgets: budget tables per device class, percentile and speedup budgets, their messages."""

from pathlib import Path

from paritygate.latency import (
    budgets_for,
)
from paritygate.latency.budgets import evaluate, unmeasurable
from tests.conftest import toy_spec

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
PLUGIN_ARGS = ("-p", "no:paritygate", "-p", "paritygate.plugin", "--strict-markers")

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
