"""Bad input never becomes a verdict: every file the suite reads, truncated, empty or random bytes, stops the run
before any check with exit code 4 and one ``ERROR:`` line naming the file; pytest never crashes (INTERNALERROR)
and prints no traceback. The lines come before pytest's summary, and the report (problems, no checks) is written.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")  # before pytester snapshots sys.modules: re-importing onnx's extension aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from tests.conftest import make_onnx, write_config

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance" / "test_parity.py"
RNG = np.random.default_rng(18)
X = {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}
GOOD_HANDLER = "def make(min_batch_size, max_batch_size):\n    raise ValueError('never reached')\n"


def spoil(path, how):
    """``path`` (an existing file) truncated to half, emptied, or replaced by random bytes of its size."""
    data = Path(path).read_bytes()
    Path(path).write_bytes({"truncated": data[:len(data) // 2], "empty": b"",
                            "random": RNG.bytes(max(len(data), 64))}[how])
    return Path(path)


def table(name, reference, **fields):
    return {"name": name, "reference": str(reference), "precisions": ["fp32"], "max_batch": 2, "inputs": X,
            "onnx": "toy.onnx", **fields}


def run(pytester, config, *args, report=None):
    report = report or pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE), f"--parity-config={config}", "-p", "no:xdist", "-p",
                                "no:cacheprovider", f"--parity-report={report}", *args)
    return result, report


def stopped(result, expected):
    """The ERROR lines, after asserting exit 4, no traceback, no check, and one line per (model, file) expected."""
    output = result.outlines + result.errlines
    text = "\n".join(output)
    errors = [line for line in output if line.startswith("ERROR: ")]
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "INTERNALERROR" not in text and "Traceback" not in text and "PASSED" not in text, text
    assert len(errors) == len(expected), text
    for words in expected:
        assert sum(all(w in line for w in words) for line in errors) == 1, (words, text)
    return errors


def saved_model_copy(src, dest):
    shutil.copytree(src, dest)
    return dest


# -- the issue's six cases, each one line naming the file --------------------------------------------------
def test_each_bad_input_stops_before_any_check_with_one_line_naming_the_file(pytester, toy_saved_model,
                                                                               parity_cache):
    folder = pytester.path
    make_onnx(folder / "toy.onnx")
    inputs = folder / "inputs"
    inputs.mkdir()
    (inputs / "random_bytes.npz").write_bytes(RNG.bytes(2000))
    np.savez(inputs / "wrong_shape.npz", x=np.zeros((4, 3), np.float32))
    np.savez(inputs / "short_labels.npz", x=np.zeros((4, 1), np.float32), __labels__=np.arange(3))
    np.savez(folder / "calib_nan.npz", x=np.array([[0.5], [np.nan]], np.float32))
    truncated = saved_model_copy(toy_saved_model, folder / "truncated_sm")
    spoil(truncated / "saved_model.pb", "truncated")
    config = write_config(folder, {"models": [
        table("random_bytes", toy_saved_model), table("wrong_shape", toy_saved_model),
        table("short_labels", toy_saved_model),
        table("calib_nan", toy_saved_model, precisions=["fp32", "int8"], calibration="calib_nan.npz"),
        table("truncated_pb", truncated)]})
    result, report = run(pytester, config)
    stopped(result, [
        ("model 'random_bytes'", f"{inputs / 'random_bytes.npz'}: cannot read input set: not an .npz archive"),
        ("model 'wrong_shape'", f"{inputs / 'wrong_shape.npz'}: array 'x' is float32[4, 3], expected float32 ['N', 1]"),
        ("model 'short_labels'", (f"{inputs / 'short_labels.npz'}: array '__labels__' is int64[3], expected one label "
                                 "per row: [4]")),
        ("model 'calib_nan'", "key 'calibration'", f"{folder / 'calib_nan.npz'}: array 'x' holds 1 non-finite value",
         "inputs.x.range"),
        ("model 'truncated_pb'", "key 'reference'", str(truncated)),
    ])
    data = json.loads((report / "parity-report.json").read_text())
    assert data["checks"] == [] and len(data["validation"]["problems"]) == 5


def test_a_random_bytes_baseline_stops_the_run_and_the_report_says_why(pytester, toy_saved_model):
    make_onnx(pytester.path / "toy.onnx")
    config = write_config(pytester.path, {"models": [table("m", toy_saved_model)]})
    baseline = pytester.path / "baseline.json"
    baseline.write_bytes(RNG.bytes(500))
    result, report = run(pytester, config, f"--parity-baseline={baseline}")
    [line] = stopped(result, [(f"--parity-baseline={baseline}: cannot read --parity-baseline (a parity-report.json)",)])
    data = json.loads((report / "parity-report.json").read_text())
    assert data["checks"] == [] and data["validation"]["problems"] == [line.removeprefix("ERROR: ")]


def test_error_lines_come_before_pytests_summary(tmp_path, toy_saved_model, parity_cache):
    """One process, stdout and stderr in one stream, as a terminal or a CI log shows them."""
    make_onnx(tmp_path / "toy.onnx")
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "m.npz").write_bytes(b"")
    config = write_config(tmp_path, {"models": [table("m", toy_saved_model)]})
    env = {**os.environ, "PARITYGATE_CACHE": str(parity_cache)}
    out = subprocess.run([sys.executable, "-m", "pytest", str(CONFORMANCE), f"--parity-config={config}", "-p",
                          "no:xdist", "-p", "no:cacheprovider", f"--rootdir={tmp_path}"], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, check=False)
    lines = out.stdout.splitlines()
    assert out.returncode == 4, out.stdout
    first_error = next(i for i, line in enumerate(lines) if line.startswith("ERROR: "))
    summary = next(i for i, line in enumerate(lines) if line.startswith("paritygate: validation found 1 problem"))
    assert first_error < summary, out.stdout
    assert lines[-1].startswith("=") and "no tests ran" in lines[-1], out.stdout  # pytest's own summary line last


# -- issue 33: the rows that stop a run before validation, and the report's first screen -------------------
def _issue_33_case(folder, toy_saved_model, case):
    """(config, extra pytest args, words of its one ERROR line) for one row of issue 33's table."""
    make_onnx(folder / "toy.onnx")
    good = table("m", toy_saved_model)
    if case in ("config fifo", "config /dev/zero"):
        config = folder / "fifo.toml"
        os.mkfifo(config) if case == "config fifo" else os.symlink("/dev/zero", config)
        return config, [], (str(config), "cannot read config file", "FIFO" if "fifo" in case else "character device")
    if case == "onnx fifo":
        os.mkfifo(folder / "pipe.onnx")
        return write_config(folder, {"models": [dict(good, onnx="pipe.onnx")]}), [], (
            "key 'onnx'", "pipe.onnx", "FIFO (named pipe), expected a regular file")
    if case == "shard 2/2":
        return write_config(folder, {"models": [good]}), ["--parity-shard=2/2"], (
            "--parity-shard=2/2", "holds 1 model(s)", "expected at most 1 shards")
    if case.startswith("expectations"):
        entry = {"unknown model": 'model = "nope"\ncheck = "determinism"', "misspelled check":
                 'model = "m"\ncheck = "determinsm"'}.get(case.split(": ")[1])
        text = f"[[known_failures]]\n{entry}\nreason = \"r\"\n" if entry else RNG.bytes(300)
        (folder / "expectations.toml").write_bytes(text if isinstance(text, bytes) else text.encode())
        key = {"unknown model": "key 'model': 'nope' is no model", "misspelled check": "key 'check': 'determinsm' is "
               "no check of the suite"}.get(case.split(": ")[1], "cannot read expectations")
        return write_config(folder, {"models": [good]}), [], ("expectations.toml", key)
    field, value, words = {"max_batch 1e9": ("max_batch", 10**9, "expected at most 65536"),
                           "300-character name": ("name", "n" * 300, "expected at most 64 characters")}[case]
    return write_config(folder, {"models": [dict(good, **{field: value})]}), [], (f"key '{field}'", words)


