"""The checks the conformance tests run, returning results objects (the tests only assert on them)."""

import numpy as np

from paritygate.backend.base import run_batched
from paritygate.backend.runtimes import reference_runner, resolved_spec
from paritygate.common.memo import Memo, ModelKey
from paritygate.comparator.compare import compare_outputs, output_records
from paritygate.comparator.task import summary, task_metrics
from paritygate.comparator.tolerance import tolerance_for
from paritygate.inputs import goldens
from paritygate.judge import conditioning, coverage, kernel_order, runs
from paritygate.result import CheckResult
from paritygate.verdict import inconclusive

REFERENCE_SETS = Memo("reference_sets", key=ModelKey, close=lambda golden: None)  # forgotten once the model is done  # the model's inputs.goldens.Golden (reference_set)


def reference_set(ctx, spec):
    """Verified goldens when the model has them; else its input set run through the live TF reference: an
    ``inputs.goldens.Golden`` whose ``source`` says which, of the first shape, with every shape in ``groups``."""
    def read():
        if goldens.golden_path(spec).exists():
            source = f"goldens {goldens.golden_path(spec)}"
            groups = [goldens.Golden(g.inputs, g.outputs, g.labels, source) for g in goldens.load_golden(spec).groups]
        else:
            runner = reference_runner(ctx, spec)
            groups = [goldens.Golden(inputs, run_batched(runner, inputs, spec.max_batch), labels,
                                     "live TensorFlow reference (no goldens)")
                      for inputs, labels in goldens.input_groups(spec)]
        first = groups[0]
        return goldens.Golden(first.inputs, first.outputs, first.labels, first.source, groups)

    return REFERENCE_SETS.get(ctx, ModelKey(spec.name), read)


def judge_outputs(spec, precision, ref_outputs, cand_outputs, labels=None, compare_task=True, floors=None,
                  cosine_floors=None, nonfinite_reference=None):
    """(per-output ``OutputComparison``s, the task metric or None, failure lines): the elementwise policy (with the
    cosine budget) for every output plus the task metric for the model's task.

    ``floors`` / ``cosine_floors``: the reference's own noise per output (paritygate.judge.reference_noise);
    ``nonfinite_reference``: see comparator.compare.compare_array (default: the model's)."""
    outputs = compare_outputs(spec, precision, ref_outputs, cand_outputs, floors, cosine_floors, nonfinite_reference)
    failures, task = [], None
    for o in outputs:
        o._plot = (ref_outputs[o.output], cand_outputs[o.candidate_output])
        if not o.passed:
            failures.append(f"{spec.name} {precision}: {o.describe()}")
    if compare_task:  # the reference's own noise (floors) widens the tie rule where the check measured it
        task = task_metrics(spec, precision, ref_outputs, cand_outputs, labels, floors)
        if task is not None and not task["passed"]:
            failures.append(f"{spec.name} {precision}: task metric failed: {summary(task)}")
    return outputs, task, failures


def compare(spec, precision, ref_outputs, cand_outputs, labels=None, compare_task=True, floors=None,
            cosine_floors=None, nonfinite_reference=None, check="matches_reference"):
    """``judge_outputs`` as the check's ``CheckResult``: per-output numbers (with plot data), task, failures."""
    outputs, task, failures = judge_outputs(spec, precision, ref_outputs, cand_outputs, labels, compare_task, floors,
                                            cosine_floors, nonfinite_reference)
    return CheckResult(spec.name, precision, check, outputs=output_records(outputs), task=task, failures=failures)


def candidate_parity(ctx, spec, precision):
    """The candidate at ``precision`` on the model's reference set (goldens, or live TF), every shape of it:
    (CheckResult, the reference group it speaks for: the first failing shape's, else the first). A failing result
    carries its reproducer (with the inputs at each output's worst element; where precision broke is
    ``judge.divergence.localize_failure``'s); a NaN / Inf reference, uninformative inputs or an fp16/int8 artifact
    below its precision coverage (``judge.coverage``) make a passing one inconclusive."""
    result, group = _parity(ctx, spec, precision)
    return coverage.judge(ctx, spec, precision, result), group


