"""A failing fp16/int8 check, explained and repaired: where precision breaks (``backend.onnx.diagnosis.localize``) and a
verified plan of nodes to keep in FP32 / leave unquantized (``backend.onnx.diagnosis.repair``), as the check's
``details["divergence"]``.

Runs on ONNX Runtime's CPU provider whatever the candidate runtime: the FP16/INT8 candidates are ONNX artifacts
derived from the same FP32 graph, and TensorRT builds strongly typed from those same artifacts.
"""

import dataclasses
import time
from contextlib import contextmanager
from functools import cached_property

import numpy as np

from paritygate.backend.onnx.diagnosis import repair
from paritygate.common import apart, memory, progress
from paritygate.common.memo import Memo, PrecisionKey
from paritygate.common.numerics import DEFAULT_NUMERICS
from paritygate.lazy import lazy_import
from paritygate.models import writer

onnx = lazy_import("onnx")
PLAN_BOOKS = Memo("plan_books", key=PrecisionKey, close=lambda book: None)  # its evidence: forgotten once done  # the model+precision's plans.PlanBook (plan_book)

PLAN_KEY = {"fp16": "fp16_keep_fp32", "int8": "int8_exclude"}
PLAN_FIELD = {"fp16": "keep_fp32", "int8": "exclude_from_quantization"}
RULE = ("an intermediate element fails when |cand - ref| > atol * max|ref| + rtol * |ref|, with the check's own "
        "atol/rtol (numpy.isclose with the absolute term scaled to the tensor's magnitude; "
        "paritygate/backend/onnx/diagnosis/localize.py)")


def localize_failure(ctx, spec, precision, feed, reference_outputs=None, labels=None, compare_task=False,
                     check="matches_reference", feeds=()):
    """The ``divergence`` dict of a failing ``precision`` check on ``feed`` (reference input names), or None
    when localization does not apply (fp32, or ``--parity-localize=off``). ``reference_outputs`` default to the
    live TF reference on ``feed``; ``feeds``: every input the failing check ran (a property's ledger), which the
    plan must pass too (``paritygate.judge.plans``)."""
    if precision not in PLAN_KEY or not ctx.localize:
        return None
    from paritygate.backend.runtimes import resolved_spec
    from paritygate.judge.localization_budget import MIN_SECONDS, clock

    budget = clock(ctx)
    allowed = budget.allowance()
    if allowed <= 0:  # the run's localization time is spent (judge.localization_budget): nothing started
        return {"first_node": None, "verified": None, "budget": budget.describe(allowed, 0.0, True),
                "note": f"not localized: localization took {budget.spent:.0f} s of this run already, its budget of "
                        f"{budget.share:.0%} of the run or {MIN_SECONDS:.0f} s (--parity-localize=SHARE)"}
    spec = resolved_spec(ctx, spec)
    if reference_outputs is None:
        from paritygate.backend.runtimes import reference_runner
        from paritygate.judge.parity import run_batched

        reference_outputs = run_batched(reference_runner(ctx, spec), feed, spec.max_batch)
    book = plan_book(ctx, spec, precision)
    if feeds:
        book.evidence.add_feeds(check, feeds)
    deadline = time.monotonic() + allowed
    with progress.step(f"localizing {spec.name} {precision} {check} (at most {_seconds(allowed)})"), \
            book.evidence.profiled_ahead():  # the reference's runs of the evidence, while the search ranks and rebuilds
        out = localize_and_repair(spec, precision, feed, reference_outputs, ctx.fp16_keep_fp32, labels,
                                  compare_task, ctx.numerics, book=book, check=check, deadline=deadline)
    budget.spend(out["seconds"])
    out["budget"] = budget.describe(allowed, out["seconds"], time.monotonic() >= deadline and not out.get("verified"))
    if out["budget"]["stopped"] and out.get("plan_note"):
        out["plan_note"] += (f"; the search stopped at its time budget ({_seconds(allowed)}: {budget.share:.0%} of the "
                             f"run or {MIN_SECONDS:.0f} s, --parity-localize=SHARE)")
    return out


def _seconds(allowed):
    return "no limit" if allowed == float("inf") else f"{allowed:.0f} s"


