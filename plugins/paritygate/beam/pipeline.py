"""One real Beam pipeline run of a ``Case``: ``Create -> RunInference(handler) -> collect``, on a pinned runner.

The runner is always named (Beam 2.77's default, Prism, downloads a binary; offline that fails). Locally
FnApiRunner or BundleBasedDirectRunner; ``--parity-beam-runner=DataflowRunner`` (or Flink, Spark) with
``--parity-beam-option=...`` runs the same pipeline there. Results, batch traces and dead letters come back
through files written with Beam's FileSystems (a temporary folder locally, ``--temp_location`` elsewhere), and
metrics through the runner's metrics API, so nothing relies on the pipeline running in this process.
This module imports apache_beam: import it on first use.
"""

import contextlib
import os
import sys
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass, field, replace

import apache_beam as beam
import numpy as np
from apache_beam.ml.inference.base import KeyedModelHandler, MaybeKeyedModelHandler, RunInference
from apache_beam.options.pipeline_options import PipelineOptions

from paritygate.beam.contract import (
    LOCAL_RUNNERS,
    HandlerContractError,
    apply_fns,
    beam_decoded,
    digest,
    element_of,
    handler_fns,
)
from paritygate.beam.handlers import (
    TracedHandler,
    WithoutFns,
    count_loads,
    weight_batching,
)
from paritygate.beam.overlap import Rendezvous
from paritygate.beam.records import ToRecord, WriteRecords, dead_record, read_records
from paritygate.inputs.strategies import sample_inputs

_RUNNER_PATHS = {"FnApiRunner": "apache_beam.runners.portability.fn_api_runner.FnApiRunner"}
WRAPPERS = ("plain", "keyed", "maybe_keyed", "maybe_keyed_plain")  # maybe_keyed: keyed input; _plain: unkeyed
KEY_KINDS = ("unique_str", "unique_int", "unique_tuple", "duplicated_str", "duplicated_int", "duplicated_tuple")
POISON = "poison"  # a string array where the model takes numbers: any numeric handler must fail on it


@dataclass(frozen=True)
class Case:
    """One pipeline: ``count`` elements from ``seed``, batched within [min_batch, max_batch]."""

    count: int
    min_batch: int
    max_batch: int
    wrapper: str = "plain"
    keys: str = "none"  # a KEY_KINDS entry for keyed wrappers; "mixed": every other element keyed
    seed: int = 0
    runner: str = "FnApiRunner"
    poison: int = None  # index of the element replaced by a poison element (dead-letter check)
    exceptions: bool = False  # RunInference(...).with_exception_handling()
    weight: int = None  # max_batch_weight, in payload bytes (batch-weight check)
    workers: int = 1  # > 1: Beam's multi-process mode, each worker a process that unpickles the handler
    copies: int = None  # model_copies given to the factory (beam_model_copies); None: the factory's own default


@dataclass
class PipelineRun:
    case: Case
    inputs: list  # (key, has_key, digest, example)
    results: list = field(default_factory=list)  # Emitted
    traces: list = field(default_factory=list)  # handlers.BatchTrace
    dead: list = field(default_factory=list)  # DeadBatch
    loads: list = field(default_factory=list)  # handlers.LoadRecord: one per load_model call, in any process
    metrics: dict = field(default_factory=dict)  # name -> int (counter) or dict (distribution)
    namespace: str = None
    batching: dict = field(default_factory=dict)  # the handler stack's batch_elements_kwargs() for this case
    error: str = None
    seconds: float = 0.0

    def example(self, d):
        return next(ex for _, _, dd, ex in self.inputs if dd == d)


# -- elements ----------------------------------------------------------------------------------------
def _key(kind, i):
    index = i if kind.startswith("unique") else i // 2
    return {"str": f"k{index}", "int": index, "tuple": ("k", index)}[kind.rsplit("_", 1)[1]]


# Half the elements of a case come from the model's own input sets (golden / input set, held-out, calibration:
# strategies.model_input_pool), half of those perturbed within the range, as the property checks draw them: a
# handler is then exercised on inputs like the model's data, not only on uniform noise (ssd: scenes with
# detections). The rest stay uniform samples from the spec.
POOL_SHARE = 0.5
_POOLS = {}  # per process (workers included): (model, config, calibration) -> InputPool


def _pool(spec):
    from paritygate.inputs.strategies import model_input_pool

    key = (spec.name, str(spec.source), str(spec.calibration))
    if key not in _POOLS:
        _POOLS[key] = model_input_pool(spec)
    return _POOLS[key]


