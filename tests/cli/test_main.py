"""paritygate.cli.main: the ``paritygate`` command's conventions (--help, --version, pytest's exit codes) and the
``report`` re-render. ``init`` and ``run`` are exercised in tests/cli/test_init.py and tests/test_packaging.py."""

import json

import pytest

from paritygate import __version__
from paritygate.cli.main import USAGE, main


def test_version_and_help_exit_zero(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"paritygate {__version__}"
    for argv in (["--help"], ["init", "--help"], ["run", "--help"], ["replay", "--help"], ["report", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
    assert "Arguments after CONFIG" in capsys.readouterr().out


def test_python_dash_m_paritygate_is_the_command():
    """``python -m paritygate`` runs the same ``main`` (it once called the ``paritygate.cli.main`` module itself)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "paritygate", "--version"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert (done.returncode, done.stdout.strip()) == (0, f"paritygate {__version__}"), done.stderr


def test_run_help_lists_the_suites_options(capsys):
    """Not only --report: every --parity-* option, as pytest --help lists the plugin's group (issue 41)."""
    import re
    from pathlib import Path

    plugin = Path(__file__).resolve().parents[2] / "plugins" / "paritygate" / "plugin.py"
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    options = re.findall(r'addoption\("(--parity-[a-z0-9-]+)"', plugin.read_text())
    assert len(options) >= 15 and [o for o in options if o not in out] == [], out
    assert "paritygate: TF -> ONNX -> TensorRT parity" in out and "are passed on to pytest" in out


@pytest.mark.parametrize("argv", [[], ["bogus"], ["init"], ["report", "a.json", "--unknown"]])
def test_usage_errors_exit_like_pytest(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == USAGE == int(pytest.ExitCode.USAGE_ERROR)
    assert "error:" in capsys.readouterr().err


def test_run_and_report_name_a_missing_or_wrong_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.toml")]) == USAGE
    assert "nope.toml: cannot read config file: file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["report", str(bad)]) == USAGE
    assert "bad.json: cannot read JSON report: not valid JSON" in capsys.readouterr().err
    bad.write_text("[]")
    assert main(["report", str(bad)]) == USAGE
    assert "not a parity report" in capsys.readouterr().err


def test_report_rerenders_markdown_and_html(tmp_path):
    data = {"schema": 1, "environment": {"python": "3.11"}, "runtime": "onnxruntime", "config": "x.toml",
            "device_class": "cpu", "artifact_cache": {"builds": 0, "hits": 0},
            "checks": [{"model": "m", "precision": "fp32", "check": "matches_reference", "status": "fail",
                        "details": {"message": "output 'y' differs"}}]}
    source = tmp_path / "parity-report.json"
    source.write_text(json.dumps(data))
    assert main(["report", str(source), "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "parity-report.md").read_text()
    assert "matches_reference" in md and "fail" in md
    assert (tmp_path / "out" / "parity-report.html").read_text().lstrip().lower().startswith("<!doctype html")


# -- issue 33: bad input to the CLI is one error line, never a traceback ---------------------------------
def _report_json(tmp_path, how):
    path = tmp_path / f"{how}.json"
    if how == "sparse 2.3 GB":
        with open(path, "wb") as f:
            f.truncate(2_300_000_000)
    else:
        path.write_text({"schema 99": '{"schema": 99, "checks": []}', "junk records": '{"schema": 1, "checks": '
                         '[{"model": 1}, 5]}', "deep nesting": "[" * 100_000 + "]" * 100_000,
                         "details not an object": '{"schema": 1, "checks": [{"model": "m", "precision": null, '
                         '"check": "c", "status": "pass", "details": 5}]}'}[how])
    return path


@pytest.mark.parametrize(("how", "words"), [
    ("schema 99", "parity report has schema version 99; this paritygate reads schema version(s) 1"),
    ("junk records", "checks[0]: a check record needs"),
    ("details not an object", "checks[0]: "),
    ("deep nesting", "JSON nested too deep to read"),
    ("sparse 2.3 GB", "over the 256 MB limit for json files (default 256); raise it with PARITYGATE_MAX_JSON_MB"),
])
def test_report_on_a_bad_json_is_one_error_line(tmp_path, capsys, how, words):
    path = _report_json(tmp_path, how)
    assert main(["report", str(path)]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"paritygate report: error: {path}: ") and words in err, err
    assert not (tmp_path / "parity-report.md").exists()


def test_replay_takes_check_and_runtime_as_documented(tmp_path, capsys):
    """``paritygate replay F --check determinism`` was "unrecognized arguments"; now it reaches the reproducer."""
    assert main(["replay", str(tmp_path / "r.npz"), "--check", "determinism", "--runtime", "onnxruntime"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "r.npz: not a paritygate reproducer" in err, err


@pytest.mark.parametrize(("option", "words"), [
    (["--max-batch", "-1"], "--max-batch -1: expected at least 1, got -1"),
    (["--max-batch", "1000000000"], "--max-batch 1000000000: expected at most 65536"),
    (["--name", "../../evil name"], "--name '../../evil name': expected a value matching"),
    (["--name", "n" * 300], "expected at most 64 characters"),
])
def test_init_refuses_a_bad_option_before_it_writes_anything(tmp_path, capsys, option, words):
    (tmp_path / "ref").mkdir()
    out = tmp_path / "parity.toml"
    assert main(["init", str(tmp_path / "ref"), "-o", str(out), *option]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("paritygate init: error: ") and words in err, err
    assert list(tmp_path.iterdir()) == [tmp_path / "ref"]


def test_init_on_a_fifo_is_one_line_not_a_hang(tmp_path, capsys):
    import os

    from tests.test_files import within

    os.mkfifo(tmp_path / "model.keras")
    box = within(30, main, ["init", str(tmp_path / "model.keras"), "-o", str(tmp_path / "p.toml")])
    assert box == {"value": USAGE}
    assert "model.keras: cannot read the reference" in capsys.readouterr().err


def test_an_internal_error_is_one_line_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    from paritygate.cli import main as cli

    def broken(args, extra):
        raise KeyError("environment")  # a bug of paritygate's (issue 33's report on schema 99 was one)

    monkeypatch.setattr(cli, "_report", broken)
    assert main(["report", "x.json"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error KeyError: 'environment'" in err and "--debug" in err
    with pytest.raises(KeyError):
        main(["--debug", "report", "x.json"])


def test_init_with_a_fifo_as_the_onnx_is_one_line_before_the_model_loads(tmp_path, capsys):
    import os

    from tests.test_files import within

    (tmp_path / "ref").mkdir()
    os.mkfifo(tmp_path / "model.onnx")
    box = within(30, main, ["init", str(tmp_path / "ref"), "--onnx", str(tmp_path / "model.onnx"), "-o",
                            str(tmp_path / "p.toml")])
    assert box == {"value": USAGE}
    assert "model.onnx: cannot read ONNX model: it is a FIFO (named pipe), expected a regular file" in \
        capsys.readouterr().err


# -- issue 38: reports from anywhere, written only through a new file; the command line's bad input -----------
def _report(tmp_path, name="parity-report.json", **fields):
    data = {"schema": 1, "checks": [{"model": "m", "precision": "fp32", "check": "matches_reference",
                                     "status": "pass", "details": {}}], **fields}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_report_replaces_a_planted_symlink_and_never_writes_its_target(tmp_path):
    source, victim = _report(tmp_path), tmp_path / "victim"
    victim.write_text("keep")
    for name in ("parity-report.md", "parity-report.html"):
        (tmp_path / name).symlink_to(victim)
    assert main(["report", str(source)]) == 0
    assert victim.read_text() == "keep"
    assert not (tmp_path / "parity-report.md").is_symlink() and "Parity report" in (tmp_path / "parity-report.md").read_text()


def test_report_into_an_unwritable_folder_is_one_line(tmp_path, capsys):
    source = _report(tmp_path)
    (tmp_path / "file").write_text("")
    for argv in (["report", str(source), "--out", str(tmp_path / "file" / "out")],
                 ["report", str(source), str(_report(tmp_path, "b.json", checks=[])), "--out",
                  str(tmp_path / "file")]):
        assert main(argv) == USAGE
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot write the report there" in err and "file" in err, err


def test_a_wrong_typed_record_is_one_line_naming_the_record_and_field(tmp_path, capsys):
    source = _report(tmp_path, checks=[{"model": "m", "precision": None, "check": "c", "status": "fail", "details": {
        "outputs": [{"output": "y", "worst": {"reference": {"<img>": 1}}}]}}])
    assert main(["report", str(source)]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checks[0].details.outputs[0].worst.reference: expected a number" in err, err


def test_an_interrupted_report_is_rerendered_as_interrupted_and_a_shard_given_twice_is_refused(tmp_path, capsys):
    source = _report(tmp_path, status="interrupted", interrupted={"selected": 9, "recorded": 1})
    assert main(["report", str(source)]) == 0
    assert (tmp_path / "parity-report.md").read_text().splitlines()[2].startswith("**Verdict: INTERRUPTED**")
    assert "<div class=word>INTERRUPTED</div>" in (tmp_path / "parity-report.html").read_text()
    copy = tmp_path / "copy.json"
    copy.write_text(source.read_text())
    for twice in ([source, source], [source, tmp_path / ".." / tmp_path.name / source.name], [source, copy]):
        assert main(["report", *map(str, twice), "--out", str(tmp_path / "merged")]) == USAGE
        err = capsys.readouterr().err
        assert "given twice" in err and "give each shard's report once" in err, err
    assert not (tmp_path / "merged").exists()


def test_init_into_an_unwritable_place_is_one_line_before_the_model_loads(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main(["init", str(tmp_path / "missing_model"), "-o", str(tmp_path / "file" / "parity.toml")]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'file'} is a file, not a folder" in err, err


@pytest.mark.tf
def test_init_on_a_keras_layer_name_tensorflow_rejects_is_one_line_without_colour_codes(tmp_path, capsys):
    keras = pytest.importorskip("keras")
    x = keras.Input((3,), name="x")
    keras.Model(x, keras.layers.Dense(2, name="a b!<")(x)).save(tmp_path / "m.keras")
    assert main(["init", str(tmp_path / "m.keras"), "-o", str(tmp_path / "parity.toml")]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TensorFlow cannot trace the Keras model" in err and "\x1b" not in err, err
    assert "'a b!<' is not a valid scope name" in err


def test_run_starts_pytest_with_no_unnamed_folder_importable():
    import sys

    from paritygate.cli.main import safe_python

    command = safe_python()
    assert command[0] == sys.executable
    if sys.version_info >= (3, 11):
        assert command[1:] == ["-P", "-m", "pytest"]
    else:
        assert command[1] == "-c" and "sys.path.pop(0)" in command[2]
