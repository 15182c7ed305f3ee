"""paritygate.judge.declared: what a config declares beside the reference, checked without running the model (the
validation pass runs these; tests/judge/test_preflight.py runs them through it end to end)."""

from paritygate.judge import declared
from paritygate.judge.preflight import ModelValidation
from tests.conftest import toy_spec


def test_an_empty_engine_file_is_one_problem_under_its_key(tmp_path):
    engine = tmp_path / "model.fp16.plan"
    engine.write_bytes(b"")
    spec = toy_spec(tmp_path / "ref", tmp_path / "parity.toml", precisions=("fp32", "fp16"), engines={"fp16": engine})
    v = ModelValidation(spec)
    declared.engines(spec, v)
    assert v.problems == [f"{spec.where('engines.fp16')}: {engine}: TensorRT engine file is empty"]


def test_a_model_that_declares_nothing_more_adds_no_problem_and_checks_nothing(tmp_path):
    spec = toy_spec(tmp_path / "ref", tmp_path / "parity.toml")
    v = ModelValidation(spec)
    declared.own_artifacts(spec, v)
    declared.engines(spec, v)
    declared.handler(spec, v)
    assert (v.problems, v.notes, v.checked) == ([], [], [])


def test_a_handler_module_that_does_not_import_is_one_problem_naming_it(tmp_path):
    spec = toy_spec(tmp_path / "ref", tmp_path / "parity.toml", beam={"handler": "no_such_module_here:factory"})
    v = ModelValidation(spec)
    declared.handler(spec, v)
    assert len(v.problems) == 1 and "beam.handler" in v.problems[0] and "no_such_module_here" in v.problems[0]
