"""One latency check per model x precision: the candidate and the TF reference at batch sizes {1, max_batch}
plus any a budget names, measured serially, gated by the budgets of the run's device class."""

import functools
import os
from dataclasses import asdict
from typing import NamedTuple

import numpy as np

from paritygate.common.memo import Memo
from paritygate.latency.budgets import budgets_for, evaluate, unmeasurable
from paritygate.latency.harness import (
    OVERHEAD_LIMIT,
    PERCENTILE_METHOD,
    PROFILE_ENV,
    UNBUDGETED,
    LatencyError,
    cdf_points,
    load_profile,
    measure,
    summarize,
)
from paritygate.latency.machine import load_average, load_note, machine_info
from paritygate.lazy import available, missing_reason
from paritygate.result import CheckResult
from paritygate.verdict import inconclusive


class LatencyKey(NamedTuple):
    """A reference latency row's key: the TF reference's timing does not depend on the candidate's precision."""

    model: str
    batch: int
    profile: str  # the latency profile's name


REFERENCE_LATENCY = Memo("reference_latency", key=LatencyKey)  # the TF reference's row (latency_row)
# Timings a runner may report about its last infer (backend/trt/runner.py does): name -> attribute.
RUNNER_TIMINGS = {"compute": "last_compute_ms", "e2e": "last_e2e_ms"}
WALL = "wall (time.perf_counter_ns around runner.infer)"
E2E = "e2e (the runner's own end-to-end time: host->device copies, compute, device->host copies, sync)"


def measure_runner(runner, feed, profile=None):
    """``measure`` of ``runner.infer(feed)``, collecting the runner's own timings after every call."""
    attrs = {name: attr for name, attr in RUNNER_TIMINGS.items() if hasattr(runner, attr)}
    after = (lambda: {name: getattr(runner, attr) for name, attr in attrs.items()}) if attrs else None
    return measure(functools.partial(runner.infer, feed), profile, after)


def latency_row(role, runtime, batch, timing):
    """A report row: percentiles of the primary metric (the runner's e2e where reported, else wall time),
    the wall time and the runner's compute/e2e apart where reported, and the CDF (<= 500 points)."""
    wall_ms = timing.wall_ns / 1e6
    reported = timing.reported or {}
    primary = reported.get("e2e", wall_ms)
    row = {"batch": batch, "role": role, "runtime": runtime, "metric": E2E if "e2e" in reported else WALL,
           **summarize(primary), "iterations": timing.iterations, "calls_per_sample": timing.calls_per_sample,
           "budget": None, "within_budget": None, "overhead_ns": round(timing.overhead_ns, 1),
           "overhead_fraction": round(timing.overhead_fraction, 5), "samples_ms": cdf_points(primary)}
    if reported:
        row.update(summarize(wall_ms, "wall_"))
        for name, values in reported.items():
            row.update(summarize(values, f"{name}_"))
    return row


def numbers(result):
    """'candidate b1 p50 0.21 ms p99 0.40 ms, ...': what a latency result measured, for a skip's reason."""
    return ", ".join(f"{r['role']} b{r['batch']} p50 {r['p50_ms']:.3g} ms p99 {r['p99_ms']:.3g} ms"
                     for r in result.latency or [])