def plan_book(ctx, spec, precision):
    """The model+precision's one plan and its evidence, in this process (``paritygate.judge.plans.PlanBook``)."""
    def open_book():
        from paritygate.inputs.strategies import input_pool
        from paritygate.judge import plans
        from paritygate.judge.parity import reference_set
        from paritygate.judge.reference_noise import reference_noise

        return plans.PlanBook(plans.base_evidence(spec, precision, reference_noise(ctx, spec).profile,
                                                  reference_set(ctx, spec), input_pool(ctx, spec)))

    return PLAN_BOOKS.get(ctx, PrecisionKey(spec.name, precision), open_book)


def localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops=None, labels=None, compare_task=False,
                        numerics=DEFAULT_NUMERICS, book=None, check="matches_reference", deadline=None):
    """Localize the break on the failing samples of ``feed``, search a plan, verify it; a dict for the report.
    Every artifact (the candidate and each plan's rebuild) is run with the check's ``numerics``. Without a
    ``book`` (no session) the evidence is ``feed`` as the reference set plus corners and the fresh sample, with
    the FP32 ONNX standing in for the reference. A tool failing inside (ONNX Runtime refusing the marked graph,
    a converter error) is recorded under ``error``: the check has already failed on its own evidence. ``deadline``
    (time.monotonic): no rebuild starts after it, and a step run apart ends there (judge.localization_budget)."""
    started = time.perf_counter()
    try:
        with apart.until(deadline):
            out = _localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task,
                                       numerics, book, check, deadline)
    except apart.Overdue:  # the first ranking (the plan search ends on its own at a step ended there)
        out = {"first_node": None, "verified": None, "note": f"not localized: {repair.OVERDUE_FIRST}"}
    except Exception as err:  # noqa: BLE001 - any tool error is reported in the details, never hidden
        out = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:400] if str(err) else ''}"}
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def _localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task, numerics, book,
                         check, deadline=None):
    from paritygate.backend.base import RunnerError
    from paritygate.backend.onnx.artifacts.loader import fp32_onnx, load_checked, precision_list
    from paritygate.backend.onnx.diagnosis import localize
    from paritygate.comparator.tolerance import tolerance_for

    failing = FailingCheck(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task, numerics)
    book = book or _standalone_book(failing)
    fp32_model = localize.named_nodes(load_checked(fp32_onnx(spec)))
    base = list(precision_list(spec, PLAN_KEY[precision]))
    try:
        result, _ = failing.check(base)
    except RunnerError as err:  # the candidate crashes on the failing inputs: the node, and the cause where known
        return {**localize.crash_site(load_checked(failing.built(base)), str(err)), "numerics": numerics}
    if result.passed:
        return {"first_node": None, "verified": None,
                "note": "the check passes when re-run here on ONNX Runtime's CPU provider with the configured "
                        "artifact: nothing to localize (the failure belongs to the candidate runtime)"}
    samples = _trigger(result, feed, spec.max_batch)
    local_feed = failing.onnx_feed({k: v[samples] for k, v in feed.items()})
    tol = tolerance_for(spec, precision)
    # the files, not their graphs: a large model's comparison runs apart and reads them there (localize.divergence)
    first_div = localize.divergence(fp32_onnx(spec), failing.artifact(base), local_feed, tol.atol, tol.rtol)
    if precision in spec.onnx_artifacts:  # the team's own file: the suite cannot rebuild it with a plan
        return _own_file(spec, precision, fp32_model, onnx.load(str(failing.artifact(base))), first_div, local_feed,
                         tol, base, samples, feed, numerics)
    plan = _plan(failing, book, fp32_model, base, first_div, local_feed, tol, deadline)
    found = {**_details(spec, precision, first_div, plan, base, samples, feed, tol), "numerics": numerics,
             "coverage": failing.plan_coverage(base + [n for n in plan.nodes if n not in base]),
             "verification": book.evidence.describe(),
             "verified_on": f"onnxruntime CPUExecutionProvider, {numerics} numerics: every failing check of this "
                            "artifact re-run on all its inputs plus a fresh seeded sample (paritygate/judge/plans.py)"}
    return book.publish(found, check)


