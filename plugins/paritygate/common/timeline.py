"""Where a run's time went: conversion, reference, candidate, checks (one line in the terminal summary).

Per process, like the cache counters (xdist workers hand theirs to the controller):

- ``conversion``: building artifacts the suite caches (tf2onnx, the fp16/int8 artifacts, Keras exports,
  TensorRT engines): the builds of ``paritygate.backend.cache``, hits cost nothing here;
- ``reference``: TensorFlow loading the reference and running it (live runs and cache misses; a cache hit is
  a file read, left to ``checks``);
- ``candidate``: the candidate runtime loading its artifact and running it;
- ``checks``: the rest of the time spent inside the tests (comparison, Hypothesis, Beam pipelines, reports).
"""

import threading
import time
from contextlib import contextmanager

SPENT = {"conversion": 0.0, "reference": 0.0, "candidate": 0.0, "checks": 0.0}
PARTS = ("conversion", "reference", "candidate")
ASIDE = {"s": 0.0}  # the parts' time of threads working beside the tests (``aside``): no test's own


@contextmanager
def spent(part):
    """Add the time of the ``with`` block to ``part``; a part nested in it (an engine built while a runner
    loads) keeps its own time, which the outer part does not count again."""
    stack = _open()
    start = time.perf_counter()
    stack.append([part, 0.0])
    try:
        yield
    finally:
        _, nested = stack.pop()
        elapsed = time.perf_counter() - start
        SPENT[part] += elapsed - nested
        if getattr(_LOCAL, "aside", False):
            ASIDE["s"] += elapsed - nested
        if stack:
            stack[-1][1] += elapsed


_LOCAL = threading.local()  # Beam runs DoFns (and the reference inside them) on its own threads


def aside():
    """Mark this thread as working beside the tests (``backend.ahead``'s builds): its time is still its part's,
    but not taken out of the time of the test that runs meanwhile (``in_test``), as a Beam thread's reference is."""
    _LOCAL.aside = True


def _inside():
    return sum(SPENT[p] for p in PARTS) - ASIDE["s"]


def _open():
    if not hasattr(_LOCAL, "stack"):
        _LOCAL.stack = []
    return _LOCAL.stack


@contextmanager
def in_test():
    """Time a test: what its conversion / reference / candidate parts did not take goes to ``checks``."""
    before, start = _inside(), time.perf_counter()
    try:
        yield
    finally:
        inside = _inside() - before
        SPENT["checks"] += max(0.0, time.perf_counter() - start - inside)


def summary_line(seconds, wall, processes):
    """``paritygate: time: 52.3 s = conversion 12.1 s, reference 9.3 s, candidate 1.2 s, checks 29.7 s ...``"""
    total = sum(seconds.get(k, 0.0) for k in SPENT)
    parts = ", ".join(f"{k} {seconds.get(k, 0.0):.1f} s" for k in SPENT)
    where = "1 process" if processes == 1 else f"summed over {processes} processes"
    return f"paritygate: time: {total:.1f} s = {parts} ({where}; wall {wall:.1f} s)"
