"""Property checks over each model's inputs (Hypothesis), returning results objects; the conformance tests in
``conformance/test_properties.py`` only assert on them.

    property_parity   the candidate vs the live TF reference within the precision's policy
    batch_invariance  an element's output does not depend on its batch companions, position or batch size
    determinism       identical inputs give identical outputs over repeated runs

Inputs: spec noise and corners, plus rows of the model's own input sets, as is and perturbed
(``paritygate.inputs.strategies``). Every input also runs through the reference in each configuration the candidate
is judged in (``reference_noise.ReferenceNoise``), and the candidate is never held to closer agreement than the
reference has with itself. A check whose reference outputs carry no information is inconclusive
(``paritygate.judge.vacuity``). A failing example is shrunk by Hypothesis and saved as a reproducer.
"""

from contextlib import contextmanager
from functools import cache

import numpy as np

from paritygate.backend.precision import computed_dtype
from paritygate.backend.runtimes import resolved_spec
from paritygate.common import progress
from paritygate.comparator.tolerance import (
    DETERMINISM_SOURCE,
    INVARIANCE_SOURCE,
    tolerance_for,
)
from paritygate.inputs.sampling import near_bound
from paritygate.inputs.strategies import explicit_count, feeds, input_pool, with_corner_examples
from paritygate.judge import conditioning, coverage, kernel_order, runs, vacuity
from paritygate.judge.limits import invariance_caps, invariance_limit, policy_limit, row_of, within
from paritygate.judge.nonfinite import NonfiniteLog
from paritygate.judge.parity import judge_outputs, output_records
from paritygate.judge.reference_noise import K_REFERENCE, Incomplete, Ledger, reference_noise
from paritygate.models.known import known_failure_feeds
from paritygate.result import CheckResult
from paritygate.verdict import SuiteError, inconclusive


# -- the three properties -------------------------------------------------------------------------------------
# Each ``*_check(spec, precision, candidate, ledger)`` returns the ``check(feed, reference_profile)`` its property
# runs on every input (an AssertionError: the candidate is wrong); ``paritygate.cli.replay`` runs the same one on a
# reproducer's inputs. ``candidate``: a ``judge.runs.Once``, whose ``infer`` takes an identical input's outputs from
# the earlier check that ran it (the three properties draw the same inputs under a derandomized profile).
def parity_check(spec, precision, candidate, ledger, task_rows=None):
    order = kernel_order.applies(precision)  # FP32: TensorFlow's other kernel order is reference noise too

    def limit(name, ref):
        return policy_limit(spec, precision, name, ref)

    def check(feed, profile):
        floors = {k: K_REFERENCE * v for k, v in profile.spread(kernel_order=order).items()}
        cand = candidate.infer(feed, profile.digest)
        outputs, _, failures = judge_outputs(spec, precision, profile.outputs, cand, compare_task=False, floors=floors,
                                             cosine_floors=profile.cosine_floors(K_REFERENCE, order))
        if failures and profile.pending(order):
            raise Incomplete
        wider = conditioning.floors(profile, floors) if failures else None
        if wider is not None:  # it would fail: is the reference itself that sensitive here? (judge.conditioning)
            conditioning.note(ledger.ill_conditioned, spec, feed, profile, limit)
            floors = wider
            outputs, _, failures = judge_outputs(
                spec, precision, profile.outputs, cand, compare_task=False, floors=floors,
                cosine_floors=profile.cosine_floors(K_REFERENCE, order, conditioned=True))
        if task_rows is not None:  # in-distribution rows: judged with the task metric too (paritygate.judge.task_rows)
            task_rows.add(feed, profile.outputs, cand, floors, cache(lambda: _completed_floors(profile, order)))
        ledger.applied(profile, {k: np.maximum(limit(k, ref), floors[k]) for k, ref in profile.outputs.items()})
        ledger.keep_worst(outputs)
        ledger.note_unstable(feed, profile, limit)
        assert not failures, _explain(spec, precision, feed, failures)

    return completing(check, ledger, order, task_rows)


