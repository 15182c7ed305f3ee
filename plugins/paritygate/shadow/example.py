"""One example of a shadow run judged as the checks judge a batch: ``judge.parity.judge_outputs`` (the elementwise
policy with the cosine budget, the task metric), on a batch of one. The task metric picks the outputs it judges
with the checks' own rule (``comparator.task.classification_outputs`` / ``detection_outputs``, on the batch, so with
the same errors as ``paritygate run``); the top-1 classes and the detection counts here are read off that metric's
result, never picked a second time. The record it returns is what the combiners (``shadow.stats``) fold: small
numbers per output, the top-1 classes, the detection counts per reference class, the inputs."""

import numpy as np

from paritygate.comparator.task import detection_outputs
from paritygate.judge.parity import judge_outputs
from paritygate.shadow.stats import NONFINITE


def _batch(outputs):
    return {k: np.asarray(v)[None] for k, v in outputs.items()}


def top1(task, ref):
    """(reference class, candidate class) of the one example the classification metric ``task`` judged: the first
    judged output's reference class; the candidate's class from the first judged output that flips (several
    judged outputs, e.g. logits and probabilities: a flip in any is a flip, as the metric fails on any)."""
    per_output = task.get("per_output") or [task]
    reference = int(np.argmax(ref[per_output[0]["output"]]))
    flipped = next((o["flipped_rows"][0] for o in per_output if o["flipped_rows"]), None)
    if flipped is None:
        return reference, reference
    return int(flipped["reference_class"]), int(flipped["candidate_class"])


def detections(spec, task, ref):
    """The detection metric's counts on one example, with [reference detections, missed] per reference class."""
    names = detection_outputs(spec, ref)
    scores, classes = np.asarray(ref[names["scores"]]), np.asarray(ref[names["classes"]])
    missed = {m["detection"] for m in task["missed"]}
    counts = {}
    for i in np.flatnonzero(scores >= task["min_score"]):
        row = counts.setdefault(int(classes[i]), [0, 0])
        row[0] += 1
        row[1] += int(int(i) in missed)
    return {"reference_detections": task["reference_detections"], "matched": task["matched"], "classes": counts}


def record_of(key, slice_value, precision, feed, rows, failures):
    """The record of one example from its per-output ``rows`` (name -> elements, mismatches, passed, max_abs and
    the NONFINITE counts) and its failure lines: what judge_example and the bundle screen (``shadow.screen``)
    both return."""
    return {"key": key, "slice": slice_value, "precision": precision, "passed": not failures, "outputs": rows,
            "failures": failures[:3], "inputs": feed, "score": max((r["max_abs"] for r in rows.values()), default=0.0)}


def judge_example(spec, precision, key, slice_value, feed, ref, cand):
    """The record of one example: ``ref`` by reference output name, ``cand`` by candidate output name."""
    batch_ref = _batch(ref)
    outputs, task, failures = judge_outputs(spec, precision, batch_ref, _batch(cand))
    rows = {o.output: {"elements": o.elements, "mismatches": o.mismatches, "passed": o.passed,
                       "max_abs": o.max_abs, **{k: getattr(o, k) for k in NONFINITE}} for o in outputs}
    record = record_of(key, slice_value, precision, feed, rows, failures)
    if task and task["metric"] == "classification":
        record["top1"] = top1(task, ref)
    elif task and task["metric"] == "detection":
        record["detection"] = detections(spec, task, ref)
    return record
