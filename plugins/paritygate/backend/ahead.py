"""A serial run's fp16 and int8 builds, made while the checks before them run (issue 37).

A model's fp16 and int8 artifacts, TensorRT-RTX's engine builds of them and the file ONNX Runtime runs for each
(the strict twin) are built when their precision's first check asks for them: on ResNet50, 10 s of a run in which one
core works (the fp16 conversion and int8 calibration in their own process, the builder in its own) and the other
waits. ``start`` builds them in a thread of its own as soon as the checks begin, in the order the run will check
them, so that they are ready, or well on their way, when their checks come: each build is the one the check would
make (the same cache, the same keys, the same files); a check that asks for one being built waits for it
(``common.memo.Store.turn``, ``backend.cache._turn``).

A build that fails is the failure its check reports: kept as the candidate's build failure
(``engines.built_once``), raised once by the first check of that precision and named by the later ones, as when the
check made it. An error this thread meets otherwise is left to the check, which builds again and reports it.
The thread's time goes to the time line's parts (conversion, candidate) and to no test (``timeline.aside``); its
builds show on the progress line after " | ". The thread stops between builds when the run ends (``RunContext.close``).
"""

import threading

from paritygate.common import progress, timeline


def start(ctx, cases):
    """Build ``cases`` ([(spec, precision)], in the run's order) in a thread of its own; returns its ``Ahead``, or
    None where there is nothing to build."""
    return Ahead(ctx, cases) if cases else None


class Ahead:
    """The thread; ``stop`` ends it between builds and waits for the one under way (it writes the run's cache, whose
    folder a later run in the same process, a test's, may change)."""

    def __init__(self, ctx, cases):
        self.halt = threading.Event()
        self.thread = threading.Thread(target=_build_all, args=(ctx, cases, self.halt), name="paritygate-ahead",
                                       daemon=True)
        self.thread.start()

    def stop(self):
        self.halt.set()
        self.thread.join()


def _build_all(ctx, cases, stop):
    timeline.aside()
    for spec, precision in cases:
        if stop.is_set():
            return
        with progress.step(f"ahead of its checks: {spec.name} {precision}"):
            build(ctx, spec, precision)


def build(ctx, spec, precision):
    """What ``precision``'s checks of ``spec`` will ask for first: the engine build (its artifact with it), and what
    the candidate runtime opens (``registry.Runtime.files``)."""
    from paritygate.backend.engines import built_once
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact

    try:
        # the artifact on its own first: where no engine is built (the builder off or missing) its failure is kept too
        built_once(ctx, spec, precision, lambda *_: onnx_artifact(spec, precision, ctx.fp16_keep_fp32))
        built_once(ctx, spec, precision)
        if ctx.runtime_entry.files is not None:
            ctx.runtime_entry.files(ctx, spec, precision)
    except Exception:  # noqa: BLE001 - kept for the checks where it is theirs (built_once); else they meet it again
        return
