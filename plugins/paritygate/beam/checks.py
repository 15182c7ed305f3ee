"""Pipeline-level RunInference checks: each runs real pipelines (``pipeline.run_case``) and returns a
``CheckResult`` (``beam_result``); the conformance tests only assert on it.

    exactly_once      no element lost or duplicated, plain and keyed; no batch returns more or fewer results
                      than it had elements (KeyedModelHandler zips keys with results and drops the rest); a
                      result whose example is a converted copy of its element is a contract breach, named
    pairing           each result's example is its own input, its key stays with it, and its inference matches
                      the native TF reference for that element within the handler's precision policy
    batch_bounds      batch sizes within the factory's max_batch_size and the model's max_batch, and short
                      batches as the handler's ``batch_elements_kwargs`` promise (``short_batch_rule``: local
                      runners, one bundle: at most one below min_batch_size unless time-based batching);
                      ``num_inferences`` equals the element count
    metric_bytes      ``get_num_bytes`` exact for every batch (``contract.expected_num_bytes``: the elements' nbytes
                      or the handler's declared formula; keyed batches: the unkeyed handler's count), and
                      ``inference_request_batch_byte_size`` equal to it for unkeyed pipelines
    dead_letter       with ``with_exception_handling()`` a failing element lands in the dead-letter output, and
                      every other element comes out once (only batch-mates of the failing one may be dead)
    batch_weight      a handler built with Beam's ``max_batch_weight`` / ``element_size_fn`` gets batches within it
    maybe_keyed_mixed ``MaybeKeyedModelHandler`` over keyed and unkeyed elements keeps every element and key
    batch_latency     p99 of the suite-timed per-batch ``run_inference`` wall time within
                      ``[models.beam] batch_latency_p99_ms``

Short batches: every check but batch_latency runs element counts that are not a multiple of max_batch_size, and
each also holds the results of the short batches to the reference (``short_batch_failures``).
"""

from collections import Counter
from dataclasses import asdict

from paritygate.beam.contract import LOCAL_RUNNERS
from paritygate.common.memo import Memo, ModelKey
from paritygate.comparator.compare import OutputMismatchError, compare_outputs
from paritygate.comparator.stats import PERCENTILE_METHOD, percentile
from paritygate.result import CheckResult

SUBJECTS = Memo("beam_subjects", key=ModelKey)  # the model's beam.contract.HandlerUnderTest (subject_for)
MAX_LISTED = 8  # failures listed per check; the count says how many there were
LATENCY_BATCHES = 40  # full batches timed by the latency check (nearest-rank p99 of 40 samples: the slowest)


def beam_result(check, subject, failures=(), info=None):
    """A RunInference check's CheckResult: model-level (no precision), its handler and what it ran in details."""
    return CheckResult(subject.spec.name, None, check, failures=list(failures),
                       details={"handler": subject.name, **(info or {})})


def subject_for(ctx, spec):
    """The model's HandlerUnderTest (once per run, ``SUBJECTS``), with its TF reference and the Beam runner."""
    def subject():
        from paritygate.backend.runtimes import reference_runner, resolved_spec
        from paritygate.beam.contract import HandlerUnderTest

        return HandlerUnderTest.from_spec(resolved_spec(ctx, spec), reference_runner(ctx, spec),
                                          runner=ctx.beam_runner, options=ctx.beam_options)

    return SUBJECTS.get(ctx, ModelKey(spec.name), subject)


def _listed(failures):
    if len(failures) <= MAX_LISTED:
        return failures
    return failures[:MAX_LISTED] + [f"... and {len(failures) - MAX_LISTED} more"]


# -- evaluators over one PipelineRun -----------------------------------------------------------------
def _label(run, key, has_key, d):
    index = next((i for i, (k, kk, dd, _) in enumerate(run.inputs) if dd == d and (not has_key or k == key)), None)
    return f"element #{index}" + (f" (key {key!r})" if has_key else "")


