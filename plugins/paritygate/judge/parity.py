"""The checks the conformance tests run, returning results objects (the tests only assert on them)."""

from dataclasses import dataclass, field

import numpy as np

from paritygate.backend.runtimes import candidate_runner, reference_runner, resolved_spec
from paritygate.comparator.compare import compare_outputs
from paritygate.comparator.task import task_metrics
from paritygate.comparator.tolerance import tolerance_for
from paritygate.inputs import goldens

HIST_BINS = np.concatenate([[0.0], np.logspace(-9, 2, 23)])  # |error| histogram edges for the report plots


def run_batched(runner, inputs, max_batch):
    """Run ``inputs`` (arrays with a leading sample axis) in batches of at most ``max_batch``."""
    n = len(next(iter(inputs.values())))
    parts = [runner.infer({k: v[i:i + max_batch] for k, v in inputs.items()}) for i in range(0, n, max_batch)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


@dataclass
class ReferenceSet:
    inputs: dict
    outputs: dict
    labels: object = None
    source: str = "goldens"
    groups: list = None  # one ReferenceSet per shape (a dynamic model's); [self] for one shape

    def __post_init__(self):
        self.groups = self.groups or [self]


def reference_set(session, spec):
    """Verified goldens when the model has them; else its input set run through the live TF reference (each of
    their shapes: ``groups``; the set itself is its first shape's)."""
    memo = session.context.reference_sets
    if spec.name not in memo:
        if goldens.golden_path(spec).exists():
            source = f"goldens {goldens.golden_path(spec)}"
            groups = [ReferenceSet(g.inputs, g.outputs, g.labels, source) for g in goldens.load_golden(spec).groups]
        else:
            runner = reference_runner(session.context, spec)
            groups = [ReferenceSet(inputs, run_batched(runner, inputs, spec.max_batch), labels,
                                   "live TensorFlow reference (no goldens)")
                      for inputs, labels in goldens.input_groups(spec)]
        first = groups[0]
        memo[spec.name] = ReferenceSet(first.inputs, first.outputs, first.labels, first.source, groups)
    return memo[spec.name]


@dataclass
class ParityResult:
    model: str
    precision: str
    outputs: list  # OutputComparison
    task: dict = None
    failures: list = field(default_factory=list)
    informativeness: dict = None  # paritygate.judge.vacuity: what the inputs drew out of the reference
    inconclusive: Exception = None  # verdict.Inconclusive when those inputs could not have shown a failure
    shapes: list = None  # [{"shape": {input: dims}, "rows": n}] per shape judged, when there were several

    @property
    def passed(self):
        return not self.failures

    def details(self, **extra):
        shapes = {"inputs": {"shapes": self.shapes}} if self.shapes else {}
        return {"outputs": [_with_plot_data(o) for o in self.outputs], "task": self.task,
                "failures": self.failures, **shapes, **extra}


def compare(spec, precision, ref_outputs, cand_outputs, labels=None, compare_task=True, floors=None,
            cosine_floors=None, nonfinite_reference=None):
    """Elementwise policy (with the cosine budget) for every output plus the task metric for the model's task.

    ``floors`` / ``cosine_floors``: the reference's own noise per output (paritygate.judge.reference_noise);
    ``nonfinite_reference``: see comparator.compare.compare_array (default: the model's)."""
    result = ParityResult(spec.name, precision, compare_outputs(spec, precision, ref_outputs, cand_outputs, floors,
                                                                cosine_floors, nonfinite_reference))
    for o in result.outputs:
        o._plot = (ref_outputs[o.output], cand_outputs[o.candidate_output])
        if not o.passed:
            result.failures.append(f"{spec.name} {precision}: {o.describe()}")
    if compare_task:
        result.task = task_metrics(spec, precision, ref_outputs, cand_outputs, labels)
        if result.task is not None and not result.task["passed"]:
            result.failures.append(f"{spec.name} {precision}: task metric failed: "
                                   f"{ {k: v for k, v in result.task.items() if k != 'source'} }")
    return result


def _with_plot_data(comparison, max_points=1500):
    """The comparison's statistics plus compact data for the report's plots."""
    d = comparison.as_dict()
    ref, cand = getattr(comparison, "_plot", (None, None))
    if ref is not None and ref.size:
        r = ref.astype(np.float64).ravel()
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, dropped below as non-finite
            err = np.abs(cand.astype(np.float64).ravel() - r)
        ok = np.isfinite(err)
        d["error_histogram"] = {"edges": HIST_BINS.tolist(),
                                "counts": np.histogram(np.clip(err[ok], 0, 100), HIST_BINS)[0].tolist()}
        pick = np.linspace(0, r.size - 1, min(max_points, r.size)).astype(int)
        d["error_vs_magnitude"] = {"reference_abs": np.abs(r[pick]).tolist(), "abs_error": err[pick].tolist()}
    return d


def candidate_parity(session, spec, precision):
    """The candidate at ``precision`` on the model's reference set (goldens, or live TF), every shape of it;
    returns the result and the reference group it speaks for (the first failing shape's, else the first)."""
    from paritygate.judge import vacuity

    ref = reference_set(session, spec)
    runner = candidate_runner(session.context, spec, precision)
    spec = resolved_spec(session.context, spec)
    results = [compare(spec, precision, g.outputs, run_batched(runner, g.inputs, spec.max_batch), g.labels)
               for g in ref.groups]
    result, group = next(((r, g) for r, g in zip(results, ref.groups) if not r.passed), (results[0], ref.groups[0]))
    if len(results) > 1:
        result = _merged(results, ref.groups, result)

    def limit(name, out):
        return tolerance_for(spec, precision, name).limit(out)

    # Several shapes: the inputs could show a failure when those of any one shape could (a candidate ignoring its
    # inputs fails there); the first informative shape speaks, else the first.
    infos = [vacuity.informativeness(spec, [g.outputs], limit) for g in ref.groups]
    result.informativeness = next((i for i in infos if i["informative"]), infos[0])
    result.inconclusive = vacuity.verdict(spec, "matches_reference", result.informativeness)
    return result, group


def _merged(results, groups, shown):
    """One result over several shapes: every shape's output comparisons and failures (each failure naming its
    shape), the task metric of ``shown`` (the first failing shape's, else the first)."""
    def where(g):
        return ", ".join(f"{k} {list(v.shape)}" for k, v in g.inputs.items())

    failures = [f"at {where(g)}: {f}" for r, g in zip(results, groups) for f in r.failures]
    shapes = [{"shape": {k: list(v.shape) for k, v in g.inputs.items()}, "rows": len(next(iter(g.inputs.values()))),
               "passed": r.passed} for r, g in zip(results, groups)]
    return ParityResult(shown.model, shown.precision, [o for r in results for o in r.outputs], shown.task, failures,
                        shapes=shapes)
