"""Case strategies and ``explore``: a property over pipeline cases, explicit cases first, no shrinking."""

import pytest

pytest.importorskip("apache_beam")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import given, settings

from paritygate.beam import cases
from paritygate.beam.pipeline import KEY_KINDS
from tests.conftest import toy_spec

pytestmark = [pytest.mark.beam]

SPEC = toy_spec(max_batch=4)


@settings(max_examples=50)
@given(cases.cases(SPEC, ("FnApiRunner", "BundleBasedDirectRunner"), poison=True))
def test_cases_stay_within_the_model(case):
    assert 1 <= case.count <= 2 * SPEC.max_batch + 1
    assert 1 <= case.min_batch <= case.max_batch <= SPEC.max_batch
    assert (case.keys in KEY_KINDS) == (case.wrapper in ("keyed", "maybe_keyed"))
    assert 0 <= case.poison < case.count and case.exceptions


def test_explicit_cases_cover_growing_and_full_batches():
    plain, keyed = cases.explicit_cases(SPEC, ("FnApiRunner",))
    assert (plain.count, plain.min_batch, plain.max_batch, plain.wrapper) == (9, 1, 4, "plain")
    assert (keyed.count, keyed.min_batch, keyed.max_batch, keyed.wrapper) == (17, 4, 4, "keyed")


def test_explore_runs_explicit_cases_first_and_stops_at_a_failure():
    explicit = cases.explicit_cases(SPEC, ("FnApiRunner",))
    strategy = cases.cases(SPEC, ("FnApiRunner",))
    case, failures, ran = cases.explore(strategy, explicit, lambda c: [], 3)
    assert case is None and failures == [] and ran[:2] == explicit and len(ran) <= 5
    case, failures, ran = cases.explore(strategy, explicit, lambda c: ["bad"] if c.wrapper == "keyed" else [], 3)
    assert case == explicit[1] and failures == ["bad"]


def test_pipeline_examples_scale_with_the_profile():
    assert cases.pipeline_examples() == max(1, settings.default.max_examples // 5)
    assert cases.pipeline_examples(cases.DEAD_LETTER_EXAMPLES_DIVISOR) == max(1, settings.default.max_examples // 10)


def test_a_derandomised_profile_draws_the_same_cases_in_every_process(monkeypatch):
    """Under ci's profile (derandomize) the drawn cases do not depend on the process's seed: a rerun, or another
    xdist worker, runs the same pipelines, so the reference cache serves their batches. Without it, each process
    draws its own."""
    explicit, strategy = cases.explicit_cases(SPEC, ("FnApiRunner",)), cases.cases(SPEC, ("FnApiRunner",))

    def drawn(process_seed):
        monkeypatch.setattr(cases, "SESSION_SEED", process_seed)
        return cases.explore(strategy, explicit, lambda c: [], 5)[2][2:]

    before = settings.get_current_profile_name()
    try:
        for derandomize in (True, False):  # True: as the ci profile sets it
            settings.register_profile("test-derandomize", settings.get_profile(before), derandomize=derandomize)
            settings.load_profile("test-derandomize")
            assert (drawn(1) == drawn(2)) is derandomize and len(drawn(1)) >= 3
    finally:
        settings.load_profile(before)