def case_arrays(spec, case):
    """The case's input arrays (count rows) and each row's source: "spec", or an input set's (``~perturbed``)."""
    from paritygate.inputs.strategies import perturb

    rng = np.random.default_rng(case.seed)
    arrays = sample_inputs(spec, case.count, rng)
    sources = ["spec"] * case.count
    pool = _pool(spec)
    if len(pool.sources) and pool.dims() == {n: t.dims for n, t in spec.inputs.items()}:  # rows of the case's shape
        for i in np.flatnonzero(rng.random(case.count) < POOL_SHARE):
            row, perturbed = int(rng.integers(len(pool.sources))), bool(rng.random() < 0.5)
            for name, tensor in spec.inputs.items():
                x = pool.arrays[name][row]
                arrays[name][i] = perturb(tensor, x, rng) if perturbed else x
            sources[i] = pool.sources[row] + ("~perturbed" if perturbed else "")
    return arrays, sources


def rows_by_source(spec, cases):
    """How many elements of ``cases`` came from each source, as the property checks report it."""
    from collections import Counter

    return dict(Counter(source for case in cases for source in case_arrays(spec, case)[1]))


def poison_element(spec):
    """An element of the right shape holding strings: no numeric model can run it."""
    name, tensor = next(iter(spec.inputs.items()))
    feed = {n: np.zeros(t.dims, t.dtype) for n, t in spec.inputs.items()}
    feed[name] = np.full(tensor.dims, POISON)
    return element_of(spec, feed)


def case_inputs(spec, case):
    """The case's elements as (key, has_key, digest, example); examples own their data."""
    arrays, _ = case_arrays(spec, case)
    out = []
    for i in range(case.count):
        example = element_of(spec, {k: np.array(v[i]) for k, v in arrays.items()})
        if case.poison == i:
            example = poison_element(spec)
        keyed = case.keys != "none" and (case.keys != "mixed" or i % 2 == 0)
        key = (f"k{i}" if case.keys == "mixed" else _key(case.keys, i)) if keyed else None
        out.append((key, keyed, digest(example), example))
    return out


# -- the pipeline ------------------------------------------------------------------------------------
def handler_stack(subject, case, folder=None):
    """TracedHandler over the (keyed) handler; its pre/post-processing functions move to the outermost level.
    With ``folder``, every load_model call of the handler writes a LoadRecord there (``handlers.count_loads``)."""
    handler = subject.make(case.min_batch, case.max_batch, **({"model_copies": case.copies} if case.copies else {}))
    if folder is not None:
        count_loads(handler, folder)
    pre, post = handler_fns(handler)
    core = WithoutFns(handler) if pre or post else handler
    inner = core
    if case.wrapper == "keyed":
        inner = KeyedModelHandler(core)
    elif case.wrapper.startswith("maybe_keyed"):
        inner = MaybeKeyedModelHandler(core)
    local = folder is not None and case.workers > 1 and case.runner in LOCAL_RUNNERS
    meet = Rendezvous(f"{folder}/overlap") if local else None  # two batches inside at once (overlap.py)
    return TracedHandler(inner, weight_batching(case.weight) if case.weight else None, pre, post, unkeyed=core,
                         rendezvous=meet)


def make_pipeline(runner, options, workers=1):
    return beam.Pipeline(options=PipelineOptions([f"--runner={_RUNNER_PATHS.get(runner, runner)}", *options,
                                                  *multi_process_options(workers)]))


def multi_process_options(workers):
    """FnApiRunner / DirectRunner in multi-process mode: ``workers`` SDK worker processes
    (``python -m apache_beam.runners.worker.sdk_worker_main``), each unpickling the handler and loading its model."""
    if workers <= 1:
        return []
    return ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]


@contextlib.contextmanager
def worker_import_path(workers):
    """Beam's local worker processes inherit this environment, not this process's sys.path: give them the
    same import path (the config's folder, where handler modules live, is on it), as a container image or
    ``--setup_file`` gives Dataflow's workers the handler's modules."""
    if workers <= 1:
        yield
        return
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, before or ""] if p)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def output_folder(runner, options):
    """Where the pipeline's records go: a local temp folder, or ``--temp_location`` on a remote runner."""
    if runner in LOCAL_RUNNERS:
        return tempfile.mkdtemp(prefix="paritygate-beam-")
    temp = PipelineOptions(list(options)).get_all_options().get("temp_location")
    if not temp:
        raise HandlerContractError(f"--parity-beam-runner={runner}: results come back through files; pass "
                                   "--parity-beam-option=--temp_location=<path the workers and this machine share>")
    return f"{temp.rstrip('/')}/paritygate-{uuid.uuid4().hex}"


def run_case(subject, case):
    """Run ``case`` once (memoised per subject): a PipelineRun with everything the checks need."""
    memo = subject.cache.setdefault("runs", {})
    if case not in memo:
        memo[case] = _run(subject, case)
    return memo[case]


