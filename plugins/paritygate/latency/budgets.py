"""Latency budgets from ``[models.latency.<device class>]`` and their evaluation against measured rows.

Keys (config_schema.json enforces the pattern):
  ``<fp32|fp16|int8|reference>_batch<N>_p<50|90|99>_ms``: that percentile of the row's latency at batch N
      must not exceed the value (the row's metric: the runner's own end-to-end time where it reports one,
      else wall time around ``runner.infer``). ``reference_*`` keys gate the TF reference's rows, which the
      check of every precision of the model carries (measured once per run and shared).
  ``<fp32|fp16|int8>_speedup_vs_reference_min``: at every batch size measured, the TF reference's p50
      divided by the candidate's p50, both measured in the same run, must be at least the value.
"""

import re
from dataclasses import dataclass, field

PERCENTILE_KEY = re.compile(r"^(?P<target>fp32|fp16|int8|reference)_batch(?P<batch>\d+)_p(?P<q>50|90|99)_ms$")
SPEEDUP_KEY = re.compile(r"^(?P<precision>fp32|fp16|int8)_speedup_vs_reference_min$")


@dataclass(frozen=True)
class PercentileBudget:
    key: str
    target: str  # a precision, or "reference"
    batch: int
    percentile: int
    limit_ms: float
    source: str  # "<config>: model '<name>': key 'latency.<class>.<key>'"

    def describe(self):
        return f"{self.key} = {self.limit_ms:g} ms"


@dataclass(frozen=True)
class SpeedupBudget:
    key: str
    precision: str
    minimum: float
    source: str

    def describe(self):
        return f"{self.key} = {self.minimum:g}x"


@dataclass
class Budgets:
    """The budgets that apply to one model x precision on one device class."""

    device_class: str
    table: str = None  # "latency.<class>" as written in the config, None when the model has no such table
    percentiles: list = field(default_factory=list)
    speedups: list = field(default_factory=list)

    @property
    def gates(self):
        """Whether any budget applies (else the check only reports what it measured)."""
        return bool(self.percentiles or self.speedups)

    @property
    def batches(self):
        return sorted({b.batch for b in self.percentiles})

    def note(self, spec, precision):
        """Why nothing is gated, or None when some budget applies."""
        if self.table is None:
            known = ", ".join(sorted(spec.latency)) or "none"
            return (f"no budget for class {self.device_class} ({spec.where('latency')}: classes with budgets: "
                    f"{known}); measured, no budget")
        if not self.percentiles and not self.speedups:
            return (f"no budget for class {self.device_class} at {precision} ({spec.where(self.table)} has no "
                    f"{precision}_* or reference_* key); measured, no budget")
        return None


def budgets_for(spec, device_class, precision):
    """The ``[models.latency.<device_class>]`` keys of ``spec`` that concern ``precision`` or the reference.

    Class names match case-insensitively (``--parity-device-class=T4`` finds ``[models.latency.t4]``).
    """
    found = Budgets(device_class)
    name = next((c for c in spec.latency if c.lower() == device_class.lower()), None)
    if name is None:
        return found
    found.table = f"latency.{name}"
    for key, value in sorted(spec.latency[name].items()):
        source = spec.where(f"{found.table}.{key}")
        if (m := PERCENTILE_KEY.match(key)) and m["target"] in (precision, "reference"):
            found.percentiles.append(PercentileBudget(key, m["target"], int(m["batch"]), int(m["q"]),
                                                      float(value), source))
        elif (m := SPEEDUP_KEY.match(key)) and m["precision"] == precision:
            found.speedups.append(SpeedupBudget(key, precision, float(value), source))
    return found


def unmeasurable(spec, budgets):
    """Messages for budgets naming a batch size the model cannot take (0, or above max_batch)."""
    return [f"{spec.name}: budget {b.describe()} names batch {b.batch}, but the model takes batch sizes "
            f"1..{spec.max_batch} (max_batch); fix the key ({b.source})"
            for b in budgets.percentiles if not 1 <= b.batch <= spec.max_batch]


def evaluate(spec, precision, budgets, rows, reference_missing=None):
    """Annotate ``rows`` with their budgets; return (failures, errors): one failure message per budget not met,
    one error per budget that needs the TF reference when it could not run (``reference_missing`` says why):
    such a budget is not judged, which is the suite's error, never a pass or the candidate's failure."""
    failures, errors = [], []
    for b in budgets.percentiles:
        role = "reference" if b.target == "reference" else "candidate"
        row = _row(rows, role, b.batch)
        if row is None:
            if role == "reference" and 1 <= b.batch <= spec.max_batch:
                errors.append(_unjudged(spec, precision, b, reference_missing))
            continue  # a batch the model cannot take is reported by `unmeasurable`
        measured = row[f"p{b.percentile}_ms"]
        ok = measured <= b.limit_ms
        _annotate(row, b.describe(), ok)
        if not ok:
            failures.append(f"{spec.name} {precision} batch {b.batch}: {row['runtime']} ({role}) p{b.percentile} "
                            f"= {measured:.4g} ms exceeds budget {b.describe()} (from {b.source})")
    for b in budgets.speedups:
        for row in (r for r in rows if r["role"] == "candidate"):
            ref = _row(rows, "reference", row["batch"])
            if ref is None:
                errors.append(_unjudged(spec, precision, b, reference_missing, row["batch"]))
                continue
            ok = row["speedup_vs_reference"] >= b.minimum
            _annotate(row, b.describe(), ok)
            if not ok:
                failures.append(f"{spec.name} {precision} batch {row['batch']}: {row['runtime']} is "
                                f"{row['speedup_vs_reference']:.3g}x as fast as the TF reference (p50 "
                                f"{ref['p50_ms']:.4g} ms / {row['p50_ms']:.4g} ms), below budget "
                                f"{b.describe()} (from {b.source})")
    return failures, errors


def _unjudged(spec, precision, budget, why, batch=None):
    at = batch if batch is not None else budget.batch
    return (f"{spec.name} {precision} batch {at}: budget {budget.describe()} needs the TF reference, which could "
            f"not run: {why or 'not measured'} (from {budget.source})")


def _row(rows, role, batch):
    return next((r for r in rows if r["role"] == role and r["batch"] == batch), None)


def _annotate(row, text, ok):
    row["budget"] = text if row.get("budget") is None else f"{row['budget']}; {text}"
    row["within_budget"] = ok if row.get("within_budget") is None else (row["within_budget"] and ok)