def converted(run):
    """Returned example digest -> (element digest, what changed) for examples the handler returned converted."""
    return {got: (sent, text) for t in run.traces for sent, got, text in t.converted}


def breaches(run):
    """One message per element whose result came back with a converted example (named by the element sent)."""
    return [f"contract breach: {_label(run, None, False, sent)}: run_inference returned its example converted "
            f"({text}); a PredictionResult's example must be the element itself"
            for sent, text in sorted(set(converted(run).values()))]


def exactly_once_failures(run):
    if run.error:
        return [f"pipeline failed: {run.error}"]
    conv = converted(run)
    want = Counter((k if keyed else None, d) for k, keyed, d, _ in run.inputs)
    got = Counter((e.key if e.has_key else None, conv.get(e.digest, (e.digest,))[0]) for e in run.results)
    failures = breaches(run)
    failures += [f"lost: {_label(run, k, k is not None, d)}" for (k, d), n in (want - got).items() for _ in range(n)]
    failures += [f"duplicated or foreign result: key {k!r}, example {d}" for (k, d), n in (got - want).items()
                 for _ in range(n)]
    failures += [f"a batch of {t.size} element(s) came back with {t.returned} result(s)"
                 for t in run.traces if t.returned != t.size]
    count = run.metrics.get("num_inferences")
    if count != len(run.inputs):
        failures.append(f"num_inferences counter is {count}, {len(run.inputs)} elements were sent")
    return _listed(failures)


def pairing_failures(subject, run):
    if run.error:
        return [f"pipeline failed: {run.error}"]
    examples = {d: ex for _, _, d, ex in run.inputs}
    keys = {(k, d) for k, keyed, d, _ in run.inputs if keyed}
    failures, good, conv = breaches(run), [], converted(run)
    for e in run.results:
        if e.error:
            failures.append(f"result (key {e.key!r}): {e.error}")
        elif e.digest in conv:
            continue  # a contract breach, listed above with its element
        elif e.digest not in examples:
            failures.append(f"result (key {e.key!r}): its example is none of the inputs")
        elif e.has_key and (e.key, e.digest) not in keys:
            owners = sorted(repr(k) for k, d in keys if d == e.digest)
            failures.append(f"key {e.key!r} came back with the element of key {', '.join(owners)}")
        else:
            good.append(e)
    refs = subject.run_references(run)
    wrong = [(e, compare_element(subject, refs[e.digest], e.inference)) for e in good if e.digest in refs]
    wrong = [(e, problem) for e, problem in wrong if problem]
    for i, (e, problem) in enumerate(wrong):
        hint = _misaligned_hint(subject, run, e) if i < 3 else ""
        failures.append(f"{_label(run, e.key, e.has_key, e.digest)}: {problem}{hint}")
    return _listed(failures)


def compare_element(subject, ref, cand):
    """None when ``cand`` matches ``ref`` under the handler's precision policy, else why not."""
    try:
        comparisons = compare_outputs(subject.spec, subject.precision, ref, cand)
    except OutputMismatchError as err:
        return f"inference has outputs {sorted(cand)}, the reference has {sorted(ref)}: {err}"
    bad = [c.describe() for c in comparisons if not c.passed]
    return "; ".join(bad) or None


def _misaligned_hint(subject, run, emitted):
    refs = subject.run_references(run)
    for i, (_, _, d, _) in enumerate(run.inputs):
        if d != emitted.digest and d in refs and compare_element(subject, refs[d], emitted.inference) is None:
            return f" -- it matches the reference of element #{i} instead (results misaligned)"
    return ""


