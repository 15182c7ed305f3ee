"""paritygate.report: parity-report.json (schema 1), .md and a self-contained .html with plots; through the
plugin (pytester): written also when checks fail, and an unwritable --parity-report fails the run early."""

import json
import platform
import re

import numpy as np
import pytest

from paritygate.context import RunOptions
from paritygate.judge.parity import compare
from paritygate.lazy import dist_version
from paritygate.report import SCHEMA, write_report
from paritygate.report.summary import summary_lines
from paritygate.session import ParitySession
from tests.conftest import record_of, toy_spec, write_config
from tests.report.test_plots import parse, texts

ENV_KEYS = {"python", "tensorflow", "onnxruntime", "tensorrt", "apache-beam", "gpu"}
X = np.linspace(-1, 1, 64, dtype=np.float32).reshape(16, 4)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = ParitySession(RunOptions(config_path=tmp_path_factory.mktemp("cfg") / "parity.toml", runtime="onnxruntime"))
    spec = toy_spec(precisions=("fp32", "fp16"))
    ok = compare(spec, "fp16", {"y": 5 * X}, {"y": (5 * X).astype(np.float16)}, compare_task=False)
    bad = compare(spec, "fp32", {"y": 5 * X}, {"y": 5 * X + 1e-3}, compare_task=False)
    s.record(record_of("toy", "fp16", "parity", "pass", ok.to_dict()["details"]))
    s.record(record_of("toy", "fp32", "parity", "fail", {**bad.to_dict()["details"], "message": "toy fp32: y | z mismatch\nsecond line <b>"}))
    s.record(record_of("zeta", None, "goldens", "skip", {"reason": "no goldens | run --update-goldens"}))
    s.record(record_of("alpha", "fp32", "latency", "pass", {"latency": [{"batch": 1, "p50_ms": 1.0, "p90_ms": 1.5,
                                                               "p99_ms": 2.0, "budget": 3.0,
                                                               "samples_ms": [1.0, 1.2, 2.0]}]}))
    return s


@pytest.fixture(scope="module")
def report(session, tmp_path_factory):
    """The report folder, written once for this module."""
    return write_report(session, tmp_path_factory.mktemp("out") / "report")  # missing folders are made


def _installed(dist):
    return dist_version(dist)


def test_json_report(session, report):
    data = json.loads((report / "parity-report.json").read_text())
    assert data["schema"] == SCHEMA == 1
    assert ENV_KEYS <= set(data["environment"])
    assert data["environment"]["python"] == platform.python_version()
    assert data["environment"]["onnxruntime"] == _installed("onnxruntime")  # None where it is not installed
    assert data["runtime"] == "onnxruntime" and data["config"] == str(session.options.config_path)
    assert data["device_class"] == session.options.device_class
    checks = data["checks"]
    assert [(c["model"], c["precision"], c["check"], c["status"]) for c in checks] == [
        ("alpha", "fp32", "latency", "pass"), ("toy", "fp16", "parity", "pass"), ("toy", "fp32", "parity", "fail"),
        ("zeta", None, "goldens", "skip")]  # sorted by model, precision, check
    for c in checks:
        assert set(c) == {"model", "precision", "check", "status", "details"}
    (y,) = checks[2]["details"]["outputs"]
    assert y["output"] == "y" and y["passed"] is False and y["mismatches"] == 64
    assert y["tolerance"]["source"] and len(y["error_histogram"]["counts"]) == len(y["error_histogram"]["edges"]) - 1


def test_markdown_report(report):
    md = (report / "parity-report.md").read_text()
    assert md.startswith("# Parity report\n\n**Verdict: FAIL**")
    assert "Runtime **onnxruntime**" in md
    assert ("✅ pass: 2 · ❌ fail: 1 · 💥 error: 0 · ❔ inconclusive: 0 · ⏭️ skip: 1 · ⚠️ xfail: 0 · "
            "♻️ regenerated: 0") in md  # every status, zeros included
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| model")]
    table = [r for r in rows if r.count("|") - r.count("\\|") == 7]
    assert [r.split(" | ")[:4] for r in table] == [["| toy", "fp32", "parity", "❌ fail"],  # failures first
                                                   ["| alpha", "fp32", "latency", "✅ pass"],
                                                   ["| toy", "fp16", "parity", "✅ pass"],
                                                   ["| zeta", "—", "goldens", "⏭️ skip"]]
    fail = table[0]
    assert "y \\| z mismatch second line" in fail  # pipes escaped, newlines flattened
    assert "no goldens \\| run --update-goldens" in table[3]
    assert "`y` 64/64 out of atol 1e-05/rtol 1e-05; max abs 0.001" in fail
    assert "## Latency" in md and "| alpha | fp32 | — | 1 | 1.000 | 1.500 | 2.000 | 3.0 | — |" in md
    failures = md[md.index("## Failures"):md.index("## Checks")]
    assert "### ❌ fail: toy fp32 parity" in failures
    assert "```\ntoy fp32: y | z mismatch\nsecond line <b>\n```" in failures  # the full cause, as written
    assert failures.count("- tolerance for `y`: atol 1e-05, rtol 1e-05 (source: tensorflow/python/compiler/tensorrt") == 1


