"""One judgement per row: the task metric over every in-distribution row a property check runs.

``matches_reference`` judges the rows of goldens / ``inputs/<model>.npz`` with the task metric (top-1 agreement,
detection matching); ``property_parity`` feeds the same kind of rows (golden inputs, input sets, held-out and
calibration sets, perturbed copies of them) and, before this module, judged them elementwise only, so a row's
verdict depended on the file that held it. Here every in-distribution row ``property_parity`` ran, plus every row
of the model's input sets as is (a sweep, so no row is left to what Hypothesis happened to draw), is collected
by source and judged with ``comparator.task.task_metrics``, the metric and ratio ``matches_reference`` uses, once
per source: a source whose rows fail it fails the check, as the same rows would fail ``matches_reference`` in
``inputs/<model>.npz``. Noise and corner rows keep the elementwise policy and the vacuity rules only.
"""

import hashlib
from collections import defaultdict

import numpy as np

from paritygate.comparator.task import summary, task_metrics

TASKS = ("classification", "detection")


def in_distribution(source):
    """A row from the model's own data (as is or perturbed), not spec noise or a corner batch."""
    return source not in ("noise", "unlabelled", "known_failure") and not source.startswith("corner:")


class TaskRows:
    """Rows by source: inputs, reference and candidate outputs, each distinct row once."""

    def __init__(self, spec, precision):
        self.spec, self.precision = spec, precision
        self.rows = defaultdict(list)  # source -> [(inputs, ref outputs, cand outputs, noise)], one row each
        self.seen = set()

    def add(self, feed, ref, cand, noise=None, complete=None):
        """``noise``: output -> the reference's K-scaled spread on ``feed`` where measured (its ties,
        ``comparator.task.tie_rows``); rows without it count no noise. ``complete``: () -> that noise over every
        configuration of the reference (``reference_noise.ReferenceRuns.complete``), asked only where a source
        fails with ``noise`` (``judge``)."""
        noise = noise or {}
        sources = getattr(feed, "sources", None) or []
        for i, source in enumerate(sources):
            if not in_distribution(source):
                continue
            row = {k: np.asarray(v[i:i + 1]) for k, v in feed.items()}
            key = (source, hashlib.sha256(b"".join(x.tobytes() for _, x in sorted(row.items()))).hexdigest())
            if key in self.seen:
                continue
            self.seen.add(key)
            self.rows[source].append((row, {k: v[i:i + 1] for k, v in ref.items()},
                                      {k: v[i:i + 1] for k, v in cand.items()},
                                      {k: np.broadcast_to(noise[k], np.shape(v))[i:i + 1] if k in noise
                                       else np.zeros((1,) + np.shape(v)[1:]) for k, v in ref.items()},
                                      None if complete is None else (complete, i)))

    def mark(self):
        return {s: len(r) for s, r in self.rows.items()}, set(self.seen)

    def rollback(self, mark):
        counts, self.seen = mark
        for source in list(self.rows):
            del self.rows[source][counts.get(source, 0):]

    def sweep(self, pool, reference, candidate):
        """Every row of ``pool`` as is, in batches of max_batch through both runners."""
        batch = self.spec.max_batch
        for part in pool.parts():  # one shape each
            for start in range(0, len(part.sources), batch):
                feed = {k: v[start:start + batch] for k, v in part.arrays.items()}
                wrapped = _Feed(feed, part.sources[start:start + batch])
                self.add(wrapped, reference.infer(feed), candidate.infer(feed))

    def judge(self):
        """(metric per source, failure lines, the inputs of the rows that failed) over the collected rows."""
        by_source, failures, failing = {}, [], []
        for source, rows in sorted(self.rows.items()):
            if not rows:
                continue
            ref = {k: np.concatenate([r[1][k] for r in rows]) for k in rows[0][1]}
            cand = {k: np.concatenate([r[2][k] for r in rows]) for k in rows[0][2]}
            metric = self._metric(rows, ref, cand)
            if not metric["passed"] and any(r[4] is not None for r in rows):  # the reference's noise, complete
                rows[:] = [_completed(r) for r in rows]
                metric = self._metric(rows, ref, cand)
            by_source[source] = {k: v for k, v in metric.items() if k not in ("per_output",)}
            if not metric["passed"]:
                failures.append(f"{self.spec.name} {self.precision}: task metric on the {len(rows)} '{source}' "
                                f"rows: {summary(metric)}")
                failing += [rows[i][0] for i in _failing_rows(metric)]
        inputs = {k: np.concatenate([r[k] for r in failing]) for k in failing[0]} if failing else None
        return by_source, failures, inputs

    def _metric(self, rows, ref, cand):
        noise = {k: np.concatenate([r[3][k] for r in rows]) for k in rows[0][3]}
        return task_metrics(self.spec, self.precision, ref, cand, noise=noise)


def _completed(row):
    """``row`` with its noise over every configuration of the reference (``add``'s ``complete``)."""
    if row[4] is None:
        return row
    complete, i = row[4]
    noise = complete()
    return (*row[:3], {k: np.asarray(noise[k])[i:i + 1] if k in noise else v for k, v in row[3].items()}, None)


class _Feed(dict):
    def __init__(self, arrays, sources):
        super().__init__(arrays)
        self.sources = list(sources)


def _failing_rows(metric):
    if metric["metric"] == "classification":
        return [f["row"] for f in metric.get("flipped_rows", [])]
    return sorted({m["batch_element"] for m in metric.get("missed", [])})


def judge_task_rows(ctx, spec, precision, rows, pool, candidate, result):
    """Sweep the pool, judge every source, record ``task_by_source``; a failing source fails ``result`` and its
    failing rows are saved as a ``matches_reference`` reproducer (replay judges them with the same metric).
    Returns the inputs of the failing rows (None when every source passes)."""
    from paritygate.backend.runtimes import reference_runner

    rows.sweep(pool, reference_runner(ctx, spec), candidate)
    by_source, failures, inputs = rows.judge()
    result.details["task_by_source"] = by_source
    if not failures:
        return None
    text = "\n".join(failures)
    result.failures.append(text)
    result.set_inconclusive(None)  # a failure is a verdict about the candidate
    result.details["task_reproducer"] = ctx.save_reproducer(spec, precision, "matches_reference", inputs,
                                                            failures[:1])
    return inputs
