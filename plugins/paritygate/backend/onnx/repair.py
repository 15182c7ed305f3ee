"""Which nodes to keep in FP32 (fp16) or leave unquantized (int8) so that a failing check passes.

The strategy of Polygraphy's ``polygraphy debug precision`` (tools/Polygraphy/polygraphy/tools/debug/subtool/
precision.py: mark layers to run in higher precision, rebuild, re-check; ``BisectMarker`` binary-searches how
many layers, in topological order, to mark), adapted to a gate that already knows where the error starts:

1. greedy: keep the first divergent node; rebuild, re-run the check; while it still fails, localize again on
   the rebuilt artifact and keep the new first divergent node (or, when that node is already kept or cannot be
   kept, the nearest eligible nodes upstream of it: the FP16 cast or INT8 Q/DQ feeding it is the break);
2. bisect: when greedy runs out of steps, Polygraphy's forward bisection over the eligible nodes from the first
   divergent one on: the smallest prefix ``k`` that passes (checked first with all of them);
3. prune: drop each member whose removal still passes, so that the plan is small, trying the members that
   weigh most first (``weight``: the MAC nodes, so the plan keeps as few multiply-accumulates in FP32 / unquantized
   as it can, which keeps the artifact's precision coverage); the first divergent node
   itself is never dropped (ONNX Runtime's CPU provider runs most FP16 ops upcast to FP32, so a check may pass
   there without it while its own FP16 output overflows, which a strictly typed TensorRT engine would compute).

Every candidate set is judged by ``passes(nodes)``, which rebuilds the artifact and re-runs the failing check
and a plan is offered only if ``acceptable(nodes)``: paritygate.divergence requires the rebuilt artifact's
precision coverage to stay at the model's minimum (a plan whose artifact computes mostly in FP32 would turn the
failure into an ``inconclusive``, not a pass).
"""

from dataclasses import dataclass, field


@dataclass
class Plan:
    nodes: list = field(default_factory=list)
    verified: bool = False
    trials: list = field(default_factory=list)  # {"step", "nodes", "passed"} in the order they ran


class _Search:
    def __init__(self, passes, max_trials):
        self._passes, self.max_trials = passes, max_trials
        self.trials, self._seen = [], {}

    @property
    def exhausted(self):
        return len(self.trials) >= self.max_trials

    def passes(self, nodes, step):
        key = frozenset(nodes)
        if key not in self._seen:
            self._seen[key] = bool(self._passes(list(nodes)))
            self.trials.append({"step": step, "nodes": list(nodes), "passed": self._seen[key]})
        return self._seen[key]


def search(first_divergent, passes, order, upstream_of, max_greedy=6, max_trials=24, weight=None, acceptable=None):
    """A verified plan, or the best unverified attempt.

    first_divergent(nodes) -> node name or None: localization on the artifact built with ``nodes`` kept;
    passes(nodes) -> bool: rebuild with ``nodes`` kept and re-run the failing check;
    order: the eligible node names (those the converter can keep / the quantizer can exclude), topological;
    upstream_of(name, nodes) -> [names]: the nearest eligible nodes upstream of ``name`` not in ``nodes``;
    weight(name) -> number: prune tries the heaviest members first (None: all alike);
    acceptable(nodes) -> bool: whether a passing plan may be offered (the artifact keeps its precision coverage);
    a passing plan that is not is pruned once more, the first divergent node included, and is verified only if
    it then is."""
    s = _Search(passes, max_trials)
    eligible = set(order)
    start = first_divergent([])
    keep, first = [], start
    for _ in range(max_greedy):
        if first is None or s.exhausted:
            break
        add = [first] if first in eligible and first not in keep else upstream_of(first, keep)
        if not add:
            break
        keep += add
        if s.passes(keep, "greedy"):
            return _finish(s, keep, start, weight, acceptable)
        first = first_divergent(keep)
    found = _bisect(s, order, start, keep)
    if found is None:
        return Plan(keep, False, s.trials)
    return _finish(s, found, start, weight, acceptable)


def _finish(s, nodes, start, weight, acceptable):
    kept = _prune(s, nodes, start, weight)
    if acceptable is None or acceptable(kept):
        return Plan(kept, True, s.trials)
    kept = _prune(s, kept, None, weight)  # a plan below the coverage minimum is no plan: try without the start too
    return Plan(kept, bool(acceptable(kept)), s.trials)


def _bisect(s, order, start, base):
    """Smallest k such that ``base`` + the first k eligible nodes from ``start`` on passes (forward bisection)."""
    begin = order.index(start) if start in order else 0
    cands = [n for n in order[begin:] if n not in base]
    if not cands or s.exhausted or not s.passes(base + cands, "bisect"):
        if begin and not s.exhausted and s.passes(list(order), "bisect"):  # the break may start upstream
            return list(order)
        return None
    bad, good = 0, len(cands)  # marking none fails (the check failed), marking all passes
    while good - bad > 1 and not s.exhausted:
        mid = (good + bad) // 2
        if s.passes(base + cands[:mid], "bisect"):
            good = mid
        else:
            bad = mid
    return base + cands[:good]


def _prune(s, nodes, protected, weight=None):
    """Drop, heaviest first and among equals last added first, each node (but ``protected``) whose removal still
    passes."""
    kept = list(nodes)
    order = list(reversed(list(nodes)))
    for name in sorted(order, key=lambda n: -weight(n)) if weight else order:
        if len(kept) == 1 or s.exhausted:
            break
        if name == protected:
            continue
        trial = [n for n in kept if n != name]
        if s.passes(trial, "prune"):
            kept = trial
    return kept
