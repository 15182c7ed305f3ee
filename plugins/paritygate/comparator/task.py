"""Task metrics for reduced precision: classification agreement/accuracy, detection matching."""

import numpy as np

from paritygate.comparator.tolerance import (
    DEFAULTS,
    DETECTION_IOU,
    DETECTION_MIN_SCORE,
    TASK_RATIO,
    TASK_SOURCE,
    TF_TRT_BASE,
    tolerance_for,
)

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


MAX_FLIPS = 50  # flipped rows listed per output; top1_agreement counts them all

# Ties (issue 37, item 6): a row whose reference margin (top-1 minus top-2 score) is within what cannot order the
# two classes is unjudged by top-1 agreement, at every precision alike: neither an agreement nor a flip. What
# cannot order them, the largest of:
# - the reference's own resolution: the FP32 policy at the top score (TF-TRT's 1e-5 + 1e-5*|top|, TF_TRT_BASE),
#   what FP32 parity grants each score; the same rule at fp32, fp16 and int8 (a reference property);
# - the precision's resolution: two roundings of the scores in the float type the precision stores them in,
#   2 * u * |top| (float16 at fp16: u = 2^-11; int8 artifacts keep float32 tensors between their explicit Q/DQ
#   pairs, whose steps are the error the metric exists to judge, not a resolution);
# - the reference's own noise on that row where the check measured it: the caller's ``noise`` (K_REFERENCE times
#   the reference's spread over its configurations, paritygate.judge.reference_noise).
# Measured (issue 37): EfficientNetB0 with weights=None answers 0.001 for every class, margins 1e-8 to 1e-10; at
# fp16 and int8 those rows were counted as flips and failed the check, while fp32 called them ties.
TIE_TOLERANCE = DEFAULTS["fp32"]
RESOLUTION = {"fp32": np.float32, "fp16": np.float16, "int8": np.float32}
TIE_RULE = (f"reference top-2 margin <= max(fp32 policy at the top score ({TF_TRT_BASE}), 2 x the unit roundoff of "
            "the precision's float type x |top|, K x the reference's own spread on that row where measured)")


