"""``beam_multi_process``: the handler on Beam's multi-process runner, as Dataflow and Flink run it.

Beam pickles the ``RunInference`` transform (and the handler in it) into the pipeline; each worker process
unpickles it and calls ``load_model`` itself. A handler that works in one process can break there: it cannot be
pickled (it holds a loaded model, a session, a lock), or it relies on state the factory left in the launching
process (a module global, a class attribute, a model loaded before pickling). The check:

1. pickles the handler with Beam's own pickler and unpickles it (a failure is a contract breach, with the
   pickler's message);
2. runs one keyed pipeline on FnApiRunner with ``--direct_running_mode=multi_processing
   --direct_num_workers=2`` (``MULTI_PROCESS_WORKERS``), elements spread over both workers, and holds its
   results to exactly-once and to the native reference (``beam_pairing``'s comparison);
3. checks that batches ran in worker processes (not in this one) and in more than one of them;
4. makes its first two batches meet inside the handler (``paritygate.beam.overlap``): both are inside
   ``run_inference`` at once, staged before either model runs, so model copies that share state (one staging
   buffer) give wrong results every run, and a runner that never runs two batches at once fails, saying so.

Cost: one pipeline per model, two worker processes each importing the handler's framework (measured in
docs/beam.md, "Beyond one process").
"""

from paritygate.beam.checks import beam_result, case_info, exactly_once_failures, pairing_failures
from paritygate.beam.overlap import overlap_failures

MULTI_PROCESS_WORKERS = 2


def pickling_failures(subject):
    """Why Beam could not ship the handler to a worker (empty when it can)."""
    from apache_beam.internal import pickler

    handler = subject.make(1, subject.spec.max_batch)
    try:
        blob = pickler.dumps(handler)
    except Exception as err:  # noqa: BLE001 - any pickling error is the finding
        return [(f"the handler ({type(handler).__name__}) cannot be pickled, so no worker process or remote runner "
                f"can receive it: {type(err).__name__}: {str(err)[:300]} -- keep only paths and settings on the "
                "handler and load the model in load_model()")]
    try:
        pickler.loads(blob)
    except Exception as err:  # noqa: BLE001
        return [(f"the handler ({type(handler).__name__}) pickles but does not unpickle: "
                f"{type(err).__name__}: {str(err)[:300]}")]
    return []


def multi_process_case(subject):
    from paritygate.beam.pipeline import Case

    spec = subject.spec
    count = 4 * spec.max_batch + 1  # four full batches and a short one: each worker gets a share of the bundle
    return Case(count, 1, spec.max_batch, "keyed", "unique_str", seed=23, runner="FnApiRunner",
                workers=MULTI_PROCESS_WORKERS)


def worker_failures(run):
    import os

    if run.error:
        return []  # the pipeline's own failure is reported by exactly_once_failures
    pids = {t.pid for t in run.traces}
    if os.getpid() in pids:
        return [f"batches ran in the launching process (pid {os.getpid()}), not in worker processes"]
    if len(pids) < 2 and len(run.traces) > 1:
        return [(f"all {len(run.traces)} batches ran in one worker process: the run did not exercise "
                f"{MULTI_PROCESS_WORKERS} workers")]
    return []


def multi_process(subject):
    from paritygate.beam.pipeline import run_case

    result = beam_result("beam_multi_process", subject, pickling_failures(subject),
                             {"precision": subject.precision, "workers": MULTI_PROCESS_WORKERS})
    if result.failures:
        return result
    if subject.runner not in (None, "FnApiRunner"):
        result.details["note"] = f"runs on FnApiRunner's multi-process mode, not on --parity-beam-runner={subject.runner}"
    run = run_case(subject, multi_process_case(subject))
    result.failures = (exactly_once_failures(run) + pairing_failures(subject, run) + worker_failures(run)
                       + overlap_failures(run))
    result.details.update(case_info(run), worker_pids=sorted({t.pid for t in run.traces if t.pid is not None}),
                          overlap=[t.overlap for t in run.traces if t.overlap])
    return result
