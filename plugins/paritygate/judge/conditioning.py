"""Ill-conditioned inputs: where the reference itself moves by more than a check's budget when its input moves by one
step of its own resolution, that input cannot tell a faithful candidate from a wrong one at that precision.

Why. An FP32 implementation of a model (TensorFlow in another kernel order, ONNX Runtime, an engine) rounds as it
goes; a backward-stable one computes exactly f(x + d) for some d the size of its own rounding, and its first rounding
of x alone is one step of x's resolution (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., section
1.5: forward error <= condition number x backward error). So an implementation as good as the reference may differ
from it by as much as the reference moves under such a step, |f(x + d) - f(x)|. On a well-conditioned input that is
rounding-sized; where the model divides by about zero it reaches the output's own range. Measured on basic-pitch
0.4.0 (TensorFlow, one float32 step at its range's scale, 1.2e-7): on one of its audio clips the outputs move by
5e-5 at most, below TensorFlow's second kernel order's spread there; on silence, where it divides its log-CQT by the
CQT's range, contour moves by 0.14 and onset by 0.59, over outputs spanning 0.13 and 0.15.

What it does. Measured only where a check would fail an input (a passing input needs no excuse): the reference runs
once more on that input moved by one step of its resolution (``reference_noise.resolution_step``), and the
comparison is judged again with its floor raised to K_REFERENCE x the reference's move on each batch row (the same K
and triangle argument as reference_noise's). The input then decides only what the reference itself can tell there:
a candidate further off than that still fails. Where K x the move exceeds the check's own limit, the input is
ill-conditioned for the precision's budget: the check records an ``ill_conditioned`` finding naming the input (its
rows' sources, a reproducer) with its factor, K x move / limit. A check whose inputs are all excused is inconclusive
by the vacuity rule, which asks of the limits the check applied, floors included, whether any candidate could fail.

What it cannot excuse. On a well-conditioned input the step moves the reference by rounding only, so the floor stays
at the policy and a wrong candidate fails as before (tests/judge/test_conditioning.py shows both). Integer and bool
inputs take no step (one step changes what they mean); determinism (identical runs of one artifact) is never
excused.
"""

import numpy as np

from paritygate.judge.reference_noise import K_REFERENCE, RESOLUTION, RESOLUTION_SOURCE, ReferenceRuns, resolution_step

KIND = "ill_conditioned"


def floors(profile, base, kernel_order=False):
    """``base`` (output -> K x the reference's spread, broadcast to its shape) raised to K x the reference's move
    under one step of its input's resolution, measured now (once per input); None where it cannot be measured (no
    float input, or no spec to read ranges from)."""
    if profile.conditioning() is None:
        return None
    moved = profile.spread(RESOLUTION, conditioned=True)
    return {k: np.maximum(base[k], K_REFERENCE * m) if k in base else K_REFERENCE * m for k, m in moved.items()}


def note(found, spec, feed, profile, limit):
    """Append to ``found`` an entry for the worst output where K x the reference's move under the step exceeds
    ``limit(name, ref)``: the input is ill-conditioned for the check's budget there (None when it is not)."""
    moved = profile.spread(RESOLUTION, conditioned=True)
    worst = None
    for name, move in moved.items():
        ref = profile.outputs[name]
        lim = np.broadcast_to(limit(name, ref), ref.shape).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(np.isfinite(lim) & (lim > 0), K_REFERENCE * move / lim, 0.0)
        ratio = np.nan_to_num(ratio, nan=0.0, posinf=np.finfo(np.float64).max)
        if ref.size and np.max(ratio) > 1 and (worst is None or np.max(ratio) > worst["factor"]):
            i = int(np.argmax(ratio))
            worst = {"output": name, "factor": float(ratio.ravel()[i]), "reference_move": float(np.max(move)),
                     "limit_at_worst": float(lim.ravel()[i]), "elements_over_limit": int(np.count_nonzero(ratio > 1)),
                     "elements": int(ref.size), "batch_element": int(np.unravel_index(i, ref.shape)[0]),
                     "rows_from": sorted(set(getattr(feed, "sources", []))), "feed": dict(feed)}
    if worst is not None:
        worst["step"] = steps(spec, feed)
        found.append(worst)
    return worst


def steps(spec, feed):
    """{input: the largest step taken} of each float input (``RESOLUTION_SOURCE``)."""
    stepped = resolution_step(spec, feed) or {}
    return {name: float(np.max(np.abs(np.asarray(stepped[name], np.float64) - np.asarray(x, np.float64))))
            for name, x in feed.items() if name in stepped and np.asarray(x).size and np.asarray(x).dtype.kind == "f"}


def record_findings(ctx, spec, precision, check, found, result):
    """The check's ``ill_conditioned`` finding (its worst input saved as a reproducer), added to ``result``."""
    if not found:
        return
    worst = max(found, key=lambda f: f["factor"])
    where = ", ".join(f"'{k}' by {v:.3g}" for k, v in worst["step"].items()) or "its float inputs"
    rows = f" (rows from {', '.join(worst['rows_from'])})" if worst["rows_from"] else ""
    summary = (f"the model is ill-conditioned on {len(found)} input(s){rows}: moving input {where} (one step of its "
               f"resolution) moves the reference itself by {worst['reference_move']:.3g} on output "
               f"'{worst['output']}', so {K_REFERENCE:g}x that is {worst['factor']:.3g} times the check's limit "
               f"{worst['limit_at_worst']:.3g}; there the candidate was judged only against {K_REFERENCE:g}x the "
               "reference's own move")
    details = {k: v for k, v in worst.items() if k != "feed"}
    details.update(summary=summary, inputs=len(found), k=K_REFERENCE, step_source=RESOLUTION_SOURCE,
                   reproducer=ctx.save_reproducer(spec, precision, KIND, worst["feed"],
                                                  [f"{spec.name} {check}: {summary}"]))
    result.finding(KIND, details)


def measured(spec, inputs, run):
    """A ``ReferenceRuns`` of a fixed input set (``matches_reference``'s groups): the live reference on ``inputs``
    and, on first need, on their step, each through ``run(feed)`` (the reference, batched)."""
    stepped = resolution_step(spec, inputs)
    return ReferenceRuns(run(inputs), {}, None, stepped=(lambda: run(stepped)) if stepped is not None else None)
