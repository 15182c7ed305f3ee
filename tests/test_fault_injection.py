"""Fault injection (issue 33): every kind of file the suite reads and every key of the config, fed special files
(FIFO, device, folder, symlink loop), huge sparse files, bytes and JSON that Hypothesis generates, values of the
wrong type and out of range, ends in its reader's own one-line error naming the file or the key: never another
exception, never a hang, never silent acceptance of what cannot be right. Each reader runs in a daemon thread with
a deadline (``within``), so a reader that blocks fails its test instead of hanging the run. A few seconds in all;
the pytester runs of the whole suite on such input are in tests/test_bad_inputs.py."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paritygate.backend.base import RunnerError
from paritygate.files import LIMITS, limit_bytes
from paritygate.inputs.goldens import GoldenError, read_manifest
from paritygate.inputs.reproducer import ReplayError, load_reproducer
from paritygate.inputs.sets import InputSetError, read_input_set
from paritygate.models.config import ConfigError, load_config
from paritygate.models.known import ExpectationError, read_expectations
from paritygate.report.baseline import BaselineError, load_baseline
from paritygate.report.merge import MergeError, read_report
from tests.conftest import toy_spec, write_config
from tests.test_files import within

FAST = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SECRET = b"root:*:19000:0:99999:7:::\n"  # the start of /etc/shadow: a reader must never echo it


def _onnx(path):
    from paritygate.backend.onnx.artifacts.loader import load_checked

    return load_checked(path)


# kind -> (file name in the config's folder, size-limit kind, reader(path), its error class)
KINDS = {
    "config": ("parity.toml", "config", load_config, ConfigError),
    "expectations": ("expectations.toml", "config", read_expectations, ExpectationError),
    "input set": ("inputs/toy.npz", "npz", lambda p: read_input_set(toy_spec(source=p.parent.parent / "parity.toml"),
                                                                     p), InputSetError),
    "goldens manifest": ("goldens/manifest.json", "json",
                         lambda p: read_manifest(toy_spec(source=p.parent.parent / "parity.toml")), GoldenError),
    "report JSON": ("parity-report.json", "json", read_report, MergeError),
    "baseline": ("baseline.json", "json", load_baseline, BaselineError),
    "reproducer": ("toy-fp32-determinism-0.npz", "npz", load_reproducer, ReplayError),
    "onnx": ("model.onnx", "onnx", _onnx, RunnerError),
}


def place(folder, kind):
    path = Path(folder) / KINDS[kind][0]
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def one_line(box, kind, *words):
    """The reader's error, after asserting it is the kind's own class, one line, holding ``words``."""
    err = box.get("error")
    assert isinstance(err, KINDS[kind][3]), f"{kind}: expected {KINDS[kind][3].__name__}, got {box}"
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    assert all(w in text for w in words), (words, text)
    return text


def read(kind, path):
    return within(20, KINDS[kind][2], path)


# -- special files and huge sizes, every kind --------------------------------------------------------------
SPECIALS = {"fifo": "FIFO", "folder": "a folder", "loop": "symlink loop", "device": "character device"}


@pytest.mark.parametrize("special", sorted(SPECIALS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_special_file_of_every_kind_is_one_line_and_never_blocks(tmp_path, kind, special):
    path = place(tmp_path, kind)
    {"fifo": lambda: os.mkfifo(path), "folder": path.mkdir, "loop": lambda: os.symlink(path, path),
     "device": lambda: os.symlink("/dev/zero", path)}[special]()
    one_line(read(kind, path), kind, path.name, SPECIALS[special])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_huge_sparse_file_of_every_kind_is_refused_with_its_limit_and_variable(tmp_path, kind):
    path = place(tmp_path, kind)
    with open(path, "wb") as f:
        f.truncate(limit_bytes(KINDS[kind][1]) + 1)
    one_line(read(kind, path), kind, path.name, "limit", LIMITS[KINDS[kind][1]][1])


# -- generated contents ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(KINDS))
@FAST
@given(data=st.binary(max_size=300))
def test_generated_bytes_of_every_kind_are_refused_by_its_reader_without_echoing_them(tmp_path, kind, data):
    path = place(tmp_path, kind)
    path.write_bytes(SECRET + data)
    text = one_line(read(kind, path), kind, path.name)
    assert SECRET.hex()[:12] not in text and "root:*" not in text, text


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=20)
REPORTS = st.fixed_dictionaries({"schema": st.one_of(st.just(1), JSON), "checks": st.lists(JSON, max_size=3)},
                                optional={"environment": JSON, "findings": JSON, "validation": JSON, "time": JSON})


@pytest.mark.parametrize("kind", ["report JSON", "baseline", "goldens manifest"])
@FAST
@given(doc=st.one_of(JSON, REPORTS, st.fixed_dictionaries({"schema": JSON, "models": JSON})))
def test_generated_json_is_read_or_refused_by_its_reader_never_another_exception(tmp_path, kind, doc):
    path = place(tmp_path, kind)
    path.write_text(json.dumps(doc))
    box = read(kind, path)
    if "error" in box:
        one_line(box, kind, path.name)
    elif kind == "report JSON":  # what read_report accepts, `paritygate report` renders
        from paritygate.report import render_html, render_markdown

        assert render_markdown(box["value"]) and render_html(box["value"])


@FAST
@given(version=st.integers(min_value=2) | st.text(max_size=4) | st.none())
def test_a_report_or_manifest_of_another_schema_version_is_refused_naming_file_and_versions(tmp_path, version):
    for kind, doc in (("report JSON", {"schema": version, "checks": [], "environment": {}}),
                      ("goldens manifest", {"schema": version, "models": {}})):
        path = place(tmp_path, kind)
        path.write_text(json.dumps(doc))
        one_line(read(kind, path), kind, path.name, "schema version", "reads schema version(s) 1")


def test_a_reproducer_of_another_schema_version_is_refused(tmp_path):
    path = place(tmp_path, "reproducer")
    meta = {"schema": 7, "config": "c", "model": "toy", "precision": "fp32", "check": "determinism",
            "runtime": "onnxruntime"}
    np.savez(path, **{"input:x": np.zeros((1, 1), np.float32), "__meta__": np.array(json.dumps(meta))})
    one_line(read("reproducer", path), "reproducer", path.name, "schema version 7")


# -- every config key: wrong type, out of range ------------------------------------------------------------
FILES = ("model.onnx", "calib.npz", "e32.plan", "e8.plan")


def base_model():
    """A valid model table with most keys of config_schema.json (int8 for calibration, engines, tolerances)."""
    return {"name": "m", "reference": "ref", "signature": "serve", "onnx": "model.onnx", "engines": {"fp32": "e32.plan"},
            "precisions": ["fp32", "int8"], "max_batch": 8, "task": "classification", "task_output": "probs",
            "calibration": "calib.npz", "min_precision_coverage": 0.5, "allow_uninformative": False,
            "nondeterministic": "why",
            "inputs": {"x": {"shape": [-1, 4], "dtype": "float32", "range": [-1.0, 1.0],
                             "profile": {"min": [1, 4], "opt": [4, 4], "max": [8, 4]}},
                       "ids": {"shape": [-1, 2], "dtype": "int32", "range": [0, 9], "candidate": "ids2"}},
            "outputs": {"probs": "Identity"},
            "tolerances": {"fp32": {"atol": 1e-5, "rtol": 1e-4, "outputs": {"probs": {"atol": 0.5}}}},
            "beam": {"handler": "handlers:make", "batch_latency_p99_ms": 50.0},
            "latency": {"cpu": {"fp32_batch1_p99_ms": 3.0, "fp32_speedup_vs_reference_min": 1.5}},
            "precision": {"fp16_keep_fp32": ["a"], "int8_exclude": ["b"]}}


def key_paths(value, prefix=()):
    """Every key path of a nested table, list elements included: ('inputs', 'x', 'range', 0), ..."""
    out = [prefix] if prefix else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        out += key_paths(v, prefix + (k,))
    return out


KEYS = key_paths(base_model())
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)  # TOML's integers
TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=70)  # TOML's \\uXXXX escapes
WRONG = st.one_of(st.booleans(), INT64,
                  st.sampled_from([10**9, 2**31, -1, 0, 65537, 1e300, -1e-300, float("nan"), float("inf")]),
                  st.floats(), TEXT, st.sampled_from(["", "../../x", "a" * 300, "/dev/zero"]),
                  st.lists(st.integers(min_value=-3, max_value=2**40), max_size=9),
                  st.dictionaries(st.sampled_from(["min", "opt", "max", "atol", "x"]), INT64, max_size=3))


def config_folder(tmp_path):
    (tmp_path / "ref").mkdir(exist_ok=True)
    for name in FILES:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def test_the_base_config_of_the_key_family_loads(tmp_path):
    (spec,) = load_config(write_config(config_folder(tmp_path), {"models": [base_model()]}))
    assert spec.max_batch == 8 and spec.inputs["x"].profile[2] == (8, 4)


@pytest.mark.parametrize("key", KEYS, ids=lambda k: ".".join(map(str, k)))
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=WRONG)
def test_every_config_key_with_a_wrong_or_out_of_range_value_loads_or_is_one_line_naming_it(tmp_path, key, value):
    model = base_model()
    table = model
    for k in key[:-1]:
        table = table[k]
    table[key[-1]] = value
    path = write_config(config_folder(tmp_path), {"models": [model]})
    box = within(20, load_config, path)
    if "error" not in box:
        return  # a value the schema allows (e.g. another float tolerance)
    err = box["error"]
    assert isinstance(err, ConfigError), f"{key} = {value!r}: {type(err).__name__}: {err}"
    text = str(err)
    assert "\n" not in text and text.startswith(str(path)), text
    assert any(k in text for k in key if isinstance(k, str)), (key, text)  # the key, its table or its input


@pytest.mark.parametrize(("key", "value", "words"), [
    ("max_batch", 10**9, "expected at most 65536"),
    ("name", "a" * 300, "expected at most 64 characters"),
    ("name", "../../evil name", "key 'name': expected a value matching"),
    ("name", ".hidden", "key 'name'"),
])
def test_the_issues_config_values_are_refused_up_front(tmp_path, key, value, words):
    path = write_config(config_folder(tmp_path), {"models": [dict(base_model(), **{key: value})]})
    with pytest.raises(ConfigError, match=f"key '{key}'") as err:
        load_config(path)
    assert words in str(err.value)


def test_a_batch_too_big_for_memory_names_max_batch_the_limit_and_the_variable(tmp_path):
    model = dict(base_model(), max_batch=65536)
    model["inputs"]["x"] = {"shape": [-1, 1048576], "dtype": "float64", "range": [-1.0, 1.0]}
    with pytest.raises(ConfigError, match=r"key 'max_batch': 65536 rows of \d+ bytes each .* over the 1024 MB "
                                          r"limit .*PARITYGATE_MAX_FEED_MB"):
        load_config(write_config(config_folder(tmp_path), {"models": [model]}))


@pytest.mark.parametrize("special", sorted(SPECIALS))
@pytest.mark.parametrize("key", ["onnx", "calibration", "engines.fp32"])
def test_a_special_file_a_config_key_names_is_one_line_naming_the_key(tmp_path, key, special):
    folder = config_folder(tmp_path)
    target = folder / "special"
    {"fifo": lambda: os.mkfifo(target), "folder": target.mkdir, "loop": lambda: os.symlink(target, target),
     "device": lambda: os.symlink("/dev/zero", target)}[special]()
    model = base_model()
    table, leaf = (model["engines"], "fp32") if key == "engines.fp32" else (model, key)
    table[leaf] = "special"
    box = within(20, load_config, write_config(folder, {"models": [model]}))
    assert isinstance(box.get("error"), ConfigError), box
    assert f"key '{key}'" in str(box["error"]) and SPECIALS[special] in str(box["error"])


def test_an_npz_that_unpacks_past_the_limit_is_refused_before_it_is_unpacked(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_MAX_NPZ_MB", "1")
    path = place(tmp_path, "input set")
    np.savez_compressed(path, x=np.zeros((300_000, 1), np.float32))  # 1.2 MB of zeros, a few kB compressed
    assert path.stat().st_size < 2**20
    one_line(read("input set", path), "input set", path.name, "unpacks to 1.1 MB, over the 1 MB limit",
             "PARITYGATE_MAX_NPZ_MB=<MB>")
