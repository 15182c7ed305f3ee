"""paritygate.session: the recorder counts what its own run did, not what the process did before it."""

import json
from pathlib import Path

import pytest

from paritygate.backend import cache, reference_cache
from paritygate.common import timeline
from paritygate.result import CheckResult
from paritygate.session import ParitySession


def test_a_second_session_in_one_process_counts_only_its_own_work(monkeypatch):
    """An in-process run (pytester.runpytest, or a team calling pytest.main twice) is a second session in a process
    whose counters already hold the first one's builds, cache outcomes and time."""
    monkeypatch.setattr(cache, "STATS", {"hits": 5, "builds": 4})
    monkeypatch.setattr(reference_cache, "STATS", {"computed": 524, "reused": 9, "live": 1})
    monkeypatch.setattr(timeline, "SPENT", {"conversion": 10.9, "reference": 1.8, "candidate": 0.1, "checks": 1.2})
    second = ParitySession()
    cache.STATS["hits"] += 14
    reference_cache.STATS["reused"] += 533
    timeline.SPENT["checks"] += 0.5
    assert second.cache_stats() == {"builds": 0, "hits": 14}
    assert second.reference_cache_stats() == {"enabled": second.options.reference_cache, "computed": 0, "reused": 533,
                                              "live": 0}
    spent = second.time_spent()
    assert (spent["conversion"], spent["reference"], spent["checks"]) == (0.0, 0.0, 0.5)
    handed = {}
    second._hand_over(handed)  # an xdist worker hands the controller its own counts too
    assert '"builds": 0' in handed["paritygate_cache_stats"] and '"reused": 533' in handed["paritygate_reference_cache_stats"]


def test_one_run_at_a_time_writes_into_a_report_folder_and_a_rerun_says_what_it_replaces(tmp_path):
    """Issue 38: two runs into one report folder silently replaced each other. A second run while the first holds
    the folder is refused before any check (its reproducers and report would mix with the first's); a run after
    it replaces the report and says when the replaced one was written."""
    from paritygate.context import RunOptions
    from paritygate.report.summary import summary_lines

    first = ParitySession(RunOptions(report_dir=tmp_path / "out"))
    assert first.open() is None and first.replaces is None
    second = ParitySession(RunOptions(report_dir=tmp_path / "out"))
    problem = second.open()
    assert problem.startswith(f"--parity-report={tmp_path / 'out'}: another paritygate run (pid ") and \
        "give each run its own --parity-report folder" in problem, problem
    first.finish()
    first.release()
    third = ParitySession(RunOptions(report_dir=tmp_path / "out"))
    assert third.open() is None and third.replaces
    third.checks.append(CheckResult("m", "fp32", "determinism", "pass"))
    assert f"paritygate: report written to {tmp_path / 'out'} (replacing the report written there at {third.replaces})" \
        in summary_lines(third)
    third.release()


REGISTERED = """
import numpy as np
from paritygate.result import CheckResult

JUDGED = []

def test_judged(parity_model, parity_record):
    result = CheckResult("any", None, "any", details={"half": np.float32(0.5)})
    JUDGED.append(result)
    parity_record(result).details["noted"] = "after"

def test_two_results(parity_model, parity_result, parity_record):
    parity_result.details["mine"] = 1
    parity_record(CheckResult("m", None, "two_results"))

def test_recorded_as_itself(parity_model, request):
    from paritygate.plugin import SESSION_KEY

    judged = [c for c in request.config.stash[SESSION_KEY].checks if c.check == "judged"]
    assert len(judged) == 1 and judged[0] is JUDGED[0]
"""


def test_the_session_records_the_registered_result_itself_and_refuses_two(pytester):
    """``parity_record`` makes the judge's object the test's check: the session keeps that very object (with the
    item's model and check, settled as its record reads back); a test that wrote into its own result and then
    registers another one fails, naming the rule."""
    pytester.makepyfile(test_registered=REGISTERED)
    (pytester.path / "sm").mkdir()
    (pytester.path / "parity.toml").write_text(
        '[[models]]\nname = "m"\nreference = "sm"\nprecisions = ["fp32"]\nmax_batch = 1\n'
        '[models.inputs.x]\nshape = [-1, 1]\ndtype = "float32"\nrange = [0.0, 1.0]\n')
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", f"--parity-report={report}",
                                           f"--parity-config={pytester.path / 'parity.toml'}")
    checks = {c["check"]: c for c in json.loads((report / "parity-report.json").read_text())["checks"]}
    assert {k: c["status"] for k, c in checks.items()} == {"judged": "pass", "two_results": "fail",
                                                          "recorded_as_itself": "pass"}, result.stdout.str()
    assert checks["judged"]["model"] == "m" and checks["judged"]["details"]["half"] == 0.5
    assert checks["judged"]["details"]["noted"] == "after"
    assert "wrote into its own result (parity_result) and then registered" in checks["two_results"]["details"]["message"]


