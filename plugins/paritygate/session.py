"""The one ParitySession of a pytest run: the recorder. It keeps each check's ``paritygate.result.CheckResult``
itself (the judge's, which the test registered, or the test's own: ``RESULT_KEY``) with the pytest outcome's
status, and the findings; merges what xdist workers recorded (JSON: the hand-over is an edge); and writes the
report; around each check, it orders the run and releases what a run is done with. The run's options
(``paritygate.context.RunOptions``) and what checks compute with (``RunContext``) live in the context: judge code
takes that, never the session. The baseline comparison and the terminal summary are the report's."""

import copy
import json
import os
import tempfile
import time

import pytest

from paritygate.models.order import Around, case_of
from paritygate.result import CheckResult, jsonable
from paritygate.verdict import MARKED, REPORT_ATTR, STATUSES, UPSTREAM_DEFECT_ATTR, Inconclusive, SuiteError

_WORKER_KEY = "paritygate_checks"
_CACHE_KEY = "paritygate_cache_stats"
_FINDINGS_KEY = "paritygate_findings"
_REFERENCE_KEY = "paritygate_reference_cache_stats"
_TIME_KEY = "paritygate_time"
RESULT_KEY = pytest.StashKey[CheckResult]()  # a test's result for its check (`result_of`, `register`)


class ParitySession:
    def __init__(self, options=None):
        """``options``: the run's ``RunOptions``, which the report names (config, runtime, folder); default ones
        (the bundled zoo, no report) when None."""
        from paritygate.context import RunOptions

        self.options = options if options is not None else RunOptions()
        self.checks = []
        self.findings = []  # facts for the model owner that are no candidate verdict (e.g. reference_unstable)
        self.validation = None  # paritygate.judge.preflight's findings, once the pass ran (controller only)
        self.interrupted = None  # {"selected": tests pytest had selected} when the run was interrupted (Ctrl-C)
        self.replaces = None  # when the report in --parity-report's folder that this run replaces was written
        self.baseline = None  # report.baseline.Baseline: --parity-baseline and its gates, read by ``open`` (controller)
        self.baseline_section = None  # the report's "baseline" section, once the run is compared with it
        self.worker_cache_stats = {}
        self.worker_reference_stats = {}
        self.worker_time = {}  # seconds per part of the time line, summed over xdist workers
        self.workers = 0
        self.started = time.perf_counter()
        self.around = Around(self.options)  # around each test: its time, a progress step, what is released after it
        self._at_start = _counters()  # the process's counters: a second session in it (an in-process run) counts its own

    # -- before the checks -----------------------------------------------------------------------------
    def open(self):
        """Check the run's input before any test: a team's config loads, --parity-baseline and its gates read
        (the controller keeps them, ``baseline``), the report folder is writable. Returns the problem that stops
        the run, or None; a config or baseline problem is in the report too (``refuse``)."""
        options = self.options
        try:
            if not options.is_bundled:  # a wrong user config fails the run at once, whatever tests are selected
                _ = options.models
            if not options.is_xdist_worker:  # a bad baseline or gate fails the run at once, not after the checks
                from paritygate.report.baseline import Baseline

                self.baseline = Baseline(options.baseline_path, options.baseline_fail)
        except ValueError as err:  # models.config.ConfigError, report.baseline.BaselineError
            self.refuse(str(err))
            return str(err)
        try:
            if options.report_dir is not None:
                self.check_report_dir()
                if not options.is_xdist_worker:
                    self._claim_report_dir()
        except OSError as err:
            return str(err)
        return None

    def _claim_report_dir(self):
        """One run at a time writes into a report folder: a second run into it while this one runs is refused
        (their reports and reproducers would mix); a run after it replaces its report, and says so (``replaces``).
        The claim is an exclusive lock on DIR/.paritygate-run.lock, let go when this process ends."""
        folder = self.options.report_dir
        earlier = folder / "parity-report.json"
        if os.path.isfile(earlier) and not os.path.islink(earlier):
            self.replaces = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(earlier).st_mtime))
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; runs into one folder are the caller's to keep apart
            return
        path = folder / ".paritygate-run.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC, 0o644)
        except OSError as err:  # a link planted there (never followed), a folder of that name
            raise OSError(f"--parity-report={folder}: cannot claim the folder for this run: {path.name}: "
                          f"{err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise OSError(f"--parity-report={folder}: another paritygate run ({holder}) is writing its report into "
                          "this folder; give each run its own --parity-report folder (runs in turn replace the "
                          "report, with a notice)") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        self._lock = fd  # held until ``release`` (pytest_unconfigure) or the process ends

    def release(self):
        """Let go of the report folder (``_claim_report_dir``): the run is over."""
        fd, self._lock = getattr(self, "_lock", None), None
        if fd is not None:
            os.close(fd)

    def refuse(self, problem):
        """A run stopped before pytest started on it: the report, when one was asked for and its folder can be
        written, holds the problem and no checks, as after a stop by the validation pass."""
        self.stopped([problem])
        if self.options.report_dir is not None and not self.options.is_xdist_worker:
            from paritygate.report import write_report

            try:
                self.check_report_dir()
                write_report(self, self.options.report_dir)
            except OSError:
                pass  # the folder cannot be written: the problem line is all there is

    def stopped(self, problems):
        """The run stops before any check for ``problems`` (the validation pass's, kept when it ran)."""
        if self.validation is None:
            self.validation = {"config": str(self.options.config_path), "models": {}, "problems": list(problems)}

    def validate(self, ahead=()):
        """The validation pass over every model (``judge.preflight``), once, before any check: returns its
        problems (ConfigError for a config that does not load). ``ahead``: see ``models.order.ahead_of``."""
        from paritygate.judge.preflight import validate_models

        options = self.options
        self.validation = validate_models(options.context, options.models, options.config_path, ahead)
        return self.validation["problems"]

    def known_failures(self):
        """The config's known failures (``models.known``), with the [[expectations]] beside it read now (their
        reaches and when too): a malformed entry stops the run, not a Beam check (ConfigError)."""
        from paritygate.beam.expectations import expectations_for
        from paritygate.models.known import load_known_failures

        options = self.options
        known = load_known_failures(options.config_path, [m.name for m in options.models])
        expectations_for(options.config_path)  # ExpectationError is a ConfigError
        return known

    def is_model_check(self, rootpath, nodeid):
        """Whether xdist node id ``nodeid`` (relative to ``rootpath``) is a bundled conformance check over one of
        the run's models."""
        from paritygate.models.bundled import in_conformance
        from paritygate.models.config import ConfigError

        path, _, rest = nodeid.partition("::")
        if "[" not in rest or not in_conformance(rootpath / path):
            return False
        param = rest[rest.index("[") + 1:].rstrip("]")
        try:
            names = [m.name for m in self.options.models]
        except ConfigError:
            return False
        return any(param == n or param.startswith(f"{n}-") for n in names)

    # -- checks ---------------------------------------------------------------------------------------
    def record(self, result):
        """Keep one check's CheckResult itself, settled (``CheckResult.settle``: as its record reads back; a status
        outside verdict.STATUSES is refused), and its findings; returns it."""
        result.settle()
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
        result = result_of(item)
        if any(c is result for c in self.checks):  # recorded at the call, now a teardown error: a row of its own
            result = copy.deepcopy(result)
        result.status = status
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
        if precision in ("fp16", "int8") and result.numerics is None and status != "skip":
            result.numerics = options.numerics_label  # a reduced-precision row that ran names what computed it
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

    def finish(self, workeroutput=None, interrupted=None):
        """An xdist worker hands its checks to the controller (``workeroutput``); the controller compares the run
        with its ``baseline`` unless the validation pass stopped it, and writes the report when
        ``--parity-report`` names a folder, then lets go of the folder. ``interrupted``: the pytest session of a
        run stopped by Ctrl-C (or pytest.exit), whose report then says INTERRUPTED, never a verdict on what did not
        run. Returns whether the comparison fails the run (new failures or gating drift:
        ``report.baseline.run_fails_reasons``)."""
        if interrupted:
            self.interrupted = {"selected": len(getattr(interrupted, "items", None) or [])}
        if workeroutput is not None:
            self._hand_over(workeroutput)
            return False
        baseline = self.baseline
        stopped = bool(self.validation and self.validation["problems"])  # no check ran: nothing to compare
        if baseline is not None and baseline.path is not None and not stopped:
            from paritygate.report import report_dict

            self.baseline_section = baseline.compare(report_dict(self))
        if self.options.report_dir is not None:
            from paritygate.common import progress
            from paritygate.report import write_report

            with progress.step(f"writing the report ({len(self.checks)} checks)"):
                write_report(self, self.options.report_dir)
        self.release()
        from paritygate.report.baseline import run_fails_reasons

        return bool(run_fails_reasons(self.baseline_section))

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
        if os.path.islink(folder / "reproducers"):  # planted: the run writes only inside the folder it was given
            raise OSError(f"--parity-report={folder}: its reproducers/ is a symlink to {os.readlink(folder / 'reproducers')}; "
                          "the run writes reproducers only inside the report folder: remove the link")


