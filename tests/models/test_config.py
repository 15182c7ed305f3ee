"""paritygate.models.config: every bad config gives a one-line ConfigError naming the file, the model and the key;
a valid config parses into the expected ModelSpec; the plugin refuses a bad --parity-config (pytester)."""

import copy
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from paritygate.models.config import ConfigError, ModelSpec, TensorSpec, load_config
from tests.conftest import write_config

FILES = ("ref", "model.onnx", "calib.npz", "e32.plan", "e16.plan", "e8.plan")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A config folder holding every file a config may name; sys.path is restored afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "ref").mkdir()
    for name in FILES[1:]:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def minimal():
    return {"name": "m", "reference": "ref", "precisions": ["fp32"], "max_batch": 4,
            "inputs": {"x": {"shape": [-1, 3], "dtype": "float32", "range": [-1.0, 1.0]}}}


def full():
    """Every key of config_schema.json."""
    return {
        "name": "full", "reference": "ref", "signature": "serve", "onnx": "model.onnx",
        "engines": {"fp32": "e32.plan", "fp16": "e16.plan", "int8": "e8.plan"},
        "precisions": ["int8", "fp32", "fp16"], "max_batch": 8, "task": "classification", "task_output": "probs",
        "calibration": "calib.npz",
        "inputs": {"ids": {"shape": [-1, 16], "dtype": "int32", "range": [0, 999]},
                   "image": {"shape": [-1, 8, 8, 3], "dtype": "float32", "range": [-1.0, 1.0]}},
        "outputs": {"probs": "Identity"},
        "tolerances": {"fp16": {"atol": 1e-3, "rtol": 2e-3, "outputs": {"probs": {"atol": 0.5, "rtol": 0.25}}},
                       "int8": {"atol": 0.5}},
        "beam": {"handler": "handlers.m:make_handler", "batch_latency_p99_ms": 50.0},
        "latency": {"cpu": {"fp32_batch1_p99_ms": 3.0, "fp16_speedup_vs_reference_min": 1.5}},
    }


def test_full_example_parses_into_the_expected_model_spec(folder):
    path = write_config(folder, {"models": [full(), minimal()]})
    specs = load_config(path)
    assert [s.name for s in specs] == ["full", "m"]
    assert specs[0] == ModelSpec(
        name="full", source=path, reference=folder / "ref", signature="serve", onnx=folder / "model.onnx",
        engines={p: folder / f for p, f in (("fp32", "e32.plan"), ("fp16", "e16.plan"), ("int8", "e8.plan"))},
        precisions=("fp32", "fp16", "int8"), max_batch=8, task="classification", task_output="probs",
        calibration=folder / "calib.npz",
        inputs={"ids": TensorSpec("ids", (-1, 16), np.dtype("int32"), (0, 999)),
                "image": TensorSpec("image", (-1, 8, 8, 3), np.dtype("float32"), (-1.0, 1.0))},
        outputs={"probs": "Identity"},
        tolerances={"fp16": {"atol": 1e-3, "rtol": 2e-3, "outputs": {"probs": {"atol": 0.5, "rtol": 0.25}}},
                    "int8": {"atol": 0.5}},
        beam={"handler": "handlers.m:make_handler", "batch_latency_p99_ms": 50.0},
        latency={"cpu": {"fp32_batch1_p99_ms": 3.0, "fp16_speedup_vs_reference_min": 1.5}})
    assert list(specs[0].inputs) == ["ids", "image"]  # config order
    m = specs[1]
    assert (m.signature, m.onnx, m.engines, m.task, m.calibration, m.outputs, m.tolerances, m.beam, m.latency) == \
        ("serving_default", None, {}, "generic", None, {}, {}, None, {})
    assert m.inputs["x"].with_batch(5) == (5, 3)


def test_relative_paths_resolve_against_the_config_folder_which_stays_off_sys_path(folder, tmp_path_factory,
                                                                                   monkeypatch):
    (folder / "sub").mkdir()
    (folder / "sub" / "ref2").mkdir()
    elsewhere = tmp_path_factory.mktemp("cwd")
    absolute = elsewhere / "abs.onnx"
    absolute.write_bytes(b"")
    model = dict(minimal(), reference="sub/ref2", onnx=str(absolute))
    path = write_config(folder, {"models": [model]})
    monkeypatch.chdir(elsewhere)
    assert str(folder) not in sys.path
    (spec,) = load_config(os.path.relpath(path, elsewhere))
    assert spec.source == path and spec.reference == folder / "sub" / "ref2" and spec.onnx == absolute
    assert str(folder) not in sys.path  # only a handler the config names makes its folder importable (contract.py)


