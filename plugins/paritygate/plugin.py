"""The pytest plugin (wired through the ``pytest11`` entry point). It only talks to pytest; importing this module
imports none of tensorflow, tensorrt, apache_beam or cuda."""

import functools
import sys

import pytest

from paritygate.backend import registry
from paritygate.common import progress
from paritygate.common.numerics import DEFAULT_NUMERICS, NUMERICS
from paritygate.context import RunOptions
from paritygate.extras import require_extras, restore_importorskip
from paritygate.gpu.device import pin_xdist_worker
from paritygate.lazy import available
from paritygate.models.bundled import in_conformance
from paritygate.models.config import BUNDLED_CONFIG, ConfigError
from paritygate.models.known import mark_known_failures
from paritygate.models.order import ahead_of, built_ahead, case_of, run_order
from paritygate.session import ParitySession, classify, register, result_of
from paritygate.verdict import MARKED, REPORT_ATTR

SESSION_KEY = pytest.StashKey[ParitySession]()  # the recorder
OPTIONS_KEY = pytest.StashKey[RunOptions]()  # the run's options; its .context is what checks compute with
GPU_REQUIRED_KEY = pytest.StashKey[str]()  # why a gpu/trt item cannot run, when --require-gpu is given

MARKERS = {
    "gpu": "needs an NVIDIA GPU (skipped with a reason without one; fails the run under --require-gpu)",
    "slow": "takes more than a few seconds",
    "latency": "latency measurement: runs serially, never beside other work under xdist",
    "tf": "needs TensorFlow (the reference runtime)",
    "onnx": "needs ONNX / ONNX Runtime",
    "trt": "needs TensorRT (implies gpu)",
    "beam": "needs Apache Beam (RunInference checks)",
}


