"""The rate gate over classes and slices (paritygate.shadow.rates): Holm on the fail side, every upper bound on
the pass side, small groups reported and not gated; and its family-wise error rate, simulated."""

import numpy as np

from paritygate.shadow import gate
from paritygate.shadow.rates import gate_rates


def classes(*counts):
    return [{"kind": "class", "value": c, "examples": n, "events": x} for c, (n, x) in enumerate(counts)]


def test_a_class_over_the_budget_fails_though_the_overall_rate_passes():
    record = gate_rates("top-1 flip rate", 23, 5000, classes((1004, 0), (1004, 0), (985, 23), (1003, 0), (1004, 0)),
                        0.01, "MLPerf")
    assert record["status"] == "fail" and record["overall_status"] == "pass"
    assert [g["status"] for g in record["groups"]] == ["pass", "pass", "fail", "pass", "pass"]
    assert record["gated"] == 6 and record["decided_by"][0].startswith("class 2 23/985")


def test_every_gated_upper_bound_must_be_within_the_budget_to_pass():
    record = gate_rates("r", 4, 5000, classes((1000, 0), (1000, 0), (1000, 4), (1000, 0), (1000, 0)), 0.01, "s")
    assert record["status"] == "inconclusive" and record["overall_status"] == "pass"
    row = record["groups"][2]
    assert row["status"] == "inconclusive" and gate.status(4, row["examples_to_decide"], 0.01) == "pass"


def test_groups_below_the_minimum_count_are_reported_not_gated():
    record = gate_rates("r", 1, 500, classes(*[(100, 0)] * 4, (100, 1)) +
                        [{"kind": "slice", "value": "(other slices)", "examples": 5000, "events": 0}], 0.01, "s")
    assert record["min_examples"] == 368 and record["gated"] == 1
    assert {g["status"] for g in record["groups"]} == {"not gated"}
    assert record["status"] == "inconclusive" and "about" in record["message"]
    assert gate_rates("r", 0, 0, [], 0.01, "s")["status"] == "inconclusive"


def test_controls_fail_at_most_at_the_stated_rate():
    """A candidate whose every one of 20 classes flips at the budget itself (the worst a control can be): Holm's
    step-down fails it in at most 2.5% of 2000 simulated runs; a 2.5% test per class would fail it far more."""
    rng = np.random.default_rng(0)
    failed = naive = 0
    for _ in range(2000):
        p = [gate.over_budget_p(int(f), 500, 0.01) for f in rng.binomial(500, 0.01, 20)]
        failed += min(gate.holm(p)) <= 0.025
        naive += min(p) <= 0.025
    assert failed / 2000 <= 0.025 and naive > 5 * failed