def batch_bounds_failures(subject, run):
    if run.error:
        return [f"pipeline failed: {run.error}"]
    case, spec = run.case, subject.spec
    sizes = [t.size for t in run.traces]
    failures = [f"a batch of {s} exceeds max_batch_size={case.max_batch} given to the factory"
                for s in sizes if s > case.max_batch]
    failures += [f"a batch of {s} exceeds the model's max_batch={spec.max_batch} ({spec.where('max_batch')})"
                 for s in sizes if s > spec.max_batch]
    low, limit, why = short_batch_rule(run.batching, case.min_batch)
    short = [s for s in sizes if s < low]
    if case.runner in LOCAL_RUNNERS and limit is not None and len(short) > limit:
        failures.append(f"{len(short)} batches {short} are smaller than min_batch_size={low} "
                        f"({', '.join(f'{k}={_shown(v)}' for k, v in sorted(run.batching.items()))}): {why}")
    metric = run.metrics.get("inference_request_batch_size")
    if metric is None:
        failures.append("RunInference reported no inference_request_batch_size metric")
    elif metric["max"] > case.max_batch or metric["min"] < 1:
        failures.append(f"inference_request_batch_size ranges {metric['min']}..{metric['max']}, outside "
                        f"1..{case.max_batch}")
    if sum(sizes) != len(run.inputs):
        failures.append(f"batches hold {sum(sizes)} elements, {len(run.inputs)} were sent")
    count = run.metrics.get("num_inferences")
    if count != len(run.inputs):
        failures.append(f"num_inferences counter is {count}, {len(run.inputs)} elements were sent")
    return _listed(failures)


def short_batch_rule(kwargs, min_batch):
    """(min_batch_size, most short batches allowed per bundle or None, why), from the handler's
    ``batch_elements_kwargs()``: what ``beam.BatchElements(**kwargs)`` promises (apache_beam/transforms/util.py)."""
    low = kwargs.get("min_batch_size", min_batch)
    if kwargs.get("max_batch_duration_secs") is not None:
        return low, None, ("max_batch_duration_secs selects the stateful BatchElements, whose buffering timer "
                           "flushes any partial batch (util.py:886, :913), per length bucket with a length_fn: "
                           "short batches are not bounded")
    return low, 1, "BatchElements flushes at most one short remainder per bundle (one bundle here)"


def _shown(value):
    return getattr(value, "__name__", None) or repr(value)


def metric_bytes_failures(run):
    if run.error:
        return [f"pipeline failed: {run.error}"]
    reported = run.metrics.get("inference_request_batch_byte_size")
    payload = run.metrics.get("paritygate/payload_bytes")
    own = run.metrics.get("paritygate/reported_bytes")
    wrong = run.metrics.get("paritygate/misreported_batches", 0)
    if reported is None or payload is None:
        return ["RunInference reported no inference_request_batch_byte_size metric"]
    failures = []
    if wrong:
        ratio = (own or {}).get("sum", 0) / max(payload["sum"], 1)
        failures.append(f"{wrong} of {payload['count']} batches reported a byte count other than their exact bytes "
                        f"({'over' if ratio > 1 else 'under'}-reported {ratio:.3g}x): get_num_bytes sums to "
                        f"{(own or {}).get('sum')} bytes for {payload['sum']} bytes expected (the elements' nbytes, "
                        "or the handler's paritygate_num_bytes formula)")
    if run.case.keys == "none" and reported["sum"] != payload["sum"]:  # keyed: Beam adds the keys' pickled bytes
        failures.append(f"inference_request_batch_byte_size sums to {reported['sum']} bytes, the batches hold "
                        f"{payload['sum']} bytes")
    return failures