def _own_file(spec, precision, fp32_model, candidate, div, local_feed, tol, base, samples, feed, numerics):
    """The details for a team's own fp16/int8 file, named by its own nodes (``backend.onnx.diagnosis.own``): an fp16
    file against its FP32 twin where float16 breaks there, else against the FP32 source; no plan searched."""
    from paritygate.backend.onnx.diagnosis import own, repair

    path = spec.onnx_artifacts[precision]
    team = onnx.load(str(path))
    twin = own.self_divergence(team, candidate, local_feed, tol.atol, tol.rtol) if precision == "fp16" else None
    if twin is not None and twin.first is not None:  # float16 breaks inside the file itself
        div, against = twin, "the team file's own FP32 twin (its float16 types, weights and casts made float32)"
    else:
        div = own.named_in(div, fp32_model, team)
        against = "the FP32 source ONNX; rows named by the node of the team's file producing each tensor"
    found = _details(spec, precision, div, repair.Plan([], False, []), base, samples, feed, tol)
    top = div.top
    advice = (f"its node '{top.node}' ({top.op_type}) adds the most error: keep it in "
              f"{'FP32' if precision == 'fp16' else 'higher precision (unquantized)'} when rebuilding the file, "
              "then re-run") if top else "no node of it leaves the tolerance on these inputs"
    return {**found, "numerics": numerics, "compared_with": against,
            "note": f"the artifact is the team's own file ({path}): no plan searched (the suite cannot rebuild it); "
                    f"{advice}"}


def _plan(failing, book, fp32_model, base, first_div, local_feed, tol, deadline=None):
    """The artifact's plan: the one found earlier when it holds on the evidence grown by this check, else a
    search from it (``backend.onnx.diagnosis.repair``); every trial is judged on the whole evidence."""
    from paritygate.backend.onnx.artifacts.loader import INT8_OPS, fp32_onnx
    from paritygate.backend.onnx.diagnosis import localize
    from paritygate.backend.onnx.lint import coverage

    prior = [n for n in book.nodes if n not in base]
    start, last = base + prior, []  # last: the failures of the last plan judged

    def passes(nodes):
        last[:] = [repair.OVERDUE]  # what stays if the rebuild is ended at the deadline (repair.search)
        last[:] = failing.failures(book.evidence, start + nodes)
        return not last or last[0][:300]

    if prior and passes([]) is True:
        return repair.Plan(prior, True, [{"step": "reused", "nodes": prior, "passed": True}])
    if book.found is not None and book.found.get("verified") is False and book.found.get("trials"):
        # an earlier check of this artifact spent the budget on a subset of this evidence: no second search
        failed = repair.Plan(list(book.found.get(PLAN_FIELD[failing.precision]) or []), False, book.found["trials"])
        failed.failures = [book.found.get("plan_failure") or "-"]
        return failed

    def ranked(nodes):
        """Localize on the rows the last rejected trial failed (else the check's failing samples)."""
        rows = book.evidence.failing_feed if nodes else None
        div = first_div if not nodes and not prior else localize.divergence(
            fp32_onnx(failing.spec), failing.artifact(start + nodes),
            failing.onnx_feed(rows) if rows is not None else local_feed, tol.atol, tol.rtol)
        return [r.node for r in div.ranked()]

    if failing.precision == "int8":
        def eligible(node):
            return node.op_type in INT8_OPS
    else:
        floats = {r.node for r in first_div.rows}

        def eligible(node):
            return node.name in floats
    order = [n.name for n in fp32_model.graph.node if eligible(n) and n.name not in start]
    mac_nodes = {n.name for n in fp32_model.graph.node if n.op_type in coverage.MAC_OPS}
    plan = repair.search(ranked, passes, order,
                         lambda name, nodes: localize.upstream(fp32_model, name, eligible, set(start) | set(nodes)),
                         max_greedy=MAX_GREEDY, max_trials=MAX_TRIALS,
                         weight=lambda name: 1 if name in mac_nodes else 0, deadline=deadline)
    plan.nodes = prior + [n for n in plan.nodes if n not in prior]
    plan.failures = list(last) if not plan.verified else []
    return plan


def _standalone_book(failing):
    """Evidence without a session: ``feed`` as the reference set, corners and the fresh sample, the FP32 ONNX
    standing in for the reference (``localize_and_repair`` called directly)."""
    from paritygate.backend.onnx.artifacts.loader import fp32_onnx
    from paritygate.backend.onnxrt.runner import OnnxrtRunner
    from paritygate.inputs.goldens import Golden
    from paritygate.judge import plans
    from paritygate.judge.reference_noise import ReferenceNoise

    spec = failing.spec
    runner = OnnxrtRunner(fp32_onnx(spec), name=f"onnxruntime:{spec.name}:fp32:reference").activate()
    noise = ReferenceNoise(_Renamed(runner, failing.onnx_feed))
    ref = Golden(failing.feed, failing.reference_outputs, failing.labels, "the failing inputs")
    return plans.PlanBook(plans.base_evidence(spec, failing.precision, noise.profile, ref))


