"""paritygate.judge.vacuity: a constant reference, argmax ties over one class and detection-free inputs are
uninformative; varied outputs are informative; an output is unjudged only when no criterion that ran on it
(elementwise, cosine, task metric) could have failed. Pure numpy, the thresholds' edges."""

import numpy as np

from paritygate.judge import vacuity
from paritygate.verdict import Inconclusive
from tests.conftest import toy_spec


def policy(atol=1e-5, rtol=1e-5):
    return lambda name, ref: atol + rtol * np.abs(ref)


def test_a_constant_output_is_uninformative_and_says_what_would_help():
    spec = toy_spec(task="regression")
    outs = [{"y": np.full((4, 3), 0.1, np.float32)}, {"y": np.full((2, 3), 0.1, np.float32)}]
    info = vacuity.informativeness(spec, outs, policy())
    assert not info["informative"] and info["inputs"] == 6
    assert "output 'y' is constant over the 6 inputs" in info["reasons"][0]
    text = vacuity.message(spec, "property_parity", info)
    assert "inputs/toy.npz" in text and "allow_uninformative = true" in text


def test_variation_within_the_checks_limit_is_still_constant():
    spec = toy_spec(task="regression")
    y = np.array([[1.0], [1.1], [0.9]], np.float32)
    assert not vacuity.informativeness(spec, [{"y": y}], policy(atol=0.3))["informative"]  # int8-wide limit
    assert vacuity.informativeness(spec, [{"y": y}], policy())["informative"]


def test_classification_ties_and_a_single_decided_class():
    """Probabilities within an int8-wide limit, one decided class: neither criterion could fail, so unjudged."""
    spec = toy_spec(task="classification")
    probs = np.array([[0.5, 0.5], [0.5, 0.5], [0.9, 0.1], [0.8, 0.2]], np.float32)
    info = vacuity.informativeness(spec, [{"probs": probs}], policy(0.3, 0.1), task_outputs=[{"probs": probs}])
    assert info["classification"]["tie_share"] == 0.5 and info["classification"]["distinct_argmax"] == [0]
    assert any("1 class(es)" in r and "output 'probs' is constant" in r for r in info["reasons"])
    probs[3] = [0.2, 0.8]
    info = vacuity.informativeness(spec, [{"probs": probs}], policy(0.3, 0.1), task_outputs=[{"probs": probs}])
    assert info["informative"] and info["outputs"]["probs"]["criteria"]["classification top-1 agreement"]


def test_the_task_metric_counts_only_where_it_ran():
    spec = toy_spec(task="classification")
    probs = np.array([[0.6, 0.4], [0.4, 0.6]], np.float32)
    assert not vacuity.informativeness(spec, [{"probs": probs}], policy(0.3, 0.1))["informative"]  # no task metric


def _int8_classifier_outputs(rows=32, seed=0):
    """Issue 30's int8 classifier: logits and their softmax over 2 classes on 32 rows. The logits carry a per-row
    offset (softmax ignores it), so they vary widely; the probabilities' spread is 0.32, within int8's
    atol 0.3 + rtol 0.1 around their midpoint; top-1 is decided on every row, both classes occur."""
    rng = np.random.default_rng(seed)
    gap = rng.uniform(0.1, 0.66, rows) * np.where(np.arange(rows) % 2, 1, -1)  # logit difference, both signs
    offset = rng.uniform(-2, 2, rows)
    logits = np.stack([offset + gap / 2, offset - gap / 2], axis=1).astype(np.float32)
    probs = (np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)).astype(np.float32)
    return {"logits": logits, "probs": probs}


def _int8_policy(spec):
    from paritygate.comparator.tolerance import tolerance_for

    return (lambda name, ref: tolerance_for(spec, "int8", name).limit(ref)), (lambda name: tolerance_for(spec, "int8", name))


def test_int8_classifier_with_probabilities_inside_the_tolerance_is_judged():
    """Issue 30: the probabilities alone could not fail elementwise (nor the cosine, which int8 does not apply to
    outputs of rms below 3.9), but the top-1 agreement that ran on them could: judged, with the reasons recorded."""
    spec = toy_spec(task="classification", precisions=("fp32", "int8"))
    outs = _int8_classifier_outputs()
    assert 0.3 < np.ptp(outs["probs"][:, 0]) <= 0.32
    limit, tolerance = _int8_policy(spec)
    judged = [outs]  # matches_reference: the task metric ran on the very rows the elementwise policy judged
    info = vacuity.informativeness(spec, judged, limit, tolerance, task_outputs=judged)
    assert info["informative"] and info["reasons"] == [] and "unjudged_outputs" not in info
    assert info["outputs"]["probs"]["criteria"] == {"elementwise": False, "cosine": False,
                                                   "classification top-1 agreement": True}
    assert info["outputs"]["logits"]["criteria"]["elementwise"] and info["outputs"]["logits"]["judged"]
    assert vacuity.verdict(spec, "matches_reference", info) is None


