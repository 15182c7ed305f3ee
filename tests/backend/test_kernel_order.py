"""paritygate.backend.kernel_order: the reference under TensorFlow's other oneDNN setting, in a child process whose
outputs are cached under their own key."""

import numpy as np
import pytest

from paritygate.backend.kernel_order import ONEDNN, alternate_setting, describe_setting
from paritygate.backend.reference_cache import CachedReference, device
from paritygate.backend.tf.process import TfProcessRunner

AVX512_VNNI, HASWELL = {"avx2", "avx512f", "avx512_vnni"}, {"avx", "avx2", "fma"}


@pytest.mark.parametrize("value, flags, other", [
    (None, AVX512_VNNI, "0"),  # TensorFlow's default there is oneDNN: the second order is Eigen's
    (None, HASWELL, "1"),  # its default there is Eigen: the second order must switch oneDNN on, explicitly
    ("", HASWELL, "1"), ("1", HASWELL, "0"), ("true", HASWELL, "0"), ("0", AVX512_VNNI, "1"), (" False ", AVX512_VNNI, "1"),
])
def test_the_second_order_is_the_other_onednn_setting(value, flags, other):
    environ = {} if value is None else {ONEDNN: value}
    assert alternate_setting(environ, flags) == other
    assert describe_setting(other).startswith(f"{ONEDNN}={other} (oneDNN {'on' if other == '1' else 'off'}")


def test_its_cache_entries_are_keyed_by_its_own_setting(monkeypatch, tmp_path):
    monkeypatch.setenv(ONEDNN, "1")
    lazy = TfProcessRunner(tmp_path / "sm", env={ONEDNN: "0"}, lazy=True)
    assert lazy._child is None, "a lazy child starts on activate, not before (a warm rerun needs none)"
    assert device().endswith("|onednn=1") and device("0").endswith("|onednn=0")
    assert CachedReference(lazy, onednn="0").base_key["device"] == device("0") != CachedReference(lazy).base_key["device"]
    lazy.close()  # nothing started: nothing to end


@pytest.mark.tf
def test_the_child_runs_under_the_setting_it_is_given(toy_saved_model):
    pytest.importorskip("tensorflow")
    x = np.linspace(-1, 1, 4, dtype=np.float32).reshape(-1, 1)
    child = TfProcessRunner(toy_saved_model, env={ONEDNN: "0"}).activate()
    try:
        np.testing.assert_array_equal(child.infer({"x": x})["y"], 5 * x)
        child._log.seek(0)
        log = child._log.read().decode(errors="replace")
    finally:
        child.close()
    assert "oneDNN custom operations are on" not in log  # TensorFlow says so on load when they are


@pytest.mark.tf
def test_the_run_context_ends_the_child_it_started_when_it_closes(toy_saved_model):
    """The second order's child is kept by its owner's memo (KERNEL_ORDERS), which declares how to end it."""
    pytest.importorskip("tensorflow")
    from paritygate.backend.kernel_order import alternate_reference
    from paritygate.context import RunContext
    from tests.conftest import toy_spec

    ctx = RunContext()
    alternate = alternate_reference(ctx, toy_spec(toy_saved_model))
    assert alternate_reference(ctx, toy_spec(toy_saved_model)) is alternate, "once per run"
    x = np.linspace(-1, 1, 4, dtype=np.float32).reshape(-1, 1)
    np.testing.assert_array_equal(alternate.infer({"x": x})["y"], 5 * x)
    child = alternate.process._child
    assert child.poll() is None, "the child serves the run until it ends"
    ctx.close()
    assert child.wait(timeout=30) is not None


@pytest.mark.tf
def test_the_child_starts_on_first_need_one_for_the_models_over_one_reference(toy_saved_model, tmp_path, monkeypatch):
    """The second order's child starts only when a check asks it to run an input (judge.reference_noise: where a
    comparison fails without it), one for the models over one reference; a warm rerun reads the cache and starts
    none."""
    pytest.importorskip("tensorflow")
    from paritygate.backend.kernel_order import alternate_reference
    from paritygate.context import RunContext
    from tests.conftest import toy_spec

    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    spec, x = toy_spec(toy_saved_model), np.linspace(-1, 1, 4, dtype=np.float32).reshape(-1, 1)
    twin = toy_spec(toy_saved_model, name="twin")  # another candidate of the same reference: the same child
    for ctx, cold in ((RunContext(reference_cache=True), True), (RunContext(reference_cache=True), False)):
        try:
            alternate = alternate_reference(ctx, spec)
            assert alternate_reference(ctx, twin).process is alternate.process
            assert alternate.process._child is None, "nothing asked yet: no child"
            np.testing.assert_array_equal(alternate.infer({"x": x})["y"], 5 * x)  # the cold run records it
            assert (alternate.process._child is not None) is cold, "warm: served from the cache, no child"
        finally:
            ctx.close()
