"""A bounded time for every inference call, whatever the runtime: a model that does not return (an ONNX ``Loop``
with a trip count of 10**12 passes onnx.checker and ONNX Runtime's session creation, then runs for days) ends its
call with ``InferenceTimeout`` instead of hanging the run.

``BaseRunner.infer`` (paritygate/backend/base.py) calls every leaf runner's ``infer_impl`` through ``bounded`` (its
error: ``base.InferenceTimeout``, a RunnerError), so
the checks, the validation pass, replay, the Beam handlers and the shadow gate all get the same limit:

- a runner that can stop a call from another thread (ONNX Runtime: ``RunOptions.terminate``) runs it in the
  caller's thread; a watchdog thread cancels it at the limit (the caller pays a dict insert, no thread switch:
  latency measures the same call);
- any other (TensorFlow, TensorRT, the TensorFlow child process) runs in a worker thread the caller waits on; at
  the limit the caller gets ``InferenceTimeout``, the runner's ``cancel`` (if any: the child process is killed)
  runs, and the stuck worker is abandoned (a daemon thread: it cannot keep the process alive).

The limit is ``PARITYGATE_MAX_INFER_S`` seconds (``--parity-max-infer-s`` sets it for a run; a command's own flag
calls ``configure``), default ``DEFAULT_S``: ten minutes, over 1000x the slowest single call measured here on
a real-size model (ResNet50's TensorFlow reference, first call 0.46 s: docs/measure_infer_call.py, docs/limits.md
"Inference time"), and short enough that a CI job's own timeout (GitHub Actions: 6 h) never has to end a hung run
without its report.
"""

import itertools
import os
import queue
import threading
import time

ENV = "PARITYGATE_MAX_INFER_S"
DEFAULT_S = 600.0
POLL_S = 0.25  # how often the watchdog looks at the calls it guards: a cancel comes at most this late


def infer_limit_s():
    """The limit in seconds: ``PARITYGATE_MAX_INFER_S`` when set (a positive number), else ``DEFAULT_S``; a
    value that is no positive number is a ``ValueError`` naming the variable."""
    raw = os.environ.get(ENV)
    if raw is None:
        return DEFAULT_S
    return _seconds(raw, ENV)


def _seconds(raw, where):
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(f"{where}={raw!r}: expected a positive number of seconds for one inference call "
                         f"(default {DEFAULT_S:g})")
    return value


def configure(seconds, where="--parity-max-infer-s"):
    """Set the limit for this process and the processes it starts (xdist workers, the TensorFlow child):
    ``ValueError`` naming ``where`` for a value that is no positive number."""
    os.environ[ENV] = repr(_seconds(seconds, where))


def timeout_message(what, limit):
    """``what``: a name, or a callable giving it (computed only when a call ran too long)."""
    what = what() if callable(what) else what
    return (f"{what}: one inference call ran longer than {limit:g} s and was stopped; a model that takes this long "
            f"per batch needs a larger limit: {ENV}=<seconds> or --parity-max-infer-s=<seconds> (default "
            f"{DEFAULT_S:g})")


def bounded(call, what, cancel=None, in_thread=True, limit=None, error=TimeoutError):
    """``call()``, stopped after ``limit`` seconds (default ``infer_limit_s()``) with ``error`` (the runners':
    ``paritygate.backend.base.InferenceTimeout``, a RunnerError) naming ``what`` (or what it returns, a callable:
    named only on a timeout), the limit and how to raise it.
    ``cancel``: makes a running ``call`` return (or unblock) from another thread; ``in_thread=False`` (only with
    ``cancel``) runs ``call`` in the caller's thread under the watchdog. A call made from inside a bounded call
    (a runner that wraps another) runs as it is: the outer bound holds."""
    if getattr(_LOCAL, "inside", False):
        return call()
    if in_thread:
        return _in_worker(call, what, cancel, infer_limit_s() if limit is None else limit, error)
    if cancel is None:
        raise TypeError("bounded(in_thread=False) needs cancel: nothing else could stop the call")
    return _watched(call, what, cancel, limit, error)  # limit None: the watchdog reads it (not the caller's time)


_LOCAL = threading.local()


# -- in the caller's thread, a watchdog cancels ------------------------------------------------------------------
_GUARDED = {}  # ticket -> [start, limit (None: infer_limit_s()), cancel, cancelled]
_TICKETS = itertools.count()
_WATCHDOG = []  # the watchdog thread, once started


def _watched(call, what, cancel, limit, error):
    """``call()`` in the caller's thread; what it costs the caller (latency measures it): a ticket and a dict entry
    (measured: 0.4 us a call; reading the limit from the environment here cost 0.75 us more, so the watchdog
    reads it)."""
    ticket = next(_TICKETS)
    entry = _GUARDED[ticket] = [time.monotonic(), limit, cancel, False]
    if not _WATCHDOG:
        _start_watchdog()
    _LOCAL.inside = True
    try:
        return call()
    except Exception as err:
        if entry[3]:
            raise error(timeout_message(what, entry[1])) from err
        raise
    finally:
        _LOCAL.inside = False
        _GUARDED.pop(ticket, None)
        if entry[3]:  # cancelled, yet the call returned before it saw the cancel: still over the limit
            raise error(timeout_message(what, entry[1]))


def _start_watchdog():
    with _START:
        if not _WATCHDOG:
            thread = threading.Thread(target=_watch, name="paritygate-infer-watchdog", daemon=True)
            thread.start()
            _WATCHDOG.append(thread)


_START = threading.Lock()


def _watch():
    while True:
        time.sleep(POLL_S)
        now = time.monotonic()
        for entry in list(_GUARDED.values()):
            if entry[1] is None:
                entry[1] = infer_limit_s()
            if now >= entry[0] + entry[1] and not entry[3]:
                entry[3] = True
                _quietly(entry[2])


def _quietly(cancel):
    try:
        cancel()
    except Exception:  # noqa: BLE001, S110 - a cancel that fails leaves the call to the caller's own wait
        pass


# -- in a worker thread the caller waits on -----------------------------------------------------------------------
_IDLE = queue.SimpleQueue()  # workers waiting for a call


class _Worker:
    """A daemon thread running one call at a time; abandoned (never reused) when a call outlives its limit."""

    def __init__(self):
        self.jobs = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="paritygate-infer", daemon=True).start()

    def _serve(self):
        _LOCAL.inside = True
        while True:
            call, done, box = self.jobs.get()
            try:
                box.append((True, call()))
            except BaseException as err:  # noqa: BLE001 - handed to the caller as it is
                box.append((False, err))
            done.set()


def _in_worker(call, what, cancel, limit, error):
    try:
        worker = _IDLE.get_nowait()
    except queue.Empty:
        worker = _Worker()
    done, box = threading.Event(), []
    worker.jobs.put((call, done, box))
    if not done.wait(limit):
        if cancel is not None:
            _quietly(cancel)
        raise error(timeout_message(what, limit))
    _IDLE.put(worker)
    ok, value = box[0]
    if ok:
        return value
    raise value
