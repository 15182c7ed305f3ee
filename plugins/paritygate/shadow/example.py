"""One example of a shadow run judged as the checks judge a batch: ``judge.parity.judge_outputs`` (the elementwise
policy with the cosine budget, the task metric), on a batch of one. The record it returns is what the combiners
(``shadow.combiners``) fold: small numbers per output, the top-1 classes, the detection counts, the inputs."""

import numpy as np

from paritygate.comparator.task import classification_outputs
from paritygate.judge.parity import judge_outputs

NONFINITE = ("reference_nan", "reference_inf", "candidate_nan", "candidate_inf")


def _batch(outputs):
    return {k: np.asarray(v)[None] for k, v in outputs.items()}


def judge_example(spec, precision, key, slice_value, feed, ref, cand):
    """The record of one example: ``ref`` by reference output name, ``cand`` by candidate output name."""
    outputs, task, failures = judge_outputs(spec, precision, _batch(ref), _batch(cand))
    rows = {o.output: {"elements": o.elements, "mismatches": o.mismatches, "passed": o.passed,
                       "max_abs": o.max_abs, **{k: getattr(o, k) for k in NONFINITE}} for o in outputs}
    record = {"key": key, "slice": slice_value, "precision": precision, "passed": not failures,
              "outputs": rows, "failures": failures[:3], "inputs": feed,
              "score": max((o.max_abs for o in outputs), default=0.0)}
    if task and task["metric"] == "classification":
        name = classification_outputs(spec, ref)[0]
        record["top1"] = (int(np.argmax(ref[name])), int(np.argmax(cand[spec.outputs.get(name, name)])))
    elif task and task["metric"] == "detection":
        record["detection"] = (task["reference_detections"], task["matched"])
    return record

