"""Plans that hold: what a plan (``fp16_keep_fp32`` / ``int8_exclude``) for one model and precision must pass
before it is called verified, and the one plan per model and precision that every failing check shares.

A plan is verified only when every failing check of the artifact, re-run with it on all of that check's inputs,
passes, and so does a fresh seeded sample (``Evidence``):

- ``matches_reference``: the reference set (goldens, else ``inputs/<model>.npz`` through the live reference)
  with its labels, judged as the check judges it (elementwise policy plus the task metric);
- ``property_parity``: every input the property ran (the ledger's feeds), the model's corner batches and each
  input-set row as is, judged as the property judges them (elementwise policy against max(limit, 2 x the
  reference's own spread), and the task metric per source on the in-distribution rows, ``paritygate.judge.task_rows``);
- a fresh sample: ``FRESH_EXAMPLES`` feeds drawn from the property's own strategy with ``FRESH_SEED`` (not the
  run's seed), judged as ``property_parity`` judges them. The reference set, corners, input-set rows and fresh
  sample are in every model+precision's evidence from the start, whichever check failed first, so two checks of
  one artifact search the same evidence.

The first failing check of an artifact searches a plan; a later one re-judges that plan on the evidence grown by
its own inputs and keeps it when it holds, else searches again starting from it, and the grown plan replaces the
earlier one in every check of that artifact in this process (``PlanBook``).
"""

import threading
from contextlib import contextmanager

import numpy as np

from paritygate.common.digest import digest

FRESH_SEED = 20240611  # any fixed seed other than the run's: the sample is fresh, and the same on every run
FRESH_EXAMPLES = 12  # Hypothesis feeds of 1..max_batch rows (about 30 rows at max_batch 4)


class Evidence:
    """What a plan must pass for one model and precision (module doc). ``profile(feed)`` is the reference's
    noise profile of a feed (``reference_noise.ReferenceNoise.profile``), cached per feed."""

    def __init__(self, spec, precision, profile):
        self.spec, self.precision, self.profile = spec, precision, profile
        self.reference = None  # (inputs, outputs, labels) of matches_reference
        self.feeds, self.pool, self._digests = [], None, set()
        self.parts = {}  # what each part holds, for the report: name -> rows
        self.failing_feed = None  # the inputs of the last judge's first failure (where to localize next)
        self._ahead = None  # the thread of ``profiled_ahead``

    def add_reference_set(self, inputs, outputs, labels=None, name="matches_reference"):
        self.reference = (inputs, outputs, labels)
        self.parts[name] = len(next(iter(inputs.values())))

    def add_feeds(self, name, feeds):
        """Property-style feeds (``strategies.Feed`` with row sources, or plain dicts: noise), each once."""
        added = 0
        for feed in feeds:
            key = digest({k: np.asarray(v) for k, v in feed.items()})
            if key not in self._digests:
                self._digests.add(key)
                self.feeds.append(feed)
                added += len(next(iter(feed.values())))
        self.parts[name] = self.parts.get(name, 0) + added

    def add_pool(self, pool):
        if pool is not None and len(pool):
            self.pool = pool
            self.parts["input_set_rows"] = len(pool)

    def describe(self):
        return {"rows": dict(self.parts), "fresh_seed": FRESH_SEED, "fresh_examples": FRESH_EXAMPLES,
                "judged_as": "each check's own judgement: elementwise policy (property rows against max(limit, "
                             "2 x the reference's spread)) and the task metric per source"}

    @contextmanager
    def profiled_ahead(self):
        """The reference's profile of every feed, made in a thread of its own while the ``with`` block runs (issue
        37): a search ranks and rebuilds in the apart worker first, while the reference's process would wait, and
        the fresh sample alone is ~30 rows of it (7 core-seconds of ResNet50's). The feeds are profiled in the
        order ``judge`` would (so the reference's repeats fall on the same ones, ``reference_noise.REPEAT_FIRST``),
        and ``judge`` waits for the thread before it asks for one: one thread at a time talks to the reference.
        Leaving the block stops it between two feeds and waits for it. An error is left to ``judge``, which meets
        it again and reports it."""
        from paritygate.common import timeline

        stop = threading.Event()

        def run():
            timeline.aside()  # the reference's time, not the test's own
            for feed in list(self.feeds):
                if stop.is_set():
                    return
                try:
                    self.profile(feed)
                except Exception:  # noqa: BLE001 - judge meets it again and reports it
                    return

        self._ahead = threading.Thread(target=run, name="paritygate-evidence", daemon=True)
        self._ahead.start()
        try:
            yield self
        finally:
            stop.set()
            self._join()

    def _join(self):
        if self._ahead is not None:
            self._ahead.join()
            self._ahead = None

    def judge(self, run):
        """Failure lines of the candidate ``run(feed) -> outputs`` over the whole evidence ([] = it passes)."""
        from paritygate.judge.parity import compare
        from paritygate.judge.task_rows import TASKS, TaskRows

        self._join()  # profiled_ahead's thread: the reference answers one caller at a time
        failures, self.failing_feed = [], None
        if self.reference is not None:
            inputs, outputs, labels = self.reference
            failures += _first(compare(self.spec, self.precision, outputs, _batched(run, inputs, self.spec.max_batch),
                                       labels).failures, "matches_reference")
            self.failing_feed = {k: v[:self.spec.max_batch] for k, v in inputs.items()} if failures else None
        rows = TaskRows(self.spec, self.precision) if self.spec.task in TASKS else None
        for feed in self.feeds:
            profile, cand = self.profile(feed), run(dict(feed))
            if rows is not None:
                rows.add(feed, profile.outputs, cand)
            result = _judged(self.spec, self.precision, profile, cand)
            failures += _first(result.failures, f"property row ({', '.join(sorted(set(_sources(feed))))})")
            if failures and self.failing_feed is None:
                self.failing_feed = dict(feed)
            if len(failures) > 3:
                return failures  # enough to reject the plan
        if rows is not None and self.pool is not None:
            rows.sweep(self.pool, _Reference(self.profile), _Runner(run))
        if rows is not None:
            failures += rows.judge()[1]
        return failures


