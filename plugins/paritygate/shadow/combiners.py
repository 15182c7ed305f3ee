"""Bounded-memory statistics of a shadow run, as one Beam ``CombineFn`` per candidate precision.

The accumulator's size depends on the number of outputs, classes, slices (at most MAX_SLICES) and K, never on the
number of examples: a relative-error quantile sketch per output (DDSketch: Masson, Rim & Lee, "DDSketch: a fast and
fully-mergeable quantile sketch with relative-error guarantees", VLDB 2019) and the K worst examples.
"""

import heapq
import math
from collections import Counter

import apache_beam as beam

from paritygate.comparator.stats import nearest_rank

SKETCH_ACCURACY = 0.01  # each quantile within 1% of a true sample value (DDSketch's alpha); the max is exact
SKETCH_SOURCE = "DDSketch (Masson, Rim & Lee, VLDB 2019), relative accuracy 1%; max exact"
MAX_SLICES = 1000  # slice values beyond this many are pooled under OTHER_SLICE (bounded memory)
OTHER_SLICE = "(other slices)"
QUANTILES = (50, 99, 99.9)


class QuantileSketch:
    """Log-bucketed histogram of non-negative values: bucket i holds (gamma^(i-1), gamma^i]; zero apart."""

    gamma = (1 + SKETCH_ACCURACY) / (1 - SKETCH_ACCURACY)

    def __init__(self):
        self.buckets, self.zeros, self.count, self.max, self.max_key = Counter(), 0, 0, -math.inf, None

    def add(self, value, key=None):
        self.count += 1
        if not value > 0:  # 0, and NaN errors (counted as non-finite elsewhere)
            self.zeros += 1
        else:
            self.buckets[math.ceil(math.log(value) / math.log(self.gamma))] += 1
        if value > self.max or self.max_key is None:
            self.max, self.max_key = value, key

    def merge(self, other):
        self.buckets.update(other.buckets)
        self.zeros += other.zeros
        self.count += other.count
        if other.max_key is not None and (other.max > self.max or self.max_key is None):
            self.max, self.max_key = other.max, other.max_key
        return self

    def quantile(self, q):
        """The nearest-rank q-th percentile (comparator.stats), within SKETCH_ACCURACY of the exact one."""
        if not self.count:
            return None
        rank = nearest_rank(self.count, q)
        if rank <= self.zeros:
            return 0.0
        seen = self.zeros
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen >= rank:
                return min(2 * self.gamma ** i / (self.gamma + 1), self.max)
        return self.max

    def summary(self):
        return {**{f"p{q:g}": self.quantile(q) for q in QUANTILES}, "max": self.max if self.count else None,
                "key_of_max": self.max_key, "examples": self.count, "method": SKETCH_SOURCE}


class OutputStats:
    """One output over all examples: elements, mismatching elements, examples failing, non-finite, |error|."""

    def __init__(self):
        self.elements = self.mismatches = self.failing_examples = 0
        self.nonfinite = Counter()
        self.abs_error = QuantileSketch()

    def add(self, row, key):
        self.elements += row["elements"]
        self.mismatches += row["mismatches"]
        self.failing_examples += int(not row["passed"])
        self.nonfinite.update({k: row[k] for k in ("reference_nan", "reference_inf", "candidate_nan",
                                                   "candidate_inf") if row[k]})
        self.abs_error.add(row["max_abs"], key)

    def merge(self, other):
        self.elements += other.elements
        self.mismatches += other.mismatches
        self.failing_examples += other.failing_examples
        self.nonfinite.update(other.nonfinite)
        self.abs_error.merge(other.abs_error)
        return self


class ShadowStats:
    """Everything a precision's verdicts need, mergeable; ``k`` worst examples kept whole (inputs included)."""

    def __init__(self, k):
        self.k, self.examples, self.failing = k, 0, 0
        self.outputs, self.flips, self.per_class, self.slices = {}, None, {}, {}
        self.detection = None  # [reference detections, matched]
        self.worst = []  # min-heap of (score, key, record)

    def add(self, record):
        self.examples += 1
        self.failing += int(not record["passed"])
        for name, row in record["outputs"].items():
            self.outputs.setdefault(name, OutputStats()).add(row, record["key"])
        flipped = self._add_task(record)
        self._add_slice(record.get("slice"), flipped, not record["passed"])
        self._keep_worst(((int(flipped), int(not record["passed"]), record["score"]), record["key"], record))
        return self

    def _add_task(self, record):
        top1 = record.get("top1")
        if top1 is not None:
            ref, cand = top1
            self.flips = (self.flips or 0) + int(ref != cand)
            row = self.per_class.setdefault(int(ref), [0, 0])
            row[0] += 1
            row[1] += int(ref != cand)
        if record.get("detection") is not None:
            self.detection = [a + b for a, b in zip(self.detection or [0, 0], record["detection"])]
        return top1 is not None and top1[0] != top1[1]

    def _add_slice(self, value, flipped, failing, n=1):
        if value is None:
            return
        value = str(value)
        if value not in self.slices and len(self.slices) >= MAX_SLICES:
            value = OTHER_SLICE
        row = self.slices.setdefault(value, [0, 0, 0])
        row[0] += n
        row[1] += int(flipped)
        row[2] += int(failing)

    def _keep_worst(self, item):
        if len(self.worst) < self.k:
            heapq.heappush(self.worst, item)
        elif item[:2] > self.worst[0][:2]:
            heapq.heapreplace(self.worst, item)

    def merge(self, other):
        self.examples += other.examples
        self.failing += other.failing
        for name, stats in other.outputs.items():
            self.outputs.setdefault(name, OutputStats()).merge(stats)
        if other.flips is not None:
            self.flips = (self.flips or 0) + other.flips
        for cls, (n, f) in other.per_class.items():
            row = self.per_class.setdefault(cls, [0, 0])
            row[0] += n
            row[1] += f
        if other.detection is not None:
            self.detection = [a + b for a, b in zip(self.detection or [0, 0], other.detection)]
        for value, (n, f, bad) in other.slices.items():
            self._add_slice(value, 0, 0, n=0)
            row = self.slices.get(value) or self.slices[OTHER_SLICE]
            row[0] += n
            row[1] += f
            row[2] += bad
        for item in other.worst:
            self._keep_worst(item)
        return self

    def worst_first(self):
        """The kept records, worst first."""
        return [record for *_, record in sorted(self.worst, key=lambda item: item[:2], reverse=True)]


class ShadowStatsFn(beam.CombineFn):
    """``beam.CombinePerKey(ShadowStatsFn(k))`` over (precision, judged record)."""

    def __init__(self, k):
        self.k = k

    def create_accumulator(self):
        return ShadowStats(self.k)

    def add_input(self, acc, record):
        return acc.add(record)

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        first = next(accumulators)
        for acc in accumulators:
            first.merge(acc)
        return first

    def extract_output(self, acc):
        return acc
