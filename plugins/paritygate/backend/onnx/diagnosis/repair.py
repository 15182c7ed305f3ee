"""Which nodes to keep in FP32 (fp16) or leave unquantized (int8) so that a failing check passes.

The strategy of Polygraphy's ``polygraphy debug precision`` (tools/Polygraphy/polygraphy/tools/debug/subtool/
precision.py: mark layers to run in higher precision, rebuild, re-check; ``BisectMarker`` binary-searches how
many layers, in topological order, to mark), adapted to a gate that already knows where the error starts:

1. greedy: keep the node that adds the most error (``localize.Divergence.ranked``, not the first tensor out of
   tolerance); rebuild, re-run the check; while it still fails, localize again on the rebuilt artifact and keep
   the new top-ranked node (or, when that node is already kept or cannot be kept, the nearest eligible nodes
   upstream of it: the FP16 cast or INT8 Q/DQ feeding it is the break);
2. bisect: when greedy runs out of steps, Polygraphy's forward bisection over the eligible nodes from the first
   divergent one on: the smallest prefix ``k`` that passes (checked first with all of them);
3. prune: drop each member whose removal still passes, so that the plan is small; the first node kept is
   never dropped (ONNX Runtime's CPU provider runs most FP16 ops upcast to FP32, so a check may pass
   there without it while its own FP16 output overflows, which a strictly typed TensorRT engine would compute).

Every candidate set is judged by ``passes(nodes)``, which rebuilds the artifact and re-runs the whole failing
check on all its inputs plus a fresh seeded sample (``paritygate.judge.plans``): a set that passes is verified. The
search stops after ``max_trials`` rebuilds, or before a rebuild that would end past its ``deadline`` (its budgets;
a rebuild is expected to take as long as the longest one so far); a rebuild or ranking run apart that the deadline
ends (``common.apart.Overdue``) is the search's last. An unverified plan lists every trial.
"""

import time
from dataclasses import dataclass, field

from paritygate.common.apart import Overdue

OVERDUE = "its rebuild had not finished when the time budget ran out, and was ended there"
OVERDUE_FIRST = ("its comparison of every node's output, the first step, had not finished when its time budget ran out, "
                 "and was ended there")


@dataclass
class Plan:
    nodes: list = field(default_factory=list)
    verified: bool = False
    trials: list = field(default_factory=list)  # {"step", "nodes", "passed"} in the order they ran


class _Search:
    def __init__(self, passes, max_trials, deadline=None, shown=None):
        self._passes, self.max_trials, self.deadline = passes, max_trials, deadline  # deadline: time.monotonic
        self.shown = shown  # the progress step
        self.trials, self._seen = [], {}
        self.longest = 0.0  # seconds: the longest rebuild so far, what the next one is expected to take

    @property
    def exhausted(self):
        late = self.deadline is not None and time.monotonic() + self.longest >= self.deadline
        return late or len(self.trials) >= self.max_trials

    def passes(self, nodes, step):
        key = frozenset(nodes)
        if key not in self._seen:
            start = time.monotonic()
            try:
                out = self._passes(list(nodes))  # True, or False / a string saying why not
            except Overdue:  # a rebuild run apart, ended at the deadline (common.apart.until)
                out = OVERDUE
            self.longest = max(self.longest, time.monotonic() - start)
            self._seen[key] = out is True
            trial = {"step": step, "nodes": list(nodes), "passed": out is True}
            if isinstance(out, str):
                trial["why_not"] = out
            self.trials.append(trial)
            if self.shown is not None:
                self.shown.advance(detail=f"{step}, {len(nodes)} node(s) kept")
        return self._seen[key]


def search(ranked, passes, order, upstream_of, max_greedy=6, max_trials=24, weight=None, deadline=None):
    """A verified plan, or the best unverified attempt (``Plan.trials`` says what was tried).

    ranked(nodes) -> [node names]: localization on the artifact built with ``nodes`` kept, the nodes that add
    the most error first (``localize.Divergence.ranked``);
    passes(nodes) -> True, or False / a string saying why not: rebuild with ``nodes`` kept and re-run the
    failing check (the plan's verification);
    order: the eligible node names (those the converter can keep / the quantizer can exclude), topological;
    upstream_of(name, nodes) -> [names]: the nearest eligible nodes upstream of ``name`` not in ``nodes``;
    weight(name) -> number: prune tries the heaviest members first (the MAC nodes: the plan then keeps as few
    multiply-accumulates out of the precision as it can, which keeps its precision coverage); None: all alike;
    deadline: a time.monotonic after which no rebuild starts (the run's localization budget)."""
    from paritygate.common import progress

    with progress.step("localization: plan trials", total=max_trials) as shown:
        return _search(_Search(passes, max_trials, deadline, shown), ranked, order, upstream_of, max_greedy, weight)


def _search(s, ranked, order, upstream_of, max_greedy, weight):
    eligible = set(order)
    keep = []

    def step(names):
        """What to keep next: the highest-ranked node that can be kept, or the eligible nodes feeding it."""
        for name in names:
            add = [name] if name in eligible and name not in keep else upstream_of(name, keep)
            if add:
                return add
        return []

    add = step(_ranked(ranked, []))
    start = add[0] if add else None
    for _ in range(max_greedy):
        if not add or s.exhausted:
            break
        keep += add
        if s.passes(keep, "greedy"):
            return Plan(_prune(s, keep, start, weight), True, s.trials)
        add = step(_ranked(ranked, keep))
    found = _bisect(s, order, start, keep)
    if found is None:
        return Plan(keep, False, s.trials)
    return Plan(_prune(s, found, start, weight), True, s.trials)


def _ranked(ranked, nodes):
    """``ranked(nodes)``; none where a ranking run apart was ended at the deadline (the search then stops)."""
    try:
        return ranked(nodes)
    except Overdue:
        return []


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
    """Drop each node (but ``protected``) whose removal still passes: the heaviest first (``weight``), and among
    equals the last added first."""
    kept = list(nodes)
    order = list(reversed(list(nodes)))
    if weight is not None:
        order.sort(key=lambda n: -weight(n))  # stable: ties stay last-added first
    for name in order:
        if len(kept) == 1 or s.exhausted:
            break
        if name == protected:
            continue
        trial = [n for n in kept if n != name]
        if s.passes(trial, "prune"):
            kept = trial
    return kept
