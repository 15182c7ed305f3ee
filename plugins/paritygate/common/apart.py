"""A step run in a Python process of its own, so that the memory it holds at its peak is never the run's (issue 37:
a real-size model's fp16 and int8 builds and its localization each hold several copies of its weights at once).

    report = apart(build_fp16, spec, src, keep, plan, out)   # build_fp16(...) in the worker process: its result

One worker per process, started on the first call (``python -m paritygate.common.apart``: nothing of the run's
threads, sessions or TensorFlow is copied into it, and the caller's own ``__main__`` is never imported again, which
``multiprocessing``'s spawn does) and kept for the next ones: its start (0.6 s: onnx, ONNX Runtime) is paid once.
Each call hands it the caller's ``sys.path``, working folder and environment, then ``function`` (module-level) and
its arguments, pickled; it answers the result or what was raised, which is raised here. After each call it gives
its freed pages back (``common.memory.trim``). A worker that dies (killed for memory, say) raises ``ApartError``;
the next call starts a new one. A call given a ``deadline`` (or made inside ``until(deadline)``) that passes before
the answer ends the worker and raises ``Overdue``: localization's steps on a large model, within its time budget.
Calls from several threads take turns.
"""

import atexit
import io
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from paritygate.verdict import SuiteError

# A model this large (its fp32 ONNX, or its SavedModel) has its artifact builds, its localization and its TensorFlow
# reference run apart (issue 37): ResNet50's (98 MB) fp16 build took the run's process from 1.3 to 2.05 GiB, its int8
# build to 2.4 GiB, its int8 localization from 2.2 to 3.3 GiB, and its reference, loaded and run, held 0.8 GiB of the
# run's 1.77. Smaller ones stay in the run, where a process's start (0.6 s and 80 MB for onnx and ONNX Runtime; 6 s
# and 0.5 GiB for TensorFlow) costs more than their memory.
APART_BYTES = 8 * 2**20


def large(path):
    """Whether the file ``path``, or the files of the folder ``path`` together, hold ``APART_BYTES`` or more: the
    one test of what runs apart (a model's fp32 ONNX, its ONNX graphs, its SavedModel)."""
    path = Path(path)
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files) >= APART_BYTES


_WORKER, _CLOSING, _TURN = [], [], threading.Lock()  # the worker; its end registered at exit; one call at a time
_UNTIL = threading.local()  # .deadline: this thread's calls' deadline inside ``until``


class ApartError(SuiteError):
    """The process running a step ended before it answered."""


class Overdue(ApartError):
    """The step had not answered by its deadline: its process was ended."""


@contextmanager
def until(deadline):
    """Each call this thread makes in the block is given ``deadline`` (``time.monotonic``; None: none)."""
    before = getattr(_UNTIL, "deadline", None)
    _UNTIL.deadline = deadline
    try:
        yield
    finally:
        _UNTIL.deadline = before


def apart(function, *args, deadline=None):
    """``function(*args)`` in the worker process: its result, or what it raised. ``deadline`` (``time.monotonic``;
    by default ``until``'s): not answered by then, the worker is ended and ``Overdue`` raised."""
    deadline = getattr(_UNTIL, "deadline", None) if deadline is None else deadline
    request = pickle.dumps((sys.path, os.getcwd(), dict(os.environ))) + \
        pickle.dumps((function, args), protocol=pickle.HIGHEST_PROTOCOL)  # the path first: the function is found on it
    name = f"{function.__module__}.{function.__qualname__}"
    with _TURN:
        worker = _worker()
        try:
            send(worker.stdin, request)
            if deadline is not None and not select.select([worker.stdout], [], [],
                                                          max(deadline - time.monotonic(), 0.0))[0]:
                _close(kill=True)
                raise Overdue(f"{name}, run apart, had not answered by its deadline: its process was ended")
            reply = receive(worker.stdout)
        except OSError:
            reply = None
        if reply is None:
            code = _close()
            raise ApartError(f"the process running {name} ended before it answered (exit {code}: killed, for memory "
                             "or by a signal?)")
    try:
        ok, value = pickle.loads(reply)
    except Exception as err:  # a class this process cannot make again: said, with the worker's words
        raise ApartError(f"the answer of {name}, run apart, cannot be read here: {type(err).__name__}: {err}") from err
    if ok:
        return value
    raise value


def _worker():
    if _WORKER and _WORKER[0].poll() is not None:
        _close()
    if not _WORKER:
        _WORKER.append(subprocess.Popen([sys.executable, "-m", "paritygate.common.apart"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE))
        if len(_WORKER) == 1 and not _CLOSING:
            _CLOSING.append(atexit.register(_close))
    return _WORKER[0]


def _close(kill=False):
    """End the worker (its stdin closed, it exits; killed if it has not within 5 s, or at once with ``kill``): its
    exit status, or None."""
    if not _WORKER:
        return None
    worker = _WORKER.pop()
    if kill:
        worker.kill()
    try:
        worker.stdin.close()
    except OSError:
        pass  # a worker that died: its pipe is broken
    try:
        code = worker.wait(5)
    except subprocess.TimeoutExpired:
        worker.kill()
        code = worker.wait()
    worker.stdout.close()
    return code


def send(stream, data):
    """Write ``data`` (bytes) to ``stream`` as one frame: its length (8 bytes, little-endian), then itself."""
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def receive(stream):
    """The next frame ``send`` wrote to ``stream``, or None at its end."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    return stream.read(struct.unpack("<Q", head)[0])


def _serve():
    """The worker: each request run as asked, until its stdin closes."""
    from paritygate.common.memory import trim

    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what a step prints cannot corrupt the answers
    while (request := receive(sys.stdin.buffer)) is not None:
        try:
            function, args = _unpickled(request)  # a module the worker cannot import is said, like any error
            answer = (True, function(*args))
        except Exception as err:  # noqa: BLE001 - raised again in the caller's process, with the worker's traceback
            if hasattr(err, "add_note"):
                err.add_note("in the process it ran apart in (paritygate.common.apart):\n" + traceback.format_exc())
            answer = (False, err)
        send(channel, _reply(answer))
        del answer
        trim()


def _reply(answer):
    """``answer`` pickled; an exception that would not be made again on the other side (its class takes other
    arguments than it keeps), or an answer that cannot be pickled, becomes an ApartError saying what it was."""
    try:
        reply = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        if not answer[0]:
            pickle.loads(reply)
        return reply
    except Exception as err:  # noqa: BLE001 - said, not lost
        what = f"{type(answer[1]).__name__}: {answer[1]}" if not answer[0] else f"{type(err).__name__}: {err}"
        return pickle.dumps((False, ApartError(f"a step run apart ended with {what} (not sent back as it is)")))


def _unpickled(request):
    """(function, args) of ``request``, the caller's path, folder and environment taken on first."""
    stream = io.BytesIO(request)
    path, folder, environment = pickle.load(stream)
    sys.path[:] = path
    os.chdir(folder)
    os.environ.clear()
    os.environ.update(environment)
    return pickle.load(stream)


if __name__ == "__main__":
    _serve()