def pytest_addoption(parser):
    group = parser.getgroup("paritygate", "paritygate: TF -> ONNX -> TensorRT parity and RunInference conformance")
    group.addoption("--parity-config", metavar="PATH", default=None,
                    help=f"model config (TOML); exactly its models are validated (default: {BUNDLED_CONFIG})")
    group.addoption("--parity-runtime", metavar="NAME", choices=registry.names(), help=registry.option_help())
    group.addoption("--parity-report", metavar="DIR", default=None,
                    help="write parity-report.json/.md/.html and reproducers into DIR (default: no report)")
    group.addoption("--parity-baseline", metavar="PATH", default=None,
                    help="a previous parity-report.json: report new failures, fixed checks and drift against it; "
                         "new failures fail the run (default: no comparison)")
    group.addoption("--parity-baseline-fail", metavar="EXPR", action="append", default=[],
                    help="fail the run on drift vs --parity-baseline, repeatable: FIELD:VALUE%% (relative growth) "
                         "or FIELD:VALUE (absolute), e.g. max_abs:100%% p99_ms:10%% cosine:0.001 "
                         "(default: drift is reported, not gating)")
    group.addoption("--parity-device-class", metavar="NAME", default=None,
                    help="latency budget class [models.latency.<NAME>] (default: derived from the GPU name, "
                         "'cpu' without a GPU)")
    group.addoption("--parity-beam-runner", metavar="NAME", default=None,
                    help="Beam runner for RunInference checks (default: FnApiRunner and BundleBasedDirectRunner, "
                         "drawn per case; e.g. DataflowRunner, FlinkRunner)")
    group.addoption("--parity-beam-option", metavar="OPT", action="append", default=[],
                    help="pipeline option passed to the Beam runner, repeatable (e.g. --parity-beam-option=--project=x)")
    group.addoption("--parity-fp16-keep-fp32", metavar="OPS", default=None,
                    help="comma-separated ONNX op types kept in FP32 in the fp16 artifact (default: "
                         "LayerNormalization,Softmax,Exp,Pow,Sqrt,ReduceMean,ReduceSum,Erf)")
    group.addoption("--parity-localize", metavar="on|off|SHARE", default="on",
                    help="on a failing fp16/int8 check, localize the node adding the most error and search a verified "
                         "plan of nodes to keep in FP32 / leave unquantized, in at most SHARE of the run, 0 < SHARE "
                         "<= 1 (on: 0.2) (default: on)")
    group.addoption("--parity-engine-build", metavar="on|off", choices=("on", "off"), default="on", help="off: no "
                    "TensorRT-RTX build (docs/engine.md), engine_builds skips, the report says so (default: on)")
    group.addoption("--parity-cache", metavar="on|off", choices=("on", "off"), default="on",
                    help="serve the TF reference's outputs for a batch it ran before from $PARITYGATE_CACHE/reference "
                         "(keyed by its files, signature, TF version, device and the exact batch); goldens and "
                         "latency always run TF live; converted artifacts stay cached either way (default: on)")
    group.addoption("--parity-shard", metavar="K/N", default=None,
                    help="judge only the config's models K, K+N, K+2N, ... (1-based, in config order): shard K of N "
                         "of one run across CI machines; merge the shards' reports with `paritygate report` "
                         "(default: every model)")
    group.addoption("--parity-numerics", metavar="|".join(NUMERICS), choices=NUMERICS, default=DEFAULT_NUMERICS,
                    help="how ONNX Runtime computes a candidate artifact that holds float16 tensors: strict (each "
                         "float16 tensor rounded to FP16 where produced, ops computed in FP32 from FP16 values, as "
                         "a strongly typed engine does; docs/numerics.md) or ort (its own numerics, mostly FP32) "
                         f"(default: {DEFAULT_NUMERICS})")
    group.addoption("--parity-max-infer-s", metavar="SECONDS", help="stop an inference call of any runtime after "
                    "SECONDS: an error (or exit 4 in validation) (default: $PARITYGATE_MAX_INFER_S, else 600)")
    group.addoption("--parity-allow-unsafe-deserialization", action="store_true", help="load Keras files whose Lambda "
                    "layers hold Python code, run as they load: a file you trust (default: refused before it loads)")
    group.addoption("--parity-require-gpu", "--require-gpu", action="store_true", default=False, dest="require_gpu",
                    help="fail (not skip) when GPU tests cannot run: no GPU, broken driver or no TensorRT "
                         "(default: skip with the reason; --require-gpu is an alias)")
    group.addoption("--parity-update-goldens", "--update-goldens", action="store_true", default=False,
                    dest="update_goldens",
                    help="regenerate golden outputs and their manifest from the native TF reference "
                         "(default: off; --update-goldens is an alias)")


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # xdist worker gwN: pin GPU N before anything initialises CUDA here
        pin_xdist_worker(config.workerinput.get("workerid"), worker_count=config.workerinput.get("workercount"))
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if available("hypothesis"):  # profiles dev / smoke / ci / nightly, by HYPOTHESIS_PROFILE (without it: skips)
        from paritygate.inputs.strategies import register_profiles

        register_profiles()
    require_extras(config)
    try:
        options = config.stash[OPTIONS_KEY] = _options(config)
    except ValueError as err:
        raise pytest.UsageError(str(err)) from err
    session = config.stash[SESSION_KEY] = ParitySession(options)
    config.add_cleanup(progress.show_in(config))  # the run's long steps on stdout (common.progress)
    problem = session.open()
    if problem is not None:
        raise pytest.UsageError(problem)


# RunOptions keyword -> the pytest option it is read from as given
_OPTIONS = {"config_path": "parity_config", "runtime": "parity_runtime", "report_dir": "parity_report",
            "require_gpu": "require_gpu", "update_goldens": "update_goldens", "device_class": "parity_device_class",
            "beam_runner": "parity_beam_runner", "beam_options": "parity_beam_option",
            "fp16_keep_fp32": "parity_fp16_keep_fp32", "numerics": "parity_numerics", "baseline": "parity_baseline",
            "baseline_fail": "parity_baseline_fail", "shard": "parity_shard", "max_infer_s": "parity_max_infer_s",
            "allow_unsafe_deserialization": "parity_allow_unsafe_deserialization",
            "engine_build": "parity_engine_build"}


def _options(config):
    """The run's RunOptions from pytest's command line (ValueError names a bad --parity-shard)."""
    return RunOptions(**{k: config.getoption(dest) for k, dest in _OPTIONS.items()},
                      localize=config.getoption("parity_localize"),
                      reference_cache=config.getoption("parity_cache") != "off",
                      is_xdist_worker=hasattr(config, "workerinput"))


def _stop(config, problems):
    """Stop a started run before any check (exit code 4): each problem is one ``ERROR:`` line, printed now, so
    that it comes before pytest's summary; the session's finish writes the report (problems, no checks)."""
    config.stash[SESSION_KEY].stopped(problems)
    for line in problems:
        sys.stderr.write(f"ERROR: {line}\n")
    sys.stderr.flush()
    raise pytest.UsageError()  # no arguments: pytest prints nothing more after its summary


