"""Two batches inside the handler at once: the rendezvous of ``beam_multi_process`` and ``beam_model_copies``.

A handler whose model copies share state (one staging buffer, one output array, a module global) is right one batch
at a time and wrong when two batches are inside ``run_inference`` together. Beam's multi-process runner runs two
batches at once only when its worker processes happen to overlap, so these checks caught such a handler by luck
(issue 41: with 50 ms of simulated device time 5 runs in 5 and 4 in 5, with 2 ms one run in two). The suite's own
handler (``handlers.TracedHandler``) now makes the first two batches of a multi-worker pipeline meet:

1. at entry: each of the first two batches to reach ``run_inference`` takes a slot and waits there until the other
   has taken the second (``OVERLAP_TIMEOUT_S``); a runner that never runs two batches at once fails the check, and
   the failure says so (``overlap_failures``);
2. at the model: each waits (``MODEL_WAIT_S``) at its first use of the model Beam handed it (an attribute, a call,
   an item) until the other batch has reached its own, so both batches are staged before either model runs; a race
   on a buffer filled before the model runs is then caught at any device time, none included. A handler that never
   touches the model it is given is met at entry only; one that serialises its model use itself (a lock across
   processes) waits ``MODEL_WAIT_S`` once and goes on.

Later batches pass straight through. The meeting points are files in a folder of the run (local runners only: the
multi-process checks run on FnApiRunner). Imports nothing heavy.
"""

import os
import time
from dataclasses import dataclass

SLOTS = 2  # the batches that meet: two, as two model copies or two worker processes race
# How long the first batch waits for a second: each of the 2 worker processes imports Beam and the handler's
# framework and loads its model before its first batch. Measured: the second arrived within 0.55 s of the first in
# all 60 runs of tests/beam/probe_overlap.py on the shared 2-core machine (load 5-7); 60 s leaves two orders of
# magnitude for a slower machine and is only ever waited out by a runner that never runs two batches at once.
OVERLAP_TIMEOUT_S = 60.0
MODEL_WAIT_S = 5.0  # at the model: a handler that serialises its own model use waits this once
POLL_S = 0.0005


@dataclass
class Meeting:
    """One batch's part in the rendezvous: its slot, how long it waited at entry, whether the other batch came,
    and (None until the model is used) whether both met at the model."""

    folder: str
    slot: int
    waited_s: float = 0.0
    met: bool = False
    model_met: bool = None
    model_waited_s: float = 0.0

    def record(self):
        return {"slot": self.slot, "pid": os.getpid(), "met": self.met, "waited_s": round(self.waited_s, 4),
                "model_met": self.model_met, "model_waited_s": round(self.model_waited_s, 4)}

    def at_model(self):
        """This batch's first use of the model: mark it, then wait for the other batch's (``MODEL_WAIT_S``)."""
        if self.model_met is not None:
            return
        _touch(os.path.join(self.folder, f"model-{self.slot}"))
        self.model_met, self.model_waited_s = _wait([os.path.join(self.folder, f"model-{i}") for i in range(SLOTS)],
                                                    MODEL_WAIT_S)

    def wrap(self, model):
        return AtFirstUse(model, self.at_model) if self.met else model


class Rendezvous:
    """The meeting points of one pipeline run (a folder every worker process can reach; it pickles as its path)."""

    def __init__(self, folder, timeout=OVERLAP_TIMEOUT_S):
        self.folder, self.timeout = str(folder), timeout

    def enter(self):
        """A Meeting when this batch is one of the first ``SLOTS`` (after waiting for the others), else None."""
        os.makedirs(self.folder, exist_ok=True)
        for slot in range(SLOTS):
            try:
                os.close(os.open(os.path.join(self.folder, f"slot-{slot}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                continue
            met, waited = _wait([os.path.join(self.folder, f"slot-{i}") for i in range(SLOTS)], self.timeout)
            return Meeting(self.folder, slot, waited, met)
        return None


def _touch(path):
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY))


def _wait(paths, timeout):
    """(whether every path exists before ``timeout`` s, the seconds waited)."""
    start = time.perf_counter()
    while not all(os.path.exists(p) for p in paths):
        if time.perf_counter() - start > timeout:
            return False, time.perf_counter() - start
        time.sleep(POLL_S)
    return True, time.perf_counter() - start


class AtFirstUse:
    """The model Beam handed ``run_inference``, calling ``first()`` on its first use (an attribute, a call, an
    item, iteration, ``with``) and delegating everything to it; ``isinstance`` sees the model's class."""

    def __init__(self, model, first):
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_first", first)

    def _use(self):
        object.__getattribute__(self, "_first")()
        return object.__getattribute__(self, "_model")

    @property
    def __class__(self):
        return type(object.__getattribute__(self, "_model"))

    def __getattr__(self, name):
        return getattr(self._use(), name)

    def __setattr__(self, name, value):
        setattr(self._use(), name, value)

    def __call__(self, *args, **kwargs):
        return self._use()(*args, **kwargs)

    def __getitem__(self, key):
        return self._use()[key]

    def __iter__(self):
        return iter(self._use())

    def __len__(self):
        return len(self._use())

    def __contains__(self, item):
        return item in self._use()

    def __enter__(self):
        return self._use().__enter__()

    def __exit__(self, *exc):
        return self._use().__exit__(*exc)


def overlap_failures(run):
    """Why the run did not put two batches inside the handler at once (empty when it did, or when the pipeline
    failed: that is reported by exactly_once_failures)."""
    if run.error:
        return []
    meetings = [t.overlap for t in run.traces if t.overlap]
    if len(run.traces) > 1 and not meetings:
        return ["no batch reached the suite's rendezvous: the run could not put two batches inside the handler at once"]
    return [(f"the runner never ran two batches at once: the batch in slot {m['slot']} (pid {m['pid']}) waited "
             f"{m['waited_s']:.1f} s inside run_inference for a second batch ({run.case.workers} worker processes, "
             f"OVERLAP_TIMEOUT_S = {OVERLAP_TIMEOUT_S:g} in paritygate.beam.overlap), so the check could not tell "
             "whether the handler's model copies share state; run it where the workers run batches concurrently")
            for m in meetings if not m["met"]]