def latency_check(ctx, spec, precision, profile=None):
    """Measure ``spec`` at ``precision`` on the run's candidate runtime and the TF reference: a CheckResult whose
    ``latency`` holds the rows, ``failures`` the budget misses, ``errors`` the budgets that could not be judged, and
    whose details say why no budget applies (``unbudgeted``: nothing was gated, so the check cannot pass)."""
    from paritygate.backend.runtimes import candidate_runner
    from paritygate.inputs.strategies import sample_inputs

    if not ctx.serial:
        raise LatencyError("latency is measured serially, never beside other work: rerun without xdist "
                           "(pytest -m latency -p no:xdist)")
    budgets = budgets_for(spec, ctx.device_class, precision)
    profile = profile or load_profile(None if budgets.gates or os.environ.get(PROFILE_ENV) else UNBUDGETED)
    result = CheckResult(spec.name, precision, "latency", latency=[], errors=[])
    result.failures += unmeasurable(spec, budgets)
    batches = sorted({1, spec.max_batch, *(b for b in budgets.batches if 1 <= b <= spec.max_batch)})
    machine = machine_info(ctx)
    runner = candidate_runner(ctx, spec, precision)
    for batch in batches:
        feed = sample_inputs(spec, batch, np.random.default_rng(0))
        result.latency.append(latency_row("candidate", ctx.runtime, batch, measure_runner(runner, feed, profile)))
    reference, missing = _reference_rows(ctx, spec, batches, profile)
    notes = [f"TF reference not measured: {missing}"] if missing else []
    for row in result.latency:
        ref = next((r for r in reference if r["batch"] == row["batch"]), None)
        row["speedup_vs_reference"] = round(ref["p50_ms"] / max(row["p50_ms"], 1e-4), 3) if ref else None
    result.latency += reference
    failures, errors = evaluate(spec, precision, budgets, result.latency, missing)
    result.failures += failures + overhead_failures(spec, precision, result.latency)
    result.errors += errors
    machine["load_average_end"] = load_average()
    cores = machine["usable_cores"]
    loaded = load_note(machine["load_average"], cores) or load_note(machine["load_average_end"], cores)
    unbudgeted = budgets.note(spec, precision)
    probed = (f"nothing gated, so measured briefly (profile {UNBUDGETED}: {profile.min_iterations}+ samples a row); "
              "a [models.latency.<class>] budget measures in full") if profile.name == UNBUDGETED else None
    notes += [n for n in (unbudgeted, probed, loaded) if n]
    notes += [f"{r['role']} batch {r['batch']}: one call takes ~{r['p50_ms'] * 1e3:.1f} us, so each sample "
              f"is the mean of {r['calls_per_sample']} back-to-back calls (keeps the harness overhead "
              f"under {OVERHEAD_LIMIT:.0%})" for r in result.latency if r["calls_per_sample"] > 1]
    result.details.update({"device_class": ctx.device_class, "budget_table": spec.where(budgets.table)
                           if budgets.table else None, "note": "; ".join(notes) or None, "machine": machine,
                           "profile": asdict(profile), "percentile_method": PERCENTILE_METHOD,
                           "overhead_limit": OVERHEAD_LIMIT, "unbudgeted": unbudgeted})
    if result.failures and loaded:  # load only slows a run down: a pass stands, a miss cannot be told from it
        result.set_inconclusive(inconclusive(
            f"{loaded}, so these budget misses cannot be told apart from the load; rerun alone (pytest -m latency "
            "-p no:xdist on an idle machine):\n" + "\n".join(result.failures)))
    return result


def _reference_rows(ctx, spec, batches, profile):
    """(rows, None), or ([], why) when the TF reference cannot run here. Its rows are measured once per
    model x batch x profile in a run and shared by the precisions."""
    if not available("tensorflow"):
        return [], missing_reason("tensorflow")
    from paritygate.backend.base import RunnerError
    from paritygate.backend.runtimes import live_reference
    from paritygate.inputs.strategies import sample_inputs

    def measure(batch):
        timing = measure_runner(live_reference(ctx, spec, here=True), sample_inputs(spec, batch, np.random.default_rng(0)), profile)
        return latency_row("reference", "tensorflow", batch, timing)

    rows = []
    for batch in batches:
        try:
            row = REFERENCE_LATENCY.get(ctx, LatencyKey(spec.name, batch, profile.name), functools.partial(measure, batch))
        except (RunnerError, OSError, ValueError) as err:
            return [], f"{type(err).__name__}: {err}"
        rows.append(dict(row))  # a copy: budgets annotate rows per check
    return rows, None


def overhead_failures(spec, precision, rows):
    """One message per row whose harness overhead exceeds OVERHEAD_LIMIT of its median."""
    return [f"{spec.name} {precision} batch {r['batch']}: the harness's own overhead ({r['overhead_ns']:.0f} ns "
            f"per call: an empty callable timed through the same loop) is {r['overhead_fraction']:.2%} of the "
            f"{r['runtime']} ({r['role']}) median, above the {OVERHEAD_LIMIT:.0%} limit; the measurement cannot be "
            f"trusted (calls per sample: {r['calls_per_sample']})"
            for r in rows if r["overhead_fraction"] > OVERHEAD_LIMIT]
