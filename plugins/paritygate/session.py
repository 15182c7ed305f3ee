"""The one ParitySession of a pytest run: the recorder. It holds the config and runtime choice, takes each check's
``paritygate.result.CheckResult`` (the one a conformance test filled, ``RESULT_KEY``) with the pytest outcome's
status, and writes the report. What checks compute with (options, runners, reference outputs, resolved mappings)
lives in its ``context`` (``paritygate.context.RunContext``): judge code takes that, never the session."""

import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from paritygate.gpu import device as _gpu
from paritygate.lazy import available
from paritygate.models.config import BUNDLED_CONFIG, load_config
from paritygate.result import CheckResult, jsonable
from paritygate.verdict import REPORT_ATTR, STATUSES

_WORKER_KEY = "paritygate_checks"
_CACHE_KEY = "paritygate_cache_stats"
_FINDINGS_KEY = "paritygate_findings"
_REFERENCE_KEY = "paritygate_reference_cache_stats"
_TIME_KEY = "paritygate_time"
RESULT_KEY = pytest.StashKey[CheckResult]()  # a test's result for its check, filled through `parity_result`


class ParitySession:
    def __init__(self, config_path=None, runtime=None, report_dir=None, require_gpu=False,
                 update_goldens=False, device_class=None, beam_runner=None, beam_options=(),
                 fp16_keep_fp32=None, is_xdist_worker=False, localize=True, baseline=None, baseline_fail=(),
                 numerics="strict", reference_cache=True, shard=None):
        self.config_path = Path(config_path).resolve() if config_path else BUNDLED_CONFIG
        self.is_bundled = config_path is None
        self.requested_runtime = runtime
        self.report_dir = Path(report_dir).resolve() if report_dir else None
        self.require_gpu = require_gpu
        self.update_goldens = update_goldens
        self.device_class_option = device_class
        self.beam_runner = beam_runner
        self.beam_options = list(beam_options)
        self.fp16_keep_fp32 = tuple(op.strip() for op in fp16_keep_fp32.split(",") if op.strip()) \
            if fp16_keep_fp32 is not None else None
        self.is_xdist_worker = is_xdist_worker
        self.localize = localize  # --parity-localize: explain and repair failing fp16/int8 checks
        self.reference_cache = reference_cache  # --parity-cache: TF outputs served from paritygate.backend.reference_cache
        self.shard = parse_shard(shard)  # --parity-shard=K/N: (K, N), this run judges every N-th model from the K-th
        self.numerics = numerics  # --parity-numerics: strict FP16 emulation (default) or ONNX Runtime's own
        self.baseline_path = Path(baseline).resolve() if baseline else None
        self.baseline_fail = list(baseline_fail)
        self.baseline_section = None  # the report's "baseline" section, once the run is compared with it
        self.checks = []
        self.findings = []  # facts for the model owner that are no candidate verdict (e.g. reference_unstable)
        self.worker_cache_stats = {}
        self.worker_reference_stats = {}
        self.worker_time = {}  # seconds per part of the time line, summed over xdist workers
        self.workers = 0
        self.started = time.perf_counter()
        self._models = None
        self._context = None  # the run's context (paritygate.context): what checks compute with, made on first use
        self.validation = None  # paritygate.models.preflight's findings, once the pass ran (controller only)

    # -- models and runtime --------------------------------------------------------------------------
    @property
    def models(self):
        """The ModelSpecs under test; raises ConfigError with a one-line message."""
        if self._models is None:
            check_files = True
            if self.is_bundled:
                # The zoo's SavedModels are rebuilt from committed weights, which needs TensorFlow; without it
                # the models are still listed (collection works) and their TF-needing tests skip.
                check_files = available("tensorflow")
                if check_files:
                    _ensure_zoo_built()
            models = load_config(self.config_path, check_files=check_files)
            if self.shard:
                models = [m for i, m in enumerate(models) if i % self.shard[1] == self.shard[0] - 1]
            self._models = models
        return self._models

    @property
    def runtime(self):
        if self.requested_runtime:
            return self.requested_runtime
        return "tensorrt" if _gpu.probe().available and _gpu.trt_reason() is None else "onnxruntime"

    @property
    def device_class(self):
        if self.device_class_option:
            return self.device_class_option
        probe = _gpu.probe()
        return probe.device_class() if probe.available else "cpu"

    def gpu_skip_reason(self, needs_trt=False):
        probe = _gpu.probe()
        if not probe.available:
            return probe.reason
        return _gpu.trt_reason() if needs_trt else None

    def runtime_skip_reason(self):
        """Why the selected candidate runtime cannot run here (None when it can)."""
        if self.runtime == "tensorrt":
            return self.gpu_skip_reason(needs_trt=True)
        from paritygate.backend.runtimes import candidate_missing

        return candidate_missing(self.models)

    @property
    def context(self):
        """The run's ``RunContext``: the candidate runtime and the options checks compute with, and the typed
        per-process cache of loaded runners and reference outputs. Backends get this, never the session."""
        if self._context is None:
            from paritygate.context import RunContext

            self._context = RunContext(runtime=self.runtime, fp16_keep_fp32=self.fp16_keep_fp32, numerics=self.numerics,
                                       reference_cache=self.reference_cache, localize=self.localize,
                                       beam_runner=self.beam_runner, beam_options=tuple(self.beam_options),
                                       reproducer_dir=self.report_dir / "reproducers" if self.report_dir else None,
                                       device_class=self.device_class, serial=not self.is_xdist_worker,
                                       update_goldens=self.update_goldens)
        return self._context

    @property
    def environment(self):
        return self.context.versions()

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
        details.setdefault("nodeid", item.nodeid)
        from paritygate.cli import commands

        details.setdefault("rerun", commands.rerun(self.config_path, item.nodeid))
        if precision in ("fp16", "int8") and result.numerics is None:  # every reduced-precision row names its numerics
            result.numerics = self.numerics if self.runtime == "onnxruntime" else self.runtime
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

    def cache_stats(self):
        """Artifacts (ONNX conversions, fp16/int8 variants, engines) built vs served from the cache."""
        from paritygate.backend.cache import STATS

        return {k: STATS.get(k, 0) + self.worker_cache_stats.get(k, 0) for k in ("builds", "hits")}

    def reference_cache_stats(self):
        """TF reference runs: computed (and stored), reused from the cache, and live (goldens, latency)."""
        from paritygate.backend.reference_cache import STATS

        counts = {k: STATS.get(k, 0) + self.worker_reference_stats.get(k, 0) for k in ("computed", "reused", "live")}
        return {"enabled": self.reference_cache, **counts}

    def time_spent(self):
        """Seconds per part (conversion, reference, candidate, checks) over this process and its workers."""
        from paritygate.report.timeline import SPENT

        seconds = {k: round(s + self.worker_time.get(k, 0.0), 3) for k, s in SPENT.items()}
        return {**seconds, "wall": round(time.perf_counter() - self.started, 3), "processes": 1 + self.workers}

    def finish(self, workeroutput=None):
        if workeroutput is not None:  # an xdist worker hands its checks to the controller
            from paritygate.backend.cache import STATS

            workeroutput[_WORKER_KEY] = json.dumps([c.to_dict() for c in self.checks])
            workeroutput[_FINDINGS_KEY] = json.dumps(self.findings)
            workeroutput[_CACHE_KEY] = json.dumps(STATS)
            from paritygate.backend.reference_cache import STATS as REFERENCE_STATS

            workeroutput[_REFERENCE_KEY] = json.dumps(REFERENCE_STATS)
            from paritygate.report.timeline import SPENT

            workeroutput[_TIME_KEY] = json.dumps(SPENT)
            return
        stopped = bool(self.validation and self.validation["problems"])  # no check ran: nothing to compare
        if self.baseline_path is not None and not stopped:
            self.compare_with_baseline()
        if self.report_dir is not None:
            from paritygate.report import write_report

            write_report(self, self.report_dir)

    # -- baseline -------------------------------------------------------------------------------------
    def check_baseline(self):
        """Read the baseline and parse the gates up front (BaselineError names the file or expression)."""
        from paritygate.report.baseline import load_baseline, parse_gates

        self._gates = parse_gates(self.baseline_fail)
        if self.baseline_fail and self.baseline_path is None:
            from paritygate.report.baseline import BaselineError

            raise BaselineError("--parity-baseline-fail needs --parity-baseline=PATH (the report to compare with)")
        if self.baseline_path is not None:
            self._baseline = load_baseline(self.baseline_path)

    def compare_with_baseline(self):
        from paritygate.report import report_dict
        from paritygate.report.baseline import compare

        if not hasattr(self, "_baseline"):
            self.check_baseline()
        self.baseline_section = compare(report_dict(self), self._baseline, self.baseline_path, self._gates)
        return self.baseline_section

    def baseline_fails(self):
        """Why the comparison with the baseline fails the run (new failures, gating drift), or []."""
        b = self.baseline_section
        if not b:
            return []
        reasons = [f"new failure vs baseline: {f['model']} {f['precision'] or 'model-level'} {f['check']} "
                   f"({f['status']}; baseline: {f['baseline_status'] or 'not run'})" for f in b["new_failures"]]
        reasons += [f"drift past --parity-baseline-fail {d['threshold']}: {d['model']} {d['precision'] or ''} "
                    f"{d['check']} {d['where']} {d['field']} {d['baseline']:.4g} -> {d['current']:.4g} ({d['change']})"
                    for d in b["drift"] if d["gating"]]
        return reasons

    def check_report_dir(self):
        """Fail early (not after an hour of checks) when the report folder cannot be written."""
        try:
            self.report_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.report_dir, prefix=".write-test-"):
                pass
        except OSError as err:
            raise OSError(f"--parity-report={self.report_dir}: report folder is not writable: "
                          f"{err.strerror or err}") from err

    def summary_lines(self):
        from paritygate.models.preflight import summary_lines as validation_lines
        from paritygate.report.text import describe_numerics, precision_label

        lines = validation_lines(self.validation)
        if not self.checks and not self.findings:
            return lines
        counts = {s: sum(c.status == s for c in self.checks) for s in STATUSES}
        # the four verdicts always, so that "0 error" is said; skip/xfail/regenerated when they occurred
        text = ", ".join(f"{n} {s}" for s, n in counts.items() if n or s in ("pass", "fail", "error", "inconclusive"))
        stats = self.cache_stats()
        lines += [f"paritygate: runtime {self.runtime}, {len(self.checks)} checks: {text}",
                  f"paritygate: artifact cache: {stats['builds']} built, {stats['hits']} reused"]
        from paritygate.backend.reference_cache import summary_line

        ref = self.reference_cache_stats()
        lines.append(summary_line(ref, ref["enabled"]))
        from paritygate.report import timeline

        spent = self.time_spent()
        lines.append(timeline.summary_line(spent, spent["wall"], spent["processes"]))
        reduced = sorted({c.numerics for c in self.checks if c.numerics})
        if reduced:
            lines.append(f"paritygate: fp16/int8 rows computed with {' and '.join(reduced)} numerics "
                         f"({'; '.join(describe_numerics(n) for n in reduced)})")
        for c in self.checks:
            if c.reproducer:
                lines.append(f"paritygate: {c.model} {precision_label(c)} {c.check} failed; replay: "
                             f"{c.reproducer['command']}")
        for f in self.findings:
            lines.append(f"paritygate: finding {f['kind']}: {f['model']} {f['precision'] or ''} {f['check']}: "
                         f"{f['details'].get('summary', '')}".replace("  ", " "))
        lines += self._baseline_lines()
        if self.report_dir is not None:
            lines.append(f"paritygate: report written to {self.report_dir}")
        return lines

    def _baseline_lines(self):
        b = self.baseline_section
        if not b:
            return []
        lines = [(f"paritygate: vs baseline {b['path']}: {len(b['new_failures'])} new failure(s), "
                 f"{len(b['fixed'])} fixed, {len(b['existing_failures'])} still failing, {len(b['drift'])} drift "
                 f"({sum(d['gating'] for d in b['drift'])} gating)")]
        if b["environment_differs"]:
            lines.append("paritygate: WARNING: the baseline came from another machine or runtime: "
                         + "; ".join(b["environment_differs"]))
        return lines + [f"paritygate: {r}" for r in self.baseline_fails()]


def parse_shard(text):
    """``K/N`` -> (K, N) with 1 <= K <= N; None for None. A ValueError names what was expected."""
    if text is None:
        return None
    k, _, n = str(text).partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"--parity-shard={text}: expected K/N with 1 <= K <= N, e.g. 2/4 (the 2nd of 4 shards)")
    return int(k), int(n)


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


def _ensure_zoo_built():
    """The bundled config points at SavedModels rebuilt from committed weights into the cache."""
    from paritygate.models.bundled import zoo_module

    zoo_module("build").ensure_built()


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
