"""Vacuity guard: how much information a check's inputs drew out of the reference.

A check passes honestly only on inputs that could have shown a failure. For the reference outputs a check
saw (all its examples, stacked along the batch axis) this asks, per output, whether each criterion that ran on
that output could have failed a *constant* candidate (each element fixed at the midpoint of the reference's
range over the inputs, a candidate ignoring its inputs):

    elementwise   the check's own per-element limit: the constant candidate leaves it somewhere
    cosine        the policy's cosine budget, where it applies (reference rms above its floor): the constant
                  candidate's cosine with the stacked reference falls below it
    task metric   classification: the decided inputs (no argmax tie) show 2+ classes, so a candidate answering
                  one class always would disagree; detection: at least MIN_DETECTION_SHARE of the inputs hold a
                  detection scoring >= DETECTION_MIN_SCORE (boxes, scores and classes are what it matches)

An output is *unjudged* only when no criterion that ran on it could have failed (``outputs[name]["criteria"]``
says which could). The check is uninformative (``reasons`` non-empty) only when every output is unjudged, or when
an unjudged output is the one the task names (``task_output``; detection: the scores). Otherwise an unjudged
output is listed in ``unjudged_outputs`` with its reason, and the check stands on what judged the others.

Thresholds and their reasoning:
- constant output: a candidate ignoring its inputs would pass, so the check cannot tell it from the model.
- classification: an input is a tie when its top two scores differ by no more than the fp32 tolerance at the
  top score (TF-TRT's 1e-5 + 1e-5*|top|), or the precision's resolution there (``comparator.task.tie_rows``, the
  rule top-1 agreement itself applies: a tie is neither an agreement nor a flip at any precision): the
  reference cannot order them, so top-1 agreement there is decided by rounding. Fewer than 2 distinct classes
  among the decided inputs means a candidate answering that one class always agrees: the inputs cannot show a
  wrong class.
- detection: MIN_DETECTION_SHARE below.
"""

import numpy as np

from paritygate.comparator.compare import cosine_similarity
from paritygate.comparator.task import TIE_RULE, TaskSpecError, classification_outputs, detection_outputs, tie_rows
from paritygate.comparator.tolerance import DETECTION_MIN_SCORE
from paritygate.verdict import inconclusive

# Detection: at least 10% of the inputs must hold a detection. Below that, 9 comparisons in 10 are of empty
# outputs (zeros in every slot), which any candidate that never detects also produces; the bundled ssd's own
# input sets have a detection in every scene, so a check drawing on them reaches far more (measured ~0.5).
MIN_DETECTION_SHARE = 0.1

HELP = ("inputs that move the reference would help: the model's own data (goldens inputs/<model>.npz, the held-out "
        "set inputs/<model>_heldout.npz, the calibration set), or a wider declared input range; if the model is "
        "meant to behave like this, set allow_uninformative = true for it")


def stack_outputs(outputs_list):
    """Reference outputs of every example (dicts name -> batch-first array) stacked per output. Outputs whose
    shape follows a dynamic input's (a fully convolutional model's maps) stack only with rows of their own
    shape: the shape that most rows have is taken, whose elements line up across inputs."""
    names = outputs_list[0].keys() if outputs_list else ()
    stacked = {}
    for k in names:
        rows = [np.asarray(o[k]).reshape(-1, *np.shape(o[k])[1:]) for o in outputs_list]
        by_shape = {}
        for r in rows:
            by_shape.setdefault(r.shape[1:], []).append(r)
        stacked[k] = np.concatenate(max(by_shape.values(), key=lambda rs: sum(len(r) for r in rs)))
    return stacked


