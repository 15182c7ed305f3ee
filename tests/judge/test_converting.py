"""paritygate.judge.converting: tf2onnx's conversions started before validation, and the reference's runs made
while the validation waits for one (real TensorFlow, tf2onnx and reference-output cache, on the toy SavedModel)."""

from concurrent.futures import Future

import pytest

from tests.judge.test_preflight import model, validated

pytestmark = [pytest.mark.tf]


def test_conversions_of_several_references_run_at_once_before_validation(tmp_path, monkeypatch):
    """Two SavedModel references, two tf2onnx processes at the same time (``converting.Conversions``): each conversion
    (the real one, timed around) starts before the other ends, and both models then validate."""
    import os
    import threading
    import time

    from paritygate.backend.onnx.artifacts import loader
    from tests.conftest import save_toy_model

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: the conversions run one after the other")
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # a serial run's validation (a worker's converts in order)
    spans, real = {}, loader._convert

    def timed(spec, out, key):
        start = time.perf_counter()
        try:
            return real(spec, out, key)
        finally:
            spans[spec.name] = (start, time.perf_counter(), threading.current_thread() is threading.main_thread())

    monkeypatch.setattr(loader, "_convert", timed)
    a, b = save_toy_model(tmp_path / "a", y_scale=3.0), save_toy_model(tmp_path / "b", y_scale=4.0)
    _, found = validated(tmp_path, model("a", a), model("b", b))
    assert found["problems"] == [] and set(spans) == {"a", "b"}, (found, spans)
    (a0, a1, a_main), (b0, b1, b_main) = spans["a"], spans["b"]
    assert max(a0, b0) < min(a1, b1) and not (a_main or b_main), spans


@pytest.fixture
def cached_run(tmp_path, monkeypatch, toy_saved_model):
    """(a run context with the reference-output cache in an empty folder, the toy's spec at fp32, the cache's
    counters, zeroed); the context is closed after the test."""
    from paritygate.backend import reference_cache as rc
    from paritygate.context import RunContext
    from tests.conftest import toy_spec

    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    for k in rc.STATS:
        monkeypatch.setitem(rc.STATS, k, 0)
    ctx = RunContext(reference_cache=True)
    yield ctx, toy_spec(toy_saved_model, max_batch=2), rc.STATS
    ctx.close()


def test_the_runs_made_while_converting_are_the_ones_the_first_checks_read(cached_run):
    """Every run ``reference_runs`` makes is one ``property_parity``'s explicit examples and ``matches_reference``
    then read from the cache: after it, their profiles (the whole batch) compute nothing but the repeats it leaves to
    them; each row alone and the other kernel order are left to the checks that need them
    (reference_noise.ReferenceRuns.complete)."""
    from paritygate.inputs.strategies import corner_feeds, input_pool, pool_feeds
    from paritygate.judge.converting import reference_runs
    from paritygate.judge.reference_noise import reference_noise

    ctx, spec, stats = cached_run
    assert sum(1 for _ in reference_runs(ctx, spec)) > 0
    made = stats["computed"]
    noise = reference_noise(ctx, spec)
    feeds = corner_feeds(spec) + pool_feeds(spec, input_pool(ctx, spec))
    profiles = [noise.profile(feed) for feed in feeds]
    repeats = sum(1 for p in profiles if "repeat" in p.configs)
    assert stats["computed"] == made + repeats, stats
    assert all(p.pending(kernel_order=True) for p in profiles)


def test_nothing_is_made_without_the_reference_cache(cached_run):
    from paritygate.judge.converting import reference_runs

    ctx, spec, stats = cached_run
    ctx.reference_cache = False
    assert list(reference_runs(ctx, spec)) == [] and stats["computed"] == 0


def test_the_wait_takes_steps_only_while_the_conversion_runs():
    """``Conversions.wait``: a step at a time until the conversion is done, then no more (the rest is the checks')."""
    from paritygate.judge.converting import Conversions, _reference_key
    from tests.conftest import toy_spec

    spec, done, taken = toy_spec(), Future(), []

    def steps():
        for i in range(10):
            taken.append(i)
            if i == 2:
                done.set_result(None)
            yield

    conversions = Conversions([])
    conversions.todo = {_reference_key(spec): done}
    conversions.wait(spec, steps())
    assert taken == [0, 1, 2]  # the step under way when it ended is the last
    conversions.wait(spec, steps())  # done already: nothing taken
    assert taken == [0, 1, 2]
