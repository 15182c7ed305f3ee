"""The order a run takes its checks over models in, and what it lets go of after each (issue 37: a model's
artifacts are not all held at once; sessions that are done are released).

Pytest collects the conformance suite module by module, each module's checks grouped by model x precision, so every
precision's candidate would stay loaded from the first module to the last. ``run_order`` groups the checks by model,
then precision, in the places they held; ``releases`` says after which check the run is done with a model x
precision (then with the model); ``Around`` wraps each test: its time, a progress step for a check over a model, and
after it the release and the freed pages given back. A serial run also starts, before its checks, what they will
need later: the reference's first runs (``ahead_of``) and the fp16 and int8 builds (``built_ahead``)."""

import os
from contextlib import contextmanager, nullcontext


def case_of(item):
    """(model name, precision) of a conformance test item, or (None, None)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None, None
    if "parity_case" in callspec.params:
        model, precision = callspec.params["parity_case"]
        return model.name, precision
    if "parity_model" in callspec.params:
        return callspec.params["parity_model"].name, None
    return None, None


def run_order(items):
    """``items`` in the run's order: parity verdicts first, latency last (issue 30); the checks over models grouped by
    model, then precision (the model's own first), each group in collection order, in the places those checks held:
    a precision's candidate is done with before the next one loads, and released (``releases``)."""
    items = sorted(items, key=lambda item: item.get_closest_marker("latency") is not None)
    models, precisions, slots = {}, {}, []
    for i, item in enumerate(items):
        model, precision = case_of(item)
        if model is not None and item.get_closest_marker("latency") is None:
            slots.append(i)
            models.setdefault(model, len(models))
            precisions.setdefault(precision, len(precisions) if precision is not None else -1)
    order = sorted(slots, key=lambda i: (models[case_of(items[i])[0]], precisions[case_of(items[i])[1]], i))
    for slot, item in zip(slots, [items[i] for i in order]):
        items[slot] = item
    return items


def releases(items):
    """{nodeid: [(model, precision or None), ...]}: after which item the run is done with a model x precision (and
    with a model: its None), for ``RunContext.release``."""
    last = {}
    for item in items:
        model, precision = case_of(item)
        if model is not None:
            last.update({(model, None): item.nodeid, **({(model, precision): item.nodeid} if precision else {})})
    done = {}
    for key, nodeid in last.items():
        done.setdefault(nodeid, []).append(key)
    return {k: sorted(v, key=lambda key: key[1] is None) for k, v in done.items()}  # the precision before its model


class Around:
    """Around each test of a run (``test``): ``options``: the run's RunOptions (its context releases)."""

    def __init__(self, options):
        self.options, self._releases = options, None

    @contextmanager
    def test(self, item):
        """Its time (common.timeline); a check over a model is a progress step numbered among the run's tests
        (common.progress), and after it what the run is done with is released (``release_after``)."""
        from paritygate.common import progress
        from paritygate.common.timeline import in_test

        items = item.session.items
        shown = case_of(item)[0] is not None and item in items  # (a test run again by a plugin is not listed)
        with in_test(), progress.step(f"[{items.index(item) + 1}/{len(items)}] {item.name}") if shown else nullcontext():
            yield
        if shown:
            self.release_after(item)

    def release_after(self, item):
        """After a check over a model: close what the run's last check of a model x precision (then of the model) held
        (``RunContext.release``; not on an xdist worker, handed checks in an order it cannot know), and give the
        check's freed pages back (a few ms: the next check's come from there, not on top; ``common.memory.trim``)."""
        from paritygate.common.memory import trim

        if self._releases is None and not self.options.is_xdist_worker:
            self._releases = releases(item.session.items)
        for model, precision in (self._releases or {}).get(item.nodeid, ()):
            self.options.context.release(model, precision)
        trim()


def ahead_of(items, context):
    """The models whose fp32 checks a serial run without latency selected among ``items``: their reference's first
    runs are made while their conversion runs (``judge.converting``). None on an xdist worker, whose siblings keep
    the cores busy already."""
    if not _serial(context):
        return ()
    return {case_of(i)[0] for i in items if case_of(i)[1] == "fp32" and i.originalname != "test_engine_builds"}


def built_ahead(items, context):
    """[(spec, precision)] of a serial run's fp16 and int8 checks among ``items``, in their order, each once: what
    ``RunContext.build_ahead`` builds while the checks before them run."""
    if not _serial(context):
        return []
    cases = {}
    for item in items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("parity_case")
        if case is not None and case[1] != "fp32":
            cases.setdefault((case[0].name, case[1]), case)
    return list(cases.values())


def _serial(context):
    """Whether the run may work beside its checks: serial (not an xdist worker) and measuring no latency."""
    return not (context.spin or os.environ.get("PYTEST_XDIST_WORKER"))