def _completed_floors(profile, order):
    """K x the reference's spread over every configuration (``ReferenceRuns.complete``): a task row's noise."""
    profile.complete(order)
    return {k: K_REFERENCE * v for k, v in profile.spread(kernel_order=order).items()}


def completing(check, ledger, order=False, task_rows=None):
    """``check`` judged first against the reference's configurations run so far; where it would fail while the
    reference has configurations left (each row alone; ``order``: the other kernel order, judge.kernel_order), it
    raises ``Incomplete`` before anything else excuses the input (judge.conditioning): they run, what ``check``
    recorded is taken back and it is judged again. Each configuration only widens a floor or a cap, so this is the
    verdict every configuration gives (judge.reference_noise)."""

    def judged(feed, profile):
        if not profile.pending(order):
            return check(feed, profile)
        marks = ledger.mark(), task_rows.mark() if task_rows is not None else None
        try:
            return check(feed, profile)
        except Incomplete:
            ledger.rollback(marks[0])
            if task_rows is not None:
                task_rows.rollback(marks[1])
            profile.complete(order)
        return check(feed, profile)

    return judged


def property_parity(ctx, spec, precision, result=None):
    from paritygate.judge.task_rows import TASKS, TaskRows, judge_task_rows

    reference, candidate = reference_noise(ctx, spec), runs.once(ctx, spec, precision)
    given, spec = spec, resolved_spec(ctx, spec)
    pool, ledger = input_pool(ctx, spec), Ledger()
    rows = TaskRows(spec, precision) if spec.task in TASKS else None

    def limit(name, ref):
        return policy_limit(spec, precision, name, ref)

    result = _run(ctx, spec, precision, "property_parity", feeds(spec, pool=pool),
                  parity_check(spec, precision, candidate, ledger, rows),
                  reference, ledger, result, limit,
                  judge_vacuity=False)
    task_outputs = None
    if rows is not None and len(pool):
        failing = judge_task_rows(ctx, spec, precision, rows, pool, candidate, result)
        task_outputs = [ref for source_rows in rows.rows.values() for _, ref, *_ in source_rows] or None
        if failing is not None and "divergence" not in result.details:  # only the task metric failed
            from paritygate.judge.divergence import localize_failure

            found = localize_failure(ctx, spec, precision, failing, compare_task=True, check="property_parity",
                                     feeds=ledger.feeds)
            if found is not None:
                result.details["divergence"] = found
    _vacuity(spec, precision, "property_parity", ledger, result, limit, task_outputs)
    return coverage.judge(ctx, given, precision, result)


def invariance_check(spec, precision, candidate, ledger, computed=None):
    """The whole batch's run, and a row's run alone, are the candidate's earlier runs of them where a check made
    one (``judge.runs``: property_parity's, which drew the same inputs); a row met again (a corner batch's identical
    rows, an input-set row drawn again) is not run alone again, as the reference's batch-1 runs are not."""

    def alone_of(row):
        return _identity(spec, candidate.infer(row))

    def judge(pairs, spread, caps):
        return [[within(spec, name, alone[name], other[name], spread.get(name), i, INVARIANCE_SOURCE,
                         computed=computed, cap=row_of(caps.get(name), i)) for name in alone]
                for i, _, alone, other in pairs]

    def check(feed, profile):
        if not ledger.counts(feed):
            return
        pairs = _invariance_pairs(spec, candidate, feed, alone_of, profile.digest)
        spread, caps = profile.spread(), invariance_caps(spec, precision, profile)

        def limit(name, ref):
            return invariance_limit(spec, ref, computed, caps[name])

        ledger.note_unstable(feed, profile, limit, "batch1")
        judged = judge(pairs, spread, caps)
        failed = any(not o.passed for outs in judged for o in outs)
        if failed and profile.pending(kernel_order.applies(precision)):
            raise Incomplete
        if failed and profile.conditioning() is not None:
            conditioning.note(ledger.ill_conditioned, spec, feed, profile, limit)  # judge.conditioning
            spread, caps = profile.spread(conditioned=True), invariance_caps(spec, precision, profile, True)
            judged = judge(pairs, spread, caps)
        applied = {name: np.zeros(np.shape(ref), np.float32) for name, ref in profile.outputs.items()}
        for (i, label, _, _), outs in zip(pairs, judged):
            ledger.keep_worst(outs)
            for o in outs:  # the most lenient limit this row was held to: what vacuity asks about
                if o.output in applied:
                    applied[o.output][i] = np.maximum(applied[o.output][i], o._limit.reshape(applied[o.output][i].shape))
            bad = [o.describe() for o in outs if not o.passed]
            assert not bad, (f"{spec.name} {precision}: batch invariance: {label} differs from the same element alone "
                             "(batch of 1):\n" + "\n".join(bad))
        ledger.applied(profile, applied)

    return completing(check, ledger, kernel_order.applies(precision))


