"""A bundle of shadow examples judged together: one vectorised screen per precision over the bundle's rows, the
record of every row it finds clean built directly, every other row judged alone by ``shadow.example.judge_example``
(the checks' own comparator and task metric on a batch of one). The records are those judge_example gives, row for
row (tests/shadow/test_screen.py compares them); the screen only decides which rows need no judging of their own.

A row is clean when, for every output the policy compares (``comparator.compare.pair_outputs``):
- both sides are finite and every element is within the policy's limit (``Tolerance.limit``, as compare_array);
- the cosine budget (``comparator.compare.cosine_rule``) cannot fail it: checked with the reference's rms raised
  and the cosine lowered by COSINE_SLACK (the row's sums here and compare_array's may round differently);
and, for classification, every output the metric judges (``comparator.task.classification_outputs``) has the same
argmax on both sides. Such a row has no flipped row whatever the tie rule says (a tie is only taken out of the rows
judged), so the screen needs no tie rule: a row whose argmax differs (a flip or a tie) is judged alone.
Detection, empty or non-numeric outputs, shapes that differ between the sides and anything the pairing or the task
rule would raise on are judged alone too, with judge_example's errors.
"""

import numpy as np

from paritygate.comparator.compare import OutputMismatchError, cosine_rule, pair_outputs
from paritygate.comparator.task import TaskSpecError, classification_outputs
from paritygate.comparator.tolerance import tolerance_for
from paritygate.shadow.example import judge_example, record_of
from paritygate.shadow.stats import NONFINITE

BUNDLE = 256  # examples judged together at most (JudgeBundle holds this many: memory does not grow with N)
# float64 sums of n products (a dot product, a sum of squares) err by at most n * u relative to the sum of |terms|
# (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 2002, eq. 3.5); the screen's cosine and rms
# and compare_array's may differ by a few times that, so the screen decides only beyond 8 (n + 2) eps of them.
COSINE_SLACK = 8


def judge_bundle(spec, precision, examples):
    """The records of ``examples`` ((key, slice value, feed, reference outputs, candidate outputs) each), in
    order: each one equal to ``judge_example`` on that example."""
    records = [None] * len(examples)
    if spec.task != "detection":
        for rows in _groups(examples):
            for i, record in zip(rows, screen(spec, precision, [examples[i] for i in rows])):
                records[i] = record
    return [r if r is not None else judge_example(spec, precision, *e) for r, e in zip(records, examples)]


def _signature(outputs):
    return tuple((k, np.shape(v), np.asarray(v).dtype.str) for k, v in outputs.items())


def _groups(examples):
    """Row indices by their outputs' names, shapes and dtypes on both sides: what stacks into one array."""
    groups = {}
    for i, (_, _, _, ref, cand) in enumerate(examples):
        groups.setdefault((_signature(ref), _signature(cand)), []).append(i)
    return list(groups.values())


def screen(spec, precision, examples):
    """Per example (all of one ``_groups`` signature): its record where the row is clean, else None."""
    ref0, cand0 = examples[0][3], examples[0][4]
    try:
        mapping = pair_outputs(spec, list(ref0), list(cand0))
    except OutputMismatchError:
        return [None] * len(examples)
    clean, max_abs = np.ones(len(examples), dtype=bool), {}
    stacked = {}
    for r, c in mapping.items():
        ref, cand = np.stack([e[3][r] for e in examples]), np.stack([e[4][c] for e in examples])
        if ref.shape != cand.shape or ref[0].size == 0 or not {ref.dtype.kind, cand.dtype.kind} <= set("biuf"):
            return [None] * len(examples)  # judged alone, with judge_example's errors
        ok, max_abs[r] = elementwise(ref, cand, tolerance_for(spec, precision, r))
        clean &= ok
        stacked[r] = (ref, cand)
    top1 = None
    if spec.task == "classification":
        agree, top1 = _agree(spec, {r: ref for r, (ref, _) in stacked.items()},
                             {r: cand for r, (_, cand) in stacked.items()})
        clean &= agree
    sizes = {r: int(np.size(ref0[r])) for r in mapping}
    return [_record(e, precision, sizes, {r: m[i] for r, m in max_abs.items()}, None if top1 is None else top1[i])
            if clean[i] else None for i, e in enumerate(examples)]


def _record(example, precision, sizes, max_abs, top1):
    key, slice_value, feed, _, _ = example
    rows = {r: {"elements": n, "mismatches": 0, "passed": True, "max_abs": float(max_abs[r]),
                **dict.fromkeys(NONFINITE, 0)} for r, n in sizes.items()}
    record = record_of(key, slice_value, precision, feed, rows, [])
    if top1 is not None:
        record["top1"] = (top1, top1)
    return record


def elementwise(ref, cand, tol):
    """(a boolean per row: finite, within the limit everywhere and beyond the cosine budget's reach, the row's max
    |error| in compare_array's working dtype) of ``ref`` / ``cand`` stacked by row."""
    n = len(ref)
    work = np.result_type(ref.dtype, cand.dtype, np.float32)
    r, c = ref.astype(work, copy=False).reshape(n, -1), cand.astype(work, copy=False).reshape(n, -1)
    with np.errstate(invalid="ignore", over="ignore"):  # a non-finite row is not clean: judged alone
        clean = np.isfinite(r).all(axis=1) & np.isfinite(c).all(axis=1)
        diff = np.abs(np.subtract(c, r))
        absref = np.abs(r)
        clean &= ~(diff > tol.limit(absref, work, is_abs=True)).any(axis=1)
        clean &= _cosine_clear(r, c, tol)
    return clean, diff.max(axis=1)


def _cosine_clear(r, c, tol):
    """A boolean per row: the cosine budget cannot fail it, even with the rms raised and the cosine lowered by the
    rounding the screen's sums and compare_array's may differ by (COSINE_SLACK)."""
    x, y = r.astype(np.float64), c.astype(np.float64)
    dot, na, nb = np.einsum("ij,ij->i", x, y), np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)
    slack = COSINE_SLACK * (x.shape[1] + 2) * np.finfo(np.float64).eps
    both = (na > 0) & (nb > 0)
    norm = np.sqrt(na)  # as cosine_similarity: dot / (|r| |c|); 1 where both are zero, 0 where one is
    cosine = np.where(both, dot / np.where(both, norm * np.sqrt(nb), 1.0), np.where((na == 0) & (nb == 0), 1.0, 0.0))
    rms = norm / np.sqrt(x.shape[1])
    _, failed = cosine_rule(tol, rms * (1 + slack), cosine - slack)
    return np.isfinite(dot) & np.isfinite(na) & np.isfinite(nb) & ~failed


def _agree(spec, ref, cand):
    """(a boolean per row: every output the classification metric judges has one argmax on both sides, the
    reference's class per row on the first of them, as ``shadow.example.top1`` reads it)."""
    try:
        names = classification_outputs(spec, ref)
    except TaskSpecError:
        return np.zeros(len(next(iter(ref.values()))), dtype=bool), None
    agree = np.ones(len(ref[names[0]]), dtype=bool)
    for name in names:
        if ref[name].ndim != 2:
            return np.zeros_like(agree), None
        agree &= np.argmax(ref[name], axis=1) == np.argmax(cand[name], axis=1)
    return agree, [int(k) for k in np.argmax(ref[names[0]], axis=1)]