def _parity(ctx, spec, precision):
    from paritygate.inputs.reproducer import attach_worst_inputs, describe_inputs
    from paritygate.inputs.strategies import Feed
    from paritygate.judge.nonfinite import NonfiniteLog

    ref = reference_set(ctx, spec)
    resolved = resolved_spec(ctx, spec)
    results, floors, found = _judge_groups(ctx, spec, resolved, precision, ref.groups)
    for r, g in zip(results, ref.groups):
        if not r.passed:
            attach_worst_inputs(r.outputs, g.inputs)
    result, group = next(((r, g) for r, g in zip(results, ref.groups) if not r.passed), (results[0], ref.groups[0]))
    if len(results) > 1:
        result = merged(results, ref.groups, result)
    kernel_order.record(result, floors.order)
    conditioning.record_findings(ctx, resolved, precision, "matches_reference", found, result)
    result.inputs = {**describe_inputs(group.inputs, [group.source]), **({"shapes": shape_records(ref.groups, results)} if len(ref.groups) > 1 else {})}
    if not result.passed:
        result.reproducer = ctx.save_reproducer(resolved, precision, "matches_reference", group.inputs,
                                                result.failures)
    log = NonfiniteLog()
    for g in ref.groups:
        log.note(Feed(g.inputs, [g.source.split()[0]] * len(next(iter(g.inputs.values())))), g.outputs)
    unjudged = log.conclude(ctx, resolved, precision, result)
    if not result.passed:
        return result, group
    if unjudged:
        result.set_inconclusive(inconclusive(unjudged))
        return result, group
    _informativeness(resolved, precision, ref.groups, floors, result)
    return result, group


class _Floors(list):
    """Per reference group, output -> the floor its comparison was judged with (None: the policy alone);
    ``order``: the kernel order's details (judge.kernel_order.record)."""
    order = None


def _judge_groups(ctx, spec, resolved, precision, groups):
    """(a CheckResult per group, their ``_Floors``, ill_conditioned entries): each group compared with the policy;
    a failing group at FP32 judged again with it raised to K x TensorFlow's second kernel order's spread (run only
    then: it only widens, judge.reference_noise), and where that fails too, with the floor raised to K x the
    reference's move under one step of its input's resolution (judge.conditioning)."""
    from paritygate.inputs.strategies import Feed

    runner = runs.once(ctx, spec, precision)  # its runs of these batches serve property_parity's sweep (judge.runs)
    floors = _Floors()
    results, found = [], []
    for g in groups:
        cand = run_batched(runner, g.inputs, spec.max_batch)
        result, f = compare(resolved, precision, g.outputs, cand, g.labels), None
        if not result.passed and kernel_order.applies(precision):  # FP32: the reference's own order spread
            (f,), floors.order = kernel_order.floors(ctx, spec, precision, [g])
            result = compare(resolved, precision, g.outputs, cand, g.labels, floors=f)
        moved = None if result.passed else conditioning.measured(
            spec, g.inputs, lambda feed: run_batched(reference_runner(ctx, spec), feed, spec.max_batch))
        if moved is not None and moved.conditioning() is not None:
            rows = [g.source.split()[0]] * len(next(iter(g.inputs.values())))
            conditioning.note(found, spec, Feed(g.inputs, rows), moved,
                              lambda name, out: tolerance_for(resolved, precision, name).limit(out))
            f = conditioning.floors(moved, f or {})
            result = compare(resolved, precision, g.outputs, cand, g.labels, floors=f)
        results.append(result)
        floors.append(f)
    return results, floors, found


def _informativeness(resolved, precision, groups, floors, result):
    """Make a passing ``result`` inconclusive when no shape's inputs could have shown a failure under the limits
    the check applied (its floors included): a candidate ignoring its inputs fails where those of any one shape
    could; the first informative shape speaks, else the first."""
    from paritygate.judge import vacuity

    def limit(name, out):
        return tolerance_for(resolved, precision, name).limit(out)

    def tolerance(name):
        return tolerance_for(resolved, precision, name)

    infos = []
    for g, f in zip(groups, floors):  # the task metric judged these very rows: each group's outputs are its task's
        outputs = [g.outputs]
        applied = [{k: np.maximum(limit(k, v), f[k]) if f and k in f else limit(k, v) for k, v in g.outputs.items()}]
        infos.append(vacuity.informativeness(resolved, outputs, limit, tolerance, task_outputs=outputs,
                                             precision=precision, limits=applied))
    result.details["informativeness"] = next((i for i in infos if i["informative"]), infos[0])
    result.set_inconclusive(vacuity.verdict(resolved, "matches_reference", result.details["informativeness"]))


def shape_records(groups, results=None):
    """``inputs.shapes`` of a check over reference groups (one per shape): each shape, its rows and, given the
    groups' ``results``, whether it passed."""
    return [{"shape": {k: list(v.shape) for k, v in g.inputs.items()}, "rows": len(next(iter(g.inputs.values()))),
             **({"passed": results[i].passed} if results else {})} for i, g in enumerate(groups)]


def merged(results, groups, shown):
    """One result over several shapes: every shape's output comparisons and failures (each failure naming its
    shape), the task metric of ``shown`` (the first failing shape's, else the first)."""
    def where(g):
        return ", ".join(f"{k} {list(v.shape)}" for k, v in g.inputs.items())

    failures = [f"at {where(g)}: {f}" for r, g in zip(results, groups) for f in r.failures]
    return CheckResult(shown.model, shown.precision, shown.check, outputs=[o for r in results for o in r.outputs],
                       task=shown.task, failures=failures)