def test_int8_classifier_verdict_through_the_comparator():
    """The same rows through judge_outputs (elementwise + cosine + task metric) at int8: a candidate off by int8
    rounding passes, one answering a constant fails the task metric: the inputs could tell them apart."""
    from paritygate.judge.parity import judge_outputs

    spec = toy_spec(task="classification", precisions=("fp32", "int8"))
    ref = _int8_classifier_outputs()
    close = {k: v + np.float32(0.004) * np.sign(v) for k, v in ref.items()}
    _, task, failures = judge_outputs(spec, "int8", ref, close)
    assert failures == [] and task["passed"] and task["top1_agreement"] == 1.0
    constant = {"logits": ref["logits"], "probs": np.broadcast_to(ref["probs"].mean(axis=0), ref["probs"].shape)}
    _, task, failures = judge_outputs(spec, "int8", ref, constant)
    assert not task["passed"] and any("task metric failed" in f for f in failures)
    assert all("output 'probs'" not in f for f in failures)  # elementwise alone passed the constant


def test_an_unjudged_output_beside_judged_ones_is_recorded_not_inconclusive():
    spec = toy_spec(task="regression")
    outs = {"y": np.linspace(-1, 1, 8, dtype=np.float32).reshape(8, 1), "flag": np.ones((8, 1), np.float32)}
    info = vacuity.informativeness(spec, [outs], policy())
    assert info["informative"] and "output 'flag' is constant" in info["unjudged_outputs"]["flag"]
    assert info["outputs"]["flag"]["judged"] is False and info["outputs"]["y"]["judged"] is True


def test_the_output_the_task_names_unjudged_is_inconclusive_whatever_the_others():
    spec = toy_spec(task="classification", task_output="probs", precisions=("fp32", "int8"))
    outs = _int8_classifier_outputs()
    outs["probs"] = np.tile(np.float32([[0.6, 0.4]]), (32, 1))  # one class everywhere, constant
    limit, tolerance = _int8_policy(spec)
    judged = [outs]  # matches_reference: the task metric ran on the very rows the elementwise policy judged
    info = vacuity.informativeness(spec, judged, limit, tolerance, task_outputs=judged)
    assert outs["logits"].std() > 1 and info["outputs"]["logits"]["judged"]
    assert not info["informative"] and "output 'probs' is constant" in info["reasons"][0]
    assert isinstance(vacuity.verdict(spec, "matches_reference", info), Inconclusive)


def test_a_cosine_budget_that_applies_can_judge_an_output():
    """int8's rtol 0.1 lets the midpoint (110, 110) stay within every element of (100, 120) and (120, 100), but its
    cosine with them, 0.9959, is below the budget 0.997, which applies (rms 110 > 3.9)."""
    from paritygate.comparator.tolerance import DEFAULTS

    spec = toy_spec(task="regression")
    y = np.array([[100.0, 120.0], [120.0, 100.0]], np.float32)
    int8 = DEFAULTS["int8"]
    info = vacuity.informativeness(spec, [{"y": y}], lambda n, r: int8.limit(r), lambda n: int8)
    assert info["outputs"]["y"]["criteria"] == {"elementwise": False, "cosine": True} and info["informative"]


def test_detection_needs_a_share_of_inputs_with_a_detection():
    spec = toy_spec(task="detection")
    n = 20
    rng = np.random.default_rng(0)
    outs = {"boxes": rng.random((n, 2, 4)), "classes": rng.integers(0, 3, (n, 2)).astype(np.float32),
            "scores": np.zeros((n, 2), np.float32), "num_detections": rng.random(n)}
    info = vacuity.informativeness(spec, [outs], policy(), task_outputs=[outs])
    # the scores (what the task names) never move and no input holds a detection: inconclusive, though the
    # boxes vary
    assert info["detection"]["share_with_detection"] == 0.0 and not info["informative"]
    assert info["outputs"]["boxes"]["judged"] and "detection: 0.0%" in info["reasons"][0]
    outs["scores"][1:5, 1] = 0.6
    info = vacuity.informativeness(spec, [outs], policy(), task_outputs=[outs])
    assert info["detection"]["share_with_detection"] == 0.2 and info["informative"], info["reasons"]


def test_a_limit_at_or_above_the_outputs_magnitude_is_named():
    """Issue 37: a batch bound of 1.89 on a softmax (values up to 1) lets a candidate ignoring its inputs pass; the
    reason names that limit. The limit vacuity judges is the one the check applied (``limits``), floors included."""
    spec = toy_spec(task="regression")
    probs = np.array([[0.99, 0.01], [0.02, 0.98], [0.5, 0.5]], np.float32)
    applied = [{"probs": np.full(probs.shape, 1.89, np.float32)}]
    info = vacuity.informativeness(spec, [{"probs": probs}], policy(), limits=applied)
    assert not info["informative"] and info["outputs"]["probs"]["max_limit"] == np.float32(1.89)
    assert "the check's limit (up to 1.89) is at or above the output's own magnitude (values up to 0.99" in info["reasons"][0]
    assert vacuity.informativeness(spec, [{"probs": probs}], policy())["informative"]  # under the policy alone: judged
