"""shadow.screen: a bundle judged together gives, row for row, the records ``judge_example`` gives alone; the rows it
screens clean are exactly the clean ones. Outputs: the bundled models' goldens (TF reference outputs), each row's
candidate made from them: clean, exact, mismatching, NaN / Inf on either side, flips, near ties either way, a
cosine failure inside int8's elementwise limit, all-zero rows, a two-output classifier with a renamed output and a
per-output tolerance, float16 candidates, regression outputs of two shapes, detection."""

import dataclasses

import numpy as np
import pytest

from paritygate.comparator.compare import OutputMismatchError
from paritygate.models.bundled import fixtures_dir
from paritygate.models.config import load_config
from paritygate.shadow import screen
from paritygate.shadow.example import judge_example

PRECISIONS = ("fp32", "fp16", "int8")
CLEAN = {"clean", "exact", "tie_agree", "zero"}  # the kinds the screen must take (at every precision here)


@pytest.fixture(scope="module")
def specs():
    return {m.name: m for m in load_config(fixtures_dir() / "parity.toml")}


def golden(name):
    data = np.load(fixtures_dir() / "goldens" / f"{name}.npz")
    return {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith("output:")}


def scores_row(kind, probs, rng):
    """(reference, candidate) class scores of one row of ``kind``, from a golden row ``probs``."""
    ref, top = probs.copy(), int(np.argmax(probs))
    other = (top + 1) % len(probs)
    if kind in ("tie_flip", "tie_tied", "tie_agree"):  # the top two 0.3 apart from the rest, a margin d apart
        d = {"tie_flip": 1e-3, "tie_tied": 1e-6, "tie_agree": 1e-6}[kind]
        ref[:] = 0.01
        ref[top], ref[other] = 0.45 + d, 0.45
    cand = ref + rng.uniform(-1e-7, 1e-7, ref.shape).astype(ref.dtype) if kind != "exact" else ref.copy()
    if kind in ("tie_flip", "tie_tied", "flip"):  # the top two swapped: a near tie's inside fp16's limit
        cand[top], cand[other] = ref[other], ref[top]
    elif kind == "mismatch":
        cand[(top + 2) % len(probs)] += 0.05
    elif kind == "nan_candidate":
        cand[0] = np.nan
    elif kind == "nan_reference":
        ref[1] = np.nan
    elif kind == "inf_both":
        ref[2] = cand[2] = np.inf
    elif kind == "zero":
        ref[:], cand[:] = 0.0, 0.0
    return ref, cand


KINDS = ("clean", "exact", "mismatch", "nan_candidate", "nan_reference", "inf_both", "flip", "tie_flip",
         "tie_tied", "tie_agree", "zero")


def classifier_examples(seed=0):
    """mobilenet's one output ``probs``: (kinds, examples)."""
    rng, probs = np.random.default_rng(seed), golden("mobilenet")["probs"]
    kinds = [KINDS[i % len(KINDS)] for i in range(3 * len(KINDS))]
    examples = []
    for i, kind in enumerate(kinds):
        ref, cand = scores_row(kind, probs[i % len(probs)], rng)
        examples.append((f"k{i}", i % 3, {"image": np.full(2, i)}, {"probs": ref}, {"probs": cand}))
    return kinds, examples


def two_output_examples(seed=1):
    """A two-output classifier (logits ``output_0`` = 5 + probs, ``output_1`` = probs; the candidate's second
    output named ``cand_probs``): the classifier kinds on both outputs, a flip in the probabilities alone, a cosine
    failure of the logits inside int8's elementwise limit, and one at the budget's edge."""
    rng, probs = np.random.default_rng(seed), golden("mobilenet")["probs"]
    kinds = list(KINDS) + ["flip_second", "cosine", "cosine_edge"]
    examples = []
    for i, kind in enumerate(kinds):
        base = kind if kind in KINDS else "tie_flip" if kind == "flip_second" else "clean"
        ref, cand = scores_row(base, probs[i % len(probs)], rng)
        logits_ref, logits_cand = np.float32(5) + ref, np.float32(5) + cand
        if kind == "flip_second":  # the logits agree, the probabilities flip (inside fp16's limit)
            logits_cand = logits_ref.copy()
        elif kind.startswith("cosine"):  # orthogonal to the logits, within atol + rtol |ref| = 0.3 + 0.5 at int8
            sign = np.where(np.arange(len(ref)) % 2 == int(np.argmax(ref)) % 2, 1.0, -1.0).astype(np.float32)
            logits_cand = logits_ref + np.float32(0.6 if kind == "cosine" else 0.4322) * sign
        examples.append((f"t{i}", None, {"image": np.full(2, i)}, {"output_0": logits_ref, "output_1": ref},
                         {"output_0": logits_cand, "cand_probs": cand}))
    return kinds, examples