def _invariance_pairs(spec, candidate, feed, alone_of, key=None):
    """[(element, label, its outputs alone, its outputs in the batch)]: each element of ``feed`` alone (``alone_of``
    a row, cached by the caller: batch 1, position 0, no companions) against itself in the whole batch (``key``:
    ``feed``'s digest: batch n, position i, its companions). That one comparison sees a dependence on the batch size,
    the position and the companions at once. (Before issue 37 the batch also ran again rolled by one position: a
    second position per element at the same size, which each element alone already differs from in all three; it
    was a third of the check's candidate rows on ResNet50, and no defect of tests/test_defects.py needed it.)"""
    together = _identity(spec, candidate.infer(feed, key))
    n = len(next(iter(feed.values())))
    return [(i, f"element {i} of a batch of {n}", alone_of({k: v[i:i + 1] for k, v in feed.items()}),
             {k: v[i:i + 1] for k, v in together.items()}) for i in range(n)]


def batch_invariance(ctx, spec, precision, result=None):
    """property_parity's draws (the same strategy: under a derandomized profile the same inputs, so their reference
    runs and the candidate's whole-batch runs are made once, issue 37), each batch of two or more judged; a batch of
    one has no companions to differ by and is not counted (where ``max_batch`` is 1, every batch is one row:
    judged alone against itself again)."""
    reference, candidate = reference_noise(ctx, spec), runs.once(ctx, spec, precision)
    given, spec = spec, resolved_spec(ctx, spec)
    pool, ledger = input_pool(ctx, spec), Ledger(counts=_companions if spec.max_batch > 1 else None)
    result = _run(ctx, spec, precision, "batch_invariance", feeds(spec, pool=pool),
                  invariance_check(spec, precision, candidate, ledger, computed_dtype(ctx, spec, precision)),
                  reference, ledger, result, lambda name, ref: invariance_limit(spec, ref))
    return coverage.judge(ctx, given, precision, result)


def _companions(feed):
    return len(next(iter(feed.values()))) > 1


def _determinism_limit(spec):
    bounded = spec.nondeterministic  # the runtime is documented as non-deterministic: held to the batch bound
    return lambda name, ref: invariance_limit(spec, ref) if bounded else 0.0


def determinism_check(spec, precision, candidate, ledger):
    """Every input run twice, bit for bit the same (or within the batch bound where ``nondeterministic``): run 1 is
    an earlier check's run of it where one was made (``judge.runs``: the same candidate session; property_parity and
    batch_invariance draw the same inputs), else a run here; run 2 is made here (``again``). (A third run per input,
    as before issue 37, cost a sixth of ResNet50's candidate time; across a check's ~30 inputs each input's one
    repeat is the evidence.)"""
    bounded = spec.nondeterministic

    def check(feed, profile):
        first = _identity(spec, candidate.infer(feed, profile.digest))
        spread = profile.spread("repeat")
        ledger.note_unstable(feed, profile, _determinism_limit(spec), "repeat")
        again = _identity(spec, candidate.again(feed))
        outs = [within(spec, name, first[name], again[name], spread.get(name), None,
                       INVARIANCE_SOURCE if bounded else DETERMINISM_SOURCE, bounded=bool(bounded)) for name in first]
        ledger.applied(profile, {o.output: o._limit for o in outs if o.output in profile.outputs})
        ledger.keep_worst(outs)
        bad = [o.describe() for o in outs if not o.passed]
        assert not bad, f"{spec.name} {precision}: outputs changed between identical runs (run 1 vs 2):\n" + "\n".join(bad)

    return check


