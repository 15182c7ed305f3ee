"""paritygate.comparator.task: classification agreement and accuracy ratio (MLPerf 99%), detection matching
(IoU, class, score tolerance), and which outputs a task reads."""

import json
from pathlib import Path

import numpy as np
import pytest

from paritygate.comparator.task import (
    TIE_RULE,
    TaskSpecError,
    classification,
    classification_outputs,
    detection,
    flips_text,
    summary,
    task_metrics,
    tie_rows,
)
from paritygate.comparator.tolerance import DETECTION_IOU, TASK_RATIO, TASK_SOURCE
from tests.conftest import toy_spec, write_config


def one_hot(classes, n=5):
    return np.eye(n, dtype=np.float32)[classes]


# -- classification -----------------------------------------------------------------------------------
@pytest.mark.parametrize("disagreeing, passed", [(0, True), (1, True), (2, False)])
def test_top1_agreement_at_the_mlperf_ratio(disagreeing, passed):
    classes = np.arange(100) % 5
    cand = classes.copy()
    cand[:disagreeing] = (cand[:disagreeing] + 1) % 5
    r = classification(toy_spec(task="classification"), {"probs": one_hot(classes)}, {"probs": one_hot(cand)})
    assert r["top1_agreement"] == (100 - disagreeing) / 100 and r["passed"] is passed
    assert [f["row"] for f in r["flipped_rows"]] == list(range(disagreeing))
    assert (r["samples"], r["min_ratio"], r["source"], r["output"]) == (100, TASK_RATIO, TASK_SOURCE, "probs")


def test_accuracy_ratio_against_labels():
    labels = np.arange(100) % 5
    ref = labels.copy()
    ref[:50] = (ref[:50] + 1) % 5  # reference accuracy 0.5
    cand = ref.copy()
    cand[50] = (cand[50] + 1) % 5  # agreement 0.99, accuracy 0.49 < 0.99 * 0.5
    r = classification(toy_spec(task="classification"), {"probs": one_hot(ref)}, {"probs": one_hot(cand)}, labels)
    assert (r["reference_accuracy"], r["candidate_accuracy"], r["top1_agreement"]) == (0.5, 0.49, 0.99)
    assert r["passed"] is False
    cand = ref.copy()
    cand[0] = labels[0]  # a disagreement that is right: accuracy 0.51 >= 0.495
    r = classification(toy_spec(task="classification"), {"probs": one_hot(ref)}, {"probs": one_hot(cand)}, labels)
    assert r["candidate_accuracy"] == 0.51 and r["passed"] is True


