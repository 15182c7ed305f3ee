"""Records a pipeline sends back: written by a real Beam pipeline with FileSystems, read back once, folder removed."""

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not installed (pip install 'paritygate[beam]')")

import apache_beam as beam
from apache_beam.ml.inference.base import PredictionResult

from paritygate.beam.contract import digest
from paritygate.beam.records import Emitted, ToRecord, WriteRecords, dead_record, read_records
from tests.conftest import toy_spec


def test_records_written_by_a_pipeline_come_back_once_and_the_folder_goes(tmp_path):
    folder = str(tmp_path / "out")
    with beam.Pipeline("BundleBasedDirectRunner") as p:
        _ = p | beam.Create([("result", i) for i in range(7)]) | beam.ParDo(WriteRecords(folder))
    records = read_records(folder)
    assert sorted(records) == [("result", i) for i in range(7)]
    assert not (tmp_path / "out").exists()
    assert read_records(folder) == []  # nothing written (a pipeline that failed early): no records, no error


def test_an_output_that_is_not_a_prediction_result_is_recorded_as_an_error():
    spec = toy_spec(reference="unused")
    to_record = ToRecord(spec, ["y", "z"], keyed=True)
    kind, emitted = to_record(("k", np.zeros(3)))
    assert kind == "result" and emitted.has_key and emitted.key == "k"
    assert emitted.error == "output is a ndarray, not a PredictionResult"
    example = np.ones(2, np.float32)
    _, good = to_record(PredictionResult(example, [np.ones(1), np.zeros(1)]))
    assert isinstance(good, Emitted) and good.digest == digest(example) and not good.has_key and good.error is None
    assert sorted(good.inference) == sorted(spec.outputs.get(n, n) for n in ("y", "z"))
    _, wrong = to_record(PredictionResult(example, [np.ones(1)]))
    assert "list of 1 item(s); the reference has 2 output(s)" in wrong.error


def test_a_dead_batch_names_its_elements_and_the_exception():
    kind, dead = dead_record(([("k", np.zeros(2)), np.ones(2)], (ValueError, "ValueError('bad')", None)))
    assert kind == "dead" and dead.error == "ValueError: ValueError('bad')"
    assert [(k, has) for k, has, _ in dead.elements] == [("k", True), (None, False)]
