"""paritygate.common.memo: a run's cache, declared by the module that computes it, behind one typed key."""

import ast
import dataclasses
from pathlib import Path

import pytest

from paritygate.common.memo import ArtifactKey, Memo, ModelKey, PrecisionKey, Store
from paritygate.context import RunContext

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "paritygate"


def test_a_value_is_computed_once_per_context_and_never_shared_between_contexts():
    memo, calls = Memo("things", key=ModelKey), []

    def compute():
        calls.append(1)
        return object()

    first, second = RunContext(), RunContext()
    value = memo.get(first, ModelKey("m"), compute)
    assert memo.get(first, ModelKey("m"), compute) is value and len(calls) == 1
    assert memo.get(second, ModelKey("m"), compute) is not value and len(calls) == 2, "a fresh run computes anew"
    assert memo.get(first, ModelKey("n"), compute) is not value and len(calls) == 3, "another key, another value"


def test_a_thread_that_asks_while_another_computes_waits_for_that_value():
    """``backend.ahead`` builds in a thread of its own: a check asking for the same value meanwhile gets that value."""
    import threading
    import time

    memo, ctx, calls, started = Memo("things", key=ModelKey), RunContext(), [], threading.Event()

    def compute():
        calls.append(1)
        started.set()
        time.sleep(0.2)
        return object()

    got = []
    other = threading.Thread(target=lambda: got.append(memo.get(ctx, ModelKey("m"), compute)))
    other.start()
    started.wait(5)
    value = memo.get(ctx, ModelKey("m"), compute)
    other.join()
    assert got == [value] and len(calls) == 1


def test_a_key_of_another_type_is_refused_naming_the_memo_and_the_key_it_expects():
    memo, ctx = Memo("candidates", key=ArtifactKey), RunContext()
    memo.put(ctx, ArtifactKey("onnxruntime", "m", "fp16"), "runner")
    for wrong in (("onnxruntime", "m", "fp16"), PrecisionKey("m", "fp16"), "m"):
        with pytest.raises(TypeError) as info:
            memo.get(ctx, wrong, lambda: "never")
        assert str(info.value).startswith("memo 'candidates' is keyed by ArtifactKey('runtime', 'model', 'precision'), "
                                          f"got {type(wrong).__name__}")
        with pytest.raises(TypeError, match="memo 'candidates'"):
            memo.peek(ctx, wrong)


def test_a_failed_computation_keeps_nothing_and_the_next_ask_computes_again():
    memo, ctx = Memo("builds", key=PrecisionKey), RunContext()
    key = PrecisionKey("m", "int8")

    def fail():
        raise RuntimeError("converter failed")

    with pytest.raises(RuntimeError, match="converter failed"):
        memo.get(ctx, key, fail)
    assert memo.peek(ctx, key) is None
    assert memo.get(ctx, key, lambda: "built") == "built"


def test_peek_put_and_pop_read_replace_and_forget_without_computing():
    memo, ctx, key = Memo("mappings", key=ModelKey), RunContext(), ModelKey("m")
    assert memo.peek(ctx, key) is None and memo.pop(ctx, key) is None
    assert memo.put(ctx, key, "stand-in") == "stand-in" and memo.get(ctx, key, lambda: "computed") == "stand-in"
    assert memo.pop(ctx, key) == "stand-in" and memo.get(ctx, key, lambda: "computed") == "computed"


def test_closing_the_run_closes_each_value_of_a_memo_that_declares_a_closer_and_nothing_else():
    closed = []
    children = Memo("children", key=ModelKey, close=closed.append)
    plain = Memo("plain", key=ModelKey)
    ctx = RunContext()
    children.put(ctx, ModelKey("a"), "child a")
    children.put(ctx, ModelKey("b"), "child b")
    plain.put(ctx, ModelKey("a"), "not a resource")
    ctx.close()
    assert closed == ["child a", "child b"]
    Store().close()  # an empty store: nothing to close


def test_the_run_context_holds_options_and_one_store_not_a_list_of_caches():
    """Each cache lives with its owner: a dict or list field on the context would be one more shared cache."""
    caches = [f.name for f in dataclasses.fields(RunContext) if f.type in (dict, list, "dict", "list")]
    assert caches == []
    assert [f.name for f in dataclasses.fields(RunContext) if f.type is Store] == ["store"]


def _declared_memos():
    """(memo name, module) for every ``NAME = Memo("name", ...)`` in the package, read with ast."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Memo" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                found.append((node.args[0].value, str(path.relative_to(PACKAGE))))
    return found


def test_each_cache_is_declared_once_by_the_module_that_computes_it():
    declared = _declared_memos()
    names = [name for name, _ in declared]
    assert len(names) == len(set(names)), sorted(declared)
    owners = dict(declared)
    assert owners["references"] == owners["candidates"] == "backend/runtimes.py"
    assert owners["kernel_orders"] == "backend/kernel_order.py" and owners["noise"] == "judge/reference_noise.py"
    assert owners["precision_coverage"] == "backend/precision.py" and owners["input_pools"] == "inputs/strategies.py"
    assert len(names) >= 19, sorted(declared)


def test_release_closes_and_forgets_one_model_or_one_model_precision_and_only_what_declared_a_close():
    """The run's last check of a model x precision releases its candidate; of a model, all of the model's: each
    value of a memo that declared a ``close`` is closed and forgotten, the others (a build's result, a failure
    kept for later checks) stay."""
    closed = []
    sessions = Memo("sessions", key=ArtifactKey, close=closed.append)
    models = Memo("models", key=ModelKey, close=closed.append)
    kept = Memo("kept", key=PrecisionKey)
    ctx = RunContext()
    for precision in ("fp32", "fp16"):
        sessions.put(ctx, ArtifactKey("onnxruntime", "m", precision), f"m-{precision}")
        sessions.put(ctx, ArtifactKey("onnxruntime", "n", precision), f"n-{precision}")
        kept.put(ctx, PrecisionKey("m", precision), "report")
    models.put(ctx, ModelKey("m"), "tf-m")
    assert ctx.release("m", "fp32") == 1 and closed == ["m-fp32"]
    assert sessions.peek(ctx, ArtifactKey("onnxruntime", "m", "fp32")) is None
    assert sessions.peek(ctx, ArtifactKey("onnxruntime", "m", "fp16")) == "m-fp16"
    assert ctx.release("m") == 2 and sorted(closed) == ["m-fp16", "m-fp32", "tf-m"]
    assert kept.peek(ctx, PrecisionKey("m", "fp32")) == "report"  # no close declared: kept
    assert sessions.peek(ctx, ArtifactKey("onnxruntime", "n", "fp32")) == "n-fp32"  # another model: kept
    assert sessions.get(ctx, ArtifactKey("onnxruntime", "m", "fp32"), lambda: "again") == "again"
