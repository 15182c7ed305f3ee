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


def test_a_renamed_model_is_told_the_data_it_left_behind(tmp_path):
    """The input set and goldens are found by the model's name: renamed from 'old' to 'new' in the config, the
    model finds none, and the files named 'old' are named in a note; a model with its own files gets none."""
    import numpy as np

    from paritygate.judge.preflight import summary_lines
    from paritygate.models.config import load_config
    from tests.conftest import write_config

    table = {"reference": "ref", "precisions": ["fp32"], "max_batch": 2, "task": "regression",
             "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    path = write_config(tmp_path, {"models": [{"name": "new", **table}, {"name": "kept", **table}]})
    for sub, name in (("inputs", "old"), ("inputs", "old_heldout"), ("goldens", "old"), ("inputs", "kept")):
        (tmp_path / sub).mkdir(exist_ok=True)
        np.savez(tmp_path / sub / f"{name}.npz", x=np.zeros((1, 1), np.float32))
    new, kept = load_config(path, check_files=False)
    found = {}
    for spec in (new, kept):
        v = found[spec.name] = ModelValidation(spec)
        declared.data_left_behind(spec, v)
    assert found["kept"].notes == [] and found["new"].problems == []
    (note,) = found["new"].notes
    assert note.startswith("name: no input set, held-out set or goldens are named for 'new'"), note
    assert "goldens/old.npz, inputs/old.npz, inputs/old_heldout.npz name no model of the config" in note
    lines = summary_lines({"config": str(path), "problems": [], "models": {
        "new": {"notes": found["new"].notes, "io_mapping": None}}})
    assert lines[1].startswith("paritygate: new: name: no input set"), lines