def tie_rows(ref_scores, precision=None, noise=None):
    """(a boolean per row: the reference cannot order its top two classes there, the reference margins): the
    rule above. ``noise``: the reference's own spread, K-scaled, broadcastable to ``ref_scores`` (None: not
    measured)."""
    scores = np.asarray(ref_scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[1] < 2:
        return np.zeros(len(scores), dtype=bool), np.full(len(scores), np.inf)
    top2 = np.sort(scores, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    limit = TIE_TOLERANCE.limit(top2[:, 1])
    if precision is not None:
        limit = np.maximum(limit, float(np.finfo(RESOLUTION.get(precision, np.float32)).eps) * np.abs(top2[:, 1]))  # 2u = eps
    if noise is not None:
        row = np.broadcast_to(np.asarray(noise, dtype=np.float64), scores.shape).max(axis=1)
        limit = np.maximum(limit, row)
    with np.errstate(invalid="ignore"):  # a NaN margin (a NaN score) is no tie: the non-finite rule judges it
        return margin <= limit, margin


def flipped_rows(ref_scores, cand_scores, judged=None):
    """One record per row whose top-1 class differs, named by ``row`` (its index among the rows judged): the
    reference's and the candidate's class, both sides' scores at those two classes ([reference's class, candidate's
    class]) and the reference's margin, ref[its class] - ref[the candidate's class]: how near a tie the flip was
    (reference [0.509, 0.487] vs candidate [0.489, 0.507]: margin 0.022). ``judged``: a boolean per row, the rows
    that are not ties (``tie_rows``); None: every row."""
    ref_scores, cand_scores = np.asarray(ref_scores), np.asarray(cand_scores)
    r, c = np.argmax(ref_scores, axis=-1), np.argmax(cand_scores, axis=-1)
    flips = []
    judged = np.ones(len(r), dtype=bool) if judged is None else judged
    for i in np.flatnonzero((r != c) & judged)[:MAX_FLIPS]:
        ref_pair = [float(ref_scores[i][r[i]]), float(ref_scores[i][c[i]])]
        flips.append({"row": int(i), "reference_class": int(r[i]), "candidate_class": int(c[i]),
                      "reference_margin": ref_pair[0] - ref_pair[1], "reference": ref_pair,
                      "candidate": [float(cand_scores[i][r[i]]), float(cand_scores[i][c[i]])]})
    return flips


def flips_text(flips, limit=5):
    """``rows [2, 7] flip (row 2: reference class 1 by margin 0.022 [0.509, 0.487] vs candidate [0.489, 0.507];
    ...)``: the one way both task checks name a flipped row."""
    shown = "; ".join(f"row {f['row']}: reference class {f['reference_class']} by margin {f['reference_margin']:.3g} "
                      f"[{f['reference'][0]:.3g}, {f['reference'][1]:.3g}] vs candidate class {f['candidate_class']} "
                      f"[{f['candidate'][0]:.3g}, {f['candidate'][1]:.3g}]" for f in flips[:limit])
    more = f"; ... {len(flips) - limit} more" if len(flips) > limit else ""
    return f"rows {[f['row'] for f in flips]} flip ({shown}{more})" if flips else "no row flips"


def summary(metric):
    """One line for a failed task metric, the same in matches_reference and property_parity."""
    if metric["metric"] == "classification":
        a, ratio = metric["top1_agreement"], metric["min_ratio"]
        a = 1.0 if a is None else a  # every row a tie: nothing disagreed
        accuracy = (f", accuracy {metric['candidate_accuracy']:.3f} vs the reference's "
                    f"{metric['reference_accuracy']:.3f}" if "candidate_accuracy" in metric else "")
        return (f"top-1 agreement {a:.3f} {'<' if a < ratio else '>='} {ratio} on {metric['output']!r}{accuracy}: "
                f"{flips_text(metric['flipped_rows'])}; source: {metric.get('source', 'stated in tolerance.py')}")
    return (f"{metric['matched']}/{metric['reference_detections']} reference detections matched (IoU >= "
            f"{metric['iou_min']}); missed {metric['missed'][:5]}")


def _classification_one(spec, name, ref, cand, labels, precision=None, noise=None):
    scores = cand[spec.outputs.get(name, name)]
    r, c = np.argmax(ref[name], axis=-1), np.argmax(scores, axis=-1)
    tied, margins = tie_rows(ref[name], precision, noise)
    judged = ~tied  # ties are neither agreements nor flips: the rows the agreement is over
    agreement = float(np.mean(r[judged] == c[judged])) if judged.any() else None
    result = {"metric": "classification", "output": name, "samples": int(r.size), "judged_rows": int(judged.sum()),
              "top1_agreement": agreement, "min_ratio": TASK_RATIO, "source": TASK_SOURCE,
              "flipped_rows": flipped_rows(ref[name], scores, judged)}
    if tied.any():
        result["ties"] = {"rows": [int(i) for i in np.flatnonzero(tied)[:MAX_FLIPS]], "count": int(tied.sum()),
                          "max_margin": float(np.max(margins[tied])), "rule": TIE_RULE}
    passed = agreement is None or agreement >= TASK_RATIO
    if labels is not None and judged.any():
        labels = np.asarray(labels)[judged]
        acc_ref, acc_cand = float(np.mean(r[judged] == labels)), float(np.mean(c[judged] == labels))
        result.update(reference_accuracy=acc_ref, candidate_accuracy=acc_cand)
        passed = passed and acc_cand >= TASK_RATIO * acc_ref
    result["passed"] = passed
    return result


def classification(spec, ref, cand, labels=None, precision=None, noise=None):
    """Top-1 agreement (and accuracy on labels) per judged output, over the rows that are not ties (``tie_rows``;
    ``noise``: output -> the reference's K-scaled spread, where the check measured it); one output gives its dict
    as it is, several give the first one's figures plus ``per_output`` (the check passes only when every output
    passes). An output whose every row is a tie passes here with ``top1_agreement`` None: it judged nothing, which
    the vacuity rule (paritygate.judge.vacuity) turns into ``inconclusive``."""
    noise = noise or {}
    results = [_classification_one(spec, name, ref, cand, labels, precision, noise.get(name))
               for name in classification_outputs(spec, ref)]
    if len(results) == 1:
        return results[0]
    worst = min(results, key=lambda r: (r["passed"], 1.0 if r["top1_agreement"] is None else r["top1_agreement"]))
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


def task_metrics(spec, precision, ref, cand, labels=None, noise=None):
    """The task check for ``spec.task`` (None for regression/generic: elementwise only); ``noise``: output -> the
    reference's own K-scaled spread where the check measured it (classification ties, ``tie_rows``)."""
    if spec.task == "classification":
        return classification(spec, ref, cand, labels, precision, noise)
    if spec.task == "detection":
        return detection(spec, precision, ref, cand)
    return None
