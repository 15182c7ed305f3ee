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