@pytest.hookimpl(tryfirst=True)  # before -m deselects, so that `-m gpu` also selects trt tests
def pytest_collection_modifyitems(config, items):
    options = config.stash[OPTIONS_KEY]
    try:
        known = config.stash[SESSION_KEY].known_failures()
    except ConfigError as err:
        _stop(config, [str(err)])
    for item in items:
        model, precision = case_of(item)
        if model is not None and known:
            mark_known_failures(item, model, precision, options.runtime, known, options.numerics_label)
        mark = options.runtime_entry.mark  # a GPU runtime's candidate checks: `-m gpu` selects them
        if mark and "parity_candidate_available" in getattr(item, "fixturenames", ()):
            item.add_marker(getattr(pytest.mark, mark))
        if item.get_closest_marker("trt") and not item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.gpu)  # trt implies gpu
        if item.get_closest_marker("gpu") or item.get_closest_marker("trt"):
            reason = options.gpu_skip_reason(needs_trt=bool(item.get_closest_marker("trt")))
            if reason and options.require_gpu:
                item.stash[GPU_REQUIRED_KEY] = reason  # fails in pytest_runtest_setup
            elif reason:
                item.add_marker(pytest.mark.skip(reason=reason))
        if options.is_xdist_worker and item.get_closest_marker("latency"):
            item.add_marker(pytest.mark.skip(reason="latency tests run serially: rerun them without xdist (pytest -m latency -p no:xdist)"))
    items[:] = run_order(items)  # parity verdicts first, grouped by model and precision; latency last


def pytest_collection_finish(session):
    """Validate every model once, before any check runs, when the conformance suite's checks over models were
    collected (not on xdist workers: the controller does it, in pytest_xdist_node_collection_finished). ONNX
    Runtime's candidate threads spin-wait only in a run that measures latency (``RunContext.spin``); a goldens
    check whose TensorFlow the context started in a process of its own (``RunContext.start_goldens``) runs last."""
    config, items = session.config, session.items
    if hasattr(config, "workerinput") or config.stash[SESSION_KEY].validation is not None:
        return  # a worker; or a run stopped in modifyitems (a bad expectations.toml), after which pytest calls this
    if any(case_of(item)[0] is not None and in_conformance(item.path) for item in items):
        goldens = {i: i.callspec.params["parity_model"] for i in items
                   if i.originalname == "test_goldens_reproduce" and in_conformance(i.path)}
        context = config.stash[OPTIONS_KEY].context
        context.spin = any(i.get_closest_marker("latency") for i in items)
        _validate(config, ahead_of(items, context))
        context.build_ahead(built_ahead([i for i in items if in_conformance(i.path)], context))
        alone = not (config.pluginmanager.has_plugin("dsession") or any("beam_check" in getattr(i, "fixturenames", ())
                                                                         for i in items))
        started = context.start_goldens(goldens, alone)
        items[:] = [i for i in items if i not in started] + started


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """xdist controller: it collects nothing itself; the first worker's collection says whether to validate.
    No test is scheduled before every worker has reported its collection, so this still runs before any check."""
    parity = node.config.stash[SESSION_KEY]
    if parity.validation is None and any(parity.is_model_check(node.config.rootpath, nodeid) for nodeid in ids):
        _validate(node.config)


def _validate(config, ahead=()):
    try:
        problems = config.stash[SESSION_KEY].validate(ahead)
    except ConfigError as err:
        _stop(config, [str(err)])
    if problems:
        _stop(config, problems)