def regression_examples(seed=2):
    """linear's ``y`` in two shapes (two stacks), a float16 candidate, a mismatch and a NaN."""
    rng, y = np.random.default_rng(seed), golden("linear")["y"]
    kinds, examples = [], []
    for i in range(12):
        ref = y[i % len(y)] if i < 6 else np.tile(y[i % len(y)], 3)
        cand = (ref + rng.uniform(-1e-7, 1e-7, ref.shape)).astype(np.float16 if i % 4 == 1 else np.float32)
        kind = ("mismatch" if i == 4 else "nan_candidate" if i == 9 else
                "float16" if i % 4 == 1 else "clean")
        if kind == "mismatch":
            cand = cand + np.float32(100.0)
        elif kind == "nan_candidate":
            cand[0] = np.nan
        kinds.append(kind)
        examples.append((i, None, {"x": np.full(1, i)}, {"y": ref}, {"y": cand}))
    return kinds, examples


def two_output_spec(specs):
    return dataclasses.replace(specs["mobilenet"], outputs={"output_1": "cand_probs"},
                               tolerances={"fp16": {"outputs": {"output_0": {"atol": 0.05}}}})


def differing_rows(spec, precision, examples):
    """The rows whose bundle record differs from judge_example's (repr: exact floats and types; the inputs must
    be the example's own feed)."""
    together = screen.judge_bundle(spec, precision, examples)
    assert len(together) == len(examples)
    differ = []
    for i, (record, example) in enumerate(zip(together, examples)):
        alone = judge_example(spec, precision, *example)
        if record["inputs"] is not example[2] or repr({**record, "inputs": None}) != repr({**alone, "inputs": None}):
            differ.append(i)
    return differ


def screened(spec, precision, examples):
    """The indices the screen takes as clean (builds the record of) over all its stacks."""
    return sorted(i for rows in screen._groups(examples)
                  for i, r in zip(rows, screen.screen(spec, precision, [examples[j] for j in rows])) if r is not None)


def cases(specs):
    return {"mobilenet": (specs["mobilenet"], classifier_examples()),
            "two outputs": (two_output_spec(specs), two_output_examples()),
            "linear": (specs["linear"], regression_examples())}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", ["mobilenet", "two outputs", "linear"])
def test_bundle_records_equal_judge_example_row_by_row(specs, case, precision):
    spec, (kinds, examples) = cases(specs)[case]
    assert differing_rows(spec, precision, examples) == []
    took = {kinds[i] for i in screened(spec, precision, examples)}
    if case == "linear":  # float16 rounding (~5e-4 relative) is inside fp16's and int8's limits, not fp32's
        expected = {"clean"} | ({"float16"} if precision != "fp32" else set())
    else:
        expected = CLEAN | ({"mismatch"} if precision == "int8" else set())  # 0.05 is inside int8's atol 0.3
    assert took == expected, f"screened clean: {sorted(took)}"
    records = screen.judge_bundle(spec, precision, examples)
    assert {kinds[i] for i, r in enumerate(records) if not r["passed"]} >= {"nan_candidate"}


def test_float16_candidates_fail_fp32_alone(specs):
    """A float16 candidate errs by ~1e-3 relative: outside fp32's limit, judged alone with its mismatches."""
    kinds, examples = regression_examples()
    records = screen.judge_bundle(specs["linear"], "fp32", examples)
    assert all(not records[i]["passed"] for i, k in enumerate(kinds) if k == "float16")