def dead_letter_failures(run):
    if run.error:
        return [f"pipeline failed despite with_exception_handling(): {run.error}"]
    poison_key, poison_keyed, poison, _ = run.inputs[run.case.poison]
    poison_id = (poison_key if poison_keyed else None, poison)
    results = Counter((e.key if e.has_key else None, e.digest) for e in run.results)
    dead = Counter((k if keyed else None, d) for b in run.dead for k, keyed, d in b.elements)
    failures = []
    if results[poison_id]:
        failures.append("the failing element came out as a result instead of failing")
    if not dead[poison_id]:
        failures.append("the failing element is not in the dead-letter output")
    want = Counter((k if keyed else None, d) for k, keyed, d, _ in run.inputs)
    got = results + dead
    failures += [f"lost: {_label(run, k, k is not None, d)}" for (k, d), n in (want - got).items() for _ in range(n)]
    failures += [f"came out twice (results + dead letters): key {k!r}" for (k, d), n in (got - want).items()
                 for _ in range(n)]
    failures += [f"a batch without the failing element went to the dead-letter output: {b.error}"
                 for b in run.dead if all((k if kk else None, d) != poison_id for k, kk, d in b.elements)]
    return _listed(failures)


def batch_weight_failures(run):
    if run.error:
        return [f"RunInference with max_batch_weight={run.case.weight} failed: {run.error}"]
    return [f"a batch of {t.size} element(s) weighs {t.payload} bytes, over max_batch_weight={run.case.weight}"
            for t in run.traces if t.payload > run.case.weight and t.size > 1] + exactly_once_failures(run)


def short_batches(run):
    """Sizes of the run's batches below the case's max_batch_size. Every pipeline check but batch_latency (full
    batches, timed) runs an element count that is not a multiple of max_batch_size (2*max_batch+1 or
    4*max_batch+1), so that a final batch is short, and holds every result of it (static batches: padded by the
    handler, the padding dropped)."""
    return [t.size for t in run.traces if t.size < run.case.max_batch]


def short_batch_failures(subject, run):
    """The results of the run's short batches held to the native reference: every pipeline check holds them, so
    that a handler wrong only on a short final batch (padding misaligned, a static size assumed) fails each one."""
    if run.error:
        return []
    short = {d for t in run.traces if t.size < run.case.max_batch for d in t.digests}
    examples = {d: ex for _, _, d, ex in run.inputs}
    mine = [e for e in run.results if e.digest in short and e.digest in examples and not e.error]
    refs = subject.run_references(run)
    wrong = [(e, compare_element(subject, refs[e.digest], e.inference)) for e in mine if e.digest in refs]
    return _listed([f"short batch: {_label(run, e.key, e.has_key, e.digest)}: {problem}"
                    for e, problem in wrong if problem])


def case_info(run):
    return {"case": asdict(run.case), "batch_sizes": [t.size for t in run.traces], "error": run.error,
            "short_batches": short_batches(run),
            "pipeline_seconds": round(run.seconds, 3), "metrics": run.metrics,
            "batch_elements_kwargs": {k: _shown(v) for k, v in run.batching.items()}}


# -- drivers -----------------------------------------------------------------------------------------
def _property(name, subject, evaluate, poison=False):
    from paritygate.beam import cases as c
    from paritygate.beam.pipeline import run_case

    runners = c.runners_for(subject)
    strategy = c.cases(subject.spec, runners, poison=poison)
    explicit = c.explicit_cases(subject.spec, runners, poison=poison)
    examples = c.pipeline_examples(c.DEAD_LETTER_EXAMPLES_DIVISOR if poison else c.PIPELINE_EXAMPLES_DIVISOR)
    case, failures, ran = c.explore(strategy, explicit, lambda k: evaluate(run_case(subject, k)), examples)
    result = beam_result(name, subject, failures)
    from paritygate.beam.pipeline import rows_by_source

    result.details.update(precision=subject.precision, runners=list(runners), hypothesis_seed=c.SESSION_SEED,
                          generated_examples=examples, cases_run=len(ran),
                          cases_with_short_batches=sum(1 for k in ran if short_batches(run_case(subject, k))))
    result.inputs = {"rows_by_source": rows_by_source(subject.spec, ran)}
    if case is not None:
        result.details["failing"] = case_info(run_case(subject, case))
    return result


def exactly_once(subject):
    return _property("beam_exactly_once", subject,
                     lambda run: exactly_once_failures(run) + short_batch_failures(subject, run))