def determinism(ctx, spec, precision, result=None):
    reference, candidate = reference_noise(ctx, spec), runs.once(ctx, spec, precision)
    given, spec = spec, resolved_spec(ctx, spec)
    pool, ledger, bounded = input_pool(ctx, spec), Ledger(), spec.nondeterministic
    result = _run(ctx, spec, precision, "determinism", feeds(spec, pool=pool),
                  determinism_check(spec, precision, candidate, ledger),
                  reference, ledger, result,
                  _determinism_limit(spec))
    result.details["determinism"] = ({"mode": "bounded", "reason": bounded, "source": INVARIANCE_SOURCE} if bounded
                                     else {"mode": "bitwise", "source": DETERMINISM_SOURCE})
    return coverage.judge(ctx, given, precision, result)


CHECKS = {"property_parity": parity_check, "batch_invariance": invariance_check, "determinism": determinism_check}


# -- shared machinery -------------------------------------------------------------------------------------------
def _run(ctx, spec, precision, name, strategy, check, reference, ledger, result, limit, judge_vacuity=True):
    """Run ``check(feed, reference_profile)`` as a Hypothesis property; fills and returns ``result`` (a CheckResult,
    the test's own when given: what it holds so far stays recorded when the property raises). ``judge_vacuity``
    False: the caller judges vacuity itself (``_vacuity``), once the task metric has run too."""
    from hypothesis import given, settings

    result = CheckResult(spec.name, precision, name) if result is None else result
    nonfinite = NonfiniteLog()  # parity with a NaN / Inf reference is no evidence (paritygate.judge.nonfinite)

    @given(feed=strategy)
    def prop(feed):
        with _failing(ledger, feed):
            profile = reference.profile(feed)
            if name == "property_parity" and profile.digest not in ledger.seen:
                nonfinite.note(feed, profile.outputs)
            ledger.add(feed, profile, near_bound(spec, feed))
            check(feed, profile)

    prop = with_corner_examples(prop, spec, pool=input_pool(ctx, spec), known=known_failure_feeds(spec, precision, name))
    try:
        with progress.step("examples", total=explicit_count(prop) + settings.default.max_examples) as examples:
            reference = _Counted(reference, examples)  # prop's source stays: ci's draws hash it
            prop()
    except Exception as err:
        if not _is_assertion(err):  # ``result`` (the test's own when given) is the row: it keeps the coverage
            coverage.judge(ctx, spec, precision, result, passed=False)
            if not isinstance(err, SuiteError):  # a SuiteError: the reference or a tool failed, an `error` with
                _save_failing(ctx, spec, precision, ledger, result, str(err))  # nothing of the candidate's to reproduce
            raise
        result.failures.append(_message(err))
        _save_failing(ctx, spec, precision, ledger, result, result.failures[0])
        if name == "property_parity" and ledger.failing_feed is not None:
            from paritygate.judge.divergence import localize_failure

            found = localize_failure(ctx, spec, precision, dict(ledger.failing_feed), check=name,
                                     feeds=ledger.feeds)
            if found is not None:
                result.details["divergence"] = found
    ledger.describe(result, input_pool(ctx, spec))
    if ledger.failing_feed is not None and result.reproducer:  # the inputs at each output's worst element
        from paritygate.inputs.reproducer import attach_worst_inputs

        attach_worst_inputs(result.outputs, dict(ledger.failing_feed))
    ledger.record_findings(ctx, spec, precision, result)
    conditioning.record_findings(ctx, spec, precision, name, ledger.ill_conditioned, result)
    result.set_inconclusive(inconclusive(nonfinite.conclude(ctx, spec, precision, result)))
    if judge_vacuity:
        _vacuity(spec, precision, name, ledger, result, limit)
    return result


