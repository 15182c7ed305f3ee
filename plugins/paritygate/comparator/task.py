"""Task metrics for reduced precision: classification agreement/accuracy, detection matching."""

import numpy as np

from paritygate.comparator.tolerance import DETECTION_IOU, DETECTION_MIN_SCORE, TASK_RATIO, TASK_SOURCE, tolerance_for

DETECTION_KEYS = ("boxes", "scores", "classes", "num_detections")


class TaskSpecError(ValueError):
    """The model's outputs do not fit its declared task."""


def classification_outputs(spec, outputs):
    """The class-score outputs the metric judges: ``task_output`` when set; else the only output; else every
    ``[batch, classes]`` output (rank 2, more than one column), e.g. both the logits and the probabilities of
    a classifier that exports the two (their argmax must agree with the reference's, each on its own)."""
    if spec.task_output is not None:
        if spec.task_output not in outputs:
            raise TaskSpecError(f"{spec.where('task_output')}: '{spec.task_output}' is not an output of the "
                                f"reference; its outputs are {sorted(outputs)}")
        return [spec.task_output]
    if len(outputs) == 1:
        return list(outputs)
    cands = [k for k, v in outputs.items() if np.ndim(v) == 2 and np.shape(v)[1] > 1]
    if not cands:
        raise TaskSpecError(f"{spec.where('task')}: classification needs a [batch, classes] output; none among "
                            f"{ {k: list(np.shape(v)) for k, v in sorted(outputs.items())} } (name the one to "
                            "judge with task_output = \"...\")")
    return sorted(cands)


def _classification_one(spec, name, ref, cand, labels):
    r, c = np.argmax(ref[name], axis=-1), np.argmax(cand[spec.outputs.get(name, name)], axis=-1)
    agreement = float(np.mean(r == c))
    result = {"metric": "classification", "output": name, "samples": int(r.size),
              "top1_agreement": agreement, "min_ratio": TASK_RATIO, "source": TASK_SOURCE,
              "disagreeing_elements": [int(i) for i in np.flatnonzero(r != c)][:50]}
    passed = agreement >= TASK_RATIO
    if labels is not None:
        acc_ref, acc_cand = float(np.mean(r == labels)), float(np.mean(c == labels))
        result.update(reference_accuracy=acc_ref, candidate_accuracy=acc_cand)
        passed = passed and acc_cand >= TASK_RATIO * acc_ref
    result["passed"] = passed
    return result


def classification(spec, ref, cand, labels=None):
    """Top-1 agreement (and accuracy on labels) per judged output; one output gives its dict as it is, several
    give the first one's figures plus ``per_output`` (the check passes only when every output passes)."""
    results = [_classification_one(spec, name, ref, cand, labels) for name in classification_outputs(spec, ref)]
    if len(results) == 1:
        return results[0]
    worst = min(results, key=lambda r: (r["passed"], r["top1_agreement"]))
    return {**worst, "output": [r["output"] for r in results], "per_output": results,
            "passed": all(r["passed"] for r in results)}


def detection_outputs(spec, outputs):
    found = {}
    for key in DETECTION_KEYS:
        names = [k for k in outputs if k.endswith(key)]
        if key != "num_detections":
            names = [k for k in names if "num" not in k]
        if len(names) != 1:
            raise TaskSpecError(f"{spec.where('task')}: detection needs exactly one output named like "
                                f"'{key}' (e.g. detection_{key}); outputs are {sorted(outputs)}")
        found[key] = names[0]
    return found


def _iou(a, b):
    y1, x1 = np.maximum(a[0], b[0]), np.maximum(a[1], b[1])
    y2, x2 = np.minimum(a[2], b[2]), np.minimum(a[3], b[3])
    inter = max(0.0, y2 - y1) * max(0.0, x2 - x1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def detection(spec, precision, ref, cand):
    """Every reference detection scoring >= DETECTION_MIN_SCORE must be matched by a candidate detection of
    the same class at IoU >= DETECTION_IOU whose score is within the precision's tolerance."""
    keys = detection_outputs(spec, ref)
    ck = {k: spec.outputs.get(v, v) for k, v in keys.items()}
    tol = tolerance_for(spec, precision, keys["scores"])
    missed = []
    total = 0
    for b in range(len(ref[keys["scores"]])):
        rs, cs = ref[keys["scores"]][b], cand[ck["scores"]][b]
        for i in np.flatnonzero(rs >= DETECTION_MIN_SCORE):
            total += 1
            ok = any(cand[ck["classes"]][b][j] == ref[keys["classes"]][b][i]
                     and _iou(ref[keys["boxes"]][b][i], cand[ck["boxes"]][b][j]) >= DETECTION_IOU
                     and abs(cs[j] - rs[i]) <= tol.limit(rs[i], rs.dtype)
                     for j in range(len(cs)))
            if not ok:
                missed.append({"batch_element": b, "detection": int(i), "score": float(rs[i])})
    return {"metric": "detection", "reference_detections": total, "matched": total - len(missed),
            "missed": missed[:50], "iou_min": DETECTION_IOU, "score_tolerance": tol.as_dict(),
            "min_score": DETECTION_MIN_SCORE, "passed": not missed}


def task_metrics(spec, precision, ref, cand, labels=None):
    """The task check for ``spec.task`` (None for regression/generic: elementwise only)."""
    if spec.task == "classification":
        return classification(spec, ref, cand, labels)
    if spec.task == "detection":
        return detection(spec, precision, ref, cand)
    return None
