"""paritygate.common.timeline: each second of a test lands in one part (conversion, reference, candidate, checks); a part
nested in another keeps its own time; the summary line adds the parts up."""

import threading
import time

import pytest

from paritygate.common import timeline


@pytest.fixture
def spent(monkeypatch):
    for k in timeline.SPENT:
        monkeypatch.setitem(timeline.SPENT, k, 0.0)
    return timeline.SPENT


def test_nested_parts_count_once_and_the_rest_of_a_test_is_checks(spent):
    with timeline.in_test():
        with timeline.spent("candidate"):
            time.sleep(0.02)
            with timeline.spent("conversion"):  # an engine built while the runner loads
                time.sleep(0.05)
        time.sleep(0.03)
    assert 0.05 <= spent["conversion"] < 0.07 + 0.05
    assert 0.02 <= spent["candidate"] < 0.05, "the nested conversion is not counted again"
    assert 0.03 <= spent["checks"] < 0.08
    assert spent["reference"] == 0.0


def test_threads_keep_their_own_nesting(spent):
    def work():
        with timeline.spent("reference"):
            time.sleep(0.03)

    with timeline.spent("candidate"):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert spent["reference"] >= 0.03 and spent["candidate"] >= 0.03  # the thread's part is not nested here


def test_a_thread_working_aside_keeps_its_part_and_takes_nothing_from_the_test(spent):
    """``backend.ahead``'s builds: conversion time, not taken out of the check that runs meanwhile."""
    def work():
        timeline.aside()
        with timeline.spent("conversion"):
            time.sleep(0.1)

    with timeline.in_test():
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert 0.1 <= spent["conversion"] < 0.2
    assert 0.1 <= spent["checks"] < 0.2, "the test's own time is all checks"


def test_a_runner_counts_its_loading_and_runs_in_its_part(spent):
    np = pytest.importorskip("numpy")
    from paritygate.backend.base import BaseRunner

    class Slow(BaseRunner):
        time_as = "reference"

        def activate_impl(self):
            time.sleep(0.02)

        def infer_impl(self, feed):
            time.sleep(0.01)
            return feed

    Slow("slow").activate().infer({"x": np.zeros(1)})
    assert spent["reference"] >= 0.03 and spent["checks"] == 0.0


def test_the_summary_line_names_every_part_and_their_sum():
    line = timeline.summary_line({"conversion": 1.0, "reference": 2.25, "candidate": 0.5, "checks": 3.0}, 7.5, 3)
    assert line == ("paritygate: time: 6.8 s = conversion 1.0 s, reference 2.2 s, candidate 0.5 s, checks 3.0 s "
                    "(summed over 3 processes; wall 7.5 s)")