ISSUE_33 = ("config fifo", "config /dev/zero", "onnx fifo", "shard 2/2", "max_batch 1e9", "300-character name",
            "expectations: unknown model", "expectations: misspelled check", "expectations: garbage")


@pytest.mark.parametrize("case", ISSUE_33)
def test_issue_33_rows_stop_with_one_line_and_the_reports_first_screen_says_why(pytester, toy_saved_model, case):
    config, args, words = _issue_33_case(pytester.path, toy_saved_model, case)
    result, report = run(pytester, config, *args)
    [line] = stopped(result, [words])
    problem = line.removeprefix("ERROR: ")
    assert json.loads((report / "parity-report.json").read_text())["validation"]["problems"] == [problem]
    markdown = (report / "parity-report.md").read_text().splitlines()
    assert markdown[2].startswith("**Verdict: STOPPED before any check** (exit code 4): 1 problem(s)"), markdown[:6]
    from paritygate.common.escape import md_text

    assert all(md_text(w) in markdown[4] for w in words), markdown[:6]  # each word as the escaping layer writes it
    html = (report / "parity-report.html").read_text()
    header = html[html.index("<header id=verdict"):html.index("</header>")]
    assert "<div class=word>STOPPED</div>" in header and "1 problem(s)" in header, header
    import html as html_module

    assert html_module.escape(problem) in header, header


# -- every file kind, truncated, empty and random ----------------------------------------------------------
HOW = ("truncated", "empty", "random")