class _Renamed:
    def __init__(self, runner, rename):
        self.runner, self.rename = runner, rename

    def infer(self, feed):
        return self.runner.infer(self.rename(feed))


# The search budget: rebuilds of the artifact (each judged on the whole evidence) and greedy steps.
MAX_TRIALS = 24
MAX_GREEDY = 10


@dataclasses.dataclass(frozen=True, eq=False)
class FailingCheck:
    """A failing fp16/int8 check as localization re-runs it (ONNX Runtime, CPU): ``built`` / ``artifact`` make its
    artifact with a plan, ``check`` / ``failures`` judge that artifact. Exactly what it reads, no run context."""

    spec: object  # the ModelSpec, outputs resolved (backend.runtimes.resolved_spec)
    precision: str  # fp16 | int8
    feed: dict  # the check's failing inputs, by reference input name
    reference_outputs: dict  # the reference's outputs on ``feed``
    fp16_ops: tuple = None  # the ops the fp16 artifact keeps in FP32 (None: the loader's default)
    labels: object = None
    compare_task: bool = False
    numerics: str = DEFAULT_NUMERICS  # --parity-numerics: every artifact is run as the check ran it

    def built(self, entries):
        """The fp16/int8 ONNX built with ``entries`` in the plan (as a TensorRT builder would read it)."""
        from paritygate.backend.onnx.artifacts.loader import FP16_KEEP_FP32, fp16_onnx, int8_onnx

        spec = dataclasses.replace(self.spec, precision={**self.spec.precision, PLAN_KEY[self.precision]: list(entries)})
        if self.precision in self.spec.onnx_artifacts:
            return self.spec.onnx_artifacts[self.precision]
        if self.precision == "fp16":
            return fp16_onnx(spec, FP16_KEEP_FP32 if self.fp16_ops is None else self.fp16_ops)
        return int8_onnx(spec)

    def artifact(self, entries):
        from paritygate.backend.runtimes import computed_artifact

        return computed_artifact(self.built(entries), self.numerics)  # as the check ran it: strict or ORT's

    def plan_coverage(self, entries):
        """The precision coverage (backend/onnx/lint/coverage.py) of the artifact built with ``entries`` kept."""
        from paritygate.backend.onnx.lint import coverage

        row = self.onnx_feed({k: v[:1] for k, v in self.feed.items()})
        return coverage.measure(self.built(entries), self.precision, row)

    def coverage_shortfall(self, entries):
        """Why a plan leaves too little in the precision (a pass would be inconclusive), or None."""
        from paritygate.backend.onnx.lint import coverage

        minimum = coverage.MIN_MAC_SHARE if self.spec.min_precision_coverage is None else self.spec.min_precision_coverage
        share = self.plan_coverage(entries)["mac_share"]
        if share is not None and share < minimum:
            return (f"precision coverage: {share:.1%} of the multiply-accumulates in {self.precision} < minimum "
                    f"{minimum:.0%} (a pass would be inconclusive)")
        return None

    @cached_property
    def _input_map(self):
        from paritygate.backend import iomap
        from paritygate.backend.onnx.artifacts.loader import fp32_onnx, load_checked

        return iomap.input_map(self.spec, [i.name for i in load_checked(fp32_onnx(self.spec)).graph.input])

    def onnx_feed(self, feed):
        """Reference input names -> the ONNX graph's input names (tf2onnx may decorate them)."""
        return {self._input_map.get(k, k): v for k, v in feed.items()}

    def check(self, entries):
        """The failing check's own comparison on its failing inputs, with ``entries`` in the plan."""
        from paritygate.judge.parity import compare, run_batched

        path = self.artifact(entries)
        with self._runner(path) as runner:
            cand = run_batched(runner, self.onnx_feed(self.feed), self.spec.max_batch)
        return compare(self.spec, self.precision, self.reference_outputs, cand, self.labels, self.compare_task), path

    def failures(self, evidence, entries):
        """Why the artifact built with ``entries`` is no plan: it leaves too little in the precision, or fails the
        ``evidence`` (``paritygate.judge.plans``); [] when it keeps the coverage and passes all of it."""
        short = self.coverage_shortfall(entries) if entries else None
        if short:
            return [short]
        with self._runner(self.artifact(entries)) as runner:
            return list(evidence.judge(lambda feed: runner.infer(self.onnx_feed(feed))))

    @contextmanager
    def _runner(self, path):
        from paritygate.backend.onnxrt.runner import OnnxrtRunner

        runner = OnnxrtRunner(path, name=f"onnxruntime:{self.spec.name}:{self.precision}:plan",
                              numerics=self.numerics).activate()
        try:
            yield runner
        finally:
            runner.deactivate()
            memory.trim()  # a search opens a session a trial: each one's pages go back, not on top of the last