def pairing(subject):
    return _property("beam_pairing", subject, lambda run: pairing_failures(subject, run))


def batch_bounds(subject):
    return _property("beam_batch_bounds", subject,
                     lambda run: batch_bounds_failures(subject, run) + short_batch_failures(subject, run))


def metric_bytes(subject):
    return _property("beam_metric_bytes", subject,
                     lambda run: metric_bytes_failures(run) + short_batch_failures(subject, run))


def dead_letter(subject):
    return _property("beam_dead_letter", subject,
                     lambda run: dead_letter_failures(run) + short_batch_failures(subject, run), poison=True)


def _single(name, subject, case, evaluate):
    from paritygate.beam.pipeline import run_case

    run = run_case(subject, case)
    return beam_result(name, subject, evaluate(run),
                           {"precision": subject.precision, **case_info(run)})


def batch_weight(subject):
    from paritygate.beam.contract import payload_bytes
    from paritygate.beam.pipeline import Case, case_inputs

    spec, runner = subject.spec, (subject.runner or "FnApiRunner")
    one = payload_bytes(case_inputs(spec, Case(1, 1, 1))[0][3])
    weight = one * max(1, spec.max_batch // 2)
    case = Case(2 * spec.max_batch + 1, 1, spec.max_batch, runner=runner, weight=weight)
    return _single("beam_batch_weight", subject, case,
                   lambda run: batch_weight_failures(run) + short_batch_failures(subject, run))


def maybe_keyed_mixed(subject):
    from paritygate.beam.pipeline import Case

    spec = subject.spec
    case = Case(2 * spec.max_batch + 1, spec.max_batch, spec.max_batch, "maybe_keyed", "mixed",
                runner=subject.runner or "FnApiRunner")  # full batches: each mixes keyed and unkeyed elements
    return _single("beam_maybe_keyed_mixed", subject, case,
                   lambda run: exactly_once_failures(run) + pairing_failures(subject, run))


def batch_latency(subject, budget_ms):
    """p50/p90/p99 (nearest rank: ``comparator.stats.percentile``, as the latency rows) of the suite-timed
    run_inference calls over a pipeline of LATENCY_BATCHES full batches."""
    from paritygate.beam.pipeline import Case, run_case

    spec = subject.spec
    case = Case(LATENCY_BATCHES * spec.max_batch, spec.max_batch, spec.max_batch, seed=7,
                runner=subject.runner or "FnApiRunner")
    run = run_case(subject, case)
    samples = [t.seconds * 1e3 for t in run.traces]
    result = beam_result("beam_batch_latency", subject, [], {"precision": subject.precision,
                                                                           **case_info(run)})
    if run.error or not samples:
        result.failures.append(f"pipeline failed: {run.error or 'no batch was timed'}")
        return result
    p50, p90, p99 = (percentile(samples, q) for q in (50, 90, 99))  # nearest rank, as the latency rows
    result.latency = [{"batch": "all", "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "budget": budget_ms,
                               "percentile_method": PERCENTILE_METHOD,
                               "batches": len(samples), "samples_ms": samples,
                               "budget_source": f"{spec.source} [models.beam] batch_latency_p99_ms"}]
    if p99 > budget_ms:
        result.failures.append(f"p99 of per-batch run_inference wall time {p99:.3f} ms exceeds the budget "
                               f"{budget_ms} ms ({spec.where('beam.batch_latency_p99_ms')}); p50 {p50:.3f} ms, "
                               f"{len(samples)} batches")
    return result


PIPELINE_CHECKS = {"beam_exactly_once": exactly_once, "beam_pairing": pairing, "beam_batch_bounds": batch_bounds,
                   "beam_metric_bytes": metric_bytes, "beam_dead_letter": dead_letter,
                   "beam_batch_weight": batch_weight, "beam_maybe_keyed_mixed": maybe_keyed_mixed}