def _model_files(folder, toy_saved_model):
    """Per model of one config: (table, the spoiled file, words its line must hold)."""
    import tensorflow as tf

    models = []
    for how in HOW:
        for part in ("saved_model.pb", "variables/variables.index", "variables/variables.data-00000-of-00001"):
            sm = saved_model_copy(toy_saved_model, folder / f"sm_{len(models)}")
            spoil(sm / part, how)
            models.append((table(f"sm_{len(models)}", sm), str(sm)))
        inp = tf.keras.Input((1,), name="x")
        keras_model = tf.keras.Model(inp, tf.keras.layers.Dense(1)(inp))
        keras_model.save(folder / f"k_{how}.keras")
        models.append((table(f"keras_{how}", spoil(folder / f"k_{how}.keras", how)), str(folder / f"k_{how}.keras")))
        h5 = folder / f"k_{how}.h5"
        h5.write_bytes(b"\x89HDF\r\n\x1a\n" + RNG.bytes(4000))  # an HDF5 signature, then no HDF5 file
        models.append((table(f"h5_{how}", spoil(h5, how)), str(h5)))
        make_onnx(folder / f"o_{how}.onnx")
        spoil(folder / f"o_{how}.onnx", how)
        models.append((table(f"onnx_{how}", toy_saved_model, onnx=f"o_{how}.onnx"), str(folder / f"o_{how}.onnx")))
        for kind in ("", "_heldout"):
            name = f"set{kind}_{how}"
            np.savez(folder / "inputs" / f"{name}{kind}.npz", x=np.zeros((4, 1), np.float32))
            models.append((table(name, toy_saved_model), str(folder / "inputs" / f"{name}{kind}.npz")))
            spoil(folder / "inputs" / f"{name}{kind}.npz", how)
        np.savez(folder / f"calib_{how}.npz", x=np.zeros((4, 1), np.float32))
        models.append((table(f"calib_{how}", toy_saved_model, calibration=f"calib_{how}.npz"),
                       str(folder / f"calib_{how}.npz")))
        spoil(folder / f"calib_{how}.npz", how)
        (folder / f"handler_{how}.py").write_text(GOOD_HANDLER)
        spoil(folder / f"handler_{how}.py", how)
        models.append((table(f"handler_{how}", toy_saved_model, beam={"handler": f"handler_{how}:make"}),
                       f"'handler_{how}'"))
        np.savez(folder / "goldens" / f"golden_{how}.npz", **{"input:x": np.zeros((4, 1), np.float32)})
        spoil(folder / "goldens" / f"golden_{how}.npz", how)
        models.append((table(f"golden_{how}", toy_saved_model), str(folder / "goldens" / f"golden_{how}.npz")))
    return models


def test_every_model_file_kind_truncated_empty_or_random_is_one_line(pytester, toy_saved_model, parity_cache):
    pytest.importorskip("apache_beam")
    folder = pytester.path
    make_onnx(folder / "toy.onnx")
    (folder / "inputs").mkdir()
    (folder / "goldens").mkdir()
    models = _model_files(folder, toy_saved_model)
    manifest = {"schema": 1, "models": {  # each spoiled golden's own hash: its bytes are read, not just hashed
        t["name"]: {"sha256": hashlib.sha256(Path(f).read_bytes()).hexdigest(), "inputs": {}, "outputs": {}}
        for t, f in models if t["name"].startswith("golden_")}}
    (folder / "goldens" / "manifest.json").write_text(json.dumps(manifest))
    config = write_config(folder, {"models": [t for t, _ in models]})
    result, report = run(pytester, config)
    stopped(result, [(f"model '{t['name']}'", words) for t, words in models])
    assert json.loads((report / "parity-report.json").read_text())["checks"] == []


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("kind", ["parity.toml", "goldens/manifest.json", "baseline.json", "expectations.toml"])
def test_every_run_file_kind_truncated_empty_or_random_is_one_line(pytester, toy_saved_model, parity_cache, kind,
                                                                   how):
    folder = pytester.path
    make_onnx(folder / "toy.onnx")
    (folder / "goldens").mkdir()
    np.savez(folder / "goldens" / "m.npz", **{"input:x": np.zeros((4, 1), np.float32)})
    (folder / "goldens" / "manifest.json").write_text(json.dumps(
        {"schema": 1, "models": {"m": {"sha256": "0" * 64, "inputs": {}, "outputs": {}}}}, indent=1))
    config = write_config(folder, {"models": [table("m", toy_saved_model)]})
    (folder / "baseline.json").write_text(json.dumps({"schema": 1, "checks": []}, indent=1))
    (folder / "expectations.toml").write_text('[[known_failures]]\nmodel = "m"\ncheck = "determinism"\n'
                                              'reason = "a known failure, written out at some length"\n')
    spoil(folder / kind, how)
    if kind != "goldens/manifest.json":  # the valid golden's hash is wrong: fix the entry
        shutil.rmtree(folder / "goldens")
    args = [f"--parity-baseline={folder / 'baseline.json'}"] if kind == "baseline.json" else []
    if kind == "expectations.toml" and how == "empty":  # an empty TOML file is valid: no known failures
        result, _ = run(pytester, config, "-k", "nothing_at_all")
        assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, "\n".join(result.outlines + result.errlines)
        return
    result, _ = run(pytester, config, *args)
    stopped(result, [(str(folder / kind),)])