def _vacuity(spec, precision, name, ledger, result, limit, task_outputs=None):
    """A passing, not yet inconclusive ``result`` becomes inconclusive when its inputs could not have shown a
    failure (``judge.vacuity``: every criterion that ran counts; ``task_outputs``: the reference outputs the task
    metric judged). property_parity enforces its policy's cosine budget; the within-candidate checks do not."""
    if not result.passed or result.inconclusive:
        return
    tolerance = (lambda out: tolerance_for(spec, precision, out)) if name == "property_parity" else None
    info = vacuity.informativeness(spec, ledger.reference_outputs, limit, tolerance, task_outputs, precision,
                                   limits=ledger.applied_limits(limit))
    result.details["informativeness"] = info
    result.set_inconclusive(vacuity.verdict(spec, name, info))


class _Counted:
    """The reference noise a property runs, each example counted on the progress line (paritygate.common.progress)."""

    def __init__(self, noise, shown):
        self.noise, self.shown = noise, shown

    def profile(self, feed):
        self.shown.advance()
        return self.noise.profile(feed)


@contextmanager
def _failing(ledger, feed):
    """Remember ``feed`` when the body fails: after the run the ledger holds the last failing example, which is
    Hypothesis' shrunk one (it replays the minimal failure last) or a failing explicit example."""
    try:
        yield
    except BaseException:
        ledger.failing_feed, ledger.failing_worst = feed, dict(ledger.last_worst)
        raise


def _save_failing(ctx, spec, precision, ledger, result, text):
    feed = ledger.failing_feed
    if feed is None:
        return
    result.reproducer = ctx.save_reproducer(spec, precision, result.check, dict(feed), [text.splitlines()[0][:2000]])
    result.details["failing_feed"] = {k: {"dtype": v.dtype.name, "shape": list(v.shape)} for k, v in feed.items()}
    result.details["failing_feed_sources"] = list(getattr(feed, "sources", []))
    if ledger.failing_worst:
        result.outputs = output_records(ledger.failing_worst.values())


def _is_assertion(err):
    if isinstance(err, AssertionError):
        return True
    inner = getattr(err, "exceptions", None)  # an ExceptionGroup of distinct failures (report_multiple_bugs)
    return bool(inner) and all(_is_assertion(e) for e in inner)


def _message(err):
    text = str(err) if not getattr(err, "exceptions", None) else str(err.exceptions[0])
    notes = [n for n in getattr(err, "__notes__", []) if n.startswith("Falsifying")]
    return text + ("\n" + notes[0][:2000] if notes else "")


def check_limit(check, spec, precision):
    """(limit(name, ref), the reference-noise configuration it is held against) of a property check: the
    per-element limit each check judges by, as its reference noise floor compares with it (replay uses this)."""
    if check == "batch_invariance":
        return (lambda name, ref: invariance_limit(spec, ref)), "batch1"
    if check == "determinism":
        return _determinism_limit(spec), "repeat"
    return (lambda name, ref: policy_limit(spec, precision, name, ref)), None


def _identity(spec, outputs):
    """Candidate outputs under reference names (undo the reference -> candidate name mapping)."""
    back = {c: r for r, c in spec.outputs.items()}
    return {back.get(k, k): v for k, v in outputs.items()}


def _explain(spec, precision, feed, failures):
    shapes = ", ".join(f"{k} {v.dtype.name}{list(v.shape)} range [{v.min()}, {v.max()}]" for k, v in feed.items())
    sources = sorted(set(getattr(feed, "sources", [])))
    return (f"{spec.name} {precision}: candidate differs from the TF reference on inputs {shapes} (rows from "
            f"{', '.join(sources)}):\n" + "\n".join(failures))
