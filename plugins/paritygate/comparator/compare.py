"""Elementwise comparison of named outputs with error statistics (vectorised: 1e7 elements well under 0.5 s)."""

from dataclasses import asdict, dataclass, field

import numpy as np

from paritygate.comparator.stats import p99
from paritygate.comparator.tolerance import COSINE_MIN, tolerance_for

HIST_BINS = np.concatenate([[0.0], np.logspace(-9, 2, 23)])  # |error| histogram edges for the report plots


class OutputMismatchError(ValueError):
    """Reference and candidate outputs cannot be paired (missing name, different shape)."""


@dataclass
class OutputComparison:
    output: str
    candidate_output: str
    shape: tuple
    tolerance: dict
    passed: bool
    elements: int = 0
    mismatches: int = 0
    nonfinite_mismatches: int = 0
    finite_elements: int = 0  # elements finite on both sides: the statistics below are over these only
    reference_nan: int = 0
    reference_inf: int = 0
    candidate_nan: int = 0
    candidate_inf: int = 0
    max_abs: float = 0.0
    mean_abs: float = 0.0
    p99_abs: float = 0.0
    max_rel: float = 0.0
    mean_rel: float = 0.0
    p99_rel: float = 0.0
    cosine: float = 1.0
    cosine_enforced: bool = False  # the reference's rms is above the budget's floor (tolerance.COSINE_MIN)
    cosine_failed: bool = False
    widened_by_reference: int = 0  # elements judged against k x the reference's own spread (noise floor)
    worst: dict = field(default_factory=dict)  # index, batch element, reference and candidate values
    failing_batch_elements: list = field(default_factory=list)

    def as_dict(self):
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    def nonfinite_text(self):
        """'31 NaN in the candidate; 2 Inf in the reference' or '' when every element is finite."""
        parts = [f"{n} {kind} in the {side}" for side, kind, n in (
            ("reference", "NaN", self.reference_nan), ("reference", "Inf", self.reference_inf),
            ("candidate", "NaN", self.candidate_nan), ("candidate", "Inf", self.candidate_inf)) if n]
        return "; ".join(parts)

    def describe(self):
        w = self.worst
        where = f" worst at index {w.get('index')} (batch element {w.get('batch_element')}): " \
                f"reference {w.get('reference')}, candidate {w.get('candidate')}" if w else ""
        nonfinite = self.nonfinite_text()
        finite_only = f"{nonfinite}; over the {self.finite_elements} finite elements only: " if nonfinite else ""
        return (f"output '{self.output}': {self.mismatches}/{self.elements} elements outside "
                f"atol={self.tolerance['atol']:g} rtol={self.tolerance['rtol']:g} "
                f"({self.nonfinite_mismatches} non-finite), {finite_only}max abs {self.max_abs:.3g}, "
                f"max rel {self.max_rel:.3g}, cosine {self.cosine:.6f}{self._cosine_text()};{where}")

    def _cosine_text(self):
        if not self.cosine_failed:
            return ""
        return (f" below the budget {self.tolerance['cosine_min']:g} ({self.tolerance['cosine_source']}; applies "
                f"to outputs of reference rms > {self.tolerance['cosine_applies_above_rms']:.3g})")


def pair_outputs(spec, ref_names, cand_names):
    """Reference output name -> candidate output name, by name unless mapped in ``[models.outputs]``.

    An unmatched output on either side is an error, never silently dropped."""
    mapping = {}
    for ref in ref_names:
        cand = spec.outputs.get(ref, ref)
        if cand not in cand_names:
            raise OutputMismatchError(
                f"{spec.where('outputs')}: reference output '{ref}' has no candidate output '{cand}'; "
                f"candidate outputs are {sorted(cand_names)} (map names in [models.outputs])")
        mapping[ref] = cand
    shared = sorted({c for c in mapping.values() if list(mapping.values()).count(c) > 1})
    if shared:
        raise OutputMismatchError(f"{spec.where('outputs')}: candidate output(s) {shared} are paired with more "
                                  "than one reference output; each reference output needs its own")
    unknown = sorted(set(spec.outputs) - set(ref_names))
    extra = sorted(set(cand_names) - set(mapping.values()))
    if unknown:
        raise OutputMismatchError(f"{spec.where('outputs')}: maps {unknown}, which the reference does not have; "
                                  f"reference outputs are {sorted(ref_names)}")
    if extra:
        raise OutputMismatchError(f"{spec.where('outputs')}: candidate output(s) {extra} match no reference "
                                  f"output {sorted(ref_names)}")
    return mapping


def same_nonfinite(ref, cand):
    """The one non-finite rule: where the reference is NaN or ±Inf, the candidate matches only by holding the same
    value (NaN for NaN, +Inf for +Inf); a non-finite candidate where the reference is finite never matches."""
    return ~np.isfinite(ref) & ((np.isnan(ref) & np.isnan(cand)) | (ref == cand))