def _judged(spec, precision, profile, cand, conditioned=False):
    """A property row judged as ``property_parity`` judges it: against max(limit, 2 x the reference's spread), where
    that fails over every configuration of the reference (``ReferenceRuns.complete``), and where that fails too,
    with the reference's move under one step of its input's resolution (judge.conditioning)."""
    from paritygate.judge.parity import compare
    from paritygate.judge.reference_noise import K_REFERENCE

    result = compare(spec, precision, profile.outputs, cand, compare_task=False,
                     floors={k: K_REFERENCE * v for k, v in profile.spread(conditioned=conditioned).items()},
                     cosine_floors=profile.cosine_floors(K_REFERENCE, conditioned=conditioned))
    if result.failures and profile.complete():
        return _judged(spec, precision, profile, cand, conditioned)
    if result.failures and not conditioned and profile.conditioning() is not None:
        return _judged(spec, precision, profile, cand, conditioned=True)
    return result


def _first(failures, where):
    return [f"{where}: {failures[0]}"] if failures else []


def _sources(feed):
    return getattr(feed, "sources", None) or ["noise"]



def _batched(run, inputs, max_batch):
    n = len(next(iter(inputs.values())))
    parts = [run({k: v[i:i + max_batch] for k, v in inputs.items()}) for i in range(0, n, max_batch)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


class _Reference:
    def __init__(self, profile):
        self.profile = profile

    def infer(self, feed):
        return self.profile(feed).outputs


class _Runner:
    def __init__(self, run):
        self.run = run

    def infer(self, feed):
        return self.run(feed)


def fresh_feeds(spec, pool):
    """``FRESH_EXAMPLES`` feeds drawn by the property's own strategy (``strategies.feeds``) with ``FRESH_SEED``."""
    from hypothesis import HealthCheck, Phase, given, seed, settings

    from paritygate.inputs.strategies import feeds

    drawn = []

    @seed(FRESH_SEED)
    @settings(max_examples=FRESH_EXAMPLES, phases=[Phase.generate], database=None, deadline=None,
              derandomize=False, suppress_health_check=list(HealthCheck))
    @given(feed=feeds(spec, pool=pool))
    def draw(feed):
        drawn.append(feed)

    draw()
    return drawn


def base_evidence(spec, precision, profile, reference_set=None, pool=None):
    """The evidence every model+precision starts with: the reference set, corners, input-set rows and the fresh
    sample (module doc)."""
    from paritygate.inputs.strategies import corner_feeds

    ev = Evidence(spec, precision, profile)
    if reference_set is not None:
        ev.add_reference_set(reference_set.inputs, reference_set.outputs, reference_set.labels)
        if len(reference_set.groups) > 1:  # a dynamic model's other shapes
            ev.add_feeds("reference_set_shapes", [g.inputs for g in reference_set.groups[1:]])
    ev.add_pool(pool)
    ev.add_feeds("corners", corner_feeds(spec))
    ev.add_feeds("fresh_sample", fresh_feeds(spec, pool))
    return ev


PLAN_KEYS = ("keep_fp32", "exclude_from_quantization", "verified", "config", "trials", "search_budget",
             "verification", "verified_on", "plan_note", "plan_failure")


class PlanBook:
    """One plan per model and precision in this process: the evidence it grew from, the plan found, and the
    ``divergence`` dicts of the checks that printed it (their plan keys updated in place when the plan grows)."""

    def __init__(self, evidence):
        self.evidence, self.found, self.shown, self.checks = evidence, None, [], []

    @property
    def nodes(self):
        """The verified plan's nodes so far ([] when none)."""
        if not self.found or not self.found.get("verified"):
            return []
        return list(self.found.get("keep_fp32", self.found.get("exclude_from_quantization")) or [])

    def publish(self, found, check):
        """Record ``found`` (a check's divergence dict) as the artifact's plan: every check that showed an
        earlier plan now shows this one, and each lists the checks it covers."""
        if check not in self.checks:
            self.checks.append(check)
        self.found = found
        if not any(d is found for d in self.shown):
            self.shown.append(found)
        plan = {k: found[k] for k in PLAN_KEYS if k in found}
        for d in self.shown:
            d.update({**plan, "covers": list(self.checks)})
        return found
