"""``beam_model_copies``: how many models the worker processes load, against the handler's promise.

A ModelHandler promises how RunInference loads it (apache_beam/ml/inference/base.py:378, :387, :2040):

    share_model_across_processes() False   one model per worker process: Beam's ``shared.Shared`` loads it once
                                           per process and every batch reuses it (base.py:2049)
    share_model_across_processes() True    ``model_copies()`` models per machine, shared by every worker process
                                           through ``MultiProcessShared`` (base.py:2040-2046); ``large_model=True``
                                           or ``model_copies=N`` given to ModelHandler.__init__ make it True
                                           (base.py:231)

The check counts the handler's ``load_model`` calls per process (``handlers.count_loads``: each call, Beam's or the
handler's own, writes a record with its pid) on FnApiRunner's multi-process mode (2 workers, as
``beam_multi_process``, whose pipeline it shares), and fails when a process loads more than once without sharing
(a handler that loads per batch or per element), or when the processes together load more than ``model_copies()``
with sharing; its results are held to the reference (``beam_pairing``'s comparison), and its first two batches meet
inside the handler (``paritygate.beam.overlap``), so that copies sharing state give wrong results every run. When
the factory takes ``model_copies`` (a parameter of that name, or ``**kwargs``) it also runs the
pipeline with ``model_copies=COPIES_ASKED``: the handler must then promise sharing with that many copies (a handler
that drops the argument loads one model per process), and the two workers together must load it once.

Only what the handler offers is judged: a factory that takes ``**kwargs`` but whose handler cannot take
``model_copies`` (building it raises a TypeError naming that argument, e.g. ``def make(**kw): return
OrtHandler(**kw)`` with no such parameter in ``OrtHandler.__init__``) does not offer it. That second pipeline is
then a skip, recorded with its reason in the details (``runs[1]["skipped"]``); the per-process loads of the first
are judged all the same.
"""

import inspect
from collections import Counter
from dataclasses import replace

from paritygate.beam.checks import (
    beam_result,
    case_info,
    exactly_once_failures,
    pairing_failures,
)
from paritygate.beam.overlap import overlap_failures

COPIES_ASKED = 1  # one copy for 2 worker processes: a per-process loader loads 2 and cannot pass


def takes_model_copies(factory):
    """Whether ``factory`` accepts ``model_copies=`` (a parameter of that name, or ``**kwargs``)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False
    return any(p.name == "model_copies" or p.kind is p.VAR_KEYWORD for p in params)


def promise(handler):
    """(share_model_across_processes(), model_copies()) of a handler."""
    return bool(handler.share_model_across_processes()), int(handler.model_copies())


def promise_failures(asked, share, copies):
    if asked is None or (share and copies == asked):
        return []
    return [(f"the factory was given model_copies={asked}, but the handler promises share_model_across_processes()="
             f"{share}, model_copies()={copies}: it drops Beam's model_copies, so every worker process loads its own "
             "model -- pass model_copies / large_model on to ModelHandler.__init__ (apache_beam/ml/inference/"
             "base.py:231)")]


def load_failures(run, share, copies):
    """Why the run's load_model calls break the promise (share, copies); empty when they keep it."""
    if run.error:
        return []  # the pipeline's own failure is reported by exactly_once_failures
    loads = Counter(r.pid for r in run.loads)
    batches = Counter(t.pid for t in run.traces)
    shown = ", ".join(f"pid {pid}: {n} load(s), {batches[pid]} batch(es)" for pid, n in sorted(loads.items()))
    if share:
        total = sum(loads.values())
        if total > copies:
            return [(f"{total} load_model calls across {len(loads)} process(es) ({shown}); {copies} model cop"
                     f"{'y' if copies == 1 else 'ies'} shared across processes promised (model_copies()={copies}, "
                     f"share_model_across_processes() True, base.py:2040): at most {copies}")]
        return []
    failures = [f"worker process {pid} called load_model {n} times for {batches[pid]} batch(es) ({shown}); the "
                "handler promises one model per process (share_model_across_processes() is False, Beam loads once "
                "per process and reuses it, base.py:2049): load the model in load_model(), never per batch or "
                "element" for pid, n in sorted(loads.items()) if n > 1]
    failures += [f"worker process {pid} ran {batches[pid]} batch(es) but never called load_model: its model came "
                 "from somewhere else (loaded outside load_model, or left by the factory)"
                 for pid in sorted(batches) if pid not in loads]
    return failures


def refuses_model_copies(err):
    """The skip reason when ``err`` (a HandlerContractError from building the handler) is a TypeError naming
    ``model_copies``: the factory or its handler cannot take the argument, so it does not offer it; else None."""
    cause = err.__cause__
    if not (isinstance(cause, TypeError) and "model_copies" in str(cause)):
        return None
    return (f"the handler does not offer model_copies: the factory takes **kwargs, but building it with "
            f"model_copies={COPIES_ASKED} raised TypeError: {str(cause).strip().splitlines()[0][:300]}; only the "
            "handler's own promise is checked")


def _one(subject, case, asked):
    from paritygate.beam.contract import HandlerContractError
    from paritygate.beam.pipeline import run_case

    extra = {"model_copies": asked} if asked is not None else {}
    try:
        share, copies = promise(subject.make(case.min_batch, case.max_batch, **extra))
    except HandlerContractError as err:
        skipped = refuses_model_copies(err) if asked is not None else None
        if skipped is None:
            raise
        return [], {"model_copies_asked": asked, "skipped": skipped}
    run = run_case(subject, case)
    # counted against what the factory was asked for: a handler that drops model_copies still loads too often
    failures = (promise_failures(asked, share, copies) + exactly_once_failures(run) + pairing_failures(subject, run)
                + load_failures(run, *((True, asked) if asked is not None else (share, copies)))
                + overlap_failures(run))
    info = {"model_copies_asked": asked, "share_model_across_processes": share, "model_copies": copies,
            "loads_by_pid": dict(Counter(r.pid for r in run.loads)),
            "batches_by_pid": dict(Counter(t.pid for t in run.traces)),
            "overlap": [t.overlap for t in run.traces if t.overlap], **case_info(run)}
    return failures, info


def model_copies(subject):
    from paritygate.beam.handlers import count_loads
    from paritygate.beam.multiprocess import MULTI_PROCESS_WORKERS, multi_process_case
    from paritygate.verdict import Inconclusive

    spec = subject.spec
    if not count_loads(subject.make(1, spec.max_batch), "unused"):
        raise Inconclusive(f"{subject.name}: the handler instance takes no attribute, so its load_model calls "
                           "cannot be counted (beam_model_copies wraps the instance's load_model)")
    case = multi_process_case(subject)  # the pipeline of beam_multi_process (memoised): no extra run
    runs = [(case, None)] + ([(replace(case, copies=COPIES_ASKED), COPIES_ASKED)]
                             if takes_model_copies(subject.factory) else [])
    result = beam_result("beam_model_copies", subject, [],
                             {"precision": subject.precision, "workers": MULTI_PROCESS_WORKERS, "runs": []})
    for run_case_, asked in runs:
        failures, info = _one(subject, run_case_, asked)
        result.failures += [f"model_copies={asked}: {f}" if asked is not None else f for f in failures]
        result.details["runs"].append(info)
    if len(runs) == 1:
        result.details["note"] = ("the factory takes no model_copies argument: only the handler's own promise is "
                                  "checked")
    elif "skipped" in result.details["runs"][-1]:
        result.details["note"] = result.details["runs"][-1]["skipped"]
    return result
