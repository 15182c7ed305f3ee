"""paritygate.session: the recorder counts what its own run did, not what the process did before it."""

from paritygate.backend import cache, reference_cache
from paritygate.common import timeline
from paritygate.session import ParitySession


def test_a_second_session_in_one_process_counts_only_its_own_work(monkeypatch):
    """An in-process run (pytester.runpytest, or a team calling pytest.main twice) is a second session in a process
    whose counters already hold the first one's builds, cache outcomes and time."""
    monkeypatch.setattr(cache, "STATS", {"hits": 5, "builds": 4})
    monkeypatch.setattr(reference_cache, "STATS", {"computed": 524, "reused": 9, "live": 1})
    monkeypatch.setattr(timeline, "SPENT", {"conversion": 10.9, "reference": 1.8, "candidate": 0.1, "checks": 1.2})
    second = ParitySession()
    cache.STATS["hits"] += 14
    reference_cache.STATS["reused"] += 533
    timeline.SPENT["checks"] += 0.5
    assert second.cache_stats() == {"builds": 0, "hits": 14}
    assert second.reference_cache_stats() == {"enabled": second.options.reference_cache, "computed": 0, "reused": 533,
                                              "live": 0}
    spent = second.time_spent()
    assert (spent["conversion"], spent["reference"], spent["checks"]) == (0.0, 0.0, 0.5)
    handed = {}
    second._hand_over(handed)  # an xdist worker hands the controller its own counts too
    assert '"builds": 0' in handed["paritygate_cache_stats"] and '"reused": 533' in handed["paritygate_reference_cache_stats"]