def result_of(item):
    """The CheckResult the session records for conformance test ``item``: the one its test registered
    (``register``), else the test's own, made with the item's model, precision and check on first use."""
    if RESULT_KEY not in item.stash:
        model, precision = case_of(item)
        item.stash[RESULT_KEY] = CheckResult(model, precision, item.originalname.removeprefix("test_"))
    return item.stash[RESULT_KEY]


def register(item, result):
    """Make the judge's ``result`` the check of conformance test ``item``: the session records this very object,
    under the item's model, precision and check. A test that already wrote into its own result (``result_of``)
    registers nothing: one result per check, never two merged. Returns ``result``."""
    own = item.stash.get(RESULT_KEY, None)
    model, precision = case_of(item)
    check = item.originalname.removeprefix("test_")
    if own is not None and own is not result and own != CheckResult(model, precision, check):
        raise ValueError(f"{item.nodeid}: the test wrote into its own result (parity_result) and then registered "
                         "a judge's; a check has one result: write into the judge's after registering it")
    result.model, result.precision, result.check = model, precision, check
    item.stash[RESULT_KEY] = result
    return result


def classify(report, call):
    """Mark the statuses pytest's outcome cannot express: a passing test's declared word (``verdict.mark``:
    ``regenerated``), a SuiteError raised in the call is an `error` (the
    suite's or a tool's failure, not the candidate's), an Inconclusive is `inconclusive` (a failure unless the
    model allows uninformative inputs, which then passes the run but keeps the word)."""
    exc = call.excinfo.value if call.excinfo is not None else None
    if report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
        marked = [v for k, v in report.user_properties if k == REPORT_ATTR and v in MARKED]
        if marked:
            setattr(report, REPORT_ATTR, marked[-1])  # e.g. regenerated: nothing was judged
    if report.when != "call" or exc is None or hasattr(report, "wasxfail"):
        return
    if isinstance(exc, SuiteError):
        setattr(report, REPORT_ATTR, "error")
    elif isinstance(exc, Inconclusive):
        setattr(report, REPORT_ATTR, "inconclusive")
        if exc.allowed:
            report.outcome, report.longrepr = "passed", None
            report.user_properties.append(("paritygate_inconclusive_allowed", str(exc)))


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
