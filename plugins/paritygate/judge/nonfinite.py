"""A reference that is NaN or +-Inf on declared-valid inputs: a ``reference_nonfinite`` finding, not a verdict.

sqrt(x) declared over [-1, 1] is NaN on half its range; a candidate that is NaN there too "matches" it, and one
that is not cannot be called wrong: there is no reference value to be near. Matching NaNs are therefore not
evidence of parity. Where the reference is non-finite, a parity check (``matches_reference``,
``property_parity``, the Beam comparisons) judges nothing of the candidate (``compare_array``'s "skip"), records
the finding (where, how many, on which inputs, with a reproducer) and ends ``inconclusive`` unless it failed on
the finite elements. A model whose non-finite outputs are part of its contract sets
``allow_nonfinite_reference = true`` (or the reason, as a string): the candidate must then hold the same NaN / Inf
there (a mismatch fails), the finding is still recorded, and the check's details carry the reason.
"""

import numpy as np


def counts(outputs):
    """{output: {"nan", "inf", "elements", "rows", "first_index"}} for each output holding a NaN or an Inf."""
    found = {}
    for name, value in outputs.items():
        v = np.asarray(value)
        if v.dtype.kind not in "fc" or np.isfinite(v).all():
            continue
        bad = ~np.isfinite(v)
        nan = int(np.count_nonzero(np.isnan(v)))
        rows = np.flatnonzero(bad.reshape(len(v), -1).any(axis=1)) if v.ndim else np.array([0])
        found[name] = {"nan": nan, "inf": int(np.count_nonzero(bad)) - nan, "elements": int(v.size),
                       "rows": [int(r) for r in rows], "first_index": [int(i) for i in np.argwhere(bad)[0]]}
    return found


def allowance(spec):
    """The reason the model gives for a non-finite reference (None: not allowed)."""
    allowed = spec.allow_nonfinite_reference
    if not allowed:
        return None
    return allowed if isinstance(allowed, str) else "allow_nonfinite_reference = true"


class NonfiniteLog:
    """The inputs on which the reference was non-finite during one check."""

    def __init__(self):
        self.inputs = []  # per affected feed: its counts, the sources of its affected rows, the feed itself
        self.seen = 0

    def note(self, feed, outputs):
        self.seen += 1
        found = counts(outputs)
        if found:
            rows = sorted({r for c in found.values() for r in c["rows"]})
            sources = getattr(feed, "sources", None) or ["input"] * len(next(iter(feed.values())))
            self.inputs.append({"outputs": found, "rows": rows, "rows_from": sorted({sources[r] for r in rows}),
                                "feed": dict(feed)})

    def conclude(self, ctx, spec, precision, result):
        """Add the finding (once per check, with a reproducer) and its summary to ``result`` (a CheckResult);
        returns the inconclusive message, or None when the reference was finite throughout or the model allows it."""
        check = result.check
        if not self.inputs:
            return None
        reason = allowance(spec)
        first = self.inputs[0]
        totals = {}
        for entry in self.inputs:
            for name, c in entry["outputs"].items():
                t = totals.setdefault(name, {"nan": 0, "inf": 0})
                t["nan"], t["inf"] = t["nan"] + c["nan"], t["inf"] + c["inf"]
        where = "; ".join(f"output '{n}': {t['nan']} NaN, {t['inf']} Inf" for n, t in totals.items())
        sources = sorted({s for e in self.inputs for s in e["rows_from"]})
        ranges = {k: [float(np.min(v[first["rows"]])), float(np.max(v[first["rows"]]))]
                  for k, v in first["feed"].items()}
        summary = (f"the TensorFlow reference is non-finite on declared-valid inputs: {where}, on "
                   f"{len(self.inputs)} of {self.seen} input batch(es) (rows from {', '.join(sources)}; first: "
                   f"rows {first['rows'][:8]} with inputs in {ranges}); matching non-finite values are not "
                   "evidence of parity")
        found = {"summary": summary, "outputs": totals, "affected_inputs": len(self.inputs), "inputs": self.seen,
                 "rows_from": sources, "first": {"outputs": first["outputs"], "rows": first["rows"],
                                                 "input_ranges": ranges},
                 "allowed": reason}
        found["reproducer"] = ctx.save_reproducer(spec, precision, "reference_nonfinite", first["feed"],
                                                  [f"{spec.name} {check}: {summary}"])
        result.finding("reference_nonfinite", found)
        result.details["reference_nonfinite"] = {k: v for k, v in found.items() if k != "first"}
        if reason is not None:
            return None
        return (f"{spec.name} {precision} {check}: {summary}. Elements where the reference is NaN or Inf were not "
                "judged. Narrow the declared input ranges to where the model is defined, or set "
                "allow_nonfinite_reference = true (or the reason) when these outputs are part of the model's "
                "contract: the candidate must then hold the same NaN / Inf there")
