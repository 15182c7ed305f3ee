"""The one ParitySession of a pytest run: the recorder. It takes each check's ``paritygate.result.CheckResult``
(the one a conformance test filled, ``RESULT_KEY``) with the pytest outcome's status, and the findings; merges
what xdist workers recorded; and writes the report. The run's options (``paritygate.context.RunOptions``) and
what checks compute with (``RunContext``) live in the context: judge code takes that, never the session. The
baseline comparison and the terminal summary are the report's (``paritygate.report.baseline``, ``.summary``)."""

import json
import os
import tempfile
import time

import pytest

from paritygate.result import CheckResult, jsonable
from paritygate.verdict import REPORT_ATTR, STATUSES, UPSTREAM_DEFECT_ATTR

_WORKER_KEY = "paritygate_checks"
_CACHE_KEY = "paritygate_cache_stats"
_FINDINGS_KEY = "paritygate_findings"
_REFERENCE_KEY = "paritygate_reference_cache_stats"
_TIME_KEY = "paritygate_time"
RESULT_KEY = pytest.StashKey[CheckResult]()  # a test's result for its check, filled through `parity_result`


class ParitySession:
    def __init__(self, options=None):
        """``options``: the run's ``RunOptions``, which the report names (config, runtime, folder); default ones
        (the bundled zoo, no report) when None."""
        from paritygate.context import RunOptions

        self.options = options if options is not None else RunOptions()
        self.checks = []
        self.findings = []  # facts for the model owner that are no candidate verdict (e.g. reference_unstable)
        self.validation = None  # paritygate.judge.preflight's findings, once the pass ran (controller only)
        self.baseline_section = None  # the report's "baseline" section, once the run is compared with it
        self.worker_cache_stats = {}
        self.worker_reference_stats = {}
        self.worker_time = {}  # seconds per part of the time line, summed over xdist workers
        self.workers = 0
        self.started = time.perf_counter()
        self._at_start = _counters()  # the process's counters: a second session in it (an in-process run) counts its own

    # -- checks ---------------------------------------------------------------------------------------
    def record(self, result):
        """Keep one check's CheckResult (a copy, as its JSON reads back) and its findings; returns the copy."""
        result = CheckResult.from_dict(result.to_dict())  # to_dict refuses a status outside verdict.STATUSES
        if result.status is None:
            raise ValueError(f"status must be one of {STATUSES}, got None ({result.model} {result.check})")
        self.checks.append(result)
        self.findings += result.findings
        return result

    def record_finding(self, kind, model, precision, check, details):
        """A finding about the model rather than a verdict on the candidate, outside any check's result."""
        self.findings.append({"kind": kind, "model": model, "precision": precision, "check": check,
                              "details": jsonable(details or {})})

    def record_test_outcome(self, item, report):
        """Each conformance test over a model is one check: its outcome becomes the status of the test's result."""
        model, precision = case_of(item)
        if model is None:
            return
        status = _status_of(report)
        if status is None:
            return
        check = item.originalname.removeprefix("test_")
        result = CheckResult.from_dict(item.stash.get(RESULT_KEY, CheckResult(model, precision, check)).to_dict())
        result.model, result.precision, result.check, result.status = model, precision, check, status
        details = result.details
        allowed = [v for k, v in report.user_properties if k == "paritygate_inconclusive_allowed"]
        if allowed:
            details.update(allow_uninformative=True, message=allowed[0])
        if report.failed and report.longrepr is not None:
            details.setdefault("message", _short_failure(report))
        if report.skipped and isinstance(report.longrepr, tuple):
            details.setdefault("reason", str(report.longrepr[2]))
        if hasattr(report, "wasxfail"):
            details.setdefault("reason", report.wasxfail)
            upstream = [v for k, v in report.user_properties if k == UPSTREAM_DEFECT_ATTR]
            if upstream:
                details.setdefault("upstream_defect", upstream[0])
        details.setdefault("nodeid", item.nodeid)
        from paritygate.common import commands

        options = self.options
        details.setdefault("rerun", commands.rerun(options.config_path, item.nodeid))
        if precision in ("fp16", "int8") and result.numerics is None:  # every reduced-precision row names its numerics
            result.numerics = options.numerics if options.runtime == "onnxruntime" else options.runtime
        return self.record(result)

    def merge_worker(self, workeroutput):
        self.checks.extend(CheckResult.from_dict(c) for c in json.loads(workeroutput.get(_WORKER_KEY, "[]")))
        self.findings.extend(json.loads(workeroutput.get(_FINDINGS_KEY, "[]")))
        for key, n in json.loads(workeroutput.get(_CACHE_KEY, "{}")).items():
            self.worker_cache_stats[key] = self.worker_cache_stats.get(key, 0) + n
        for key, n in json.loads(workeroutput.get(_REFERENCE_KEY, "{}")).items():
            self.worker_reference_stats[key] = self.worker_reference_stats.get(key, 0) + n
        for key, s in json.loads(workeroutput.get(_TIME_KEY, "{}")).items():
            self.worker_time[key] = self.worker_time.get(key, 0.0) + s
        self.workers += _TIME_KEY in workeroutput

    def _since_start(self, kind):
        """This session's part of one of the process's counters (``_counters``)."""
        return {k: v - self._at_start[kind].get(k, 0) for k, v in _counters()[kind].items()}

    def cache_stats(self):
        """Artifacts (ONNX conversions, fp16/int8 variants, engines) built vs served from the cache."""
        mine = self._since_start("artifact")
        return {k: mine.get(k, 0) + self.worker_cache_stats.get(k, 0) for k in ("builds", "hits")}

    def reference_cache_stats(self):
        """TF reference runs: computed (and stored), reused from the cache, and live (goldens, latency)."""
        mine = self._since_start("reference")
        counts = {k: mine.get(k, 0) + self.worker_reference_stats.get(k, 0) for k in ("computed", "reused", "live")}
        return {"enabled": self.options.reference_cache, **counts}

    def time_spent(self):
        """Seconds per part (conversion, reference, candidate, checks) over this session and its workers."""
        seconds = {k: round(s + self.worker_time.get(k, 0.0), 3) for k, s in self._since_start("time").items()}
        return {**seconds, "wall": round(time.perf_counter() - self.started, 3), "processes": 1 + self.workers}

    def finish(self, workeroutput=None, baseline=None):
        """An xdist worker hands its checks to the controller (``workeroutput``); the controller compares the run
        with ``baseline`` (a ``report.baseline.Baseline``) unless the validation pass stopped it, and writes the
        report when ``--parity-report`` names a folder."""
        if workeroutput is not None:
            self._hand_over(workeroutput)
            return
        stopped = bool(self.validation and self.validation["problems"])  # no check ran: nothing to compare
        if baseline is not None and baseline.path is not None and not stopped:
            from paritygate.report import report_dict

            self.baseline_section = baseline.compare(report_dict(self))
        if self.options.report_dir is not None:
            from paritygate.report import write_report

            write_report(self, self.options.report_dir)

    def _hand_over(self, workeroutput):
        workeroutput[_WORKER_KEY] = json.dumps([c.to_dict() for c in self.checks])
        workeroutput[_FINDINGS_KEY] = json.dumps(self.findings)
        workeroutput[_CACHE_KEY] = json.dumps(self._since_start("artifact"))
        workeroutput[_REFERENCE_KEY] = json.dumps(self._since_start("reference"))
        workeroutput[_TIME_KEY] = json.dumps(self._since_start("time"))

    def check_report_dir(self):
        """Fail early (not after an hour of checks) when the report folder cannot be written."""
        folder = self.options.report_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
                pass
        except OSError as err:
            raise OSError(f"--parity-report={folder}: report folder is not writable: {err.strerror or err}") from err