def informativeness(spec, outputs_list, limit, tolerance=None, task_outputs=None, precision=None, limits=None):
    """Statistics and reasons for the stacked reference outputs. ``limit(name, ref)`` gives the check's per-element
    limit (broadcastable to ``ref``) within which a candidate passes; ``tolerance(name)``: the policy's Tolerance,
    whose cosine budget the check enforces (None: no cosine criterion, as in within-candidate checks);
    ``task_outputs``: the reference outputs the task metric judged (a list like ``outputs_list``; None: it did not
    run in this check); ``precision``: the check's, whose resolution widens the tie rule (None: fp32's);
    ``limits``: the per-element limits the check applied, parallel to ``outputs_list`` (``Ledger.applied_limits``:
    its floors included), used instead of ``limit``."""
    stacked = stack_outputs(outputs_list)
    applied = stack_outputs(limits) if limits else None
    rows = len(next(iter(stacked.values()))) if stacked else 0
    info = {"inputs": rows, "outputs": {}, "reasons": []}
    task = _task_criteria(spec, stacked, info, precision)  # the task statistics of the check's inputs, always reported
    if task_outputs is None:
        task = {}  # the task metric did not run in this check: it judged nothing
    elif task_outputs is not outputs_list:  # it ran on rows of its own (property_parity's in-distribution rows)
        own = stack_outputs(task_outputs)
        info["task_metric_rows"] = scratch = {"inputs": len(next(iter(own.values()), []))}
        task = _task_criteria(spec, own, scratch, precision)
    why = {}
    for name, ref in stacked.items():
        tol = tolerance(name) if tolerance else None
        info["outputs"][name] = stats = _output_stats(ref, applied[name] if applied else limit(name, ref), tol)
        criteria = {"elementwise": not stats.pop("constant_candidate_passes")}
        if tol is not None and tol.cosine_min is not None:
            criteria["cosine"] = stats.pop("cosine_can_fail")
        if name in task:
            criteria[task[name][0]] = task[name][1]
        stats.update(criteria=criteria, judged=any(criteria.values()))
        if not stats["judged"]:
            why[name] = _unjudged_reason(name, rows, stats, task.get(name))
    named = task_named(spec, stacked)
    if stacked and (len(why) == len(stacked) or any(n in why for n in named)):
        info["reasons"] = list(why.values())
    elif why:
        info["unjudged_outputs"] = why  # recorded: other outputs were judged, and the task's own output too
    info["informative"] = not info["reasons"]
    return info


def task_named(spec, stacked):
    """The output(s) the task names: ``task_output`` when set; detection: the scores output. An unjudged one of
    these makes the check inconclusive however the other outputs fare."""
    if spec.task_output is not None:
        return [spec.task_output]
    if spec.task == "detection":
        try:
            return [detection_outputs(spec, stacked)["scores"]]
        except TaskSpecError:
            return []
    return []


def _unjudged_reason(name, rows, stats, task):
    if 0 < stats["max_abs"] <= stats["max_limit"]:  # e.g. a batch bound of 1.89 on a softmax (issue 37)
        text = (f"output '{name}': the check's limit (up to {stats['max_limit']:.3g}) is at or above the output's "
                f"own magnitude (values up to {stats['max_abs']:.3g}, spread {stats['max_range']:.3g} over the "
                f"{rows} inputs): a candidate ignoring its inputs would pass")
    else:
        text = (f"output '{name}' is constant over the {rows} inputs within the check's limit (spread "
                f"{stats['max_range']:.3g}): a candidate ignoring its inputs would pass")
    if "cosine" in stats["criteria"]:
        text += " (its cosine budget too)"
    return text + (f"; {task[2]}" if task else "")


def _output_stats(ref, limit, tol=None):
    """Statistics over the finite values of each element across inputs (an element never finite: spread 0);
    computed without numpy's all-NaN warnings, which a caller's ``-W error`` would turn into a verdict."""
    r = ref.astype(np.float64)
    ok = np.isfinite(r)
    n = ok.sum(axis=0)
    lo = np.where(n > 0, np.min(np.where(ok, r, np.inf), axis=0, initial=np.inf), 0.0)
    hi = np.where(n > 0, np.max(np.where(ok, r, -np.inf), axis=0, initial=-np.inf), 0.0)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN / Inf positions are masked; huge values may overflow
        mean = np.where(ok, r, 0.0).sum(axis=0) / np.maximum(n, 1)
        std = np.sqrt(np.where(ok, (r - mean) ** 2, 0.0).sum(axis=0) / np.maximum(n, 1))
        mid = (lo + hi) / 2
        limit = np.broadcast_to(limit, r.shape)
        passes = bool(np.all(~(np.abs(r - mid) > limit)))
    stats = {"std_across_inputs_max": float(np.max(std, initial=0.0)) if r.size else 0.0,
             "max_range": float(np.max(hi - lo, initial=0.0)) if r.size else 0.0,
             "max_limit": float(np.max(limit, initial=0.0)) if r.size else 0.0,  # inf: an Inf reference element
             "max_abs": float(np.max(np.abs(np.where(ok, r, 0.0)), initial=0.0)) if r.size else 0.0,
             "constant_candidate_passes": passes}
    if tol is not None and tol.cosine_min is not None:
        stats["cosine_can_fail"] = _cosine_can_fail(np.where(ok, r, 0.0), np.where(ok, mid, 0.0), tol)
    return stats


