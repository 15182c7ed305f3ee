"""What a run computes once: each cache declared by the module that computes it, behind one typed key.

    REFERENCES = Memo("references", key=ModelKey)       # in backend/runtimes.py, beside the code that fills it
    REFERENCES.get(ctx, ModelKey(spec.name), load)      # computed on the first ask in this run, then kept

The run's context holds one ``Store`` (``ctx.store``) and knows none of the caches; a memo keeps its values in the
store of the context it is handed, so two runs (or a test's fresh context) never share them. A key of the wrong
type is refused with a TypeError naming the memo: a tuple that happens to fit another cache's key cannot be used.
A memo whose values hold a resource declares its ``close``; ``Store.close`` (the run's end) calls it on each, and
``Store.release`` on those of one model (or one model x precision) once the run's last check of it is done.
"""

import threading
from typing import NamedTuple


class ModelKey(NamedTuple):
    """What depends on the model alone (its reference, its input pool, its mapping)."""

    model: str


class PrecisionKey(NamedTuple):
    """What depends on the model at one precision, whatever the candidate runtime (its ONNX artifact)."""

    model: str
    precision: str


class ArtifactKey(NamedTuple):
    """What depends on the candidate runtime, the model and the precision (the candidate itself)."""

    runtime: str
    model: str
    precision: str


class Once(NamedTuple):
    """The key of what a run reads once and that depends on nothing (its versions)."""


class Store:
    """One run's memo values: Memo -> {key: value}."""

    def __init__(self):
        self.tables = {}
        self.turns, self.lock = {}, threading.Lock()  # (memo, key) -> the lock its computation holds

    def turn(self, memo, key):
        """The lock of ``memo``'s value under ``key``: a thread that asks while another computes it waits for that
        value (``backend.ahead`` builds in a thread of its own) instead of computing it again."""
        with self.lock:
            return self.turns.setdefault((memo, key), threading.RLock())

    def close(self):
        """Close every value of a memo that declared a ``close`` (the TensorFlow child processes)."""
        for memo, table in list(self.tables.items()):
            if memo.close is not None:
                for value in list(table.values()):
                    memo.close(value)

    def release(self, model, precision=None):
        """Close and forget the values of the memos that declared a ``close`` whose key is ``model``'s (with
        ``precision``: only keys of that precision): the sessions, processes and evidence of checks that are done.
        Returns how many; what is asked again later is computed again."""
        released = 0
        for memo, table in list(self.tables.items()):
            if memo.close is None:
                continue
            for key in [k for k in table if getattr(k, "model", None) == model
                        and (precision is None or getattr(k, "precision", None) == precision)]:
                memo.close(table.pop(key))
                released += 1
        return released


class Memo:
    """A cache of the run's context (``ctx.store``) keyed by ``key`` (a NamedTuple type); ``close``: called on each
    value when the run ends (None: nothing to release)."""

    def __init__(self, name, key, close=None):
        self.name, self.key, self.close = name, key, close

    def __repr__(self):
        return f"Memo({self.name!r}, key={self.key.__name__})"

    def get(self, ctx, key, compute):
        """The value under ``key``, ``compute()`` on the first ask (an exception is raised and nothing kept); one
        thread computes it, the others wait for it (``Store.turn``)."""
        table = self._table(ctx, key)
        if key not in table:
            with ctx.store.turn(self, key):
                if key not in table:
                    table[key] = compute()
        return table[key]

    def peek(self, ctx, key):
        """The value under ``key``, or None when none was computed (nothing is computed)."""
        return self._table(ctx, key).get(key)

    def put(self, ctx, key, value):
        """Keep ``value`` under ``key`` (a build's error, or a test's stand-in for a computed value)."""
        self._table(ctx, key)[key] = value
        return value

    def pop(self, ctx, key):
        """Forget the value under ``key`` (the next ``get`` computes it again); returns it, or None."""
        return self._table(ctx, key).pop(key, None)

    def values(self, ctx):
        """Every value computed in ``ctx``'s run so far."""
        return list(ctx.store.tables.get(self, {}).values())

    def _table(self, ctx, key):
        if not isinstance(key, self.key):
            raise TypeError(f"memo '{self.name}' is keyed by {self.key.__name__}{self.key._fields}, got "
                            f"{type(key).__name__} {key!r}")
        return ctx.store.tables.setdefault(self, {})