def _trigger(result, feed, max_batch):
    """The samples the check failed on (at most ``max_batch``): elements out of tolerance and the task metric's
    failing rows (flips, which are never ties: comparator.task.tie_rows; missed detections), or the first
    ``max_batch`` when it failed as a whole."""
    n = len(next(iter(feed.values())))
    task = result.task or {}
    rows = [f["row"] for t in task.get("per_output", [task]) for f in t.get("flipped_rows", [])]
    rows += [m["batch_element"] for m in task.get("missed", [])]
    failing = sorted({i for o in result.outputs or [] for i in o.get("failing_batch_elements", []) if i < n}
                     | {i for i in rows if i < n})
    return np.array((failing or list(range(n)))[:max_batch], dtype=int)


def tried_text(trials, shown=()):
    """What a plan search tried, each node named once: the trials by step and the nodes they kept beyond ``shown``
    (the plan's own, named beside it). The trials themselves stay in ``divergence.trials``."""
    steps = {}
    for t in trials:
        steps[t["step"]] = steps.get(t["step"], 0) + 1
    nodes = list(dict.fromkeys(n for t in trials for n in t["nodes"] if n not in set(shown)))
    more = f", and kept besides the plan's nodes: {', '.join(nodes)}" if nodes else ""
    return f"tried {len(trials)} rebuild(s) ({', '.join(f'{k} {v}' for k, v in steps.items())}){more}"


def _details(spec, precision, div, plan, base, samples, feed, tol):
    top, first = div.top, div.first
    entries = base + [n for n in plan.nodes if n not in base]
    out = {
        "first_node": top.node if top else None,  # the node adding the most error (localize.py, Ranking)
        "op_type": top.op_type if top else None,
        "tensor": top.tensor if top else None,
        "depth": top.depth if top else None,
        "max_abs_error": top.max_abs if top else None,
        "max_rel_error": top.max_rel if top else None,
        "added_ratio": top.added_ratio if top else None,
        "ranked_by": ("error the node adds given the candidate's own inputs, as a multiple of the bound"
                      if div.ranking_error is None else f"first out of tolerance (no ranking: {div.ranking_error})"),
        "ranking": [{k: r.as_dict()[k] for k in ("node", "op_type", "added_abs", "added_ratio", "max_abs")}
                    for r in div.ranked()[:5]],
        "first_out_of_tolerance": first.node if first else None,
        "input": {"samples": [int(i) for i in samples],
                  "shapes": {k: [len(samples), *v.shape[1:]] for k, v in feed.items()},
                  "ranges": {k: [float(np.min(v[samples])), float(np.max(v[samples]))] for k, v in feed.items()}},
        PLAN_FIELD[precision]: plan.nodes,
        "verified": plan.verified,
        "config": (f"[models.precision]  # in the [[models]] entry of '{spec.name}'\n"
                   f"{PLAN_KEY[precision]} = {writer.array(entries)}") if plan.verified else None,
        "trials": plan.trials,
        "search_budget": {"max_trials": MAX_TRIALS, "max_greedy": MAX_GREEDY, "trials_run": len(plan.trials)},
        "tolerance": {"atol": tol.atol, "rtol": tol.rtol, "source": tol.source, "rule": RULE},
        "unmatched_tensors": len(div.unmatched),
        "error_by_depth": [{k: r.as_dict()[k] for k in ("node", "op_type", "depth", "max_abs", "max_rel", "added_ratio")}
                           for r in div.rows],
    }
    if plan.trials and not plan.verified:
        why = out["plan_failure"] = (getattr(plan, "failures", None) or ["-"])[0]
        out["plan_note"] = (f"no plan within the search budget ({len(plan.trials)} of {MAX_TRIALS} rebuilds) passed "
                            f"every failing check plus the fresh sample; {tried_text(plan.trials, plan.nodes)}; the "
                            f"last failed: {why[:300]}")
    if top is None:
        out["note"] = "no matched intermediate leaves the magnitude-scaled tolerance; the plan was searched by bisection"
    return out
