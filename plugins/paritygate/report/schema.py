"""The report's JSON Schema (``parity-report.json``, schema 1): the type of every field the renderers, the baseline
comparison and the merge read, so that a report from anywhere (a crafted file, a merge, another version) is read
or refused with one line naming the record and the field, never a crash in a renderer.

What it does not hold: escaping. Every string in a report is data; the renderers escape each one themselves
(``paritygate.common.escape``), whatever this schema lets through. ``check_report`` is called by
``report.merge.read_report`` (``paritygate report``, the merge) and ``report.baseline.load_baseline``.
"""

import json
import re

from paritygate.verdict import STATUSES

NUMBER = {"anyOf": [{"type": "number"}, {"enum": ["nan", "inf", "-inf"]}]}  # strict JSON: non-finite as strings
COUNT = {"type": "integer", "minimum": 0}
TEXT = {"type": "string"}
TEXT_OR_NULL = {"type": ["string", "null"]}
TEXTS = {"type": "array", "items": TEXT}
NUMBERS = {"type": "array", "items": NUMBER}


def _object(required=(), **properties):
    return {"type": "object", "required": list(required), "properties": properties}


TOLERANCE = _object(atol=NUMBER, rtol=NUMBER, bound=NUMBER, reference_floor_max=NUMBER, k=NUMBER, source=TEXT_OR_NULL,
                    cosine_min={"anyOf": [NUMBER, {"type": "null"}]}, cosine_source=TEXT_OR_NULL,
                    cosine_applies_above_rms={"anyOf": [NUMBER, {"type": "null"}]})
INPUT_AT_WORST = _object(dtype=TEXT_OR_NULL, shape={"type": ["array", "null"]}, values=NUMBERS, head=NUMBERS,
                         min=NUMBER, max=NUMBER, nan=COUNT, inf=COUNT)
