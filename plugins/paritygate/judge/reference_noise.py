"""The reference's own noise floor, and the ledger a property check keeps of its inputs.

For every input a property check generates, the reference (TF) runs in the configurations the candidate is
judged in: the whole batch, again (repeated: the first ``REPEAT_FIRST`` inputs of each shape, every input once a
repeat moved), each element alone (batch 1) and, for a model judged at FP32, the
whole batch under TensorFlow's other kernel order (``kernel_order``: oneDNN toggled, judge.kernel_order). Its spread per output element
is the largest difference between those runs over that input's output elements (the issue's "on that input":
where TF drifts at silence, it drifts by different amounts on neighbouring elements, and a candidate as good as
the reference may drift where TF happened not to). The candidate is judged against max(policy limit,
K_REFERENCE x spread) on that input: never held to closer agreement than the reference has with itself. Where the spread
exceeds the check's own limit, the reference is unstable on that input: a finding for the model owner
(kind ``reference_unstable``, in the check's result) with the numbers and a reproducer, not a
candidate failure.

The whole batch and its repeat run for every input; each element alone and the other kernel order run for an input
only where a check would fail without them (``ReferenceRuns.complete``, called by the checks: properties, plans,
task_rows). Another configuration only ever widens a floor or a cap (a spread is a maximum over configurations), so
a check that passes without them passes with them, and one that fails is judged again with them: every verdict is
the one all configurations give. Running them for every input was 211 of ResNet50's 390 TensorFlow rows (issue 37).
Where the candidate passed without them, the ``reference_unstable`` finding was not looked for.

Reference runs are cached per feed (and batch-1 runs per row) for the whole session: the three property
checks and every precision share them. One more configuration is run only where a check would otherwise fail:
the input moved by its own resolution (``resolution_step``; what it excuses and why: paritygate.judge.conditioning).
"""


from collections import Counter

import numpy as np

from paritygate.backend.runtimes import reference_runner
from paritygate.common.digest import digest
from paritygate.common.memo import Memo, ModelKey
from paritygate.comparator.compare import cosine_similarity, output_records, same_nonfinite
from paritygate.inputs.sampling import BOUNDARY_TEXT
from paritygate.verdict import SuiteError

# K_REFERENCE = 2: if the reference's own configurations differ by s on an element, an implementation as good
# as the reference may sit anywhere within s of one of them, and itself carries noise of the same size; by the
# triangle inequality it differs from the configuration it is compared with by up to s + s = 2s. A smaller k
# would fail a candidate that is exactly as stable as the reference; a larger one would excuse more than the
# reference's noise explains.
K_REFERENCE = 2.0
# The reference runs a feed twice ("repeat") for the first REPEAT_FIRST feeds of each input shape (the explicit
# corner and input-set batches come first); once one repeat differs in any bit, every later feed is run twice too.
# A feed of one shape runs the same kernels over the same thread partition on every call, so a TensorFlow reference
# that repeats itself on its first feeds of a shape repeats itself on the rest; a stateful random op moves on every
# run, and the first feed shows it (tests/judge/test_reference_noise.py). Every feed run twice took 9.5 s of
# ResNet50's gate (its main thread under py-spy, issue 37).
REPEAT_FIRST = 3
CONFIGURATION = "kernel_order"  # TensorFlow's other kernel order, as judge.kernel_order names it
NOISE = Memo("noise", key=ModelKey, close=lambda noise: None)  # the model's ReferenceNoise: released when done


def reference_noise(ctx, spec):
    """The model's reference in every configuration a property judges the candidate in (once per process)."""
    def measure():
        alternate = None
        if "fp32" in spec.precisions:  # FP32's second valid kernel order (judge.kernel_order explains it)
            from paritygate.backend.kernel_order import alternate_reference

            alternate = alternate_reference(ctx, spec)
        return ReferenceNoise(reference_runner(ctx, spec), alternate, spec)

    return NOISE.get(ctx, ModelKey(spec.name), measure)


