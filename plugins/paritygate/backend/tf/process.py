"""The TF reference in a process of its own, started before the checks: the goldens check's live TensorFlow run on a
warm rerun, overlapped with the rest of the run.

A warm rerun of an unchanged config reads every reference output from the reference-output cache, so the goldens
check is the only part of it that runs TensorFlow, which must run live. Importing TensorFlow and loading the model
took 2.3 s of ONet's 4.3 s warm run (cProfile, docs/measure_rerun.py), on one core while the other idled. So when
a run selects ``goldens_reproduce`` and the cache already holds what the reference declared on an earlier run
(``paritygate.plugin.pytest_collection_finish``; not on xdist workers, which share the cores already; not for a
Keras file, which may need custom objects a conftest registered in the run's process), this process is started
at collection: it imports TensorFlow and loads the model while the checks before it run, and the
goldens check asks it for the outputs. It runs ``TfRunner``, the code an in-process reference runs, on the same
machine and environment: the same numerics.

The protocol is framed NumPy archives on the child's stdin and a private copy of its stdout (the child's own
``print``s go to its stderr): a request names a command (``meta``, ``infer``) and holds the feed; a reply holds the
outputs, the metadata (JSON), or the error the child's runner raised, which the parent raises as its own
``RunnerError``. The child ends when its stdin closes, or is killed when the run ends.
"""

import io
import json
import os
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path

import numpy as np

from paritygate.backend.base import BaseRunner, RunnerError
from paritygate.common.apart import receive, send
from paritygate.common.memo import Memo, ModelKey

# the goldens check's reference in a TensorFlow child process (start_goldens_reference), ended with the run
REFERENCE_PROCESSES = Memo("reference_processes", key=ModelKey, close=lambda child: child.close())

_CMD, _ERROR, _META = "__cmd__", "__error__", "__meta__"
# glibc's malloc arenas in the child, unless the environment sets them: TensorFlow's pool threads each take an arena
# of their own (up to 8 per core), and the freed memory scattered over them keeps the child's resident set up. On
# EfficientNetB0's gate (bytecode cached, 2026-11-29) the reference child peaked at 0.801 GiB with glibc's default and
# 0.752 GiB with 2; 200 runs of batches 1-4 in a bare process: 0.762 and 0.741 GiB. The values are the same: it is
# where the memory comes from, not what is computed.
ARENAS = {"MALLOC_ARENA_MAX": "2"}


