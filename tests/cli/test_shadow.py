"""``paritygate shadow`` end to end, in process: the bundled config's mobilenet over generated TFRecords."""

import json

import pytest

from paritygate.cli.main import main

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.beam]


@pytest.fixture
def bundled_config():
    from paritygate.models.bundled import fixtures_dir, zoo_module

    zoo_module("build").ensure_built()
    return str(fixtures_dir() / "parity.toml")


def test_shadow_writes_a_report_that_merges(bundled_config, tmp_path, capsys):
    from paritygate.models.bundled import fixtures_dir
    from paritygate.models.config import load_config
    from paritygate.shadow.synthetic import write_tfrecords

    spec = next(m for m in load_config(bundled_config) if m.name == "mobilenet")
    write_tfrecords(tmp_path / "data", spec, fixtures_dir() / "inputs" / "mobilenet_heldout.npz", 30, shards=1, bad=2)
    reports = []
    for precision in ("fp32", "fp16"):
        reports.append(tmp_path / precision)
        rc = main(["shadow", bundled_config, "--model", "mobilenet", "--data", str(tmp_path / "data" / "*.tfrecord"),
                   "--precisions", precision, "--report", str(reports[-1]), "--slice-feature", "label"])
        assert rc == 1  # 30 examples cannot bound the flip rate below 1%: inconclusive fails the run
    out = capsys.readouterr().out
    assert "paritygate shadow: read 30 examples" in out
    assert "2 record(s) went to the dead-letter output, not judged" in out
    assert "shadow_top1: INCONCLUSIVE" in out and "more examples at the observed rate would decide" in out
    data = json.loads((reports[0] / "parity-report.json").read_text())
    assert {c["check"] for c in data["checks"]} == {"shadow_elementwise", "shadow_top1"}
    assert data["findings"][0]["kind"] == "shadow_dead_letters"
    assert "shadow_top1" in (reports[0] / "parity-report.md").read_text()
    assert main(["report", *(str(r / "parity-report.json") for r in reports), "--out", str(tmp_path / "merged")]) == 1
    merged = json.loads((tmp_path / "merged" / "parity-report.json").read_text())
    assert {(c["precision"], c["check"]) for c in merged["checks"]} == {
        (p, c) for p in ("fp16", "fp32") for c in ("shadow_elementwise", "shadow_top1")}


def test_shadow_usage_errors_name_what_is_wrong(bundled_config, tmp_path, capsys):
    assert main(["shadow", bundled_config, "--data", str(tmp_path / "*.tfrecord"), "--report", str(tmp_path)]) == 4
    assert "name one with --model" in capsys.readouterr().err
    assert main(["shadow", bundled_config, "--model", "mobilenet", "--data", str(tmp_path / "*.tfrecord"),
                 "--report", str(tmp_path)]) == 4
    assert "no file matches" in capsys.readouterr().err