def test_markdown_keeps_full_causes_of_failures_out_of_the_table(tmp_path):
    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    cause = "invalid artifact: " + "x" * 600 + " END OF CAUSE with `backticks` and ``` fences"
    s.record(record_of("long", "fp32", "parity", "error", {"message": cause}))
    s.record(record_of("other", "fp32", "parity", "skip", {"reason": "y" * 1000}))
    md = (write_report(s, tmp_path) / "parity-report.md").read_text()
    (row,) = [line for line in md.splitlines() if line.startswith("| long")]
    assert "x" * 200 in row and "END OF CAUSE" not in row and "(full text under Failures below)" in row
    assert "````\n" + cause + "\n````" in md  # fenced longer than the backticks inside
    (skip,) = [line for line in md.splitlines() if line.startswith("| other")]
    assert "y" * 240 + "… (full text in parity-report.json)" in skip and "y" * 241 not in skip


def test_markdown_puts_nonfinite_counts_before_finite_only_statistics(tmp_path):
    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    ref = np.ones((4, 8), np.float32)
    cand = ref.copy()
    cand.ravel()[:31] = np.nan
    bad = compare(toy_spec(), "fp32", {"y": ref}, {"y": cand}, compare_task=False)
    s.record(record_of("toy", "fp32", "parity", "fail", {**bad.to_dict()["details"], "message": "\n".join(bad.failures)}))
    md = (write_report(s, tmp_path) / "parity-report.md").read_text()
    (row,) = [line for line in md.splitlines() if line.startswith("| toy")]
    assert "`y` 31 NaN in the candidate; 31/32 out of atol 1e-05/rtol 1e-05; finite-only (1/32 elements): " \
           "max abs 0, p99 abs 0, cos 1.00000" in row


def test_html_report_is_self_contained_with_plots(report):
    html = (report / "parity-report.html").read_text()
    assert html.startswith("<!doctype html>")
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html) and "<link" not in html and "<img" not in html
    svgs = [parse(svg) for svg in re.findall(r"<svg .*?</svg>", html, re.DOTALL)]  # finite coordinates, XML
    assert [s.get("aria-label") for s in svgs] == ["y error plots", "latency CDF", "y error plots"]  # page order
    failing = svgs[0]  # toy fp32's card: its tolerance line is labelled and the output named
    assert {"y: |error| of the finite elements", "atol", "error vs |reference|"} <= set(texts(failing))
    assert {"batch 1", "ms (log)", "CDF"} <= set(texts(svgs[1]))
    assert "second line &lt;b&gt;" in html and "<b>Tolerance</b>" in html  # messages escaped, the layout not


def test_html_leads_with_the_verdict_then_the_matrix_then_failures(report):
    html = (report / "parity-report.html").read_text()
    banner = html[html.index("<header id=verdict"):html.index("</header>")]
    assert "<div class=word>FAIL</div>" in banner and "this run fails: 1 fail" in banner
    counts = {s: int(n) for n, s in re.findall(r"<b>(\d+)</b> (\w+)</li>", banner)}
    assert counts == {"pass": 2, "fail": 1, "error": 0, "inconclusive": 0, "skip": 1, "xfail": 0, "regenerated": 0,
                      "findings": 0}
    matrix = html[html.index("<section id=matrix"):html.index("</section>", html.index("<section id=matrix"))]
    assert "<th>fp32</th><th>fp16</th><th>model-level</th>" in matrix  # precisions in policy order
    assert "<a href='#c-toy-fp32-parity'" in matrix and "bg-fail'>fail</span><small>1 fail</small>" in matrix
    order = [html.index(marker) for marker in ("<header id=verdict", "<section id=matrix", "<section id=failing",
                                               "<section id=others", "<section id=skips><details>")]
    assert order == sorted(order)  # verdict, matrix, failures, the rest, skips collapsed
    assert "`" not in html.split("</style>")[1]  # no raw Markdown backticks
    assert not re.search("[\u2600-\u27bf\U0001f300-\U0001faff]", html)  # text labels, not emoji


