"""paritygate.backend.tf.process: the TF reference served by a process of its own (the goldens check's, on a warm
rerun) computes what the in-process reference computes, and reports its errors as the in-process one does."""

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.tf.process import TfProcessRunner
from paritygate.backend.tf.runner import TfRunner

pytestmark = pytest.mark.tf
pytest.importorskip("tensorflow")

X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(-1, 1)


def test_the_process_computes_what_the_in_process_reference_computes(toy_saved_model):
    child = TfProcessRunner(toy_saved_model).activate()
    try:
        with TfRunner(toy_saved_model) as here:
            assert child.output_names == here.output_names and child.input_metadata() == here.input_metadata()
            assert child.weights_sha256() == here.weights_sha256() and child.describe() == here.describe()
            ours, theirs = child.infer({"x": X}), here.infer({"x": X})
        assert sorted(ours) == sorted(theirs)  # a SignatureDef's outputs are a proto map: no order
        for name in ours:
            np.testing.assert_array_equal(ours[name], theirs[name])
        with pytest.raises(RunnerError, match=rf"^{toy_saved_model}: feed is missing input\(s\) \['x'\]"):
            child.infer({"w": X})
        np.testing.assert_array_equal(child.infer({"x": X})["y"], 5 * X)  # an error leaves the process serving
    finally:
        child.deactivate()
    assert child._child.poll() is not None, "the run's end ends the child"


def test_a_reference_the_process_cannot_load_is_its_runner_error(tmp_path):
    child = TfProcessRunner(tmp_path / "missing")
    with pytest.raises(RunnerError, match=rf"^{tmp_path / 'missing'}: not a TensorFlow SavedModel"):
        child.activate()
    child.close()


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="reads the child's /proc environ")
def test_the_child_takes_two_malloc_arenas_unless_the_environment_says(tmp_path, monkeypatch):
    """Its resident set stays lower with glibc's arenas capped (process.ARENAS); a value the environment sets, or the
    runner's own ``env``, wins."""
    import time
    from pathlib import Path

    def arenas(child):
        # read once the child runs its own program (a sandboxed kernel, CI's, was seen showing otherwise just after
        # the start), and before anything ends it
        proc, deadline, environ = Path(f"/proc/{child._child.pid}"), time.monotonic() + 30, b""
        while time.monotonic() < deadline and not (b"paritygate.backend.tf.process" in (proc / "cmdline").read_bytes()
                                                   and (environ := (proc / "environ").read_bytes())):
            time.sleep(0.05)
        assert child._child.poll() is None and environ, "the child ended before its environ could be read"
        child.close()
        return [e for e in environ.split(b"\0") if e.startswith(b"MALLOC_ARENA_MAX=")]

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert arenas(TfProcessRunner(tmp_path / "missing")) == [b"MALLOC_ARENA_MAX=2"]
    assert arenas(TfProcessRunner(tmp_path / "missing", env={"MALLOC_ARENA_MAX": "1"})) == [b"MALLOC_ARENA_MAX=1"]
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert arenas(TfProcessRunner(tmp_path / "missing")) == [b"MALLOC_ARENA_MAX=4"]