def test_check_files_false_skips_the_existence_checks(folder):
    path = write_config(folder, {"models": [dict(minimal(), reference="nowhere")]})
    (spec,) = load_config(path, check_files=False)
    assert spec.reference == folder / "nowhere"


def _set(*keys, value):
    def edit(doc):
        target = doc["models"][0]
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
    return edit


def _del(*keys):
    def edit(doc):
        target = doc["models"][0]
        for k in keys[:-1]:
            target = target[k]
        del target[keys[-1]]
    return edit


def _input(**table):
    return _set("inputs", "x", value=dict(minimal()["inputs"]["x"], **table))


BAD = {
    # case: (edit of the minimal config, model named in the message or None, words the message must hold)
    "unknown top-level key": (lambda d: d.update(extra=1), None, ["'extra'", "<top level>"]),
    "unknown model key": (_set("maxbatch", value=4), "m", ["'maxbatch'", "unknown key"]),
    "unknown input key": (_set("inputs", "x", "scale", value=2), "m", ["'inputs.x'", "'scale'"]),
    "unknown beam key": (_set("beam", value={"handler": "h:f", "timeout": 3}), "m", ["'beam'", "'timeout'"]),
    "unknown tolerance key": (_set("tolerances", value={"fp32": {"atool": 1e-3}}), "m",
                              ["'tolerances.fp32'", "'atool'"]),
    "unknown per-output tolerance key": (_set("tolerances", value={"fp32": {"outputs": {"y": {"tol": 1}}}}), "m",
                                         ["'tolerances.fp32.outputs.y'", "'tol'"]),
    "missing models": (lambda d: d.pop("models"), None, ["'models'", "required"]),
    "missing name": (_del("name"), "models[0]", ["'name'", "required"]),
    "missing max_batch": (_del("max_batch"), "m", ["'max_batch'", "required"]),
    "missing input dtype": (_del("inputs", "x", "dtype"), "m", ["'inputs.x.dtype'", "required but missing"]),
    "missing beam handler": (_set("beam", value={"batch_latency_p99_ms": 3.0}), "m", ["'beam.handler'", "required but missing"]),
    "max_batch a string": (_set("max_batch", value="8"), "m", ["'max_batch'", "expected integer", "'8'"]),
    "max_batch a float": (_set("max_batch", value=8.0), "m", ["'max_batch'", "expected integer", "8.0"]),
    "shape of floats": (_input(shape=[-1, 3.0]), "m", ["'inputs.x.shape.1'", "expected integer"]),
    "precisions a string": (_set("precisions", value="fp32"), "m", ["'precisions'", "expected array"]),
    "atol a string": (_set("tolerances", value={"fp32": {"atol": "1e-3"}}), "m", ["'tolerances.fp32.atol'"]),
    "precision fp8": (_set("precisions", value=["fp32", "fp8"]), "m", ["'precisions.1'", "'fp8'", "fp16"]),
    "task unknown": (_set("task", value="segmentation"), "m", ["'task'", "'segmentation'", "classification"]),
    "dtype unknown": (_input(dtype="float8"), "m", ["'inputs.x.dtype'", "'float8'"]),
    "task_output empty": (_set("task_output", value=""), "m", ["'task_output'"]),
    "task_output without classification": (lambda d: d["models"][0].update(task="detection", task_output="scores"),
                                           "m", ["'task_output'", "task is 'detection'", "boxes, scores"]),
    "batch dim not first": (_input(shape=[3, -1]), "m", ["'inputs.x.shape'", "[3, -1]", "first"]),
    "two dynamic dims": (_input(shape=[-1, -1]), "m", ["'inputs.x.shape'", "[-1, -1]"]),
    "zero dim": (_input(shape=[-1, 0]), "m", ["'inputs.x.shape'", "positive"]),
    "range low > high": (_input(range=[1.0, -1.0]), "m", ["'inputs.x.range'", "low must be <= high"]),
    "range not finite": (_input(range=[-1.0, float("inf")]), "m", ["'inputs.x.range.1'", "finite number, got inf"]),
    "float16 range beyond dtype": (_input(dtype="float16", range=[0.0, 70000.0]), "m", ["'inputs.x.range'", "float16"]),
    "float16 range just beyond dtype": (_input(dtype="float16", range=[0.0, 65519.0]), "m", ["'inputs.x.range'", "float16"]),
    "float range nan": (_input(range=[float("nan"), 1.0]), "m", ["'inputs.x.range.0'", "finite number, got nan"]),
    "int range infinite": (_input(dtype="int32", range=[0, float("inf")]), "m", ["'inputs.x.range.1'", "finite"]),
    "int range nan": (_input(dtype="int32", range=[float("nan"), 3]), "m", ["'inputs.x.range.0'", "finite"]),
    "int8 range above 127": (_input(dtype="int8", range=[0, 128]), "m", ["'inputs.x.range'", "int8 [-128, 127]"]),
    "uint8 range below 0": (_input(dtype="uint8", range=[-1, 10]), "m", ["'inputs.x.range'", "uint8 [0, 255]"]),
    "int32 range above max": (_input(dtype="int32", range=[0, 2**31]), "m", ["'inputs.x.range'", "int32"]),
    "int range not integral": (_input(dtype="int32", range=[0, 2.5]), "m", ["'inputs.x.range'", "integers"]),
    "bool range": (_input(dtype="bool", range=[0, 2]), "m", ["'inputs.x.range'", "bool"]),
    "int8 without calibration": (_set("precisions", value=["fp32", "int8"]), "m", ["'calibration'", "int8"]),
    "engine for an unlisted precision": (_set("engines", value={"fp16": "e16.plan"}), "m", ["'engines'", "fp16"]),
    "tolerance for an unlisted precision": (_set("tolerances", value={"int8": {"atol": 1.0}}), "m",
                                            ["'tolerances.int8'", "not listed"]),
    "missing reference": (_set("reference", value="gone"), "m", ["'reference'", "not found", "gone"]),
    "missing onnx": (_set("onnx", value="gone.onnx"), "m", ["'onnx'", "not found", "gone.onnx"]),
    "missing calibration": (lambda d: d["models"][0].update(precisions=["int8"], calibration="gone.npz"), "m",
                            ["'calibration'", "not found", "gone.npz"]),
    "missing engine": (_set("engines", value={"fp32": "gone.plan"}), "m", ["'engines.fp32'", "gone.plan"]),
    "bad model name": (_set("name", value="my model"), "models[0]", ["'name'", "expected a value matching", "'my model'"]),
    "bad beam handler": (_set("beam", value={"handler": "no_colon"}), "m", ["'beam.handler'", "no_colon"]),
    "empty inputs": (_set("inputs", value={}), "m", ["'inputs'"]),
    "lossy int->float16 cast": (_input(dtype="int32", range=[0, 5000], reference_dtype="float16"), "m",
                                ["'inputs.x.reference_dtype'", "int32 values in [0, 5000]", "float16", "exact"]),
    "lossy float->int cast": (_input(candidate_dtype="int32"), "m", ["'inputs.x.candidate_dtype'", "float32", "int32"]),
    "narrowing float cast": (_input(candidate_dtype="float16"), "m", ["'inputs.x.candidate_dtype'", "float16"]),
    "candidate name empty": (_input(candidate=""), "m", ["'inputs.x.candidate'"]),
}