def _cosine_can_fail(r, mid, tol):
    """Whether the constant candidate ``mid`` (broadcast over the inputs) breaks the cosine budget ``tol`` sets,
    where it applies (reference rms above ``tol.cosine_rms_floor()``: comparator.compare._enforce_cosine)."""
    if not r.size or float(np.sqrt(np.mean(r * r))) <= tol.cosine_rms_floor():
        return False
    cosine, _ = cosine_similarity(r.ravel(), np.broadcast_to(mid, r.shape).ravel())
    return bool(cosine < tol.cosine_min)


def _task_criteria(spec, stacked, info, precision=None):
    """{output: (criterion, could it fail a constant candidate, why not)} for the outputs the task metric judged."""
    if spec.task == "classification" and stacked:
        return _classification(spec, stacked, info, precision)
    if spec.task == "detection" and stacked:
        return _detection(spec, stacked, info)
    return {}


def _classification(spec, stacked, info, precision=None):
    try:
        names = classification_outputs(spec, stacked)
    except TaskSpecError:
        return {}
    # every output the task metric judges (logits and probabilities alike)
    found = (_class_scores(name, stacked[name].astype(np.float64), info, precision) for name in names)
    return {name: c for name, c in zip(names, found) if c is not None}


def _class_scores(name, scores, info, precision=None):
    if scores.ndim != 2 or scores.shape[1] < 2:
        return None
    ties, _ = tie_rows(scores, precision)
    classes = sorted({int(c) for c in np.argmax(scores[~ties], axis=1)})
    entry = {"output": name, "tie_share": float(ties.mean()), "decided_inputs": int((~ties).sum()),
             "distinct_argmax": classes[:50], "tie_rule": TIE_RULE}
    info.setdefault("classification", entry)  # the first judged output; every one is under per_output
    info.setdefault("classification_per_output", []).append(entry)
    why = (f"classification ('{name}'): {int(ties.sum())} of {len(ties)} inputs are argmax ties and the decided "
           f"inputs show {len(classes)} class(es) {classes}: a candidate answering one class always would agree")
    return "classification top-1 agreement", len(classes) >= 2, why


def _detection(spec, stacked, info):
    try:
        keys = detection_outputs(spec, stacked)
    except TaskSpecError:
        return {}
    scores = stacked[keys["scores"]]
    share = float(np.mean(np.any(scores >= DETECTION_MIN_SCORE, axis=tuple(range(1, scores.ndim)))))
    info["detection"] = {"share_with_detection": share, "min_score": DETECTION_MIN_SCORE,
                         "min_share": MIN_DETECTION_SHARE}
    why = (f"detection: {share:.1%} of the inputs hold a detection scoring >= {DETECTION_MIN_SCORE} (at least "
           f"{MIN_DETECTION_SHARE:.0%} needed): the check compares mostly empty outputs")
    return {keys[k]: ("detection matching", share >= MIN_DETECTION_SHARE, why) for k in ("boxes", "scores", "classes")}


def verdict(spec, check, info):
    """The check's one ``Inconclusive`` when its inputs drew no information out of the reference, else None
    (``allowed`` when the model sets ``allow_uninformative = true``: recorded, does not fail the run)."""
    if info["informative"]:
        return None
    return inconclusive(message(spec, check, info), allowed=spec.allow_uninformative)


def message(spec, check, info):
    """The Inconclusive message: why, and which inputs would help."""
    return (f"{spec.name} {check}: the inputs could not have shown a failure: " + "; ".join(info["reasons"])
            + f". {HELP.replace('<model>', spec.name)}")
