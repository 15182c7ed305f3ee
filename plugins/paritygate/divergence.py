"""A failing fp16/int8 check, explained and repaired: where precision breaks (``backend.onnx.localize``) and a
verified plan of nodes to keep in FP32 / leave unquantized (``backend.onnx.repair``), as the check's
``details["divergence"]``.

Runs on ONNX Runtime's CPU provider whatever the candidate runtime: the FP16/INT8 candidates are ONNX artifacts
derived from the same FP32 graph, and TensorRT builds strongly typed from those same artifacts.
"""

import dataclasses
import json
import time

import numpy as np

from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

PLAN_KEY = {"fp16": "fp16_keep_fp32", "int8": "int8_exclude"}
PLAN_FIELD = {"fp16": "keep_fp32", "int8": "exclude_from_quantization"}
RULE = ("an intermediate element fails when |cand - ref| > atol * max|ref| + rtol * |ref|, with the check's own "
        "atol/rtol (numpy.isclose with the absolute term scaled to the tensor's magnitude; "
        "paritygate/backend/onnx/localize.py)")


def localize_failure(session, spec, precision, feed, reference_outputs=None, labels=None, compare_task=False):
    """The ``divergence`` dict of a failing ``precision`` check on ``feed`` (reference input names), or None
    when localization does not apply (fp32, or ``--parity-localize=off``). ``reference_outputs`` default to the
    live TF reference on ``feed``."""
    if precision not in PLAN_KEY or not getattr(session, "localize", True):
        return None
    if reference_outputs is None:
        from paritygate.checks import run_batched
        from paritygate.runtimes import reference_runner

        reference_outputs = run_batched(reference_runner(session, spec), feed, spec.max_batch)
    return localize_and_repair(spec, precision, feed, reference_outputs, session.fp16_keep_fp32, labels,
                               compare_task, getattr(session, "numerics", "strict"))


def localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops=None, labels=None, compare_task=False,
                        numerics="strict"):
    """Localize the break on the failing samples of ``feed``, search a plan, verify it; a dict for the report.
    Every artifact (the candidate and each plan's rebuild) is run with the check's ``numerics``. A tool failing
    inside (ONNX Runtime refusing the marked graph, a converter error) is recorded under ``error``: the check has
    already failed on its own evidence."""
    started = time.perf_counter()
    try:
        out = _localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task,
                                   numerics)
    except Exception as err:  # noqa: BLE001 - any tool error is reported in the details, never hidden
        out = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:400] if str(err) else ''}"}
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def _localize_and_repair(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task, numerics):
    from paritygate.backend.onnx import localize, repair
    from paritygate.backend.onnx.loader import INT8_OPS, fp32_onnx, load_checked, precision_list
    from paritygate.comparator.tolerance import tolerance_for

    ctx = _Context(spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task, numerics)
    fp32_model = localize.named_nodes(load_checked(fp32_onnx(spec)))
    base = list(precision_list(spec, PLAN_KEY[precision]))
    result, _ = ctx.check(base)
    if result.passed:
        return {"first_node": None, "verified": None,
                "note": "the check passes when re-run here on ONNX Runtime's CPU provider with the configured "
                        "artifact: nothing to localize (the failure belongs to the candidate runtime)"}
    samples = _trigger(result, feed, spec.max_batch)
    local_feed = ctx.onnx_feed({k: v[samples] for k, v in feed.items()})
    tol = tolerance_for(spec, precision)
    first_div = localize.divergence(fp32_model, onnx.load(str(ctx.artifact(base))), local_feed, tol.atol, tol.rtol)

    def first_divergent(nodes):
        div = first_div if not nodes else localize.divergence(
            fp32_model, onnx.load(str(ctx.artifact(base + nodes))), local_feed, tol.atol, tol.rtol)
        first = div.first
        return first.node if first else None

    if precision == "int8":
        def eligible(node):
            return node.op_type in INT8_OPS
    else:
        floats = {r.node for r in first_div.rows}

        def eligible(node):
            return node.name in floats
    if precision in spec.onnx_artifacts:  # the team's own file: the suite cannot rebuild it with a plan
        found = _details(spec, precision, first_div, repair.Plan([], False, []), base, samples, feed, tol)
        return {**found, "numerics": numerics, "note": "the artifact is the team's own file "
                f"({spec.onnx_artifacts[precision]}): no plan searched (the suite cannot rebuild it); keep the first "
                "divergent node in FP32 / unquantized when rebuilding it, then re-run"}
    order = [n.name for n in fp32_model.graph.node if eligible(n) and n.name not in base]
    plan = repair.search(first_divergent, lambda nodes: ctx.check(base + nodes)[0].passed, order,
                         lambda name, nodes: localize.upstream(fp32_model, name, eligible, set(base) | set(nodes)))
    return {**_details(spec, precision, first_div, plan, base, samples, feed, tol), "numerics": numerics,
            "verified_on": f"onnxruntime CPUExecutionProvider, {numerics} numerics, the failing check re-run on "
                           "the failing inputs"}


