"""A failing fp16/int8 check, explained and repaired: where precision breaks (``backend.onnx.diagnosis.localize``) and a
verified plan of nodes to keep in FP32 / leave unquantized (``backend.onnx.diagnosis.repair``), as the check's
``details["divergence"]``.

Runs on ONNX Runtime's CPU provider whatever the candidate runtime: the FP16/INT8 candidates are ONNX artifacts
derived from the same FP32 graph, and TensorRT builds strongly typed from those same artifacts.
"""

import dataclasses
import json
import time
from contextlib import contextmanager

import numpy as np

from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

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

    spec = resolved_spec(ctx, spec)
    if reference_outputs is None:
        from paritygate.backend.runtimes import reference_runner
        from paritygate.judge.parity import run_batched

        reference_outputs = run_batched(reference_runner(ctx, spec), feed, spec.max_batch)
    book = plan_book(ctx, spec, precision)
    if feeds:
        book.evidence.add_feeds(check, feeds)
    return localize_and_repair(spec, precision, feed, reference_outputs, ctx.fp16_keep_fp32, labels,
                               compare_task, ctx.numerics, book=book, check=check)


def plan_book(ctx, spec, precision):
    """The model+precision's one plan and its evidence, in this process (``paritygate.judge.plans.PlanBook``)."""
    key = (spec.name, precision)
    if key not in ctx.plan_books:
        from paritygate.inputs.strategies import input_pool
        from paritygate.judge import plans
        from paritygate.judge.parity import reference_set
        from paritygate.judge.reference_noise import reference_noise

        evidence = plans.base_evidence(spec, precision, reference_noise(ctx, spec).profile,
                                       reference_set(ctx, spec), input_pool(ctx, spec))
        ctx.plan_books[key] = plans.PlanBook(evidence)
    return ctx.plan_books[key]


def localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops=None, labels=None, compare_task=False,
                        numerics="strict", book=None, check="matches_reference"):
    """Localize the break on the failing samples of ``feed``, search a plan, verify it; a dict for the report.
    Every artifact (the candidate and each plan's rebuild) is run with the check's ``numerics``. Without a
    ``book`` (no session) the evidence is ``feed`` as the reference set plus corners and the fresh sample, with
    the FP32 ONNX standing in for the reference. A tool failing inside (ONNX Runtime refusing the marked graph,
    a converter error) is recorded under ``error``: the check has already failed on its own evidence."""
    started = time.perf_counter()
    try:
        out = _localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task,
                                   numerics, book, check)
    except Exception as err:  # noqa: BLE001 - any tool error is reported in the details, never hidden
        out = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:400] if str(err) else ''}"}
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def _localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task, numerics, book,
                         check):
    from paritygate.backend.base import RunnerError
    from paritygate.backend.onnx.artifacts.loader import fp32_onnx, load_checked, precision_list
    from paritygate.backend.onnx.diagnosis import localize
    from paritygate.comparator.tolerance import tolerance_for

    ctx = _Context(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task, numerics)
    book = book or _standalone_book(ctx)
    fp32_model = localize.named_nodes(load_checked(fp32_onnx(spec)))
    base = list(precision_list(spec, PLAN_KEY[precision]))
    try:
        result, _ = ctx.check(base)
    except RunnerError as err:  # the candidate crashes on the failing inputs: the node, and the cause where known
        return {**localize.crash_site(load_checked(ctx.built(base)), str(err)), "numerics": numerics}
    if result.passed:
        return {"first_node": None, "verified": None,
                "note": "the check passes when re-run here on ONNX Runtime's CPU provider with the configured "
                        "artifact: nothing to localize (the failure belongs to the candidate runtime)"}
    samples = _trigger(result, feed, spec.max_batch)
    local_feed = ctx.onnx_feed({k: v[samples] for k, v in feed.items()})
    tol = tolerance_for(spec, precision)
    first_div = localize.divergence(fp32_model, onnx.load(str(ctx.artifact(base))), local_feed, tol.atol, tol.rtol)
    if precision in spec.onnx_artifacts:  # the team's own file: the suite cannot rebuild it with a plan
        from paritygate.backend.onnx.diagnosis import repair

        found = _details(spec, precision, first_div, repair.Plan([], False, []), base, samples, feed, tol)
        return {**found, "numerics": numerics, "note": "the artifact is the team's own file "
                f"({spec.onnx_artifacts[precision]}): no plan searched (the suite cannot rebuild it); keep the node "
                "adding the most error in FP32 / unquantized when rebuilding it, then re-run"}
    plan = _plan(ctx, book, fp32_model, base, first_div, local_feed, tol)
    found = {**_details(spec, precision, first_div, plan, base, samples, feed, tol), "numerics": numerics,
             "coverage": ctx.plan_coverage(base + [n for n in plan.nodes if n not in base]),
             "verification": book.evidence.describe(),
             "verified_on": f"onnxruntime CPUExecutionProvider, {numerics} numerics: every failing check of this "
                            "artifact re-run on all its inputs plus a fresh seeded sample (paritygate/judge/plans.py)"}
    return book.publish(found, check)