def compare_array(ref, cand, tol, name="output", cand_name=None, floor=None, cosine_floor=None,
                  nonfinite_reference="match"):
    """Compare one output; numpy.isclose semantics plus statistics, NaN/Inf rules of the policy.

    ``floor`` (an array of ref's shape, optional) raises each element's limit to max(atol + rtol*|ref|, floor):
    the reference's own noise (paritygate.judge.properties). ``cosine_floor`` lowers the cosine budget likewise.
    ``nonfinite_reference``: "match" (the candidate must hold the same NaN / Inf there) or "skip" (elements where
    the reference is NaN / Inf are not judged: paritygate.judge.nonfinite makes the check inconclusive instead)."""
    cand_name = cand_name or name
    ref, cand = np.asarray(ref), np.asarray(cand)
    if ref.shape != cand.shape:
        raise OutputMismatchError(f"output '{name}': candidate '{cand_name}' has shape {list(cand.shape)}, "
                                  f"reference has {list(ref.shape)}")
    out = OutputComparison(name, cand_name, ref.shape, tol.as_dict(), True, elements=int(ref.size))
    if ref.size == 0:
        return out
    work = np.result_type(ref.dtype, cand.dtype, np.float32)  # float32 math for float32 outputs (as isclose)
    r = ref.astype(work, copy=False).ravel()
    c = cand.astype(work, copy=False).ravel()
    finite, nonfinite_bad = None, None  # None: every element finite (the fast path)
    if not (np.isfinite(r).all() and np.isfinite(c).all()):
        r, c, finite, nonfinite_bad = _split_nonfinite(out, r, c, nonfinite_reference)
    diff = np.subtract(c, r)
    np.abs(diff, out=diff)
    absref = np.abs(r)
    scratch = tol.limit(absref, work, is_abs=True)  # the limit atol + rtol*|ref|, later the relative error
    if floor is not None:
        floor = np.broadcast_to(np.asarray(floor, dtype=work), ref.shape).ravel()
        out.widened_by_reference = int(np.count_nonzero(floor > scratch))
        np.maximum(scratch, floor, out=scratch)
    bad = diff > scratch
    if nonfinite_bad is not None:
        bad |= nonfinite_bad
    out.mismatches = int(np.count_nonzero(bad))
    out.nonfinite_mismatches = 0 if nonfinite_bad is None else int(np.count_nonzero(nonfinite_bad))
    out.passed = out.mismatches == 0
    if out.mismatches:
        _locate_worst(out, ref, cand, diff, scratch, bad, nonfinite_bad)
    n_finite = diff.size if finite is None else int(np.count_nonzero(finite))
    out.finite_elements = n_finite
    if n_finite:
        rel = _relative(diff, absref, out=scratch)
        rel_finite = np.isfinite(rel)
        n_rel = int(np.count_nonzero(rel_finite))
        out.max_abs = float(diff.max())
        out.mean_abs = float(diff.sum(dtype=np.float64) / n_finite)
        out.max_rel = float(rel.max())
        out.mean_rel = float(rel.sum(dtype=np.float64, where=rel_finite) / n_rel) if n_rel else 0.0
        # p99 over the finite elements only (the zeroed positions would shift it)
        out.p99_abs = p99(diff if finite is None else diff[finite])
        out.p99_rel = p99(rel if finite is None else rel[finite])
        out.cosine, norm = cosine_similarity(r, c)
        _enforce_cosine(out, tol, norm / np.sqrt(n_finite), cosine_floor)
    return out


def _split_nonfinite(out, r, c, nonfinite_reference):
    """Count NaN/Inf per side into ``out``; (r, c with non-finite positions zeroed, the finite mask, the
    elements failing the non-finite rule). Zeroed, they add nothing to differences, norms or dot products."""
    r_fin, c_fin = np.isfinite(r), np.isfinite(c)
    finite = r_fin & c_fin
    out.reference_nan, out.candidate_nan = int(np.count_nonzero(np.isnan(r))), int(np.count_nonzero(np.isnan(c)))
    out.reference_inf = int(np.count_nonzero(~r_fin)) - out.reference_nan
    out.candidate_inf = int(np.count_nonzero(~c_fin)) - out.candidate_nan
    nonfinite_bad = ~finite & ~same_nonfinite(r, c)
    if nonfinite_reference == "skip":
        nonfinite_bad &= r_fin
    zero = r.dtype.type(0)
    return np.where(finite, r, zero), np.where(finite, c, zero), finite, nonfinite_bad


def cosine_rule(tol, rms, cosine, cosine_floor=None):
    """(enforced, failed) of the cosine budget: it applies where the reference's rms is above the floor at which
    atol alone could breach it (tolerance.COSINE_MIN explains the rule) and fails there below the budget (the
    tolerance's, lowered to ``cosine_floor`` where given). Elementwise on arrays of rms and cosines too
    (shadow.screen judges a bundle's rows with it); (False, False) where the tolerance enforces no cosine."""
    if tol.cosine_min is None:
        return False, False
    budget = tol.cosine_min if cosine_floor is None else min(tol.cosine_min, cosine_floor)
    enforced = rms > tol.cosine_rms_floor()
    return enforced, enforced & (cosine < budget)