WORST = _object(batch_element={"type": ["integer", "null"]}, reference=NUMBER, candidate=NUMBER, inputs_error=TEXT,
                inputs={"type": "object", "additionalProperties": INPUT_AT_WORST},
                index={"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]})
OUTPUT = _object(["output"], output=TEXT, passed={"type": "boolean"}, tolerance=TOLERANCE, worst=WORST,
                 max_abs=NUMBER, p99_abs=NUMBER, mean_abs=NUMBER, max_rel=NUMBER, p99_rel=NUMBER, mean_rel=NUMBER,
                 cosine=NUMBER, cosine_failed={"type": "boolean"}, mismatches=COUNT, elements=COUNT,
                 finite_elements={"type": ["integer", "null"], "minimum": 0}, nonfinite_mismatches=COUNT,
                 reference_nan=COUNT, reference_inf=COUNT, candidate_nan=COUNT, candidate_inf=COUNT,
                 failing_batch_elements={"type": "array", "items": {"type": "integer"}},
                 error_histogram=_object(["edges", "counts"], edges=NUMBERS,
                                         counts={"type": "array", "items": COUNT}),
                 error_vs_magnitude=_object(["reference_abs", "abs_error"], reference_abs=NUMBERS, abs_error=NUMBERS))
LATENCY_ROW = _object(role=TEXT, runtime=TEXT_OR_NULL, batch={"type": ["integer", "null"]}, p50_ms=NUMBER,
                      p90_ms=NUMBER, p99_ms=NUMBER, mean_ms=NUMBER, samples_ms=NUMBERS,
                      within_budget={"type": ["boolean", "null"]})
DEPTH_ROW = _object(depth=NUMBER, max_abs=NUMBER, max_rel=NUMBER)
DIVERGENCE = _object(first_node=TEXT_OR_NULL, crashed_node=TEXT_OR_NULL, config=TEXT_OR_NULL, error=TEXT_OR_NULL,
                     crash=TEXT_OR_NULL, keep_fp32={"type": ["array", "null"], "items": TEXT}, covers=TEXTS,
                     exclude_from_quantization={"type": ["array", "null"], "items": TEXT}, verified={"type": "boolean"},
                     max_abs_error=NUMBER, error_by_depth={"type": "array", "items": DEPTH_ROW})
ENGINE = _object(built={"type": "boolean"}, builder=TEXT_OR_NULL, warnings={"type": ["array", "null"]},
                 coverage=_object(kernels=COUNT, kernels_in_precision=COUNT, tensors=COUNT, tensors_in_precision=COUNT,
                                  tensor_datatypes={"type": ["object", "null"]}),
                 error={"type": ["object", "null"]})
REPRODUCER = _object(["command"], command=TEXT, npz=TEXT_OR_NULL, polygraphy_inputs=TEXT_OR_NULL)
FINDING = _object(["kind", "model", "precision", "check"], kind=TEXT, model=TEXT, precision=TEXT_OR_NULL,
                  check=TEXT, details=_object(reproducer=_object(npz=TEXT_OR_NULL)))
DETAILS = _object(outputs={"type": "array", "items": OUTPUT}, latency={"type": "array", "items": LATENCY_ROW},
                  task={"type": "object"}, failures={"type": "array"}, numerics=TEXT_OR_NULL,
                  precision_coverage=_object(mac_share=NUMBER), reproducer=REPRODUCER, divergence=DIVERGENCE,
                  findings={"type": "array", "items": FINDING}, engine=ENGINE,
                  fused={"type": "array", "items": {"type": "array"}}, allow_uninformative={"type": "boolean"},
                  inconclusive=_object(["message"], message=TEXT, allowed={"type": "boolean"}),
                  expectations={"type": "array"}, rerun=TEXT_OR_NULL)
CHECK = _object(["model", "precision", "check", "status"], model=TEXT, precision=TEXT_OR_NULL, check=TEXT,
                status={"enum": list(STATUSES)}, details=DETAILS)
CHECK_REF = _object(["model", "precision", "check"], model=TEXT, precision=TEXT_OR_NULL, check=TEXT,
                    status={"enum": list(STATUSES)}, baseline_status={"enum": [*STATUSES, None]})
DRIFT = _object(["gating", "model", "precision", "check", "where", "field", "baseline", "current", "change",
                 "threshold"], gating={"type": "boolean"}, model=TEXT, precision=TEXT_OR_NULL, check=TEXT, where=TEXT,
                field=TEXT, baseline={"type": "number"}, current={"type": "number"}, change=TEXT, threshold=TEXT)
BASELINE = _object(["path", "new_failures", "fixed", "existing_failures", "drift"], path=TEXT,
                   new_failures={"type": "array", "items": CHECK_REF}, fixed={"type": "array", "items": CHECK_REF},
                   existing_failures={"type": "array", "items": CHECK_REF}, drift={"type": "array", "items": DRIFT},
                   environment_differs=TEXTS, gates=TEXTS)
REPORT = _object(["schema", "checks"], schema={"const": 1}, checks={"type": "array", "items": CHECK},
                 findings={"type": ["array", "null"], "items": FINDING}, baseline=BASELINE,
                 environment={"type": ["object", "null"], "properties": {
                     "gpu": {"type": ["object", "string", "null"]}, "cpu_isa": {"type": ["array", "null"]}}},
                 validation={"type": ["object", "null"], "properties": {"problems": {"type": ["array", "null"],
                                                                                     "items": TEXT}}},
                 time={"type": ["object", "null"]}, status={"enum": ["complete", "interrupted", "stopped", None]},
                 interrupted=_object(reason=TEXT_OR_NULL, selected=COUNT, recorded=COUNT))


def check_report(data, path, error=ValueError):
    """Refuse ``data`` (a parsed ``parity-report.json``) unless it fits ``REPORT``: ``error`` with one line naming
    ``path``, the record and field (``checks[3].details.outputs[0].max_abs``) and what was expected."""
    import jsonschema

    found = next(iter(sorted(jsonschema.Draft202012Validator(REPORT).iter_errors(data), key=_depth)), None)
    if found is not None:
        where = "".join(map(_step, found.absolute_path)).lstrip(".")
        raise error(f"{path}: {where or 'the report'}: {_expected(found)}")


def _step(part):
    """One step of a field's path: [3], .outputs, or a key from data (an input's name) JSON-quoted, on one line."""
    if isinstance(part, int):
        return f"[{part}]"
    return f".{part}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part) else f"[{json.dumps(part)[:60]}]"


def _depth(err):
    return -len(err.absolute_path), str(err.absolute_path)


def _expected(err):
    """What the schema expected, in words, without echoing the value (a report may hold anything)."""
    kind = {"dict": "an object", "list": "an array", "NoneType": "null", "str": "a string", "int": "an integer",
            "float": "a number", "bool": "a boolean"}.get(type(err.instance).__name__, "a value")
    if err.validator == "required":
        return f"expected a key {err.message.split(' ', 1)[0]} (a record as a run writes it)"
    if err.validator in ("enum", "const"):
        allowed = err.validator_value if err.validator == "enum" else [err.validator_value]
        return f"expected one of {', '.join(map(str, allowed))}, got {kind}"
    if err.validator == "anyOf" or err.validator == "type":
        return f"expected {_type_words(err.schema)}, got {kind}"
    return f"not valid ({err.validator} {err.validator_value!r}), got {kind}"


def _type_words(schema):
    if "anyOf" in schema:
        return " or ".join(_type_words(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    kinds = schema.get("type")
    return " or ".join(kinds) if isinstance(kinds, list) else f"a {kinds}"