def _send(stream, arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    send(stream, buf.getvalue())


def _receive(stream):
    data = receive(stream)
    if data is None:
        return None
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


class TfProcessRunner(BaseRunner):
    """``TfRunner(path, signature)`` served by a child process, started by the constructor (it loads the model at
    once; ``lazy``: by ``activate``); ``activate`` waits for it. Raises RunnerError with the child's own message."""

    def __init__(self, path, signature="serving_default", name=None, env=None, lazy=False):
        super().__init__(name or f"tf:{Path(path).name}")
        self.path, self.signature, self.env = Path(path), signature, dict(env or {})
        self._child = self._log = self._meta = self.output_names = None  # output names: read on activate
        if not lazy:
            self._start()

    def start(self):
        """Start a lazy runner's child now, if it is not started: it imports TensorFlow and loads the model while
        the caller goes on (``activate`` then waits only for what is left)."""
        if self._child is None:
            self._start()

    def _start(self):
        """Start the child (``env``: variables set for it alone, e.g. another TF_ENABLE_ONEDNN_OPTS)."""
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - the child's stderr while it lives; close() closes it
        self._child = subprocess.Popen([sys.executable, "-m", "paritygate.backend.tf.process", str(self.path),
                                        self.signature], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=self._log, env={**ARENAS, **os.environ, **self.env})
        # ended by close(), else when this runner is collected (a caller that never closes leaks no process)
        self._end = weakref.finalize(self, end_child, self._child, self._log)

    def _call(self, command, feed=None):
        try:
            _send(self._child.stdin, {_CMD: np.array(command), **(feed or {})})
            reply = _receive(self._child.stdout)
        except (BrokenPipeError, OSError, ValueError):
            reply = None
        if reply is None:
            self._log.seek(0)
            tail = self._log.read().decode(errors="replace").strip().splitlines()[-5:]
            raise RunnerError(f"{self.path}: the TensorFlow reference process ended (exit {self._child.poll()}): "
                              + " | ".join(tail))
        if _ERROR in reply:
            raise RunnerError(str(reply[_ERROR]))
        return reply

    def activate_impl(self):
        if self._child is None:
            self._start()
        self._meta = json.loads(str(self._call("meta")[_META]))
        self.output_names = list(self._meta["outputs"])

    def describe(self):
        return self._meta["describe"] if self._meta else f"{self.path} (signature '{self.signature}')"

    def input_metadata_impl(self):
        return {k: (np.dtype(d), tuple(s)) for k, (d, s) in self._meta["inputs"].items()}

    def weights_sha256(self):
        return self._meta["weights_sha256"]

    def infer_impl(self, feed):
        return {k: v for k, v in self._call("infer", {k: np.asarray(v) for k, v in feed.items()}).items()}

    def cancel_impl(self):
        """A call past the inference time limit: the child is ended, so the waiting read returns."""
        self.close()

    def deactivate_impl(self):
        self.close()

    def close(self):
        """End the child now: it holds no state worth a clean exit, and TensorFlow's own teardown took 0.6 s the
        run would wait for."""
        if self._child is not None:
            self._end()


def end_child(child, log):
    """Kill ``child`` if it still runs, reap it, and close its pipes and ``log`` (its stderr file)."""
    if child.poll() is None:
        child.kill()
        child.wait()
    for stream in (child.stdin, child.stdout, log):
        stream.close()


def main(path, signature):
    from paritygate.backend.tf.runner import TfRunner

    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the model's own prints cannot corrupt the protocol
    runner, meta = TfRunner(Path(path), signature), None
    try:
        runner.activate()
        meta = {"describe": runner.describe(), "outputs": list(runner.output_names),
                "inputs": {k: [np.dtype(d).str, list(s)] for k, (d, s) in runner.input_metadata().items()},
                "weights_sha256": runner.weights_sha256()}
    except Exception as err:  # noqa: BLE001 - sent back, raised by the parent as its RunnerError
        failed = str(err)
    requests = sys.stdin.buffer
    while (request := _receive(requests)) is not None:
        command = str(request.pop(_CMD))
        try:
            if meta is None:
                raise RunnerError(failed)
            reply = {_META: np.array(json.dumps(meta))} if command == "meta" else runner.infer(request)
        except Exception as err:  # noqa: BLE001 - as above
            reply = {_ERROR: np.array(str(err))}
        _send(channel, reply)


def start_goldens_reference(ctx, spec):
    """Start the reference of ``spec`` in a process of its own for its goldens check
    (a ``TfProcessRunner``), when the model has goldens, its reference is a SavedModel and this run
    is likely to need TensorFlow for nothing else: the reference-output cache holds what the reference declared
    on an earlier run (so its outputs are likely cached too) and TensorFlow is not imported here yet. Returns
    whether it started."""
    from paritygate.backend.reference_cache import CachedReference
    from paritygate.backend.tf.runner import TfRunner
    from paritygate.backend.tf.util import is_keras
    from paritygate.inputs.goldens import golden_path

    key = ModelKey(spec.name)
    if (REFERENCE_PROCESSES.peek(ctx, key) is not None or "tensorflow" in sys.modules or not ctx.reference_cache
            or not golden_path(spec).exists() or is_keras(spec.reference)):
        return False  # a Keras file may need custom objects a conftest registered in this process
    try:
        warm = CachedReference(TfRunner(spec.reference, spec.signature)).has_metadata()
    except OSError:
        return False  # an unreadable reference: the check reports it, in process
    if warm:
        child = REFERENCE_PROCESSES.put(ctx, key, TfProcessRunner(spec.reference, spec.signature,
                                                                  name=f"tensorflow:{spec.name}"))
        child.time_as = "reference"
    return warm


if __name__ == "__main__":
    main(*sys.argv[1:3])