def _enforce_cosine(out, tol, rms, cosine_floor):
    """The cosine budget (``cosine_rule``) fails the output where it applies."""
    if tol.cosine_min is None:
        return
    enforced, failed = cosine_rule(tol, rms, out.cosine, cosine_floor)
    out.cosine_enforced = bool(enforced)
    if failed:
        out.cosine_failed, out.passed = True, False


def _locate_worst(out, ref, cand, diff, limit, bad, nonfinite_bad):
    """The element furthest past its limit (non-finite failures first) and the failing batch elements."""
    score = (diff - limit).astype(np.float64)
    if nonfinite_bad is not None:
        score[nonfinite_bad] = np.inf
    flat = int(np.argmax(score))
    index = np.unravel_index(flat, ref.shape)
    out.worst = {"index": [int(i) for i in index], "batch_element": int(index[0]) if ref.ndim else 0,
                 "reference": float(ref.ravel()[flat]), "candidate": float(cand.ravel()[flat])}
    if ref.ndim:
        per_row = bad.reshape(ref.shape[0], -1).any(axis=1)
        out.failing_batch_elements = [int(i) for i in np.flatnonzero(per_row)]


def _relative(diff, absref, out):
    """|error| / |reference| into ``out``; where the reference is 0: inf for a non-zero error, else 0."""
    zero_ref = absref == 0
    np.divide(diff, absref, out=out, where=~zero_ref)
    if zero_ref.any():
        out[zero_ref] = np.where(diff[zero_ref] > 0, np.inf, 0.0)
    return out


def cosine_similarity(a, b, block=1 << 18):
    """(cosine, |a|) of two flat arrays, accumulated in float64 a block at a time (no full-size float64
    temporaries); 1 when both are zero, 0 when one is."""
    dot = na = nb = 0.0
    # Finite float64 values above ~1e154 square to inf: an overflow that is the true size of the sum, not a fault
    # of the suite, so numpy is not to warn (a caller's `-W error` must not turn it into a verdict).
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, a.size, block):
            x, y = a[i:i + block].astype(np.float64), b[i:i + block].astype(np.float64)
            dot += float(np.dot(x, y))
            na += float(np.dot(x, x))
            nb += float(np.dot(y, y))
        if not np.isfinite(na + nb + dot):  # beyond float64: the cosine of the arrays scaled down alike
            scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
            return cosine_similarity(a / scale, b / scale, block)[0], np.inf
    norm = np.sqrt(na)  # the reference's norm: the caller divides by sqrt(n) for its rms
    if na == 0 and nb == 0:
        return 1.0, norm
    if na == 0 or nb == 0:
        return 0.0, norm
    return dot / (norm * np.sqrt(nb)), norm


def compare_outputs(spec, precision, ref_outputs, cand_outputs, floors=None, cosine_floors=None,
                    nonfinite_reference=None):
    """Compare every reference output with its paired candidate output; returns OutputComparisons.

    ``floors`` / ``cosine_floors``: per reference output, the reference's own noise (see compare_array).
    ``nonfinite_reference`` (see compare_array) defaults to the model's: "match" where it sets
    ``allow_nonfinite_reference``, else "skip" (a NaN reference judges nothing of the candidate)."""
    mapping = pair_outputs(spec, list(ref_outputs), list(cand_outputs))
    floors, cosine_floors = floors or {}, cosine_floors or {}
    mode = nonfinite_reference or ("match" if spec.allow_nonfinite_reference else "skip")
    return [compare_array(ref_outputs[r], cand_outputs[c], tolerance_for(spec, precision, r), r, c,
                          floors.get(r), cosine_floors.get(r), mode)
            for r, c in mapping.items()]


def cosine_ok(comparison):
    """The comparison's cosine meets its budget (the tolerance's, else Polygraphy's default)."""
    return comparison.cosine >= (comparison.tolerance.get("cosine_min") or COSINE_MIN)


def output_records(comparisons):
    """The result's ``outputs``: each comparison's statistics plus compact data for the report's plots."""
    return [_with_plot_data(o) for o in comparisons]


def _with_plot_data(comparison, max_points=1500):
    """The comparison's statistics plus compact data for the report's plots."""
    d = comparison.as_dict()
    ref, cand = getattr(comparison, "_plot", (None, None))
    if ref is not None and ref.size:
        r = ref.astype(np.float64).ravel()
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, dropped below as non-finite
            err = np.abs(cand.astype(np.float64).ravel() - r)
        ok = np.isfinite(err)
        d["error_histogram"] = {"edges": HIST_BINS.tolist(),
                                "counts": np.histogram(np.clip(err[ok], 0, 100), HIST_BINS)[0].tolist()}
        pick = np.linspace(0, r.size - 1, min(max_points, r.size)).astype(int)
        d["error_vs_magnitude"] = {"reference_abs": np.abs(r[pick]).tolist(), "abs_error": err[pick].tolist()}
    return d