def test_a_side_may_declare_another_dtype_where_the_cast_is_exact(folder):
    doc = {"models": [minimal()]}
    doc["models"][0]["inputs"]["x"] = {"shape": [-1, 80], "dtype": "int32", "range": [0, 42],
                                       "reference_dtype": "float32", "candidate": "input"}
    x = load_config(write_config(folder, doc))[0].inputs["x"]
    assert (x.dtype_of("reference"), x.dtype_of("candidate"), x.candidate) == (np.float32, np.int32, "input")


@pytest.mark.parametrize("case", list(BAD))
def test_bad_config_gives_one_line_error_naming_file_model_and_key(folder, case):
    edit, model, words = BAD[case]
    doc = {"models": [minimal()]}
    edit(doc)
    path = write_config(folder, doc)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:")
    if model is not None:
        assert (f"model '{model}'" if not model.startswith("models[") else model) in msg
    for word in words:
        assert word in msg, f"{word!r} not in {msg!r}"


def test_duplicate_model_names(folder):
    path = write_config(folder, {"models": [minimal(), dict(minimal(), max_batch=2)]})
    with pytest.raises(ConfigError, match=r"model 'm': key 'name': duplicate model name") as info:
        load_config(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_the_second_model_is_named(folder):
    second = copy.deepcopy(minimal())
    second.update(name="second", max_batch="8")
    path = write_config(folder, {"models": [minimal(), second]})
    with pytest.raises(ConfigError, match=r"model 'second': key 'max_batch'"):
        load_config(path)


def test_invalid_toml(folder):
    path = folder / "parity.toml"
    path.write_text('[[models]]\nname = "m"\nmax_batch = \n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: not valid TOML") and "line 3" in msg and "\n" not in msg


def test_non_utf8_file(folder):
    path = folder / "parity.toml"
    path.write_bytes(b'models = "\xff"\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


@pytest.mark.parametrize("kind", ["missing", "directory", "no permission"])
def test_unreadable_file(folder, kind):
    path = folder / "parity.toml"
    if kind == "directory":
        path.mkdir()
    elif kind == "no permission":
        write_config(folder, {"models": [minimal()]})
        path.chmod(0)
        if os.access(path, os.R_OK):  # root ignores permissions
            pytest.skip("running as a user who can read a file with mode 000")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: cannot read config file") and "\n" not in msg


# -- the plugin refuses a bad --parity-config -----------------------------------------------------------
CONFORMANCE_TEST = """
def test_parity(parity_model):
    assert parity_model.name
"""


def test_plugin_is_loaded_through_its_entry_point(pytester):
    config = pytester.parseconfig()
    plugin = config.pluginmanager.get_plugin("paritygate")  # registered under the pytest11 entry-point name
    assert plugin is not None and plugin.__name__ == "paritygate.plugin"


def test_plugin_fails_the_run_with_the_one_line_message(pytester):
    folder = pytester.path
    (folder / "ref").mkdir()
    path = write_config(folder, {"models": [dict(minimal(), max_batch="8")]})
    pytester.makepyfile(test_conformance=CONFORMANCE_TEST)
    result = pytester.runpytest("--parity-config", str(path))
    assert result.ret not in (0, pytest.ExitCode.NO_TESTS_COLLECTED)
    expected = f"{path}: model 'm': key 'max_batch': expected integer, got str '8'"
    lines = [line for line in result.outlines + result.errlines if expected in line]
    assert lines, "\n".join(result.outlines + result.errlines)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_plugin_runs_the_models_of_a_good_config(pytester):
    folder = pytester.path
    (folder / "ref").mkdir()
    path = write_config(folder, {"models": [minimal(), dict(minimal(), name="n")]})
    pytester.makepyfile(test_conformance=CONFORMANCE_TEST)
    result = pytester.runpytest("--parity-config", str(path), "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_parity?m? PASSED*", "*test_parity?n? PASSED*"])


def test_source_is_the_resolved_config_path(folder):
    path = write_config(folder, {"models": [minimal()]})
    (spec,) = load_config(Path(str(folder) + "/./parity.toml"))
    assert spec.source == path.resolve() and spec.where("inputs") == f"{path}: model 'm': key 'inputs'"


def test_allow_uninformative_and_nondeterministic_keys(folder):
    doc = {"models": [dict(minimal(), allow_uninformative=True, nondeterministic="atomics in reductions (docs link)")]}
    spec = load_config(write_config(folder, doc))[0]
    assert spec.allow_uninformative is True and spec.nondeterministic.startswith("atomics")
    plain = load_config(write_config(folder, {"models": [minimal()]}))[0]
    assert plain.allow_uninformative is False and plain.nondeterministic is None
    for key, value, words in (("allow_uninformative", "yes", "expected boolean"), ("nondeterministic", "", "non-empty")):
        with pytest.raises(ConfigError, match=f"model 'm': key '{key}': .*{words}"):
            load_config(write_config(folder, {"models": [dict(minimal(), **{key: value})]}))


@pytest.mark.parametrize("nested", ["a = " + "[" * 200_000 + "]" * 200_000, "a = " + "{b=" * 100_000 + "1" + "}" * 100_000])
def test_toml_nested_200000_deep_is_one_line_not_a_recursion_error(tmp_path, nested):
    path = tmp_path / "deep.toml"
    path.write_text(nested + "\n")
    with pytest.raises(ConfigError, match=r"deep\.toml: not valid TOML: arrays or tables nested too deep to read"):
        load_config(path)
