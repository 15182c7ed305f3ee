"""Real pipeline runs of a Case on the pinned local runners: elements, keys, results, traces, dead letters."""

from collections import Counter

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.beam import pipeline
from paritygate.beam.contract import HandlerContractError
from paritygate.beam.pipeline import Case, case_inputs, run_case
from tests.beam import toy_handlers as toys
from tests.conftest import toy_spec

pytestmark = [pytest.mark.beam, pytest.mark.tf, pytest.mark.onnx]


@pytest.mark.parametrize("runner", pipeline.LOCAL_RUNNERS)
@pytest.mark.parametrize("wrapper,keys", [("plain", "none"), ("keyed", "duplicated_tuple"),
                                          ("maybe_keyed", "unique_int"), ("maybe_keyed_plain", "none")])
def test_every_element_comes_back_once(toy_subject, runner, wrapper, keys):
    run = run_case(toy_subject(toys.correct), Case(7, 1, 3, wrapper, keys, seed=3, runner=runner))
    assert run.error is None
    want = Counter((k, d) for k, _, d, _ in run.inputs)
    assert Counter((e.key, e.digest) for e in run.results) == want
    assert all(e.has_key == (keys != "none") for e in run.results)
    assert sum(t.size for t in run.traces) == 7 and max(t.size for t in run.traces) <= 3
    assert run.metrics["num_inferences"] == 7 and run.metrics["inference_request_batch_size"]["max"] <= 3
    assert run.metrics["paritygate/payload_bytes"]["sum"] == 28
    assert run.namespace == "paritygate_toy"


def test_runs_are_memoised_per_subject(toy_subject):
    subject = toy_subject(toys.correct)
    case = Case(3, 1, 2)
    assert run_case(subject, case) is run_case(subject, case)


def test_dead_letters_carry_the_failed_batch(toy_subject):
    run = run_case(toy_subject(toys.correct), Case(5, 1, 1, "keyed", "unique_str", poison=2, exceptions=True))
    assert run.error is None and len(run.results) == 4
    (dead,) = run.dead
    assert dead.elements == [("k2", True, run.inputs[2][2])] and "could not convert string to float" in dead.error


def test_a_failing_pipeline_is_an_outcome(toy_subject):
    run = run_case(toy_subject(toys.factory_of(toys.FailsOnBatchOfOne)), Case(3, 1, 1))
    assert run.error.startswith("ValueError") and "a batch of one" in run.error


def test_case_inputs_keys_and_poison():
    spec = toy_spec()
    inputs = case_inputs(spec, Case(4, 1, 1, "keyed", "duplicated_str", poison=1))
    assert [k for k, *_ in inputs] == ["k0", "k0", "k1", "k1"]
    assert inputs[1][3].dtype.kind == "U" and inputs[0][3].flags.owndata
    mixed = case_inputs(spec, Case(3, 1, 1, "maybe_keyed", "mixed"))
    assert [(k, keyed) for k, keyed, *_ in mixed] == [("k0", True), (None, False), ("k2", True)]


def test_the_runner_is_always_named():
    p = pipeline.make_pipeline("FnApiRunner", ())
    assert type(p.runner).__name__ == "FnApiRunner"
    assert type(pipeline.make_pipeline("BundleBasedDirectRunner", ()).runner).__name__ == "BundleBasedDirectRunner"


def test_a_remote_runner_needs_a_temp_location():
    with pytest.raises(HandlerContractError, match="--parity-beam-option=--temp_location="):
        pipeline.output_folder("DataflowRunner", ("--project=x",))
    assert pipeline.output_folder("DataflowRunner", ("--temp_location=gs://b/t",)).startswith("gs://b/t/paritygate-")


def test_half_the_elements_come_from_the_models_own_input_sets(tmp_path):
    import numpy as np

    calib = np.linspace(-1, 1, 8, dtype=np.float32).reshape(8, 1)  # values the uniform draw would not repeat
    np.savez(tmp_path / "calib.npz", x=calib)
    spec = toy_spec(name="pooled", source=tmp_path / "parity.toml", calibration=tmp_path / "calib.npz")
    cases = [Case(9, 1, 3, seed=s) for s in range(6)]
    counts = pipeline.rows_by_source(spec, cases)
    assert set(counts) == {"spec", "calibration", "calibration~perturbed"} and sum(counts.values()) == 54
    assert 0.3 < (counts["calibration"] + counts["calibration~perturbed"]) / 54 < 0.7
    arrays, sources = pipeline.case_arrays(spec, cases[0])
    for x, source in zip(arrays["x"][:, 0], sources):
        assert (x in calib) == (source == "calibration") or source.endswith("~perturbed")
    assert pipeline.case_arrays(spec, cases[0])[1] == sources  # the same rows on every call (and every worker)
    assert all(-1 <= v <= 1 for v in arrays["x"].ravel())


def test_without_input_sets_every_element_is_drawn_from_the_spec():
    assert pipeline.rows_by_source(toy_spec(name="bare"), [Case(5, 1, 2, seed=1)]) == {"spec": 5}