def test_html_card_states_the_tolerance_source_once_and_the_worst_inputs(tmp_path):
    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    bad = compare(toy_spec(), "fp32", {"y": 5 * X, "z": 2 * X}, {"y": 5 * X + 1, "z": 2 * X + 1}, compare_task=False)
    details = {**bad.to_dict()["details"], "message": "two outputs off"}
    for o in details["outputs"]:
        o["worst"]["inputs"] = {"x": {"shape": [4], "dtype": "float32", "values": [0.5, -0.25, 1.0, 0.0]}}
    s.record(record_of("toy", "fp32", "parity", "fail", details))
    html = (write_report(s, tmp_path) / "parity-report.html").read_text()
    card = html[html.index("<article"):html.index("</article>")]
    assert card.count("source: tensorflow/python/compiler/tensorrt") == 1
    assert "<b>Tolerance</b> for every output: atol 1e-05, rtol 1e-05 (source: tensorflow" in card
    assert card.count("input <code>x</code> float32 [4] = [0.5, -0.25, 1, 0]") == 2  # per failing output


def test_findings_are_counted_in_the_banner_and_listed(tmp_path):
    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    s.record(record_of("toy", "fp32", "property_parity", "pass", {}))
    s.record_finding("reference_unstable", "toy", "fp32", "property_parity",
                     {"summary": "the reference differs from itself by 0.3 on batch element 2", "spread": 0.3})
    folder = write_report(s, tmp_path)
    html = (folder / "parity-report.html").read_text()
    assert "<b>1</b> findings</li>" in html and "<div class=word>PASS</div>" in html  # a finding is no failure
    assert "<td>reference_unstable</td>" in html and "differs from itself by 0.3" in html
    md = (folder / "parity-report.md").read_text()
    assert "· findings: 1" in md and "- **reference_unstable** toy fp32 property_parity: the reference" in md


def test_html_without_plot_data_has_no_images(tmp_path):
    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    s.record(record_of("toy", "fp32", "parity", "error", {"message": "boom"}))
    html = (write_report(s, tmp_path) / "parity-report.html").read_text()
    assert "<svg" not in html and "<pre class=cause>boom</pre>" in html and "card st-error" in html


def test_empty_session(tmp_path):
    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    folder = write_report(s, tmp_path)
    assert json.loads((folder / "parity-report.json").read_text())["checks"] == []
    assert "no checks ran" in (folder / "parity-report.md").read_text()


# -- through the plugin ---------------------------------------------------------------------------
CONFORMANCE = """
def test_parity(parity_model, parity_details):
    parity_details["outputs"] = []
    assert parity_model.name == "good", f"{parity_model.name}: y | z differ"
"""


@pytest.fixture
def inner(pytester):
    (pytester.path / "ref").mkdir()
    model = {"precisions": ["fp32"], "reference": "ref", "max_batch": 2,
             "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    config = write_config(pytester.path, {"models": [dict(model, name="good"), dict(model, name="bad")]})
    pytester.makepyfile(test_conformance=CONFORMANCE)
    return config


def test_report_is_written_when_checks_fail(pytester, inner):
    out = pytester.path / "report"
    result = pytester.runpytest(f"--parity-config={inner}", f"--parity-report={out}", "--parity-runtime=onnxruntime")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["paritygate: runtime onnxruntime, 2 checks: 1 pass, 1 fail, 0 error, 0 inconclusive",
                                 f"paritygate: report written to {out}"])
    data = json.loads((out / "parity-report.json").read_text())
    assert [(c["model"], c["precision"], c["check"], c["status"]) for c in data["checks"]] == [
        ("bad", None, "parity", "fail"), ("good", None, "parity", "pass")]
    assert data["checks"][0]["details"]["message"] == "AssertionError: bad: y | z differ"  # not pytest's rewrite
    assert data["checks"][0]["details"]["nodeid"] == "test_conformance.py::test_parity[bad]"
    assert "bad: y \\| z differ" in (out / "parity-report.md").read_text()
    assert (out / "parity-report.html").stat().st_size > 0


