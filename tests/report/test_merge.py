"""paritygate.report.merge and ``paritygate report A.json B.json --out DIR``: the shard reports of one run (each
written by a real ParitySession) become one report with one verdict; overlapping shards or shards of different
runtimes are refused, naming the files."""

import json

import numpy as np
import pytest

from paritygate.cli.main import FAILED, OK, USAGE, main
from paritygate.context import RunOptions
from paritygate.judge.parity import compare
from paritygate.report import write_report
from paritygate.report.merge import MergeError, merge_reports
from paritygate.session import ParitySession
from tests.conftest import record_of, toy_spec

X = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)


def _shard(folder, rows, runtime="onnxruntime"):
    """A shard's parity-report.json: ``rows`` are (model, precision, check, status)."""
    s = ParitySession(RunOptions(config_path=folder / "parity.toml", runtime=runtime, reference_cache=True))
    spec = toy_spec()
    for model, precision, check, status in rows:
        cand = 5 * X if status == "pass" else 5 * X + 1e-3
        s.record(record_of(model, precision, check, status, compare(spec, "fp32", {"y": 5 * X}, {"y": cand},
                                                          compare_task=False).to_dict()["details"]))
    return write_report(s, folder / "report") / "parity-report.json"


def test_shards_merge_into_one_report_and_one_verdict(tmp_path, capsys):
    a = _shard(tmp_path / "a", [("alpha", "fp32", "matches_reference", "pass"), ("alpha", "fp16", "matches_reference", "pass")])
    b = _shard(tmp_path / "b", [("beta", "fp32", "matches_reference", "pass")])
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "merged")]) == OK
    out = capsys.readouterr().out
    assert "2 shards, 3 checks: 3 pass; verdict PASS" in out
    data = json.loads((tmp_path / "merged" / "parity-report.json").read_text())
    assert [(c["model"], c["precision"]) for c in data["checks"]] == [("alpha", "fp16"), ("alpha", "fp32"), ("beta", "fp32")]
    assert [s["checks"] for s in data["shards"]] == [2, 1] and data["environment_differs"] == []
    assert set(data["reference_cache"]) >= {"computed", "reused", "live"} and data["time"]["processes"] == 2
    assert "Verdict: PASS" in (tmp_path / "merged" / "parity-report.md").read_text()
    c = _shard(tmp_path / "c", [("gamma", "int8", "property_parity", "fail")])
    assert main(["report", str(a), str(b), str(c), "--out", str(tmp_path / "merged3")]) == FAILED
    assert "verdict FAIL" in capsys.readouterr().out
    assert "Verdict: FAIL" in (tmp_path / "merged3" / "parity-report.md").read_text()


def test_overlapping_shards_and_mixed_runtimes_are_refused(tmp_path, capsys):
    a = _shard(tmp_path / "a", [("alpha", "fp32", "matches_reference", "pass")])
    again = _shard(tmp_path / "again", [("alpha", "fp32", "matches_reference", "fail")])
    with pytest.raises(MergeError, match=r"alpha fp32 matches_reference is in .*a/report.* and in .*again/report"):
        merge_reports([a, again])
    trt = _shard(tmp_path / "trt", [("beta", "fp32", "matches_reference", "pass")], runtime="tensorrt")
    assert main(["report", str(a), str(trt), "--out", str(tmp_path / "m")]) == USAGE
    assert "different candidate runtimes" in capsys.readouterr().err
    assert main(["report", str(a), str(trt)]) == USAGE
    assert "needs --out DIR" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[]")
    assert main(["report", str(a), str(tmp_path / "bad.json"), "--out", str(tmp_path / "m")]) == USAGE
    assert "bad.json: not a parity report" in capsys.readouterr().err


def test_environments_that_differ_are_listed(tmp_path):
    a = _shard(tmp_path / "a", [("alpha", "fp32", "matches_reference", "pass")])
    b = _shard(tmp_path / "b", [("beta", "fp32", "matches_reference", "pass")])
    data = json.loads(b.read_text())
    data["environment"]["onnxruntime"] = "0.0.1"
    b.write_text(json.dumps(data))
    merged = merge_reports([a, b])
    assert len(merged["environment_differs"]) == 1 and "onnxruntime" in merged["environment_differs"][0]


def test_a_run_split_with_parity_shard_merges_back_into_the_whole(pytester, toy_saved_model, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from pathlib import Path

    from tests.conftest import make_onnx, write_config

    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    make_onnx(pytester.path / "toy.onnx")
    table = {"reference": str(toy_saved_model), "onnx": "toy.onnx", "precisions": ["fp32"], "max_batch": 2,
             "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    cfg = write_config(pytester.path, {"models": [{"name": n, **table} for n in ("m1", "m2", "m3")]})
    parity = Path(__file__).resolve().parents[2] / "conformance" / "test_parity.py"
    reports = []
    for k in (1, 2):
        result = pytester.runpytest(str(parity), f"--parity-config={cfg}", f"--parity-shard={k}/2",
                                               f"--parity-report={tmp_path / f's{k}'}", "-k", "batch_size",
                                               "-p", "no:cacheprovider", "-p", "no:xdist")
        assert result.ret == 0, result.stdout.str()[-2000:]
        reports.append(tmp_path / f"s{k}" / "parity-report.json")
    models = [sorted(c["model"] for c in json.loads(r.read_text())["checks"]) for r in reports]
    assert models == [["m1", "m3"], ["m2"]]
    assert main(["report", *map(str, reports), "--out", str(tmp_path / "all")]) == OK
    assert len(json.loads((tmp_path / "all" / "parity-report.json").read_text())["checks"]) == 3
    bad = pytester.runpytest(str(parity), f"--parity-config={cfg}", "--parity-shard=3/2")
    assert bad.ret == 4 and "expected K/N with 1 <= K <= N" in bad.stderr.str()
