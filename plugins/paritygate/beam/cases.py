"""Hypothesis strategies of pipeline ``Case``s, and ``explore``: a property over real pipeline runs.

A pipeline run costs 0.2-1 s, so pipeline properties run far fewer examples than the profile's
``max_examples``: ``pipeline_examples()`` = max_examples // 5 (ci: 25 -> 5, dev: 10 -> 2, nightly: 400 -> 80),
after two explicit cases every property always runs (``explicit_cases``: plain, and keyed with batches of
exactly max_batch), and without shrinking (each shrink step would be another pipeline). Every property over
a model draws the same cases (one seed per process; under a derandomised profile, ci's, the same cases in every
process and every run, so a rerun's pipelines and their reference batches are the same), and
``pipeline.run_case`` memoises runs, so the exactly-once, pairing, batch-bound and metric checks share
their pipelines.
"""

import random

from paritygate.beam.pipeline import KEY_KINDS, LOCAL_RUNNERS, WRAPPERS, Case

PIPELINE_EXAMPLES_DIVISOR = 5
DEAD_LETTER_EXAMPLES_DIVISOR = 10
SESSION_SEED = random.SystemRandom().getrandbits(32)  # one per process: the properties share their cases


class PropertyFailed(AssertionError):
    def __init__(self, case, failures):
        super().__init__(f"{case}: {failures}")
        self.case, self.failures = case, failures


def runners_for(subject):
    return (subject.runner,) if subject.runner else LOCAL_RUNNERS


def max_count(spec):
    return 2 * spec.max_batch + 1


def cases(spec, runners, wrappers=WRAPPERS, poison=False):
    """Cases over element counts 1..2*max_batch+1, (min, max) batch sizes in 1..max_batch, wrappers and keys."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        count = draw(st.integers(1, max_count(spec)))
        low = draw(st.integers(1, spec.max_batch))
        high = draw(st.integers(low, spec.max_batch))
        wrapper = draw(st.sampled_from(wrappers))
        keys = draw(st.sampled_from(KEY_KINDS)) if wrapper in ("keyed", "maybe_keyed") else "none"
        return Case(count, low, high, wrapper, keys, seed=draw(st.integers(0, 2**16)),
                    runner=draw(st.sampled_from(runners)),
                    poison=draw(st.integers(0, count - 1)) if poison else None, exceptions=poison)

    return strategy()


def explicit_cases(spec, runners, poison=False):
    """The cases every property runs first: plain, 2*max_batch+1 elements in batches growing from 1
    (BatchElements' estimator starts at min_batch_size and at most doubles), and keyed, 4*max_batch+1 elements
    in batches fixed at max_batch (a handler that drops max_batch_size gets batches past it here)."""
    n, m = max_count(spec), 4 * spec.max_batch + 1
    return [Case(n, 1, spec.max_batch, "plain", runner=runners[0], poison=n // 2 if poison else None,
                 exceptions=poison),
            Case(m, spec.max_batch, spec.max_batch, "keyed", "unique_str", seed=1, runner=runners[-1],
                 poison=m // 2 if poison else None, exceptions=poison)]


def pipeline_examples(divisor=PIPELINE_EXAMPLES_DIVISOR):
    from hypothesis import settings

    return max(1, settings.default.max_examples // divisor)


def explore(strategy, explicit, prop, max_examples):
    """Run ``prop(case) -> list of failures`` on the explicit cases, then on up to ``max_examples`` drawn
    ones; returns (first failing case or None, its failures, cases run)."""
    from hypothesis import Phase, example, given, seed, settings

    ran = []

    def check(case):
        ran.append(case)
        failures = prop(case)
        if failures:
            raise PropertyFailed(case, failures)

    test = given(strategy)(check)
    for case in reversed(explicit):
        test = example(case)(test)
    test = settings(max_examples=max_examples, phases=(Phase.explicit, Phase.generate), database=None,
                    deadline=None, report_multiple_bugs=False)(test)
    if not settings.default.derandomize:  # an explicit seed would override the profile's derandomisation
        test = seed(SESSION_SEED)(test)
    try:
        test()
    except PropertyFailed as failed:
        return failed.case, failed.failures, _unique(ran)
    return None, [], _unique(ran)


def _unique(cases):
    return list(dict.fromkeys(cases))