def _plan(ctx, book, fp32_model, base, first_div, local_feed, tol):
    """The artifact's plan: the one found earlier when it holds on the evidence grown by this check, else a
    search from it (``backend.onnx.diagnosis.repair``); every trial is judged on the whole evidence."""
    from paritygate.backend.onnx.artifacts.loader import INT8_OPS
    from paritygate.backend.onnx.diagnosis import localize, repair
    from paritygate.backend.onnx.lint import coverage

    prior = [n for n in book.nodes if n not in base]
    if prior and ctx.verify(book.evidence, base + prior):
        return repair.Plan(prior, True, [{"step": "reused", "nodes": prior, "passed": True}])
    if book.found is not None and book.found.get("verified") is False and book.found.get("trials"):
        # an earlier check of this artifact spent the budget on a subset of this evidence: no second search
        failed = repair.Plan(list(book.found.get(PLAN_FIELD[ctx.precision]) or []), False, book.found["trials"])
        failed.failures = [book.found.get("plan_failure") or "-"]
        return failed
    start = base + prior

    def ranked(nodes):
        """Localize on the rows the last rejected trial failed (else the check's failing samples)."""
        failing = book.evidence.failing_feed if nodes else None
        div = first_div if not nodes and not prior else localize.divergence(
            fp32_model, onnx.load(str(ctx.artifact(start + nodes))),
            ctx.onnx_feed(failing) if failing is not None else local_feed, tol.atol, tol.rtol)
        return [r.node for r in div.ranked()]

    if ctx.precision == "int8":
        def eligible(node):
            return node.op_type in INT8_OPS
    else:
        floats = {r.node for r in first_div.rows}

        def eligible(node):
            return node.name in floats
    order = [n.name for n in fp32_model.graph.node if eligible(n) and n.name not in start]
    mac_nodes = {n.name for n in fp32_model.graph.node if n.op_type in coverage.MAC_OPS}
    def passes(nodes):
        return ctx.verify(book.evidence, start + nodes) or (ctx.last_failures or ["failed"])[0][:300]

    plan = repair.search(ranked, passes, order,
                         lambda name, nodes: localize.upstream(fp32_model, name, eligible, set(start) | set(nodes)),
                         max_greedy=MAX_GREEDY, max_trials=MAX_TRIALS,
                         weight=lambda name: 1 if name in mac_nodes else 0)
    plan.nodes = prior + [n for n in plan.nodes if n not in prior]
    plan.failures = ctx.last_failures if not plan.verified else []
    return plan


def _standalone_book(ctx):
    """Evidence without a session: ``feed`` as the reference set, corners and the fresh sample, the FP32 ONNX
    standing in for the reference (``localize_and_repair`` called directly)."""
    from paritygate.backend.onnx.artifacts.loader import fp32_onnx
    from paritygate.backend.onnxrt.runner import OnnxrtRunner
    from paritygate.inputs.goldens import Golden
    from paritygate.judge import plans
    from paritygate.judge.reference_noise import ReferenceNoise

    runner = OnnxrtRunner(fp32_onnx(ctx.spec), name=f"onnxruntime:{ctx.spec.name}:fp32:reference").activate()
    noise = ReferenceNoise(_Renamed(runner, ctx.onnx_feed))
    ref = Golden(ctx.feed, ctx.reference_outputs, ctx.labels, "the failing inputs")
    return plans.PlanBook(plans.base_evidence(ctx.spec, ctx.precision, noise.profile, ref))