def test_a_flipped_row_carries_the_reference_margin_in_the_details_and_the_text():
    """Issue 30's near tie: reference [0.487, 0.509] vs int8 [0.507, 0.489] is a flip by a reference margin of
    0.022; the summary both task checks print names it as a row with that margin."""
    ref = np.array([[0.9, 0.1], [0.487, 0.509], [0.2, 0.8]], np.float32)
    cand = np.array([[0.9, 0.1], [0.507, 0.489], [0.2, 0.8]], np.float32)
    r = classification(toy_spec(task="classification"), {"probs": ref}, {"probs": cand})
    (flip,) = r["flipped_rows"]
    assert (flip["row"], flip["reference_class"], flip["candidate_class"]) == (1, 1, 0)
    assert flip["reference_margin"] == pytest.approx(0.022, abs=1e-6)
    assert flip["reference"] == pytest.approx([0.509, 0.487]) and flip["candidate"] == pytest.approx([0.489, 0.507])
    text = summary(r)
    assert text.startswith("top-1 agreement 0.667 < 0.99 on 'probs': rows [1] flip (row 1: reference class 1 by "
                           "margin 0.022 [0.509, 0.487] vs candidate class 0 [0.489, 0.507])")
    assert "rows [1] flip" in flips_text(r["flipped_rows"]) and flips_text([]) == "no row flips"


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_ties_are_unjudged_at_every_precision_never_flips(precision):
    """Issue 37: EfficientNetB0 with weights=None answers 0.001 for every class, its margins 1e-8 to 1e-10; fp32
    called those rows ties, fp16 and int8 counted them as flips and failed. A tie is neither an agreement nor a flip
    at any precision: the metric judges nothing there (and vacuity makes the check inconclusive)."""
    rng = np.random.default_rng(0)
    ref = (0.001 + rng.uniform(-1e-8, 1e-8, (16, 1000))).astype(np.float64)
    cand = (0.001 + rng.uniform(-1e-6, 1e-6, (16, 1000))).astype(np.float64)  # other argmax on every row
    assert np.all(np.argmax(ref, 1) != np.argmax(cand, 1))
    r = task_metrics(toy_spec(task="classification"), precision, {"probs": ref}, {"probs": cand})
    assert r["passed"] and r["top1_agreement"] is None and r["flipped_rows"] == [] and r["judged_rows"] == 0
    assert r["ties"]["count"] == 16 and r["ties"]["max_margin"] < 2e-8 and r["ties"]["rule"] == TIE_RULE


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_a_decided_row_that_flips_still_fails_beside_ties(precision):
    """The ties leave the agreement; the decided rows keep it: one real flip among 3 decided rows fails."""
    ref = np.array([[0.5, 0.5 + 1e-9, 0.0], [0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    cand = np.array([[0.5 + 1e-3, 0.5, 0.0], [0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    r = task_metrics(toy_spec(task="classification"), precision, {"probs": ref}, {"probs": cand})
    assert not r["passed"] and r["top1_agreement"] == pytest.approx(2 / 3) and r["judged_rows"] == 3
    assert [f["row"] for f in r["flipped_rows"]] == [1] and r["ties"]["rows"] == [0]


def test_the_tie_margin_grows_with_the_precisions_resolution_and_the_measured_noise():
    """A margin of 5e-4 at a top score of 0.9: decided at fp32 (tie limit 1e-5 + 0.9e-5) and int8 (float32 tensors),
    a tie at fp16 (two float16 roundings: 2^-10 x 0.9 = 8.8e-4); a measured reference noise of 1e-3 on the row
    makes it a tie at every precision."""
    scores = np.array([[0.9, 0.9 - 5e-4, 0.0]])
    assert [bool(tie_rows(scores, p)[0][0]) for p in ("fp32", "fp16", "int8")] == [False, True, False]
    assert bool(tie_rows(scores, "fp32", noise=np.full((1, 3), 1e-3))[0][0])
    assert tie_rows(scores, None)[1][0] == pytest.approx(5e-4)
    assert not tie_rows(np.array([[np.nan, 0.5]]), "fp16")[0][0]  # a NaN score is judged by the non-finite rule


def test_classification_reads_the_mapped_candidate_output():
    spec = toy_spec(task="classification", outputs={"probs": "Identity"})
    r = classification(spec, {"probs": one_hot([1, 2])}, {"Identity": one_hot([1, 3])})
    assert r["top1_agreement"] == 0.5 and not r["passed"]


def test_classification_judges_every_class_score_output_without_task_output():
    spec = toy_spec(task="classification")
    assert classification_outputs(spec, {"logits": np.zeros((2, 3))}) == ["logits"]
    assert classification_outputs(spec, {"probs": np.zeros((2, 3)), "embedding_norm": np.zeros((2, 1))}) == ["probs"]
    assert classification_outputs(spec, {"probs": np.zeros((2, 3)), "logits": np.zeros((2, 3))}) == ["logits", "probs"]
    with pytest.raises(TaskSpecError, match=r"key 'task'.*none among \{'a': \[2, 1\], 'b': \[2\]\}.*task_output"):
        classification_outputs(spec, {"a": np.zeros((2, 1)), "b": np.zeros(2)})


def test_task_output_selects_one_output_and_must_exist():
    spec = toy_spec(task="classification", task_output="probs")
    assert classification_outputs(spec, {"probs": np.zeros((2, 3)), "logits": np.zeros((2, 3))}) == ["probs"]
    with pytest.raises(TaskSpecError, match=r"key 'task_output': 'probs' is not an output of the reference; "
                                            r"its outputs are \['scores'\]"):
        classification_outputs(spec, {"scores": np.zeros((2, 3))})


def test_logits_and_probabilities_are_each_judged():
    spec = toy_spec(task="classification")
    logits = np.log(one_hot(np.arange(100) % 5) + 0.01)
    probs = one_hot(np.arange(100) % 5)
    ref = {"logits": logits, "probs": probs}
    r = classification(spec, ref, dict(ref))
    assert r["passed"] and r["output"] == ["logits", "probs"] and [o["output"] for o in r["per_output"]] == r["output"]
    wrong = one_hot((np.arange(100) + 1) % 5)  # the probabilities disagree everywhere, the logits nowhere
    r = classification(spec, ref, {"logits": logits, "probs": wrong})
    assert not r["passed"] and r["top1_agreement"] == 0.0 and r["per_output"][0]["passed"]
    only = classification(toy_spec(task="classification", task_output="logits"), ref, {"logits": logits, "probs": wrong})
    assert only["passed"] and only["output"] == "logits"


# -- detection ---------------------------------------------------------------------------------------
BOX = [0.1, 0.1, 0.5, 0.5]  # (y1, x1, y2, x2), area 0.16


def detections(boxes, scores, classes):
    """A batch of two images with the same detections each."""
    b = np.array([boxes, boxes], np.float32)
    return {"detection_boxes": b, "detection_scores": np.array([scores, scores], np.float32),
            "detection_classes": np.array([classes, classes], np.float32),
            "num_detections": np.array([len(scores)] * 2, np.float32)}


def run_detection(ref, cand, **spec_fields):
    return detection(toy_spec(task="detection", precisions=("fp16",), **spec_fields), "fp16", ref, cand)


def test_identical_detections_match():
    ref = detections([BOX, [0.6, 0.6, 0.9, 0.9]], [0.9, 0.3], [1, 2])
    r = run_detection(ref, ref)
    assert r["passed"] and r["reference_detections"] == 2 and r["matched"] == 2  # 0.3 is below min_score
    assert r["iou_min"] == DETECTION_IOU and r["score_tolerance"]["atol"] == 0.01


def test_candidate_order_does_not_matter():
    ref = detections([BOX, [0.6, 0.6, 0.9, 0.9]], [0.9, 0.8], [1, 2])
    cand = detections([[0.6, 0.6, 0.9, 0.9], BOX], [0.8, 0.9], [2, 1])
    assert run_detection(ref, cand)["passed"]


def test_iou_at_exactly_half_matches():
    cand = detections([[0.1, 0.1, 0.5, 0.3]], [0.9], [1])  # half of the reference box: IoU 0.08 / 0.16
    assert run_detection(detections([BOX], [0.9], [1]), cand)["passed"]


@pytest.mark.parametrize("what, cand", [
    ("shifted box (IoU < 0.5)", detections([[0.1, 0.3, 0.5, 0.7]], [0.9], [1])),
    ("other class", detections([BOX], [0.9], [2])),
    ("score beyond tolerance", detections([BOX], [0.85], [1])),
])
def test_a_missed_detection_is_reported_with_its_batch_element(what, cand):
    ref = detections([BOX], [0.9], [1])
    r = run_detection(ref, cand)
    assert not r["passed"] and r["matched"] == 0 and r["reference_detections"] == 2
    assert r["missed"] == [{"batch_element": 0, "detection": 0, "score": pytest.approx(0.9)},
                           {"batch_element": 1, "detection": 0, "score": pytest.approx(0.9)}]


def test_only_the_broken_batch_element_is_reported():
    ref = detections([BOX], [0.9], [1])
    cand = {k: v.copy() for k, v in ref.items()}
    cand["detection_classes"][1, 0] = 3
    r = run_detection(ref, cand)
    assert [m["batch_element"] for m in r["missed"]] == [1] and r["matched"] == 1


def test_score_within_tolerance_matches():
    ref = detections([BOX], [0.9], [1])
    cand = detections([BOX], [0.905], [1])  # |0.005| <= 0.01 + 0.01 * 0.9
    assert run_detection(ref, cand)["passed"]


def test_detection_through_mapped_output_names():
    ref = detections([BOX], [0.9], [1])
    cand = {f"out_{k}": v for k, v in ref.items()}
    mapping = {k: f"out_{k}" for k in ref}
    assert run_detection(ref, cand, outputs=mapping)["passed"]


def test_detection_needs_each_output_once():
    ref = detections([BOX], [0.9], [1])
    del ref["detection_scores"]
    with pytest.raises(TaskSpecError, match=r"key 'task'.*'scores'"):
        run_detection(ref, ref)


# -- dispatch ----------------------------------------------------------------------------------------
def test_task_metrics_dispatch():
    probs = {"probs": one_hot([1, 2])}
    assert task_metrics(toy_spec(task="classification"), "fp16", probs, probs)["metric"] == "classification"
    ref = detections([BOX], [0.9], [1])
    assert task_metrics(toy_spec(task="detection"), "fp16", ref, ref)["metric"] == "detection"
    assert task_metrics(toy_spec(task="regression"), "fp16", probs, probs) is None
    assert task_metrics(toy_spec(), "fp16", probs, probs) is None


# -- a classifier exporting logits and probabilities, end to end ---------------------------------------------
def _two_output_classifier(folder):
    """A real SavedModel and its ONNX, made here: logits = x W + b, probs = softmax(logits), x float32 [N, 6]."""
    tf = pytest.importorskip("tensorflow")
    onnx = pytest.importorskip("onnx")
    rng = np.random.default_rng(7)
    w, b = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    module = tf.Module()
    module.w, module.b = tf.Variable(w), tf.Variable(b)

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
    def serve(x):
        logits = tf.matmul(x, module.w) + module.b
        return {"logits": logits, "probs": tf.nn.softmax(logits)}

    module.serve = serve
    tf.saved_model.save(module, str(folder / "classifier"), signatures={"serving_default": serve})
    h, T = onnx.helper, onnx.TensorProto
    graph = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["xw"]), h.make_node("Add", ["xw", "b"], ["logits"]),
         h.make_node("Softmax", ["logits"], ["probs"], axis=-1)], "classifier",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 6])],
        [h.make_tensor_value_info(n, T.FLOAT, ["N", 4]) for n in ("logits", "probs")],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "classifier.onnx"))


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.onnx
def test_a_classifier_with_logits_and_probabilities_passes(pytester, parity_cache):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxconverter_common")
    pytest.importorskip("hypothesis")
    _two_output_classifier(pytester.path)
    config = write_config(pytester.path, {"models": [{
        "name": "two_heads", "reference": "classifier", "onnx": "classifier.onnx", "precisions": ["fp32", "fp16"],
        "max_batch": 4, "task": "classification",
        "inputs": {"x": {"shape": [-1, 6], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    conformance = Path(__file__).resolve().parents[2] / "conformance"
    result = pytester.runpytest(str(conformance / "test_parity.py"), str(conformance / "test_properties.py"),
                                "-k", "matches_reference or property_parity", f"--parity-config={config}",
                                f"--parity-report={pytester.path / 'report'}", "-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    checks = json.loads((pytester.path / "report" / "parity-report.json").read_text())["checks"]
    for check in (c for c in checks if c["check"] == "matches_reference"):
        task = check["details"]["task"]
        assert task["output"] == ["logits", "probs"] and task["passed"], task
        assert [o["top1_agreement"] for o in task["per_output"]] == [1.0, 1.0]
