"""The checks the conformance tests run, returning results objects (the tests only assert on them)."""

from dataclasses import dataclass, field

import numpy as np

from paritygate import goldens
from paritygate.comparator.compare import compare_outputs
from paritygate.comparator.task import task_metrics
from paritygate.comparator.tolerance import tolerance_for
from paritygate.runtimes import candidate_runner, reference_runner

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


def reference_set(session, spec):
    """Verified goldens when the model has them; else its input set run through the live TF reference."""
    key = ("reference_set", spec.name)
    if key not in session.cache:
        if goldens.golden_path(spec).exists():
            g = goldens.load_golden(spec)
            session.cache[key] = ReferenceSet(g.inputs, g.outputs, g.labels, f"goldens {goldens.golden_path(spec)}")
        else:
            inputs, labels = goldens.input_set(spec)
            outputs = run_batched(reference_runner(session, spec), inputs, spec.max_batch)
            session.cache[key] = ReferenceSet(inputs, outputs, labels, "live TensorFlow reference (no goldens)")
    return session.cache[key]


@dataclass
class ParityResult:
    model: str
    precision: str
    outputs: list  # OutputComparison
    task: dict = None
    failures: list = field(default_factory=list)
    informativeness: dict = None  # paritygate.vacuity: what the inputs drew out of the reference

    @property
    def passed(self):
        return not self.failures

    def details(self, **extra):
        return {"outputs": [_with_plot_data(o) for o in self.outputs], "task": self.task,
                "failures": self.failures, **extra}


def compare(spec, precision, ref_outputs, cand_outputs, labels=None, compare_task=True, floors=None,
            cosine_floors=None, nonfinite_reference=None):
    """Elementwise policy (with the cosine budget) for every output plus the task metric for the model's task.

    ``floors`` / ``cosine_floors``: the reference's own noise per output (paritygate.reference_noise);
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
    """The candidate at ``precision`` on the model's reference set (goldens, or live TF)."""
    from paritygate import vacuity

    ref = reference_set(session, spec)
    cand = run_batched(candidate_runner(session, spec, precision), ref.inputs, spec.max_batch)
    result = compare(spec, precision, ref.outputs, cand, ref.labels)

    def limit(name, out):
        t = tolerance_for(spec, precision, name)
        return t.atol + t.rtol * np.abs(out.astype(np.float64))

    result.informativeness = vacuity.informativeness(spec, [ref.outputs], limit)
    return result, ref