def pytest_runtest_setup(item):
    # A stash entry, not `usefixtures` added at collection time: that comes too late to reach the item's fixtures.
    reason = item.stash.get(GPU_REQUIRED_KEY, None)
    if reason is not None:
        pytest.fail(f"--require-gpu: {reason}", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Time each test, show it as a progress step, release what the run is done with (``models.order.Around``)."""
    with item.config.stash[SESSION_KEY].around.test(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    classify(report, call)
    session = item.config.stash[SESSION_KEY]
    check = session.record_test_outcome(item, report)
    if check is not None:  # the check's key numbers become JUnit XML <property> elements (CI test tabs)
        from paritygate.report.text import key_numbers

        # junitxml writes the properties of the teardown report, which copies item.user_properties
        item.user_properties.extend(key_numbers(check))
        if report.when == "teardown":
            report.user_properties.extend(key_numbers(check))


# the statuses pytest has no word for: (category, letter, verbose word)
WORDS = {"error": ("error", "E", "ERROR"), "inconclusive": ("inconclusive", "I", "INCONCLUSIVE"),
         "regenerated": ("regenerated", "R", "REGENERATED")}


def pytest_report_teststatus(report, config):
    """`error`, `inconclusive` and `regenerated` get their own word in the terminal (counts, -r summary, verbose lines)."""
    status = getattr(report, REPORT_ATTR, None)
    if status is None and report.when == "call" and report.passed:  # xdist ships user_properties, not attributes
        status = next((v for k, v in report.user_properties if k == REPORT_ATTR and v in MARKED), None)
    return WORDS.get(status)


@pytest.hookimpl(tryfirst=True)
def pytest_keyboard_interrupt(excinfo):
    """Ctrl-C: pytest's terminal report of it fails (TypeError) on a traceback entry without a line number, which
    Python 3.11 gives a KeyboardInterrupt raised at an instruction that has none; the run then ended with exit 1 and
    a report that did not say INTERRUPTED. Such entries are left out of the traceback shown."""
    excinfo.traceback = excinfo.traceback.filter(lambda entry: entry._rawentry.tb_lineno is not None)


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[OPTIONS_KEY].close()
    fails = session.config.stash[SESSION_KEY].finish(workeroutput=getattr(session.config, "workeroutput", None),
                                                     interrupted=exitstatus == pytest.ExitCode.INTERRUPTED and session)
    if fails and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # new failures or gating drift vs --parity-baseline


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist: merge the checks a worker recorded into the controller's session."""
    node.config.stash[SESSION_KEY].merge_worker(node.workeroutput)


def pytest_terminal_summary(terminalreporter):
    from paritygate.report.summary import summary_lines

    for line in summary_lines(terminalreporter.config.stash[SESSION_KEY]):
        terminalreporter.write_line(line)


# -- thin fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def parity_options(request):
    """The run's ``RunOptions`` (config path, runtime choice, report folder, ...)."""
    return request.config.stash[OPTIONS_KEY]


def pytest_generate_tests(metafunc):
    """``parity_model`` / ``parity_case`` parametrize over the config's models (x precisions)."""
    wanted = [f for f in ("parity_model", "parity_case") if f in metafunc.fixturenames]
    if not wanted:
        return
    try:
        models = metafunc.config.stash[OPTIONS_KEY].models
    except ConfigError as err:
        raise pytest.UsageError(str(err)) from err
    if "parity_case" in metafunc.fixturenames:
        cases = [(m, p) for m in models for p in m.precisions]
        metafunc.parametrize("parity_case", cases, ids=[f"{m.name}-{p}" for m, p in cases], scope="module")
    else:
        metafunc.parametrize("parity_model", models, ids=[m.name for m in models], scope="module")


# GPU fixtures live beside the CUDA code they wrap; importing them here registers them with pytest.
from paritygate.gpu.device import cuda_stream, gpu_fixture, gpu_memory_guard, gpu_timer  # noqa: F401


@pytest.fixture
def parity_result(request):
    """The test's own ``paritygate.result.CheckResult``, for a check judged in the test's body: the session records
    it with the test's outcome as status."""
    return result_of(request.node)


@pytest.fixture
def parity_record(request):
    """``parity_record(result)``: the judge's ``CheckResult`` becomes the test's check, recorded as this very object
    with the test's outcome as status (``paritygate.session.register``); returns it."""
    return functools.partial(register, request.node)


@pytest.fixture
def parity_details(parity_result):
    """The free-form ``details`` of the test's result (the report shows them)."""
    return parity_result.details


@pytest.fixture(scope="session")
def parity_context(parity_options):
    """The run's ``RunContext``: what judge code computes with (options, runners, reference outputs)."""
    return parity_options.context


@pytest.fixture(scope="session")
def parity_candidate_available(parity_options):
    """Skip (or fail under --require-gpu) when the selected candidate runtime cannot run here."""
    reason = parity_options.runtime_skip_reason()
    if reason:
        if parity_options.require_gpu and parity_options.runtime_refusal():  # the GPU's, not TensorFlow's
            pytest.fail(f"--require-gpu: {reason}", pytrace=False)
        pytest.skip(f"candidate runtime {parity_options.runtime}: {reason}")


def pytest_unconfigure(config):
    restore_importorskip(config)
