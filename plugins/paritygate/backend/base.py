"""The runner contract shared by every runtime (Polygraphy's BaseRunner, trimmed).

A runner is a context manager: ``activate()`` loads, ``infer(feed)`` maps input name -> ndarray to output
name -> ndarray, ``deactivate()`` frees. Public methods validate and delegate to ``*_impl`` hooks. Every call of
``infer_impl`` is bounded in time (``paritygate.backend.deadline``) through ``infer_bounded``: in a worker thread by
default, in the caller's thread where the runtime can cancel a call (ONNX Runtime), as it is in a runner that only
wraps another (whose own calls are bounded).
"""

import contextlib
import time

import numpy as np

from paritygate.common.timeline import spent


class RunnerError(RuntimeError):
    """A runner could not load or run its model; the message names the file or tensor."""


class InferenceTimeout(RunnerError):
    """An inference call ran past the time limit (``paritygate.backend.deadline``); the message names the runner,
    the limit and how to raise it."""


class CandidateFault(RunnerError):
    """The candidate itself is wrong, not the suite: it fails on inputs within the config's ranges, or its file
    rounds an index to FP16. A check (and its replay) that meets one ends in ``fail``."""


class BaseRunner:
    time_as = None  # the part of the run's time line (paritygate.common.timeline) its loading and runs count in

    def __init__(self, name):
        self.name = name
        self.is_active = False
        self.last_inference_time = None  # seconds, wall time of the last infer_impl call

    # -- lifecycle -----------------------------------------------------------------------------------
    def activate(self):
        if not self.is_active:
            with _timed(self.time_as):
                self.activate_impl()
            self.is_active = True
        return self

    def deactivate(self):
        if self.is_active:
            self.deactivate_impl()
            self.is_active = False

    def __enter__(self):
        return self.activate()

    def __exit__(self, *exc):
        self.deactivate()

    # -- inference -----------------------------------------------------------------------------------
    def infer(self, feed):
        if not self.is_active:
            raise RunnerError(f"{self.name}: infer() called before activate()")
        if not isinstance(feed, dict) or not all(isinstance(v, np.ndarray) for v in feed.values()):
            raise TypeError(f"{self.name}: infer() takes a dict of input name -> numpy.ndarray")
        with _timed(self.time_as):
            start = time.perf_counter()
            outputs = self.infer_bounded(feed)
            self.last_inference_time = time.perf_counter() - start
        return outputs

    def input_metadata(self):
        """Input name -> (numpy dtype, shape with -1 for dynamic dims)."""
        return self.input_metadata_impl()

    # -- hooks ---------------------------------------------------------------------------------------
    def infer_bounded(self, feed):
        """``infer_impl(feed)`` within the inference time limit (``deadline.bounded``): in a worker thread, with
        ``cancel_impl`` called at the limit. A runtime that can stop a call from another thread overrides this to
        run in the caller's thread; a runner that only wraps another overrides it to call ``infer_impl``."""
        from paritygate.backend.deadline import bounded

        return bounded(lambda: self.infer_impl(feed), self.where, cancel=self.cancel_impl, error=InferenceTimeout)

    def where(self):
        """What a message names this runner by: its model file, else its name."""
        path = getattr(self, "path", None)
        return str(path) if path is not None else self.name

    def cancel_impl(self):
        """Called from another thread when a call outlives the limit: unblock it if the runtime can (a child
        process is killed); the default does nothing, the stuck worker thread is then abandoned."""

    def activate_impl(self):
        raise NotImplementedError

    def infer_impl(self, feed):
        raise NotImplementedError

    def input_metadata_impl(self):
        raise NotImplementedError

    def deactivate_impl(self):
        pass


def _timed(part):
    return contextlib.nullcontext() if part is None else spent(part)


def run_batched(runner, inputs, max_batch):
    """Run ``inputs`` (arrays with a leading sample axis) in batches of at most ``max_batch`` (a progress step: the
    runner's name, rows done of all)."""
    from paritygate.common import progress

    n = len(next(iter(inputs.values())))
    parts = []
    with progress.step(f"{runner.name} rows", total=n) as shown:
        for i in range(0, n, max_batch):
            parts.append(runner.infer({k: v[i:i + max_batch] for k, v in inputs.items()}))
            shown.advance(min(max_batch, n - i))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
