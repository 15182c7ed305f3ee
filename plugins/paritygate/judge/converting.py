"""tf2onnx's conversions started before the validation, and the reference's runs made while they convert (issue 37).

A cold serial run validates each model while tf2onnx converts its reference in a process of its own, on one core
(``Conversions``). Once the references have loaded, the validation waits for that conversion with the other
core idle: 6 of ResNet50's first 22 s. ``reference_runs(ctx, spec)`` makes, meanwhile, the reference's runs the model's
first checks will ask for, one at a time (the caller stops between two when the conversion is done):

- the reference set's batches (``matches_reference``; TensorFlow's other kernel order runs only where a check needs
  it, ``kernel_order``);
- ``property_parity``'s explicit examples (``inputs.strategies``: the corner batches, one batch of each input set):
  the whole batch (each row alone and the other kernel order run only where a check needs them,
  ``reference_noise``).

Every run goes through the reference-output cache (``backend.reference_cache``), whose entries are keyed by the
exact batch and sample, so a check reads what was made here, and reads exactly what it would have computed: no
verdict depends on how far this got. Without the cache (``--parity-cache=off``) nothing is made here. The repeats
(``reference_noise.REPEAT_FIRST``) are left to the checks: which feeds get one depends on the order they come in.
An error here is left to the check that meets it again and reports it.
"""

import os
from pathlib import Path

from paritygate.common import progress
from paritygate.lazy import available


def reference_runs(ctx, spec):
    """Yield after each of the reference's runs above, for ``spec`` (nothing without the reference cache)."""
    if not ctx.reference_cache:
        return
    try:
        for runner, feed in _plan(ctx, spec):
            runner.infer(feed)
            yield
    except Exception:  # noqa: BLE001 - the check that needs these runs meets the same error and reports it
        return


def _plan(ctx, spec):
    """[(the reference, a batch)], in the order the checks ask for them."""
    from paritygate.backend.runtimes import reference_runner
    from paritygate.common.digest import digest
    from paritygate.inputs.strategies import corner_feeds, input_pool, pool_feeds
    from paritygate.judge.parity import reference_set

    step, feeds = spec.max_batch, []
    for g in reference_set(ctx, spec).groups:
        feeds += [{k: v[i:i + step] for k, v in g.inputs.items()} for i in range(0, len(next(iter(g.inputs.values()))), step)]
    feeds += [dict(feed) for feed in corner_feeds(spec) + pool_feeds(spec, input_pool(ctx, spec))]  # every property's first
    reference = reference_runner(ctx, spec)
    return [(reference, feed) for feed in {digest(feed): feed for feed in feeds}.values()]  # each once


class Conversions:
    """tf2onnx's conversions of the SavedModel references the run needs, started before anything else, a process per
    core at once: each is a process of its own (``loader.fp32_onnx``), mostly on one core, so the references load
    (TensorFlow's import, the SavedModel: 5.9 s of EfficientNetB0's 14 s conversion) and a second reference converts
    on the other core meanwhile. One per reference (its other models copy the file). Not in an xdist worker (the
    workers share the cores already). A model's validation ``wait``s for its own before it needs the file; a
    conversion that fails here is left to that validation, which runs it again and reports it where it belongs."""

    def __init__(self, models):
        self.todo, self.pool = {}, None  # reference key -> its conversion's future
        cores = os.cpu_count() or 1
        if cores < 2 or os.environ.get("PYTEST_XDIST_WORKER") or not (available("tf2onnx") and available("onnxruntime")):
            return
        specs = {}  # one model per reference: its other models copy the file
        for spec in models:
            if spec.onnx is None and Path(spec.reference).is_dir():  # a SavedModel (a Keras file is exported first)
                specs.setdefault(_reference_key(spec), spec)
        if specs:
            from concurrent.futures import ThreadPoolExecutor

            from paritygate.backend.onnx.artifacts import loader

            self.pool = ThreadPoolExecutor(min(cores, len(specs)))
            self.todo = {key: self.pool.submit(loader.fp32_onnx, spec) for key, spec in specs.items()}

    def wait(self, spec, meanwhile=()):
        """``meanwhile``: an iterator of work, taken a step at a time while the conversion runs (``reference_runs``)."""
        done = self.todo.get(_reference_key(spec))
        if done is not None and not done.done():
            with progress.step(f"converting {spec.reference} with tf2onnx"):
                for _ in meanwhile:
                    if done.done():
                        break
                done.exception()  # waits; an error is the model's validation's to report

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def _reference_key(spec):
    return str(spec.reference), spec.signature
