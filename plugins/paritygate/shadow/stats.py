"""The statistics of a shadow run, bounded in memory and mergeable: what ``combiners.ShadowStatsFn`` folds per
candidate precision inside the pipeline, and what a report's ``shadow_*`` records carry (``to_json``), so that
reports of several runs or workers merge into one set of counts (``paritygate report``: ``shadow.merge``).

The size depends on the number of outputs, classes, slices (at most MAX_SLICES) and K, never on the number of
examples: a relative-error quantile sketch per output (DDSketch: Masson, Rim & Lee, "DDSketch: a fast and
fully-mergeable quantile sketch with relative-error guarantees", VLDB 2019) and the K worst examples. No Beam
import: the report reads and merges these without it.
"""

import heapq
import math
from collections import Counter

from paritygate.comparator.stats import nearest_rank

SKETCH_ACCURACY = 0.01  # each quantile within 1% of a true sample value (DDSketch's alpha); the max is exact
SKETCH_SOURCE = "DDSketch (Masson, Rim & Lee, VLDB 2019), relative accuracy 1%; max exact"
MAX_SLICES = 1000  # slice values beyond this many are pooled under OTHER_SLICE (bounded memory)
OTHER_SLICE = "(other slices)"
QUANTILES = (50, 99, 99.9)
NONFINITE = ("reference_nan", "reference_inf", "candidate_nan", "candidate_inf")
SLICE_FIELDS = ("examples", "flips", "failing", "detections", "missed")


class QuantileSketch:
    """Log-bucketed histogram of non-negative values: bucket i holds (gamma^(i-1), gamma^i]; zero apart."""

    gamma = (1 + SKETCH_ACCURACY) / (1 - SKETCH_ACCURACY)
    log_gamma = math.log(gamma)

    def __init__(self):
        self.buckets, self.zeros, self.count, self.max, self.max_key = Counter(), 0, 0, -math.inf, None

    def add(self, value, key=None):
        self.count += 1
        if not value > 0:  # 0, and NaN errors (counted as non-finite elsewhere)
            self.zeros += 1
        else:
            self.buckets[math.ceil(math.log(value) / self.log_gamma)] += 1
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

    def to_json(self):
        return {"buckets": [[i, n] for i, n in sorted(self.buckets.items())], "zeros": self.zeros,
                "count": self.count, "max": self.max if self.count else None, "max_key": self.max_key}

    @classmethod
    def from_json(cls, data):
        sketch = cls()
        sketch.buckets = Counter({int(i): int(n) for i, n in data["buckets"]})
        sketch.zeros, sketch.count = int(data["zeros"]), int(data["count"])
        sketch.max = -math.inf if data["max"] is None else float(data["max"])
        sketch.max_key = data["max_key"]
        return sketch


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
        self.nonfinite.update({k: row[k] for k in NONFINITE if row[k]})
        self.abs_error.add(row["max_abs"], key)

    def merge(self, other):
        self.elements += other.elements
        self.mismatches += other.mismatches
        self.failing_examples += other.failing_examples
        self.nonfinite.update(other.nonfinite)
        self.abs_error.merge(other.abs_error)
        return self

    def to_json(self):
        return {"elements": self.elements, "mismatching_elements": self.mismatches,
                "failing_examples": self.failing_examples, "nonfinite": dict(self.nonfinite),
                "sketch": self.abs_error.to_json()}

    @classmethod
    def from_json(cls, data):
        stats = cls()
        stats.elements, stats.mismatches = int(data["elements"]), int(data["mismatching_elements"])
        stats.failing_examples = int(data["failing_examples"])
        stats.nonfinite = Counter({k: int(v) for k, v in data["nonfinite"].items()})
        stats.abs_error = QuantileSketch.from_json(data["sketch"])
        return stats


class Worst:
    """One kept example in the worst-K heap, ordered by (flipped, failing, score) then key: never by its record
    (two records that tie are told apart by key, and two keys that tie are equal, not compared further)."""

    __slots__ = ("rank", "record")

    def __init__(self, rank, record):
        self.rank, self.record = rank, record

    def __lt__(self, other):
        return (self.rank, str(self.record["key"])) < (other.rank, str(other.record["key"]))


def _add_counts(table, key, counts):
    row = table.setdefault(key, [0] * len(counts))
    for i, n in enumerate(counts):
        row[i] += n


class ShadowStats:
    """Everything a precision's verdicts need, mergeable; ``k`` worst examples kept whole (inputs included).

    ``classes``: reference class -> [examples, flips] (classification); ``detection_classes``: reference class ->
    [reference detections, missed] (detection); ``slices``: slice value -> SLICE_FIELDS counts."""

    def __init__(self, k):
        self.k, self.examples, self.failing = k, 0, 0
        self.outputs, self.flips, self.classes, self.slices = {}, None, {}, {}
        self.detection, self.detection_classes = None, {}  # detection: [reference detections, matched]
        self.worst = []  # min-heap of Worst

    def add(self, record):
        self.examples += 1
        self.failing += int(not record["passed"])
        for name, row in record["outputs"].items():
            self.outputs.setdefault(name, OutputStats()).add(row, record["key"])
        flipped, detections, missed = self._add_task(record)
        self._add_slice(record.get("slice"), [1, int(flipped), int(not record["passed"]), detections, missed])
        self._keep_worst(Worst((int(flipped or missed > 0), int(not record["passed"]), record["score"]), record))
        return self

    def _add_task(self, record):
        flipped, detections, missed = False, 0, 0
        top1 = record.get("top1")
        if top1 is not None:
            ref, cand = top1
            flipped = ref != cand
            self.flips = (self.flips or 0) + int(flipped)
            _add_counts(self.classes, int(ref), [1, int(flipped)])
        found = record.get("detection")
        if found is not None:
            detections, matched = found["reference_detections"], found["matched"]
            missed = detections - matched
            self.detection = [a + b for a, b in zip(self.detection or [0, 0], (detections, matched))]
            for cls, counts in found["classes"].items():
                _add_counts(self.detection_classes, int(cls), counts)
        return flipped, detections, missed

    def _add_slice(self, value, counts):
        if value is None:
            return
        value = str(value)
        if value not in self.slices and len(self.slices) >= MAX_SLICES:
            value = OTHER_SLICE
        _add_counts(self.slices, value, counts)

    def _keep_worst(self, item):
        if len(self.worst) < self.k:
            heapq.heappush(self.worst, item)
        elif self.worst[0] < item:
            heapq.heapreplace(self.worst, item)

    def merge(self, other):
        self.examples += other.examples
        self.failing += other.failing
        for name, stats in other.outputs.items():
            self.outputs.setdefault(name, OutputStats()).merge(stats)
        if other.flips is not None:
            self.flips = (self.flips or 0) + other.flips
        for table, theirs in ((self.classes, other.classes), (self.detection_classes, other.detection_classes)):
            for key, counts in theirs.items():
                _add_counts(table, key, counts)
        if other.detection is not None:
            self.detection = [a + b for a, b in zip(self.detection or [0, 0], other.detection)]
        for value, counts in other.slices.items():
            self._add_slice(value, counts)
        for item in other.worst:
            self._keep_worst(item)
        return self

    def worst_first(self):
        """The kept records, worst first."""
        return [item.record for item in sorted(self.worst, reverse=True)]
