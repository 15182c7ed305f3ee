"""paritygate.judge.vacuity: a constant reference, argmax ties over one class and detection-free inputs are
uninformative; varied outputs are informative. Pure numpy, the thresholds' edges."""

import numpy as np

from paritygate.judge import vacuity
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
    spec = toy_spec(task="classification")
    probs = np.array([[0.5, 0.5], [0.5, 0.5], [0.9, 0.1], [0.8, 0.2]], np.float32)
    info = vacuity.informativeness(spec, [{"probs": probs}], policy())
    assert info["classification"]["tie_share"] == 0.5 and info["classification"]["distinct_argmax"] == [0]
    assert any("1 class(es)" in r for r in info["reasons"])
    probs[3] = [0.2, 0.8]
    assert vacuity.informativeness(spec, [{"probs": probs}], policy())["informative"]


def test_detection_needs_a_share_of_inputs_with_a_detection():
    spec = toy_spec(task="detection")
    n = 20
    rng = np.random.default_rng(0)
    outs = {"boxes": rng.random((n, 2, 4)), "classes": rng.integers(0, 3, (n, 2)).astype(np.float32),
            "scores": np.zeros((n, 2), np.float32), "num_detections": rng.random(n)}
    outs["scores"][0, 0] = 0.9  # 1 in 20 inputs: 5% < 10%
    info = vacuity.informativeness(spec, [outs], policy())
    assert info["detection"]["share_with_detection"] == 0.05 and not info["informative"]
    outs["scores"][1:4, 1] = 0.6
    info = vacuity.informativeness(spec, [outs], policy())
    assert info["detection"]["share_with_detection"] == 0.2 and info["informative"], info["reasons"]