RELEASED = """
import json
from pathlib import Path

from paritygate.backend.onnxrt.runner import OnnxrtRunner
from paritygate.backend.runtimes import CANDIDATES
from paritygate.common.memo import ArtifactKey

RUNNERS = {{}}

def test_{name}(parity_context, parity_case):
    spec, precision = parity_case
    live = sorted(f"{{k.model}}-{{k.precision}}" for k in parity_context.store.tables.get(CANDIDATES, {{}}))
    done = sorted(k for k, r in RUNNERS.items() if not r.is_active)
    with open("seen.jsonl", "a") as fh:
        fh.write(json.dumps([f"{name}-{{spec.name}}-{{precision}}", live, done]) + "\\n")
    key = ArtifactKey(parity_context.runtime, spec.name, precision)
    RUNNERS[f"{{spec.name}}-{{precision}}"] = CANDIDATES.get(
        parity_context, key, lambda: OnnxrtRunner(Path("toy.onnx")).activate())
"""


def test_checks_run_grouped_by_model_and_precision_and_a_finished_candidate_is_released(pytester, toy_onnx):
    """Two modules of checks over two models x two precisions run as model, then precision, then module; once a
    model x precision's last check is done its candidate session is closed (deactivated) and forgotten, so at most
    one candidate is held at a time (issue 37: a model's artifacts are not all held at once)."""
    import shutil

    shutil.copy(toy_onnx, pytester.path / "toy.onnx")
    pytester.makepyfile(test_one=RELEASED.format(name="one"), test_two=RELEASED.format(name="two"))
    (pytester.path / "sm").mkdir()
    model = ('[[models]]\nname = "{}"\nreference = "sm"\nprecisions = ["fp32", "fp16"]\nmax_batch = 1\n'
             '[models.inputs.x]\nshape = [-1, 1]\ndtype = "float32"\nrange = [0.0, 1.0]\n')
    (pytester.path / "parity.toml").write_text(model.format("m") + model.format("n"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist",
                                           f"--parity-config={pytester.path / 'parity.toml'}")
    result.assert_outcomes(passed=8)
    seen = [json.loads(line) for line in (pytester.path / "seen.jsonl").read_text().splitlines()]
    assert [s[0] for s in seen] == ["one-m-fp32", "two-m-fp32", "one-m-fp16", "two-m-fp16",
                                    "one-n-fp32", "two-n-fp32", "one-n-fp16", "two-n-fp16"]
    live = {s[0]: s[1] for s in seen}
    assert live["two-m-fp32"] == ["m-fp32"] and live["one-m-fp16"] == [], "m fp32's candidate was released"
    assert live["one-n-fp32"] == [] and live["two-n-fp16"] == ["n-fp16"]
    assert seen[2][2] == ["m-fp32"], "and deactivated: its ONNX Runtime session closed"


def test_a_reproducers_link_planted_in_the_report_folder_stops_the_run(tmp_path):
    from paritygate.context import RunOptions

    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "reproducers").symlink_to(tmp_path / "elsewhere")
    problem = ParitySession(RunOptions(report_dir=tmp_path / "out")).open()
    assert problem == (f"--parity-report={tmp_path / 'out'}: its reproducers/ is a symlink to {tmp_path / 'elsewhere'}; "
                       "the run writes reproducers only inside the report folder: remove the link")


AHEAD = """
import json
from paritygate.backend.cache import STATS
from paritygate.plugin import OPTIONS_KEY


def _seen(item, when):
    ahead = item.config.stash[OPTIONS_KEY].context.ahead
    if "-fp16]" in item.nodeid and ahead is not None:
        ahead.thread.join(120)  # what it builds is what the fp16 checks would have built
    with open("seen.jsonl", "a") as fh:
        fh.write(json.dumps([item.nodeid.split("::")[-1], when, ahead is not None, STATS["builds"]]) + "\\n")


def pytest_runtest_setup(item):
    _seen(item, "setup")


def pytest_runtest_teardown(item):
    _seen(item, "teardown")
"""


def test_a_serial_run_builds_fp16_ahead_and_its_checks_build_nothing(pytester, toy_saved_model, tmp_path, monkeypatch):
    """``RunContext.build_ahead`` from the plugin, before the first check: the fp16 checks find their artifact, its
    engine build and its strict file made (``backend.ahead``), and build nothing themselves."""
    pytest.importorskip("tf2onnx")
    pytest.importorskip("onnxconverter_common")
    from tests.conftest import write_config

    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # the inner run is serial, also under -n
    pytester.makepyfile(aheadplug=AHEAD)  # a plugin: the checks are the installed conformance suite
    cfg = write_config(pytester.path, {"models": [{
        "name": "toy", "reference": str(toy_saved_model), "precisions": ["fp32", "fp16"], "max_batch": 2,
        "task": "regression", "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    conformance = Path(__file__).resolve().parents[1] / "conformance" / "test_parity.py"
    result = pytester.runpytest_subprocess(str(conformance), "-k", "engine_builds or matches_reference",
                                           f"--parity-config={cfg}", "-p", "aheadplug", "-p", "no:cacheprovider",
                                           "-p", "no:xdist")
    result.assert_outcomes(passed=4)
    seen = [json.loads(line) for line in (pytester.path / "seen.jsonl").read_text().splitlines()]
    assert [s[0] for s in seen[::2]] == ["test_engine_builds[toy-fp32]", "test_matches_reference[toy-fp32]",
                                         "test_engine_builds[toy-fp16]", "test_matches_reference[toy-fp16]"]
    assert all(s[2] for s in seen), "started before the first check"
    assert seen[4][3] == seen[7][3], "the fp16 checks built nothing"
    assert list((tmp_path / "cache" / "onnx").glob("toy-fp16-*-strict-*.onnx")), result.stdout.str()
