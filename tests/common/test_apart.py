"""paritygate.common.apart: a step in a process of its own gives back its result, what it raised (an ArtifactError
with its fields), or an ApartError when the process dies."""

import math
import os
import pickle
import sys
import time

import pytest

from paritygate.backend.onnx.artifacts.validate import ArtifactError
from paritygate.common.apart import ApartError, Overdue, apart, until


def test_the_result_comes_back_from_another_process():
    assert apart(math.factorial, 20) == math.factorial(20)
    assert apart(os.getpid) != os.getpid()


def test_what_the_step_raised_is_raised_here():
    with pytest.raises(ValueError, match="invalid literal"):
        apart(int, "not a number")


def test_an_artifact_error_crosses_processes_with_its_fields():
    err = ArtifactError("tf2onnx", "conversion", "Erfc is not an ONNX op", node="gelu/Erfc", path="m.onnx")
    again = pickle.loads(pickle.dumps(err))
    assert (type(again), str(again), again.node, again.step, again.path, again.gap) == \
        (ArtifactError, str(err), err.node, err.step, err.path, err.gap)


def test_a_process_that_dies_is_an_apart_error_naming_the_step_and_the_next_call_starts_another():
    with pytest.raises(ApartError, match=r"_exit ended before it answered \(exit 3"):
        apart(os._exit, 3)
    assert apart(math.factorial, 5) == 120


def test_one_worker_serves_the_calls_in_the_callers_folder_and_environment(tmp_path, monkeypatch):
    first = apart(os.getpid)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PARITYGATE_APART_PROBE", "seen")
    assert apart(os.getpid) == first  # started once
    assert apart(os.getcwd) == str(tmp_path) and apart(os.getenv, "PARITYGATE_APART_PROBE") == "seen"
    monkeypatch.delenv("PARITYGATE_APART_PROBE")
    assert apart(os.getenv, "PARITYGATE_APART_PROBE") is None


def test_what_the_step_prints_does_not_corrupt_its_answer_or_the_next():
    assert apart(print, "printed by the step (on the worker's stderr)") is None
    assert apart(math.factorial, 5) == 120


def test_a_function_the_worker_cannot_import_is_said_and_the_worker_lives_on(monkeypatch):
    """A module this process made itself (no file: the worker, handed the same path, cannot import it)."""
    import types

    from paritygate.common import apart as module

    only_here = types.ModuleType("paritygate_only_here")
    exec("def call():\n    return None\n", only_here.__dict__)  # noqa: S102 - the test's own constant source
    monkeypatch.setitem(sys.modules, "paritygate_only_here", only_here)
    with pytest.raises(ModuleNotFoundError, match="paritygate_only_here"):
        apart(only_here.call)
    assert apart(math.factorial, 4) == 24 and module._WORKER[0].poll() is None


def test_an_exception_that_cannot_be_made_again_there_is_an_apart_error_saying_it():
    """The worker's reply (``_reply``, run here: a class of a test module is not importable by the worker)."""
    from paritygate.common.apart import _reply

    ok, err = pickle.loads(_reply((False, _Stubborn(1, 2))))
    assert not ok and isinstance(err, ApartError) and "ended with _Stubborn: 1 and 2 (not sent back as it is)" in str(err)
    assert pickle.loads(_reply((False, ValueError("kept"))))[1].args == ("kept",)


class _Stubborn(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} and {b}")


def test_a_step_past_its_deadline_is_ended_and_said_and_the_next_call_starts_another():
    first = apart(os.getpid)
    started = time.monotonic()
    with pytest.raises(Overdue, match=r"time\.sleep, run apart, had not answered by its deadline: its process was "
                                      r"ended"):
        apart(time.sleep, 60, deadline=started + 0.5)
    assert 0.5 <= time.monotonic() - started < 10
    assert apart(os.getpid) != first
    assert apart(math.factorial, 5, deadline=time.monotonic() + 60) == 120
    with until(time.monotonic() + 0.5), pytest.raises(Overdue):  # every call in the block, by default
        apart(time.sleep, 60)
    assert apart(math.factorial, 5) == 120  # after the block: no deadline