class ReferenceNoise:
    """The reference's outputs for a feed in each configuration, cached per feed."""

    def __init__(self, runner, alternate=None, spec=None):
        self.runner, self.alternate = runner, alternate  # alternate: the reference under another kernel order
        self.spec = spec  # its inputs' dtypes and ranges give each input's resolution (None: not measured)
        self.alternate_error = None
        self.feeds = {}
        self.singles = {}  # row digest -> outputs of that row alone (batch 1)
        self.repeats, self.repeat_moved = {}, False  # feeds run twice per input shape; whether any run moved

    def profile(self, feed):
        """The feed's ``ReferenceRuns`` (the method keeps its name: the derandomized ``ci`` draws of the property
        checks hash the source of their Hypothesis test function, which calls it): the whole batch and its repeat
        run now, each row alone and the other kernel order when a check asks (``ReferenceRuns.complete``)."""
        key = digest(feed)
        if key not in self.feeds:
            arrays = dict(feed)
            outputs = _numpy(self.runner.infer(arrays))
            configs = self._repeat(arrays, outputs)
            n = len(next(iter(arrays.values())))
            alone = (lambda: self._alone(arrays, outputs)) if n > 1 else None
            stepped = resolution_step(self.spec, arrays) if self.spec is not None else None
            moved = (lambda: _numpy(self.runner.infer(stepped))) if stepped is not None else None
            other = (lambda: self._other_order(arrays)) if self.alternate is not None else None
            self.feeds[key] = ReferenceRuns(outputs, configs, key, other, moved, alone)
        return self.feeds[key]

    def _alone(self, arrays, outputs):
        """Each row of ``arrays`` run alone (batch 1), stacked."""
        n = len(next(iter(arrays.values())))
        rows = [self._single({k: v[i:i + 1] for k, v in arrays.items()}) for i in range(n)]
        return {k: np.concatenate([r[k] for r in rows]) for k in outputs}

    def _repeat(self, arrays, outputs):
        """{"repeat": the feed run again} while the reference's repeat is open (``REPEAT_FIRST``), else {}."""
        shape = tuple((k, np.shape(v)) for k, v in sorted(arrays.items()))
        if not self.repeat_moved and self.repeats.get(shape, 0) >= REPEAT_FIRST:
            return {}
        again = getattr(self.runner, "again", self.runner.infer)  # the cache keeps a repeat as its own sample
        repeat = _numpy(again(arrays))
        self.repeats[shape] = self.repeats.get(shape, 0) + 1
        self.repeat_moved = self.repeat_moved or any(
            np.max(_difference(outputs[k], repeat[k]), initial=0.0) > 0 for k in outputs)
        return {"repeat": repeat}

    def _other_order(self, arrays):
        """The feed under TensorFlow's other kernel order, or None where it cannot run (then the policy alone judges,
        judge.kernel_order): run only when an FP32 check asks for it (``ReferenceRuns.complete``)."""
        if self.alternate is None:
            return None
        try:
            return _numpy(self.alternate.infer(arrays))
        except SuiteError as err:
            self.alternate, self.alternate_error = None, str(err)
            return None

    def _single(self, row):
        key = digest(row)
        if key not in self.singles:
            self.singles[key] = _numpy(self.runner.infer(row))
        return self.singles[key]


def _numpy(outputs):
    return {k: np.asarray(v) for k, v in outputs.items()}


RESOLUTION = "input_resolution"  # the configuration: the input moved by one step of its own resolution
RESOLUTION_SOURCE = ("one step of the input's own resolution: eps of its float dtype x the larger bound of its declared "
                     "range (one float32 ulp at that scale), each element moved up or down by a seeded sign, inward "
                     "at the range's bounds (paritygate/judge/reference_noise.py, resolution_step)")


def resolution_step(spec, feed):
    """``feed`` with every float input moved by one step of its own resolution (``RESOLUTION_SOURCE``): the smallest
    change its representation carries at its declared scale, as an FP32 implementation's own rounding of it does
    (its backward error, paritygate.judge.conditioning). Integer and bool inputs stay: one step changes what they
    mean. None when no input is a float."""
    out, moved = {}, False
    rng = np.random.default_rng(0)  # the same signs for an input of the same shape, in every run
    for name, x in feed.items():
        x, t = np.asarray(x), spec.inputs.get(name)
        if t is None or x.dtype.kind != "f" or not x.size:
            out[name] = x
            continue
        low, high = (float(b) for b in t.range)
        step = float(np.finfo(x.dtype).eps) * max(abs(low), abs(high), np.finfo(x.dtype).tiny)
        sign = rng.choice([-1.0, 1.0], size=x.shape)
        wide = x.astype(np.float64)
        sign = np.where(wide + sign * step > high, -1.0, np.where(wide + sign * step < low, 1.0, sign))
        out[name], moved = (wide + sign * step).astype(x.dtype), True
    return out if moved else None