def case_of(item):
    """(model name, precision) of a conformance test item, or (None, None)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None, None
    if "parity_case" in callspec.params:
        model, precision = callspec.params["parity_case"]
        return model.name, precision
    if "parity_model" in callspec.params:
        return callspec.params["parity_model"].name, None
    return None, None


def _status_of(report):
    marked = getattr(report, REPORT_ATTR, None)
    if marked is not None:
        return marked
    if hasattr(report, "wasxfail"):
        if report.skipped:
            return "xfail"
        if report.when == "call" and report.passed:
            return "fail"  # strict xfail that passed unexpectedly is reported as a failure by pytest too
    if report.when == "call":
        return {"passed": "pass", "failed": "fail", "skipped": "skip"}[report.outcome]
    if report.when == "setup" and not report.passed:
        return "skip" if report.skipped else "error"
    if report.when == "teardown" and report.failed:
        return "error"
    return None


def _short_failure(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    if text.startswith("AssertionError: ") and "\nassert " in text:  # the test's message, not pytest's rewrite
        text = text.split("\nassert ", 1)[0]
    return text if len(text) <= 4000 else text[:4000] + " …(truncated in the report; see the pytest log)"


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _counters():
    """Copies of the process's counters: artifact builds and hits, reference-cache outcomes, time per part."""
    from paritygate.backend.cache import STATS
    from paritygate.backend.reference_cache import STATS as REFERENCE_STATS
    from paritygate.common.timeline import SPENT

    return {"artifact": dict(STATS), "reference": dict(REFERENCE_STATS), "time": dict(SPENT)}
