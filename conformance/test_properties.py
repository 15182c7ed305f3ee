"""Property-based parity over each model's input spec (Hypothesis): every valid input, not a few samples.

(a) parity with the native TF reference within the precision's policy; (b) batch invariance: an element's
output does not depend on its batch companions or the batch size; (c) determinism over repeated runs.
A failing example is shrunk by Hypothesis and saved as a reproducer (.npz + Polygraphy inputs JSON).
"""

from contextlib import contextmanager

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given

from paritygate.checks import ParityResult, compare
from paritygate.runtimes import candidate_runner, reference_runner
from paritygate.strategies import feeds, with_corner_examples

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.usefixtures("parity_candidate_available")]


@contextmanager
def _failing(last, feed):
    """Remember ``feed`` when the body fails: after the run, ``last`` holds the last failing example, which
    is Hypothesis' shrunk one (it replays the minimal failure last) or a failing explicit example."""
    try:
        yield
    except BaseException:
        last["feed"], last["failing_result"] = feed, last.get("result")
        raise


def _run_property(prop, last, session, spec, precision, check, details):
    """Run a Hypothesis property; on failure save the shrunk failing example as a reproducer."""
    try:
        prop()
    except Exception as err:
        if "feed" in last:
            failures = [str(err).splitlines()[0][:2000]]
            details["reproducer"] = session.save_reproducer(spec, precision, check, last["feed"], failures)
            details["failing_feed"] = {k: {"dtype": v.dtype.name, "shape": list(v.shape)}
                                       for k, v in last["feed"].items()}
            if last.get("failing_result") is not None:
                details.update(last["failing_result"].details())
            if check == "property_parity":
                from paritygate.divergence import localize_failure

                found = localize_failure(session, spec, precision, last["feed"])
                if found is not None:
                    details["divergence"] = found
        raise


def test_property_parity(parity_session, parity_case, parity_details):
    spec, precision = parity_case
    reference = reference_runner(parity_session, spec)
    candidate = candidate_runner(parity_session, spec, precision)
    last = {}

    worst = {}  # output -> the comparison with the largest max abs error over every example run

    @given(feed=feeds(spec))
    def prop(feed):
        with _failing(last, feed):
            result = compare(spec, precision, reference.infer(feed), candidate.infer(feed), compare_task=False)
            last["result"] = result
            last["examples"] = last.get("examples", 0) + 1
            for o in result.outputs:
                if o.output not in worst or _max_abs(o) > _max_abs(worst[o.output]):
                    worst[o.output] = o
            assert result.passed, _explain(spec, precision, feed, result.failures)

    _run_property(with_corner_examples(prop, spec), last, parity_session, spec, precision, "property_parity",
                  parity_details)
    summary = ParityResult(spec.name, precision, list(worst.values()))
    n = last.get("examples", 0)
    parity_details.update(summary.details(examples=n, note=f"{n} examples run (the 3 corner batches included); "
                                          "statistics of the worst example per output"))


def _max_abs(comparison):
    return float("inf") if comparison.nonfinite_mismatches else comparison.max_abs


def test_batch_invariance(parity_session, parity_case, parity_details):
    spec, precision = parity_case
    candidate = candidate_runner(parity_session, spec, precision)
    last = {}

    @given(feed=feeds(spec, batch_sizes=range(2, spec.max_batch + 1)) if spec.max_batch > 1 else feeds(spec))
    def prop(feed):
        with _failing(last, feed):
            _check_batch_invariance(spec, precision, candidate, feed, last)

    _run_property(with_corner_examples(prop, spec), last, parity_session, spec, precision, "batch_invariance",
                  parity_details)


def test_determinism(parity_session, parity_case, parity_details):
    spec, precision = parity_case
    candidate = candidate_runner(parity_session, spec, precision)
    last = {}

    @given(feed=feeds(spec))
    def prop(feed):
        with _failing(last, feed):
            first = candidate.infer(feed)
            for attempt in (2, 3):
                again = candidate.infer(feed)
                for name, value in first.items():
                    assert np.array_equal(value, again[name], equal_nan=True), (
                        f"{spec.name} {precision}: output '{name}' changed between identical runs (run 1 vs "
                        f"{attempt}): max abs difference {np.nanmax(np.abs(value.astype(float) - again[name])):.3g}")

    _run_property(prop, last, parity_session, spec, precision, "determinism", parity_details)


def _check_batch_invariance(spec, precision, candidate, feed, last):
    together = candidate.infer(feed)
    n = len(next(iter(feed.values())))
    order = np.roll(np.arange(n), 1)  # every element gets other companions at another position
    shuffled = candidate.infer({k: v[order] for k, v in feed.items()})
    for i in range(n):
        alone = _identity(spec, candidate.infer({k: v[i:i + 1] for k, v in feed.items()}))
        for other, label in (({k: v[i:i + 1] for k, v in together.items()}, f"element {i} of a batch of {n}"),
                             ({k: v[np.flatnonzero(order == i)] for k, v in shuffled.items()},
                              f"element {i} moved within the batch")):
            result = compare(spec, precision, alone, other, compare_task=False)
            last["result"] = result
            assert result.passed, (f"{spec.name} {precision}: batch invariance: {label} differs from the same "
                                   "element alone (batch of 1):\n" + "\n".join(result.failures))


def _identity(spec, outputs):
    """Candidate outputs compared with candidate outputs: undo the reference->candidate name mapping."""
    back = {c: r for r, c in spec.outputs.items()}
    return {back.get(k, k): v for k, v in outputs.items()}


def _explain(spec, precision, feed, failures):
    shapes = ", ".join(f"{k} {v.dtype.name}{list(v.shape)} range [{v.min()}, {v.max()}]" for k, v in feed.items())
    return f"{spec.name} {precision}: candidate differs from the TF reference on inputs {shapes}:\n" + \
        "\n".join(failures)
