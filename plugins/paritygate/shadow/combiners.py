"""Beam ``CombineFn``s of a shadow run: ``ShadowStatsFn`` folds the judged records of a precision into a
``shadow.stats.ShadowStats`` (``MergedStatsFn`` the ShadowStats of each bundle); ``KeyCheckFn`` counts the records whose key another record holds too (a key
feature that is not unique). Imports apache_beam: import it on first use."""

import hashlib

import apache_beam as beam
import numpy as np

from paritygate.shadow.stats import ShadowStats

KEY_BUFFER = 1 << 16  # keys held as strings before they are folded into 8-byte digests
KEY_SAMPLES = 5  # repeated keys named in the error


class Folding(beam.CombineFn):
    """A CombineFn over accumulators that ``add`` an input and ``merge`` another accumulator, made by ``make()``."""

    def make(self):
        raise NotImplementedError

    def create_accumulator(self):
        return self.make()

    def add_input(self, acc, element):
        return acc.add(element)

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        first = next(accumulators)
        for acc in accumulators:
            first.merge(acc)
        return first

    def extract_output(self, acc):
        return acc


class ShadowStatsFn(Folding):
    """``beam.CombinePerKey(ShadowStatsFn(k))`` over (precision, judged record) -> a ShadowStats."""

    def __init__(self, k):
        self.k = k

    def make(self):
        return ShadowStats(self.k)


class MergedStatsFn(ShadowStatsFn):
    """``beam.CombinePerKey(MergedStatsFn(k))`` over (precision, a bundle's ShadowStats) -> one ShadowStats."""

    def add_input(self, acc, stats):
        return acc.merge(stats)


def key_digest(key):
    return int.from_bytes(hashlib.blake2b(str(key).encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


class KeyTally:
    """The distinct keys seen, as sorted 8-byte digests (8 bytes a record: only with a key feature), the records
    whose key repeats one seen before, and up to KEY_SAMPLES of those keys by name. Two different keys share a
    64-bit digest with probability about N^2 / 2^65 (1e-8 at N = 10^6)."""

    def __init__(self):
        self.digests = np.zeros(0, np.uint64)
        self.pending = {}  # digest -> key, not yet folded
        self.records = self.repeated = 0
        self.samples = []

    def add(self, key):
        self.records += 1
        digest = key_digest(key)
        if digest in self.pending:
            self._repeat(key)
        else:
            self.pending[digest] = key
        if len(self.pending) >= KEY_BUFFER:
            self.fold()
        return self

    def _repeat(self, key, n=1):
        self.repeated += n
        if len(self.samples) < KEY_SAMPLES and str(key) not in self.samples:
            self.samples.append(str(key))

    def fold(self):
        """Fold the pending keys into the digests, counting those seen before."""
        if not self.pending:
            return self
        new = np.fromiter(self.pending, np.uint64, len(self.pending))
        seen = np.isin(new, self.digests, assume_unique=True)
        for digest in new[seen][:KEY_SAMPLES]:
            self._repeat(self.pending[int(digest)], 0)
        self.repeated += int(seen.sum())
        self.digests = np.union1d(self.digests, new)
        self.pending = {}
        return self

    def merge(self, other):
        self.fold()
        seen = np.isin(other.digests, self.digests, assume_unique=True)
        self.repeated += other.repeated + int(seen.sum())
        for key in other.samples:
            self._repeat(key, 0)
        self.digests = np.union1d(self.digests, other.digests)
        for digest, key in other.pending.items():  # by name, where the other still holds them
            if digest in self.pending:
                self._repeat(key)
            else:
                self.pending[digest] = key
        self.fold()
        self.records += other.records
        return self


class KeyCheckFn(Folding):
    """``beam.CombineGlobally(KeyCheckFn())`` over the records' keys -> (records, repeated, sample keys)."""

    def make(self):
        return KeyTally()

    def extract_output(self, acc):
        acc.fold()
        return acc.records, acc.repeated, acc.samples


class OutsideTally:
    """Records holding values outside an input's declared range: per input [records, values, min seen, max seen],
    the records in all, and up to KEY_SAMPLES of their keys."""

    def __init__(self):
        self.inputs, self.records, self.samples = {}, 0, []

    def add(self, element):
        key, outside = element
        self.records += 1
        if len(self.samples) < KEY_SAMPLES:
            self.samples.append(str(key))
        for name, count, lo, hi in outside:
            row = self.inputs.setdefault(name, [0, 0, lo, hi])
            row[0] += 1
            row[1] += count
            row[2], row[3] = min(row[2], lo), max(row[3], hi)
        return self

    def merge(self, other):
        self.records += other.records
        self.samples = (self.samples + other.samples)[:KEY_SAMPLES]
        for name, (records, values, lo, hi) in other.inputs.items():
            row = self.inputs.setdefault(name, [0, 0, lo, hi])
            row[0] += records
            row[1] += values
            row[2], row[3] = min(row[2], lo), max(row[3], hi)
        return self


class OutsideFn(Folding):
    """``beam.CombineGlobally(OutsideFn())`` over (key, outside) -> an OutsideTally."""

    def make(self):
        return OutsideTally()