class Incomplete(Exception):
    """Raised by a check that would fail on the reference's configurations run so far while others are left
    (``ReferenceRuns.pending``): ``properties.completing`` runs them and judges the input again."""


class ReferenceRuns:
    """One feed's reference outputs (the whole batch, as compared) and its other configurations. (A ``Profile``
    is something else: a latency measurement setting, ``paritygate.latency.harness.Profile``.)"""

    def __init__(self, outputs, configs, digest, other_order=None, stepped=None, alone=None):
        self.outputs, self.configs, self.digest = outputs, configs, digest
        self._step, self._stepped = stepped, None  # the run on the input moved by its resolution, and its outputs
        # () -> outputs, run on the first ask (``complete``): each row alone, TensorFlow's other kernel order
        self._later = {k: f for k, f in (("batch1", alone), (CONFIGURATION, other_order)) if f is not None}

    def pending(self, kernel_order=False):
        """Whether ``complete(kernel_order)`` would run a configuration not run yet."""
        return "batch1" in self._later or (kernel_order and CONFIGURATION in self._later)

    def complete(self, kernel_order=False):
        """Run the configurations left for a check that would fail without them (module doc): each row alone and,
        with ``kernel_order`` (FP32 parity and its bounds, judge.kernel_order), TensorFlow's other kernel order.
        Returns whether one ran."""
        names = ["batch1"] + ([CONFIGURATION] if kernel_order else [])
        ran = False
        for name in names:
            run = self._later.pop(name, None)
            outputs = run() if run is not None else None
            if outputs is not None:
                self.configs[name], ran = outputs, True
        return ran

    def conditioning(self):
        """The reference's outputs on the input moved by one step of its resolution (``resolution_step``), run on
        the first call, once per input; None where no input is a float. Kept apart from ``configs``: a check asks
        for it only where it would otherwise fail, and no other check's floor may depend on which asked first."""
        if self._step is not None:
            self._stepped, self._step = self._step(), None
        return self._stepped

    def _configs(self, conditioned):
        """The configurations ``spread`` and ``cosine_floors`` look at: those run so far (``complete`` runs the
        rest), the input moved by its resolution added when ``conditioned``."""
        configs = dict(self.configs)
        if conditioned and self.conditioning() is not None:
            configs[RESOLUTION] = self.conditioning()
        return configs

    def spread(self, which=None, kernel_order=False, conditioned=False):
        """Per output: max |configuration - outputs| over ``which`` configurations (default all run so far but
        TensorFlow's other kernel order, which ``kernel_order`` adds: FP32 parity's, judge.kernel_order;
        ``conditioned`` adds the input moved by its resolution, measuring it) and over each input's (batch row's)
        elements, broadcast to the output's shape."""
        configs = self._configs(conditioned)
        names = [which] if which else [c for c in configs if kernel_order or c != CONFIGURATION]
        out = {}
        for k, ref in self.outputs.items():
            diffs = [_difference(ref, configs[c][k]) for c in names if c in configs]
            d = np.maximum.reduce(diffs) if diffs else np.zeros(ref.shape)
            if d.ndim > 1:
                d = np.broadcast_to(d.reshape(d.shape[0], -1).max(axis=1).reshape((-1,) + (1,) * (d.ndim - 1)), d.shape)
            out[k] = d
        return out

    def worst_configuration(self, name):
        diffs = {c: float(np.max(_difference(self.outputs[name], o[name]), initial=0.0)) for c, o in self.configs.items()}
        return max(diffs, key=diffs.get) if diffs else None

    def cosine_floors(self, k, kernel_order=False, conditioned=False):
        """Per output: 1 - k * (1 - the reference's lowest cosine with itself over its configurations, as
        ``spread`` picks them)."""
        floors, configs = {}, self._configs(conditioned)
        for name, ref in self.outputs.items():
            cosines = [_cosine(ref, c[name]) for n, c in configs.items() if kernel_order or n != CONFIGURATION]
            floors[name] = 1.0 - k * (1.0 - min(cosines, default=1.0))
        return floors