class _Renamed:
    def __init__(self, runner, rename):
        self.runner, self.rename = runner, rename

    def infer(self, feed):
        return self.runner.infer(self.rename(feed))


# The search budget: rebuilds of the artifact (each judged on the whole evidence) and greedy steps.
MAX_TRIALS = 24
MAX_GREEDY = 10


class _Context:
    """Builds an artifact with a plan and re-runs the failing check on it (ONNX Runtime, CPU)."""

    def __init__(self, spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task, numerics="strict"):
        self.spec, self.precision, self.feed, self.numerics = spec, precision, feed, numerics
        self.reference_outputs, self.fp16_ops = reference_outputs, fp16_ops
        self.labels, self.compare_task = labels, compare_task
        self._inputs = None
        self.last_failures = []

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

        return computed_artifact(self, self.built(entries))  # run as the check ran it: strict emulation or ORT's

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

    def onnx_feed(self, feed):
        """Reference input names -> the ONNX graph's input names (tf2onnx may decorate them)."""
        if self._inputs is None:
            from paritygate.backend import iomap
            from paritygate.backend.onnx.artifacts.loader import fp32_onnx, load_checked

            self._inputs = iomap.input_map(self.spec, [i.name for i in load_checked(fp32_onnx(self.spec)).graph.input])
        return {self._inputs.get(k, k): v for k, v in feed.items()}

    def check(self, entries):
        """The failing check's own comparison on its failing inputs, with ``entries`` in the plan."""
        from paritygate.judge.parity import compare, run_batched

        path = self.artifact(entries)
        with self._runner(path) as runner:
            cand = run_batched(runner, self.onnx_feed(self.feed), self.spec.max_batch)
        return compare(self.spec, self.precision, self.reference_outputs, cand, self.labels, self.compare_task), path

    def verify(self, evidence, entries):
        """Whether the artifact built with ``entries`` keeps the precision coverage and passes the whole
        ``evidence`` (``paritygate.judge.plans``)."""
        short = self.coverage_shortfall(entries) if entries else None
        if short:
            self.last_failures = [short]
            return False
        with self._runner(self.artifact(entries)) as runner:
            self.last_failures = evidence.judge(lambda feed: runner.infer(self.onnx_feed(feed)))
        return not self.last_failures

    @contextmanager
    def _runner(self, path):
        from paritygate.backend.onnxrt.runner import OnnxrtRunner

        runner = OnnxrtRunner(path, name=f"onnxruntime:{self.spec.name}:{self.precision}:plan",
                              numerics=self.numerics).activate()
        try:
            yield runner
        finally:
            runner.deactivate()


def _trigger(result, feed, max_batch):
    """The samples the check failed on (at most ``max_batch``), or the first ``max_batch`` when it failed as a
    whole (task metric)."""
    n = len(next(iter(feed.values())))
    failing = sorted({i for o in result.outputs or [] for i in o.get("failing_batch_elements", []) if i < n})
    return np.array((failing or list(range(n)))[:max_batch], dtype=int)


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
                   f"{PLAN_KEY[precision]} = {json.dumps(entries)}") if plan.verified else None,
        "trials": plan.trials,
        "search_budget": {"max_trials": MAX_TRIALS, "max_greedy": MAX_GREEDY, "trials_run": len(plan.trials)},
        "tolerance": {"atol": tol.atol, "rtol": tol.rtol, "source": tol.source, "rule": RULE},
        "unmatched_tensors": len(div.unmatched),
        "error_by_depth": [{k: r.as_dict()[k] for k in ("node", "op_type", "depth", "max_abs", "max_rel", "added_ratio")}
                           for r in div.rows],
    }
    if plan.trials and not plan.verified:
        tried = "; ".join(f"{t['step']} {t['nodes']}" for t in plan.trials[-6:])
        why = out["plan_failure"] = (getattr(plan, "failures", None) or ["-"])[0]
        out["plan_note"] = (f"no plan within the search budget ({len(plan.trials)} of {MAX_TRIALS} rebuilds) passed "
                            f"every failing check plus the fresh sample; tried (last {min(6, len(plan.trials))}): "
                            f"{tried}; the last failed: {why[:300]}")
    if top is None:
        out["note"] = "no matched intermediate leaves the magnitude-scaled tolerance; the plan was searched by bisection"
    return out