def test_unwritable_report_folder_fails_the_run_early(pytester, inner):
    blocker = pytester.path / "file.txt"
    blocker.write_text("a regular file, not a folder")
    result = pytester.runpytest(f"--parity-config={inner}", f"--parity-report={blocker / 'sub'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = "\n".join(result.outlines + result.errlines)
    assert f"--parity-report={blocker / 'sub'}: report folder is not writable" in output
    assert "passed" not in output and "failed" not in output  # no test ran
    assert "Traceback" not in output


def test_findings_reach_json_markdown_and_terminal_and_merge_across_workers(tmp_path):
    worker = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime", is_xdist_worker=True))
    details = {"summary": "the reference disagrees with itself by 0.03", "max_spread": 0.03,
               "reproducer": {"npz": "/r/x.npz", "command": "python -m paritygate.cli.replay /r/x.npz"}}
    worker.record_finding("reference_unstable", "toy", "fp32", "property_parity", details)
    out = {}
    worker.finish(workeroutput=out)
    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    s.merge_worker(out)
    assert s.findings == worker.findings and s.findings[0]["details"]["max_spread"] == 0.03
    assert ("paritygate: finding reference_unstable: toy fp32 property_parity: the reference disagrees with "
            "itself by 0.03") in summary_lines(s)
    write_report(s, tmp_path / "r")
    data = json.loads((tmp_path / "r" / "parity-report.json").read_text())
    assert data["findings"][0]["kind"] == "reference_unstable" and data["checks"] == []
    md = (tmp_path / "r" / "parity-report.md").read_text()
    assert "## Findings" in md and "**reference_unstable** toy fp32 property_parity" in md and "/r/x.npz" in md


def test_an_allowed_inconclusive_does_not_fail_the_verdict(tmp_path):
    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    s.record(record_of("toy", "fp32", "property_parity", "inconclusive", {"message": "constant reference",
                                                                "allow_uninformative": True}))
    folder = write_report(s, tmp_path)
    assert "<div class=word>PASS</div>" in (folder / "parity-report.html").read_text()
    assert "**Verdict: PASS**" in (folder / "parity-report.md").read_text()
    s.record(record_of("toy", "fp16", "property_parity", "inconclusive", {"message": "argmax ties"}))
    html = (write_report(s, tmp_path) / "parity-report.html").read_text()
    assert "<div class=word>FAIL</div>" in html and "this run fails: 1 inconclusive" in html


def test_an_amber_xfail_cell_says_the_defect_is_beams(tmp_path):
    """Issue 30: an xfail for Beam's own defect, in a passing run, says on its cell (HTML matrix and table, Markdown
    table) that the defect is upstream, not the team's handler; a known failure of the team's own does not."""
    import html

    s = ParitySession(RunOptions(config_path=tmp_path / "parity.toml", runtime="onnxruntime"))
    s.record(record_of("linear", None, "beam_metric_bytes", "xfail",
                       {"reason": "known upstream defect", "expectations": [{"id": "onnx-numpy-num-bytes"}]}))
    s.record(record_of("linear", None, "beam_pairing", "pass"))
    s.record(record_of("toy", "fp16", "property_parity", "xfail", {"reason": "known failure: our fp16 build"}))
    out = write_report(s, tmp_path / "report")
    page = html.unescape((out / "parity-report.html").read_text())
    note = "upstream: Beam's defect (onnx-numpy-num-bytes), not your handler"
    matrix = page[page.index("<section id=matrix>"):page.index("</section>", page.index("<section id=matrix>"))]
    assert matrix.count(note) == 1 and page.count(note) == 2  # the linear cell, and its row in the checks table
    md = (out / "parity-report.md").read_text()
    assert f"| ⚠️ xfail ({note}) |" in md and md.count("not your handler") == 1


def test_a_stopped_run_says_why_on_the_first_screen_of_markdown_and_html():
    """Issue 30/33: a run stopped before any check said only "no checks ran"; the reason was in the terminal and
    the JSON. Now both renderings lead with STOPPED and every problem line (escaped: paths hold `_` and `*`)."""
    from paritygate.report import render_html, render_markdown

    problems = ["c.toml: model 'm_1': key 'max_batch': expected at most 65536, got 1000000000",
                "inputs/m_1.npz: input set holds 0 rows; expected at least one row <here>"]
    data = {"schema": SCHEMA, "checks": [], "validation": {"config": "c.toml", "models": {}, "problems": problems}}
    md = render_markdown(data).splitlines()
    assert md[2] == ("**Verdict: STOPPED before any check** (exit code 4): 2 problem(s) in the input, each to fix "
                     "before the checks can run:")
    assert md[4:6] == ["- c.toml: model 'm_1': key 'max_batch': expected at most 65536, got 1000000000",  # intraword _
                       "- inputs/m_1.npz: input set holds 0 rows; expected at least one row \\<here\\>"]
    html = render_html(data)
    header = html[html.index("<header id=verdict"):html.index("</header>")]
    assert "<div class=word>STOPPED</div>" in header
    assert "<li>inputs/m_1.npz: input set holds 0 rows; expected at least one row &lt;here&gt;</li>" in header
    assert render_markdown({"schema": SCHEMA, "checks": []}).splitlines()[2] == "no checks ran"
