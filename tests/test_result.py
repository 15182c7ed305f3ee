"""paritygate.result.CheckResult: the one result of every check round-trips through JSON exactly, and its record is
the report's schema-1 check record (typed fields under their keys in ``details``)."""

import json
from pathlib import Path

import numpy as np
import pytest

from paritygate.result import DETAIL_KEYS, CheckResult, jsonable
from paritygate.verdict import STATUSES, Inconclusive

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.sampled_from(["nan", "inf", "-inf"]) | st.text(max_size=8)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=10)
NOT_TYPED = st.text(max_size=8).filter(lambda k: k not in DETAIL_KEYS.values())
DICTS = st.dictionaries(st.text(max_size=6), JSON, min_size=1, max_size=3)
LISTS = st.lists(DICTS, min_size=1, max_size=3)


def _results():
    return st.builds(
        CheckResult, model=st.text(min_size=1, max_size=8), precision=st.none() | st.sampled_from(["fp32", "fp16"]),
        check=st.text(min_size=1, max_size=12), status=st.none() | st.sampled_from(STATUSES),
        outputs=st.none() | LISTS, task=st.none() | DICTS, latency=st.none() | LISTS,
        failures=st.lists(st.text(max_size=20), max_size=3), errors=st.none() | st.lists(st.text(min_size=1), min_size=1),
        numerics=st.none() | st.sampled_from(["strict", "ort", "tensorrt"]), precision_coverage=st.none() | DICTS,
        inputs=st.none() | DICTS, reproducer=st.none() | DICTS, findings=LISTS | st.just([]),
        inconclusive=st.none() | st.fixed_dictionaries({"message": st.text(min_size=1), "allowed": st.booleans()}),
        details=st.dictionaries(NOT_TYPED, JSON, max_size=4))


@hypothesis.given(_results())
def test_every_result_round_trips_through_json_exactly(result):
    record = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert CheckResult.from_dict(record) == result
    assert CheckResult.from_dict(record).to_dict() == record


RAW = st.sampled_from([np.float32(0.5), np.arange(2), float("nan"), float("-inf"), (1, 2), Path("a/b")])
TYPED_IN_DETAILS = st.dictionaries(st.sampled_from(sorted(DETAIL_KEYS.values())), JSON | RAW | st.just([]), max_size=3)


@hypothesis.given(_results(), TYPED_IN_DETAILS, st.dictionaries(NOT_TYPED, RAW, max_size=2))
def test_settle_makes_the_result_what_its_record_reads_back_in_place(result, typed, raw):
    """What the recorder keeps is the judge's own object, holding exactly what a to_dict/from_dict round trip gave
    (typed keys written into details, numpy values, NaN, tuples, paths), so the report's content is unchanged."""
    result.details.update({**raw, **typed})
    expected = CheckResult.from_dict(json.loads(json.dumps(result.to_dict(), allow_nan=False)))
    assert result.settle() is result
    assert result == expected


def test_settle_turns_empty_typed_lists_into_their_defaults_and_refuses_a_bad_status():
    r = CheckResult("toy", "fp32", "latency", "pass", latency=[], errors=[], details={"task": {"passed": True}})
    assert r.settle() == CheckResult("toy", "fp32", "latency", "pass", task={"passed": True})
    with pytest.raises(ValueError, match="status must be one of"):
        CheckResult("toy", None, "x", "passed").settle()


def test_the_record_is_the_schema_1_check_record():
    r = CheckResult("toy", "fp16", "matches_reference", "fail", outputs=[{"output": "y", "max_abs": 0.5}],
                    failures=["y differs"], numerics="strict", precision_coverage={"mac_share": 0.9},
                    reproducer={"npz": "r.npz", "command": "paritygate replay r.npz"}, details={"message": "y differs"})
    record = r.to_dict()
    assert set(record) == {"model", "precision", "check", "status", "details"}
    d = record["details"]
    assert d["outputs"][0]["max_abs"] == 0.5 and d["numerics"] == "strict" and d["precision_coverage"]["mac_share"] == 0.9
    assert d["reproducer"]["npz"] == "r.npz" and d["message"] == "y differs" and "task" not in d
    with pytest.raises(ValueError, match="status must be one of"):
        CheckResult("toy", None, "x", "passed").to_dict()
    with pytest.raises(ValueError, match=r"needs \['status'\]"):
        CheckResult.from_dict({"model": "toy", "precision": None, "check": "x"})


def test_inconclusive_is_kept_as_json_and_raised_as_the_verdict():
    r = CheckResult("toy", "fp32", "property_parity")
    assert r.inconclusive_error() is None
    r.set_inconclusive(Inconclusive("constant reference", allowed=True))
    again = CheckResult.from_dict(json.loads(json.dumps(r.to_dict())))
    error = again.inconclusive_error()
    assert isinstance(error, Inconclusive) and str(error) == "constant reference" and error.allowed


def test_jsonable_makes_strict_json():
    value = {"a": np.float32(1.5), "b": np.array([1, 2]), "c": float("nan"), "d": (1, float("-inf")), 3: None}
    assert jsonable(value) == {"a": 1.5, "b": [1, 2], "c": "nan", "d": [1, "-inf"], "3": None}
