"""One result per check: what every check (parity, properties, latency, Beam, goldens, replay) returns, what the
recorder (``paritygate.session``) keeps, and what the report, the baseline diff, JUnit properties and replay read.

``to_dict()`` is the report's per-check record (``parity-report.json``, schema 1): ``model``, ``precision``,
``check``, ``status`` and ``details``, where each typed field below sits under its key in ``details``
(``DETAIL_KEYS``) and ``details`` (free-form: the message, the reference used, the divergence, ...) holds the rest.
``from_dict`` reads such a record back; ``from_dict(r.to_dict()) == r`` for every result. A typed field that is
None (or an empty list) is absent from the record. JSON is for the edges (the report file, the xdist hand-over):
inside a run one CheckResult goes from the judge to the report, ``settle()``d in place by the recorder.
"""

import math
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from paritygate.verdict import STATUSES, Inconclusive

# typed field -> its key in the record's ``details``
DETAIL_KEYS = {"outputs": "outputs", "task": "task", "latency": "latency", "failures": "failures",
               "errors": "errors", "numerics": "numerics", "precision_coverage": "precision_coverage", "inputs": "inputs",
               "reproducer": "reproducer", "findings": "findings", "inconclusive": "inconclusive"}


@dataclass
class CheckResult:
    model: str
    precision: str = None  # None: a model-level check (goldens, Beam)
    check: str = None
    status: str = None  # one of verdict.STATUSES; None until judged (the recorder sets the pytest outcome's word)
    outputs: list = None  # per output: error statistics, the tolerance and its source, the worst element and the
    #                       inputs there (comparator.compare.OutputComparison.as_dict() + plot data)
    task: dict = None  # the task metric (comparator.task), with its source
    latency: list = None  # per batch and role: percentiles, budget and its source (latency.checks.latency_row)
    failures: list = field(default_factory=list)  # why the candidate is wrong, one message each
    errors: list = None  # what could not be judged (a SuiteError's lines)
    numerics: str = None  # the numerics fp16/int8 outputs were computed with (--parity-numerics or the runtime)
    precision_coverage: dict = None  # the artifact's precision coverage (backend.precision.precision_coverage)
    inputs: dict = None  # the inputs judged: names, shapes, dtypes, sources and their digest
    reproducer: dict = None  # the saved failing inputs: npz, Polygraphy inputs JSON, replay command
    findings: list = field(default_factory=list)  # facts for the model owner, no verdict: {kind, model, ...}
    inconclusive: dict = None  # {"message", "allowed"}: the inputs could not have shown a failure
    details: dict = field(default_factory=dict)  # free-form: what the report shows beside the above

    @property
    def passed(self):
        return not self.failures

    def inconclusive_error(self):
        """The ``verdict.Inconclusive`` a conformance test raises, or None."""
        if not self.inconclusive:
            return None
        return Inconclusive(self.inconclusive["message"], allowed=self.inconclusive.get("allowed", False))

    def set_inconclusive(self, error):
        """Keep a ``verdict.Inconclusive`` (or None) as the JSON-able ``inconclusive``."""
        self.inconclusive = {"message": str(error), "allowed": bool(error.allowed)} if error else None

    def finding(self, kind, details):
        """Add a finding about the model (``reference_unstable``, ``reference_nonfinite``) to this result."""
        self.findings.append({"kind": kind, "model": self.model, "precision": self.precision, "check": self.check,
                              "details": jsonable(details)})

    def check_status(self):
        """Refuse a status outside ``verdict.STATUSES`` (None: not judged yet)."""
        if self.status is not None and self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def settle(self):
        """Make this result hold what its record reads back as (``from_dict(r.to_dict())``), in place: a typed
        field's key in ``details`` moves to that field when the field is empty, and every value becomes plain JSON
        data (``jsonable``). The recorder settles each result it keeps, so the report shows the judge's own
        object; a status outside ``verdict.STATUSES`` is refused. Returns self."""
        self.check_status()
        self._typed_from_details(jsonable)
        self.details = jsonable(self.details)
        return self

    def _typed_from_details(self, plain=lambda value: value):
        """Move ``details``' typed keys (``DETAIL_KEYS``) to their fields where these are empty; an empty field
        that none fills gets its default (None, or [] for failures and findings)."""
        for f in fields(self):
            if f.name not in DETAIL_KEYS:
                continue
            value, held = getattr(self, f.name), self.details.pop(DETAIL_KEYS[f.name], None)
            value = held if value is None or value == [] else value
            setattr(self, f.name, plain(value) if value is not None else
                    (f.default_factory() if f.default is MISSING else f.default))

    def to_dict(self):
        self.check_status()
        details = dict(self.details)
        for name, key in DETAIL_KEYS.items():
            value = getattr(self, name)
            if value is not None and value != []:
                details[key] = value
        return {"model": self.model, "precision": self.precision, "check": self.check, "status": self.status,
                "details": jsonable(details)}

    @classmethod
    def from_dict(cls, record):
        """A report record back into a CheckResult; ValueError names what is missing."""
        missing = [k for k in ("model", "precision", "check", "status") if k not in record]
        if missing:
            raise ValueError(f"a check record needs {missing}; got keys {sorted(record)}")
        result = cls(record["model"], record["precision"], record["check"], record["status"],
                     details=dict(record.get("details") or {}))
        result._typed_from_details()
        return result


def read_checks(records):
    """A report's check records (``parity-report.json``'s ``checks``) as CheckResults; CheckResults handed over by
    the session pass as they are. The one place the report, the baseline diff and the merge turn records into
    results; ValueError names the record's index and what it lacks."""
    results = []
    for i, record in enumerate(records):
        if isinstance(record, CheckResult):
            results.append(record)
            continue
        if not isinstance(record, dict):
            raise ValueError(f"checks[{i}]: expected a check record (a JSON object), got {type(record).__name__}")  # noqa: TRY004 - callers catch one error type
        try:
            results.append(CheckResult.from_dict(record))
        except ValueError as err:
            raise ValueError(f"checks[{i}]: {err}") from err
        except (TypeError, KeyError, AttributeError) as err:  # a field of the wrong type: junk, not a record
            raise ValueError(f"checks[{i}]: not a check record ({type(err).__name__}: {err})") from err
    return results


def jsonable(obj):
    """Plain JSON (strict: no NaN/Infinity tokens, which jq and browsers reject): numpy scalars and arrays become
    numbers and lists, paths strings, non-finite floats the strings "nan", "inf" and "-inf", tuples lists."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)