def _run(subject, case):
    run = PipelineRun(case, case_inputs(subject.spec, case))
    folder = output_folder(case.runner, subject.options)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():  # a leaked file is reported by the handler_load_model check, not here
            warnings.simplefilter("ignore", ResourceWarning)
            handler = handler_stack(subject, case, folder)
            run.batching = dict(handler.batch_elements_kwargs())
            run.namespace = handler.get_metrics_namespace()
            with worker_import_path(case.workers):
                result = _build_and_run(subject, case, handler, folder)
            run.metrics = _metrics(result, run.namespace)
    except Exception as err:  # noqa: BLE001 - the pipeline failing is an outcome the checks report
        run.error = failure_text(err)
    run.seconds = time.perf_counter() - start
    for kind, item in read_records(folder):
        getattr(run, {"result": "results", "trace": "traces", "dead": "dead", "load": "loads"}[kind]).append(item)
    _as_sent(run, subject)
    return run


def _as_sent(run, subject):
    """With preprocess functions, the handler sees (and returns) preprocessed examples: name them by the
    element the suite sent, so that every check counts and pairs by the elements it sent."""
    pre = handler_fns(subject.make(run.case.min_batch, run.case.max_batch))[0]
    if not pre:
        return
    sent = {}
    for _, _, d, example in run.inputs:
        with contextlib.suppress(Exception):  # a preprocess fn failing on the poison element: nothing to rename
            sent.setdefault(digest(apply_fns(pre, example)), d)
    name = lambda d: sent.get(d, d)
    for e in run.results:
        e.digest = name(e.digest)
    run.traces = [replace(t, digests=tuple(map(name, t.digests)),
                          converted=tuple((name(a), b, text) for a, b, text in t.converted)) for t in run.traces]
    for b in run.dead:
        b.elements = [(k, kk, name(d)) for k, kk, d in b.elements]


def _build_and_run(subject, case, handler, folder):
    p = make_pipeline(case.runner, subject.options, case.workers)
    transform = RunInference(handler)
    pcoll = case_elements(p, subject.spec, case)
    if case.exceptions:
        out, dlq = pcoll | "RunInference" >> transform.with_exception_handling()
        _ = dlq.failed_inferences | "DeadRecords" >> beam.Map(dead_record) | "WriteDead" >> beam.ParDo(
            WriteRecords(folder))
        # an element a preprocess / postprocess function fails on lands in its step's own dead-letter output
        for i, bad in enumerate([*dlq.failed_preprocessing, *dlq.failed_postprocessing]):
            _ = (bad | f"DeadElements{i}" >> beam.Map(lambda dead: dead_record(([dead[0]], dead[1])))
                 | f"WriteDeadElements{i}" >> beam.ParDo(WriteRecords(folder)))
    else:
        out = pcoll | "RunInference" >> transform
    _ = (out | "Records" >> beam.Map(ToRecord(subject.spec, subject.output_names, case.keys != "none"))
         | "WriteRecords" >> beam.ParDo(WriteRecords(folder)))
    result = p.run()
    result.wait_until_finish()
    return result


# -- on the workers ----------------------------------------------------------------------------------
def case_elements(p, spec, case):
    """The case's elements as a PCollection of pipeline ``p`` (made on the workers: ``Element``). Several workers:
    Create's reshuffle lets the runner split the elements between the worker processes."""
    return (p | "Indices" >> beam.Create(range(case.count), reshuffle=case.workers > 1)
            | "Elements" >> beam.Map(Element(spec, case)))


def failure_text(err):
    """A pipeline's failure in one line: the exception's type and the last line of its message."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[-1][:500] if text else ''}"


class Element:
    """Element ``i`` of the case, made on the worker from the seed (shipping arrays in the pipeline graph
    costs Beam's pickler seconds of bz2 for a few MB), then passed through Beam's coder: RunInference gets
    what it gets behind any fusion break or from ``beam.Create`` (arrays that are views on decoded bytes)."""

    def __init__(self, spec, case):
        self.spec, self.case, self._inputs = spec, case, None

    def __getstate__(self):
        return {"spec": self.spec, "case": self.case, "_inputs": None}

    def __call__(self, i):
        if self._inputs is None:
            self._inputs = case_inputs(self.spec, self.case)
        key, keyed, _, example = self._inputs[i]
        example = beam_decoded(example)
        return (key, example) if keyed else example

def _metrics(result, namespace):
    """Counters and distributions of the handler's namespace and the suite's, by metric name."""
    out = {}
    for kind, items in result.metrics().query().items():
        for m in items:
            if m.key.metric.namespace not in (namespace, "paritygate"):
                continue
            value = m.committed if m.committed is not None else m.attempted
            if kind == "distributions":
                value = {"count": value.count, "sum": value.sum, "min": value.min, "max": value.max}
            elif kind != "counters":
                continue
            name = m.key.metric.name if m.key.metric.namespace != "paritygate" else f"paritygate/{m.key.metric.name}"
            out[name] = value
    return out