def _difference(a, b):
    """|a - b| in float64 under the comparator's non-finite rule (``same_nonfinite``): matching non-finite values
    differ by 0, any other non-finite difference is inf."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
    return np.where(same_nonfinite(a, b), 0.0, np.where(np.isfinite(d), d, np.inf))


def _cosine(a, b):
    """The comparator's cosine, over the arrays with non-finite values zeroed."""
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)  # zeroed, not clipped to +-1.8e308 (whose squares overflow)
    return float(cosine_similarity(np.where(finite, a, 0.0), np.where(finite, b, 0.0))[0])


class Ledger:
    """What one property check saw: examples, row sources, reference outputs, worst comparisons, instability."""

    def __init__(self, counts=None):
        """``counts(feed)``: whether an input is evidence for the check (None: every one); one that is not is left
        out of everything here (``skipped``)."""
        self.counts = counts or (lambda feed: True)
        self.skipped = 0
        self.examples = 0
        self.sources = Counter()
        self.seen = set()
        self.worst = {}  # output -> the comparison with the largest max abs error
        self.last_worst = {}
        self.failing_feed = self.failing_worst = None
        self.feeds = []  # every distinct input, in order: what a repair plan must pass too (paritygate.judge.plans)
        self.unstable = []  # one entry per input where the reference's spread exceeded the check's limit
        self.ill_conditioned = []  # one entry per input the model is too ill-conditioned at (judge.conditioning)
        self.shapes = Counter()  # the distinct feed shapes run: ((input, shape), ...) -> examples
        self.profiles = []  # each distinct input's ReferenceRuns, in order
        self.limits = {}  # digest -> {output: the per-element limit the check applied} (``applied``)
        self.near_bound = 0  # distinct inputs with a float element just inside a bound (inputs.sampling)

    def mark(self):
        """What ``rollback`` restores: the comparisons, limits and findings recorded so far."""
        return (dict(self.worst), dict(self.last_worst), {k: dict(v) for k, v in self.limits.items()},
                len(self.unstable), len(self.ill_conditioned))

    def rollback(self, mark):
        """Forget what a check recorded since ``mark``: it is judged again (ReferenceRuns.complete)."""
        worst, last, limits, unstable, ill = mark
        self.worst, self.last_worst, self.limits = worst, last, limits
        del self.unstable[unstable:], self.ill_conditioned[ill:]

    def add(self, feed, profile, near_bound=False):
        if not self.counts(feed):
            self.skipped += 1
            return
        self.examples += 1
        self.shapes[tuple((k, tuple(np.shape(v))) for k, v in feed.items())] += 1
        if profile.digest not in self.seen:  # Hypothesis may replay an input: count its information once
            self.seen.add(profile.digest)
            self.feeds.append(feed)
            self.sources.update(getattr(feed, "sources", ["unlabelled"] * len(next(iter(feed.values())))))
            self.profiles.append(profile)
            self.near_bound += bool(near_bound)

    @property
    def reference_outputs(self):
        """Each distinct input's reference outputs, in order."""
        return [p.outputs for p in self.profiles]

    def applied(self, profile, limits):
        """Record the per-element limit the check held the candidate to on ``profile``'s input (its policy or bound
        with every floor that widened it), per output: vacuity asks of exactly these limits whether any
        candidate could have failed (``applied_limits``). The most lenient one is kept for an input seen twice."""
        kept = self.limits.setdefault(profile.digest, {})
        for name, limit in limits.items():
            limit = np.broadcast_to(np.asarray(limit, np.float32), np.shape(profile.outputs[name]))
            kept[name] = limit if name not in kept else np.maximum(kept[name], limit)

    def applied_limits(self, limit):
        """The per-element limits parallel to ``reference_outputs`` (a list of dicts), ``limit(name, ref)`` where
        the check recorded none for an input."""
        out = []
        for profile in self.profiles:
            kept = self.limits.get(profile.digest, {})
            out.append({name: kept[name] if name in kept else np.broadcast_to(limit(name, ref), np.shape(ref))
                        for name, ref in profile.outputs.items()})
        return out

    def keep_worst(self, outputs, result=None):
        self.last_worst = {o.output: o for o in outputs}
        for o in outputs:
            if o.output not in self.worst or _max_abs(o) > _max_abs(self.worst[o.output]):
                self.worst[o.output] = o

    def note_unstable(self, feed, profile, limit, which=None):
        """Record the input when the reference's spread exceeds ``limit(name, ref)`` on some element."""
        for name, spread in profile.spread(which).items():
            ref = profile.outputs[name]
            lim = np.broadcast_to(limit(name, ref), ref.shape)
            with np.errstate(invalid="ignore"):  # an infinite limit (an Inf reference) is never exceeded
                excess = np.where(np.isinf(lim), -np.inf, spread - lim)
            if ref.size and np.max(excess) > 0:
                i = int(np.argmax(excess))
                index = np.unravel_index(i, ref.shape)
                self.unstable.append({
                    "output": name, "max_spread": float(np.max(spread)), "limit_at_worst": float(lim.ravel()[i]),
                    "elements_over_limit": int(np.count_nonzero(excess > 0)), "elements": int(ref.size),
                    "worst_index": [int(j) for j in index], "reference_value": float(ref.ravel()[i]),
                    "configuration": profile.worst_configuration(name), "k": K_REFERENCE,
                    "rows_from": sorted(set(getattr(feed, "sources", []))), "feed": dict(feed),
                    "ratio": float(np.max(spread) / max(float(lim.ravel()[i]), 1e-300))})

    def describe(self, result, pool):
        """Put what the check saw into ``result``: its inputs, the worst example's statistics per output and the
        reference's noise (a CheckResult's ``inputs``, ``outputs`` and details)."""
        result.inputs = {"rows_by_source": dict(sorted(self.sources.items())), "distinct_inputs": len(self.seen),
                         "input_sets": pool.files, "shapes": [{"shape": {k: list(s) for k, s in key}, "examples": n}
                                                              for key, n in self.shapes.items()]}
        result.inputs["near_bound"] = {"inputs": self.near_bound, "of": len(self.seen), "what": BOUNDARY_TEXT}
        result.details["examples"] = self.examples
        if self.skipped:
            result.details["examples_not_counted"] = {
                "examples": self.skipped, "why": "a batch of one row: no companions to differ by"}
        if self.worst:
            result.outputs = output_records(self.worst.values())
            result.details["note"] = (f"{self.examples} examples run (corner and input-set batches included; "
                                      f"{self.near_bound} of {len(self.seen)} distinct inputs just inside a bound); "
                                      "statistics of the worst example per output")
        later = {c: sum(c in p.configs for p in self.profiles) for c in ("batch1", CONFIGURATION)}
        result.details["reference_noise"] = {"k": K_REFERENCE, "configurations": ["batch", "repeat"],
                                             "run_where_needed": {**{c: n for c, n in later.items() if n},
                                                                  "of_inputs": len(self.profiles)},
                                             "unstable_inputs": len(self.unstable),
                                             "ill_conditioned_inputs": len(self.ill_conditioned)}

    def record_findings(self, ctx, spec, precision, result):
        """The ``reference_unstable`` finding (its worst input saved as a reproducer) added to ``result``."""
        if not self.unstable:
            return
        worst = max(self.unstable, key=lambda u: u["ratio"])
        summary = (f"the reference disagrees with itself ({worst['configuration']} vs the whole batch) by "
                   f"{worst['max_spread']:.3g} on output '{worst['output']}', over the check's limit "
                   f"{worst['limit_at_worst']:.3g}, on {len(self.unstable)} input(s); the candidate was judged "
                   f"against {K_REFERENCE:g}x that spread there")
        details = {k: v for k, v in worst.items() if k not in ("feed", "ratio")}
        details.update(summary=summary, unstable_inputs=len(self.unstable),
                       reproducer=ctx.save_reproducer(spec, precision, "reference_unstable", worst["feed"],
                                                      [f"{spec.name} {result.check}: {summary}"]))
        result.finding("reference_unstable", details)


def _max_abs(comparison):
    return float("inf") if comparison.nonfinite_mismatches else comparison.max_abs