class _Context:
    """Builds an artifact with a plan and re-runs the failing check on it (ONNX Runtime, CPU)."""

    def __init__(self, spec, precision, feed, reference_outputs, fp16_ops, labels, compare_task, numerics="strict"):
        self.spec, self.precision, self.feed, self.numerics = spec, precision, feed, numerics
        self.reference_outputs, self.fp16_ops = reference_outputs, fp16_ops
        self.labels, self.compare_task = labels, compare_task
        self._inputs = None

    def artifact(self, entries):
        from paritygate.backend.onnx.loader import FP16_KEEP_FP32, fp16_onnx, int8_onnx

        spec = dataclasses.replace(self.spec, precision={**self.spec.precision, PLAN_KEY[self.precision]: list(entries)})
        from paritygate.runtimes import computed_artifact

        if self.precision in self.spec.onnx_artifacts:
            path = self.spec.onnx_artifacts[self.precision]
        elif self.precision == "fp16":
            path = fp16_onnx(spec, FP16_KEEP_FP32 if self.fp16_ops is None else self.fp16_ops)
        else:
            path = int8_onnx(spec)
        return computed_artifact(self, path)  # run as the check ran it: strict FP16 emulation or ORT's own

    def onnx_feed(self, feed):
        """Reference input names -> the ONNX graph's input names (tf2onnx may decorate them)."""
        if self._inputs is None:
            from paritygate import iomap
            from paritygate.backend.onnx.loader import fp32_onnx, load_checked

            self._inputs = iomap.input_map(self.spec, [i.name for i in load_checked(fp32_onnx(self.spec)).graph.input])
        return {self._inputs.get(k, k): v for k, v in feed.items()}

    def check(self, entries):
        from paritygate.backend.onnxrt.runner import OnnxrtRunner
        from paritygate.checks import compare, run_batched

        path = self.artifact(entries)
        runner = OnnxrtRunner(path, name=f"onnxruntime:{self.spec.name}:{self.precision}:plan").activate()
        try:
            cand = run_batched(runner, self.onnx_feed(self.feed), self.spec.max_batch)
        finally:
            runner.deactivate()
        return compare(self.spec, self.precision, self.reference_outputs, cand, self.labels, self.compare_task), path


def _trigger(result, feed, max_batch):
    """The samples the check failed on (at most ``max_batch``), or the first ``max_batch`` when it failed as a
    whole (task metric)."""
    n = len(next(iter(feed.values())))
    failing = sorted({i for o in result.outputs for i in o.failing_batch_elements if i < n})
    return np.array((failing or list(range(n)))[:max_batch], dtype=int)


def _details(spec, precision, div, plan, base, samples, feed, tol):
    first = div.first
    entries = base + [n for n in plan.nodes if n not in base]
    out = {
        "first_node": first.node if first else None,
        "op_type": first.op_type if first else None,
        "tensor": first.tensor if first else None,
        "depth": first.depth if first else None,
        "max_abs_error": first.max_abs if first else None,
        "max_rel_error": first.max_rel if first else None,
        "input": {"samples": [int(i) for i in samples],
                  "shapes": {k: [len(samples), *v.shape[1:]] for k, v in feed.items()},
                  "ranges": {k: [float(np.min(v[samples])), float(np.max(v[samples]))] for k, v in feed.items()}},
        PLAN_FIELD[precision]: plan.nodes,
        "verified": plan.verified,
        "config": (f"[models.precision]  # in the [[models]] entry of '{spec.name}'\n"
                   f"{PLAN_KEY[precision]} = {json.dumps(entries)}") if plan.verified else None,
        "trials": plan.trials,
        "tolerance": {"atol": tol.atol, "rtol": tol.rtol, "source": tol.source, "rule": RULE},
        "unmatched_tensors": len(div.unmatched),
        "error_by_depth": [{k: r.as_dict()[k] for k in ("node", "op_type", "depth", "max_abs", "max_rel")}
                           for r in div.rows],
    }
    if first is None:
        out["note"] = "no matched intermediate leaves the magnitude-scaled tolerance; the plan was searched by bisection"
    return out
