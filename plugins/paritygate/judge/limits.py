"""The per-element limits the property checks hold a candidate to (``paritygate.judge.properties``): the precision's
policy, the batch bound capped where it could never fail, and the within-candidate comparison that applies them
with the reference's own spread as a floor."""

import numpy as np

from paritygate.comparator.compare import compare_array
from paritygate.comparator.tolerance import Tolerance, invariance_bound, tolerance_for
from paritygate.judge import kernel_order
from paritygate.judge.reference_noise import K_REFERENCE


def invariance_caps(spec, precision, profile, conditioned=False):
    """Per output, per element of the feed's reference: 2 x the parity limit there plus the reference's own spread
    between the whole batch and each element alone. A candidate within the parity limit L of the reference at
    both batch sizes, where the reference itself moves by s between them, differs from itself by at most
    2L + s (the triangle inequality): a larger bound could never fail a candidate that parity passes, and the
    batch bound alone (10 sqrt(n) u max|output|) reaches an output's whole range for large inputs at FP16
    (issue 37: ResNet50, n = 150528: 1.89 on a softmax). L is property_parity's own: the policy limit, raised to
    K x the reference's spread over its configurations (at fp32 TensorFlow's other kernel order too; ``conditioned``:
    the input moved by its resolution too, judge.conditioning)."""
    every = profile.spread(kernel_order=kernel_order.applies(precision), conditioned=conditioned)
    batch = profile.spread("batch1") if "batch1" in profile.configs else {}
    out = {}
    for name, ref in profile.outputs.items():
        parity = np.maximum(policy_limit(spec, precision, name, ref), K_REFERENCE * every[name])
        out[name] = 2 * parity + batch.get(name, 0.0)
    return out


def row_of(values, i):
    return None if values is None else values[i:i + 1]


def policy_limit(spec, precision, name, ref):
    return tolerance_for(spec, precision, name).limit(ref)


def invariance_limit(spec, ref, computed=None, cap=None):
    """The batch bound for every row of the stacked reference outputs ``ref`` (in the dtype the candidate
    computes), no larger than ``cap`` (``invariance_caps``) where given."""
    bound = np.array([invariance_bound(spec, row, row, computed) for row in ref]).reshape(-1, *([1] * (ref.ndim - 1)))
    return bound if cap is None else np.minimum(bound, cap)


def within(spec, name, alone, other, spread, row, source, bounded=True, computed=None, cap=None):
    """A within-candidate comparison: |alone - other| <= max(own bound, k x the reference's spread); the own bound
    no larger than ``cap`` where given (``invariance_caps``). The comparison's ``limit``: the per-element limit
    it applied."""
    limit = invariance_bound(spec, alone, other, computed) if bounded else 0.0
    bound = float(limit)
    if cap is not None and bounded:
        limit = np.minimum(limit, np.broadcast_to(cap, np.shape(alone)))
    ref_floor = 0.0
    if spread is not None:
        s = spread if row is None else spread[row:row + 1]
        ref_floor = K_REFERENCE * s
    floor = np.maximum(limit, ref_floor)
    out = compare_array(alone, other, Tolerance(0.0, 0.0, source), name, name, floor=floor)
    out.tolerance.update(bound=float(np.max(limit, initial=0.0)), reference_floor_max=float(np.max(ref_floor)),
                         k=K_REFERENCE, **({"computed_dtype": np.dtype(computed).name} if computed is not None and bounded else {}))
    if cap is not None and bounded and float(np.min(np.broadcast_to(cap, np.shape(alone)), initial=np.inf)) < bound:
        out.tolerance.update(batch_bound=bound, capped_by="2 x the parity limit + the reference's own batch spread "
                             "(paritygate/judge/limits.py, invariance_caps)")
    out.widened_by_reference = int(np.count_nonzero(np.broadcast_to(ref_floor, np.shape(alone)) > limit))
    out._limit = np.broadcast_to(floor, np.shape(alone))  # not a field: never in the report
    return out
