"""CPU time of every test of a pytest run (issue 19: where the test suite's time goes on 2 cores). A pytest
plugin: each test's CPU seconds in its own process (every thread: ONNX Runtime's and TensorFlow's too) and in the
child processes it waited for (tf2onnx, CLI and pytest subprocesses, Beam's SDK workers), and its wall time, one
tab-separated line per test, appended to ``$MEASURE_CPU_OUT`` (default ``cpu-by-test.tsv``). Under xdist each
worker appends its own tests. Wall time says how long a test took; on a saturated machine CPU time says what it
costs the run.

    PYTHONPATH=docs .venv/bin/pytest -n auto --dist worksteal -m 'not latency' -p measure_cpu
    sort -t$'\t' -k1 -rn cpu-by-test.tsv | head -30      # self + children CPU s, self, children, wall, test

Two more columns at each line's end (docs/bench_real_size.py reads them): the process's resident memory after the test
and its peak so far, in GiB (``/proc/self/status`` VmRSS, ``ru_maxrss``).
"""

import os
import resource
import time

import pytest


def _now():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, time.perf_counter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = _now()
    yield
    own, children, wall = (b - a for a, b in zip(start, _now()))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    with open(os.environ.get("MEASURE_CPU_OUT", "cpu-by-test.tsv"), "a") as f:
        f.write(f"{own + children:.2f}\t{own:.2f}\t{children:.2f}\t{wall:.2f}\t{item.nodeid}\t{_rss():.3f}\t{peak:.3f}\n")


def _rss():
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 2**20
    except (OSError, StopIteration):
        return float("nan")