def test_the_comparison_can_fail(specs, monkeypatch):
    """The equality above is not vacuous: a screen that misses a non-finite row, the cosine budget or a flip gives
    records judge_example does not (a mismatch or a NaN in the scores moves the argmax: the flip rule catches it)."""
    spec, (kinds, examples) = cases(specs)["two outputs"]
    original = screen.elementwise

    def everything_clean(ref, cand, tol):
        return np.ones(len(ref), dtype=bool), original(ref, cand, tol)[1]

    monkeypatch.setattr(screen, "elementwise", everything_clean)
    assert {kinds[i] for i in differing_rows(spec, "int8", examples)} >= {"inf_both", "cosine"}
    monkeypatch.setattr(screen, "elementwise", original)
    monkeypatch.setattr(screen, "_agree", lambda spec, ref, cand: (np.ones(len(ref["output_1"]), dtype=bool),
                                                                  [int(k) for k in np.argmax(ref["output_1"], 1)]))
    assert {kinds[i] for i in differing_rows(spec, "fp16", examples)} == {"flip_second", "tie_flip"}


def test_cosine_failure_inside_the_elementwise_limit(specs):
    spec, (kinds, examples) = cases(specs)["two outputs"]
    record = screen.judge_bundle(spec, "int8", examples)[kinds.index("cosine")]
    assert not record["passed"] and record["outputs"]["output_0"]["mismatches"] == 0
    assert "cosine" in record["failures"][0]


def test_detection_and_bad_pairs_are_judged_alone(specs):
    spec, outs = specs["ssd"], golden("ssd")
    examples = [(i, None, {"image": np.zeros(1)}, {k: v[i] for k, v in outs.items()},
                 {k: v[i] + (np.float32(0.3) if i == 1 and k == "scores" else 0) for k, v in outs.items()})
                for i in range(4)]
    assert differing_rows(spec, "fp16", examples) == []
    assert screened(specs["mobilenet"], "fp16", [("a", None, {}, {"probs": np.ones(3)}, {"probs": np.ones(4)})]) == []
    text = [("a", None, {}, {"y": np.array(["1.0"])}, {"y": np.array(["1.0"])})]
    assert screened(specs["linear"], "fp32", text) == []
    with pytest.raises(OutputMismatchError) as alone:
        judge_example(specs["mobilenet"], "fp16", "a", None, {}, {"probs": np.ones(3)}, {"p": np.ones(3)})
    with pytest.raises(OutputMismatchError) as together:
        screen.judge_bundle(specs["mobilenet"], "fp16", [("a", None, {}, {"probs": np.ones(3)}, {"p": np.ones(3)})])
    assert str(together.value) == str(alone.value)


def test_rows_at_the_cosine_budget_are_judged_alone(specs):
    """float64 logits placed one rounding either side of the cosine budget at int8: the screen leaves both to
    judge_example (they are within COSINE_SLACK of it), which passes the one above and fails the one below."""
    from paritygate.comparator.compare import cosine_similarity
    from paritygate.comparator.tolerance import COSINE_MIN

    ref, sign = np.full(4, 5.0), np.array([1.0, -1.0, 1.0, -1.0])
    low, high = 0.3, 0.5  # cosine above the budget at 0.3, below at 0.5
    while np.nextafter(low, high) < high:
        mid = (low + high) / 2
        if mid in (low, high):
            break
        low, high = (mid, high) if cosine_similarity(ref, ref + mid * sign)[0] >= COSINE_MIN else (low, mid)
    examples = [(k, None, {}, {"y": ref}, {"y": ref + a * sign}) for k, a in (("above", low), ("below", high))]
    spec = specs["linear"]
    assert screened(spec, "int8", examples) == [] and differing_rows(spec, "int8", examples) == []
    assert [r["passed"] for r in screen.judge_bundle(spec, "int8", examples)] == [True, False]
