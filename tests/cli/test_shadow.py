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
    assert "finding shadow_dead_letters: 2 record(s) could not be judged and went to the dead-letter output" in out
    assert "shadow_top1: INCONCLUSIVE" in out and "more examples at the observed rate would decide" in out
    data = json.loads((reports[0] / "parity-report.json").read_text())
    assert {c["check"] for c in data["checks"]} == {"shadow_data", "shadow_elementwise", "shadow_top1"}
    assert data["findings"][0]["kind"] == "shadow_dead_letters"
    assert "shadow_top1" in (reports[0] / "parity-report.md").read_text()
    # one report per precision over the same data: their checks side by side, one shadow_data
    assert main(["report", *(str(r / "parity-report.json") for r in reports), "--out", str(tmp_path / "merged")]) == 1
    merged = json.loads((tmp_path / "merged" / "parity-report.json").read_text())
    assert {(c["precision"], c["check"]) for c in merged["checks"]} == {(None, "shadow_data")} | {
        (p, c) for p in ("fp16", "fp32") for c in ("shadow_elementwise", "shadow_top1")}
    # another run over the same file at the same precision (here: its report with fewer worst examples kept):
    # its records would count twice
    again = json.loads((reports[0] / "parity-report.json").read_text())
    for c in again["checks"]:
        (c["details"].get("shadow") or {}).get("worst", [None]).pop()
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "parity-report.json").write_text(json.dumps(again))
    capsys.readouterr()
    assert main(["report", str(reports[0] / "parity-report.json"), str(tmp_path / "copy" / "parity-report.json"),
                 "--out", str(tmp_path / "twice")]) == 4
    assert "was read by" in capsys.readouterr().err


def test_shadow_usage_errors_name_what_is_wrong(bundled_config, tmp_path, capsys):
    assert main(["shadow", bundled_config, "--data", str(tmp_path / "*.tfrecord"), "--report", str(tmp_path)]) == 4
    assert "name one with --model" in capsys.readouterr().err
    assert main(["shadow", bundled_config, "--model", "mobilenet", "--data", str(tmp_path / "*.tfrecord"),
                 "--report", str(tmp_path)]) == 4
    assert "no file matches" in capsys.readouterr().err


def test_shards_of_the_traffic_merge_into_one_set_of_intervals(bundled_config, tmp_path):
    """Two runs over disjoint halves of the traffic: the merged report's counts are the sums, gated once."""
    from paritygate.models.bundled import fixtures_dir
    from paritygate.models.config import load_config
    from paritygate.shadow.synthetic import write_tfrecords

    spec = next(m for m in load_config(bundled_config) if m.name == "mobilenet")
    paths = write_tfrecords(tmp_path / "data", spec, fixtures_dir() / "inputs" / "mobilenet_heldout.npz", 40, shards=2)
    reports = [tmp_path / f"r{i}" for i in range(2)]
    for path, report in zip(paths, reports):
        main(["shadow", bundled_config, "--model", "mobilenet", "--data", str(path), "--precisions", "fp32",
              "--report", str(report), "--slice-feature", "label"])
    main(["report", *(str(r / "parity-report.json") for r in reports), "--out", str(tmp_path / "merged")])
    merged = json.loads((tmp_path / "merged" / "parity-report.json").read_text())
    top1 = next(c for c in merged["checks"] if c["check"] == "shadow_top1")["details"]["shadow"]
    parts = [next(c for c in json.loads((r / "parity-report.json").read_text())["checks"]
                  if c["check"] == "shadow_top1")["details"]["shadow"] for r in reports]
    assert top1["examples"] == sum(p["examples"] for p in parts) == 40
    assert sum(g["examples"] for g in top1["groups"] if g["kind"] == "class") == 40
    assert merged["shadow"]["read"] == 40 and len(merged["shadow"]["runs"]) == 2
    data = next(c for c in merged["checks"] if c["check"] == "shadow_data")["details"]["shadow"]
    assert data["read"] == 40 and sorted(data["files"]) == sorted(str(p) for p in paths)


def test_data_that_cannot_serve_a_verdict_is_an_error_with_a_report(bundled_config, tmp_path, capsys):
    """Every record a dead letter (here: an empty TFRecord file and a file of garbage): exit 4, one line, and a
    report whose shadow_data check is an error (a KeyError: 'fp32', exit 3 and no report before)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "empty.tfrecord").write_bytes(b"")
    (tmp_path / "data" / "junk.tfrecord").write_bytes(b"not a tfrecord at all, just bytes")
    rc = main(["shadow", bundled_config, "--model", "mobilenet", "--data", str(tmp_path / "data" / "*.tfrecord"),
               "--precisions", "fp32", "--report", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert rc == 4 and "shadow_data: ERROR no record could be judged: all 1 record(s) of 2 file(s)" in out
    data = json.loads((tmp_path / "r" / "parity-report.json").read_text())
    by_check = {c["check"]: c for c in data["checks"]}
    assert by_check["shadow_data"]["status"] == "error" and by_check["shadow_judged"]["status"] == "error"
    assert "Verdict: FAIL" in (tmp_path / "r" / "parity-report.md").read_text()


def test_a_key_feature_that_repeats_is_an_error(bundled_config, tmp_path, capsys):
    from paritygate.models.bundled import fixtures_dir
    from paritygate.models.config import load_config
    from paritygate.shadow.synthetic import write_tfrecords

    spec = next(m for m in load_config(bundled_config) if m.name == "mobilenet")
    write_tfrecords(tmp_path / "data", spec, fixtures_dir() / "inputs" / "mobilenet_heldout.npz", 20, shards=1)
    rc = main(["shadow", bundled_config, "--model", "mobilenet", "--data", str(tmp_path / "data" / "*.tfrecord"),
               "--precisions", "fp32", "--key-feature", "label", "--report", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert rc == 4 and "--key-feature 'label':" in out and "records repeat a key another record holds" in out
