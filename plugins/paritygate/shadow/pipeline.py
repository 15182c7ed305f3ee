"""One Beam pipeline per shadow run, with no shuffle of examples (memory does not grow with their number):

    files -> ReadFile (dead letters apart) -> RunInference(reference) -> RunInference(candidate) per precision
          -> judge the examples (shadow.screen, shadow.example) into the bundle's ShadowStats -> CombinePerKey(precision) -> files

The models run one after another on the same keyed element: each ``KeyedModelHandler`` carries the example's key,
slice value and the outputs so far in its key, so the "join by key" is the chain itself (Beam's documented
alternative, two RunInference branches and a CoGroupByKey, materialises every example in the shuffle). Work is
spread by file: shard the data into at least as many files as workers. The combine is lifted (partial
accumulators per bundle), so only one accumulator per precision and bundle crosses a shuffle.
Imports apache_beam: import it on first use.
"""

import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindows

from paritygate.beam.contract import (
    as_feed,
    declared_precision,
    element_of,
    handler_path,
    load_factory,
    make_handler,
    normalise_inference,
)
from paritygate.beam.pipeline import make_pipeline, worker_import_path
from paritygate.beam.records import WriteRecords, read_records
from paritygate.common.numerics import DEFAULT_NUMERICS
from paritygate.shadow.combiners import KeyCheckFn, MergedStatsFn, OutsideFn
from paritygate.shadow.read import COUNT, DEAD, OUTSIDE, Layout, ReadFile, match
from paritygate.shadow.screen import BUNDLE, judge_bundle
from paritygate.shadow.stats import ShadowStats

PROGRESS_SECONDS = 5.0  # a progress line per worker process at most this often
DEAD_SAMPLES = 5  # dead letters kept per category for the report (all of them go to the dead-letter files)


@dataclass
class Settings:
    spec: object
    precisions: tuple
    data: str  # a file pattern
    fmt: str = "tfrecord"
    runner: str = "DirectRunner"
    options: tuple = ()  # Beam pipeline options, e.g. ("--direct_running_mode=multi_processing", ...)
    workers: int = 1
    worst: int = 10
    key_feature: str = None
    slice_feature: str = None
    numerics: str = DEFAULT_NUMERICS
    dead_letter: str = None  # path prefix of the dead-letter files (JSON lines); None: counts and samples only


@dataclass
class Outcome:
    settings: Settings
    handlers: dict  # precision -> what served it ("reference" too)
    stats: dict = field(default_factory=dict)  # precision -> combiners.ShadowStats
    read: int = 0
    dead: Counter = field(default_factory=Counter)
    dead_samples: dict = field(default_factory=dict)  # category -> [(key, reason)]
    outside: object = None  # combiners.OutsideTally of the records outside the declared range (None: none)
    keys: tuple = None  # (records, repeated, sample keys) with a key feature
    files: list = field(default_factory=list)  # the files read
    seconds: float = 0.0  # run().wait_until_finish(): loading the models in the workers, reading, judging
    build_seconds: float = 0.0  # constructing the pipeline's graph before it runs


def reference_handler(spec):
    from paritygate.beam.tf_handler import TFNumpyHandler

    return TFNumpyHandler(spec.reference, spec.signature, min_batch_size=spec.max_batch,
                          max_batch_size=spec.max_batch)


def candidate_handler(spec, precision, output_names, numerics=DEFAULT_NUMERICS):
    """(handler, what it is): the team's ``[models.beam]`` handler where it declares ``precision``, else the suite's
    ONNX Runtime handler over the candidate artifact at ``precision``, run as the checks run it (strict numerics:
    ``backend.runtimes.computed_artifact``)."""
    if handler_path(spec):
        factory = load_factory(spec)
        handler = make_handler(spec, factory, spec.max_batch, spec.max_batch, output_names)
        if declared_precision(spec, handler, factory) == precision:
            return handler, handler_path(spec)
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.runtimes import computed_artifact
    from paritygate.beam.serving import OnnxRuntimeHandler, bindings_for, output_names_for

    artifact = onnx_artifact(spec, precision)
    served = computed_artifact(artifact, numerics)
    handler = OnnxRuntimeHandler(served, bindings_for(spec, artifact), spec.max_batch,
                                 output_names_for(spec, artifact, output_names), min_batch_size=spec.max_batch,
                                 max_batch_size=spec.max_batch)
    return handler, f"paritygate.beam.serving.OnnxRuntimeHandler({served})"


class Carry:
    """``((key, slice, outputs), PredictionResult)`` -> ``((key, slice, outputs + this model's), example)``."""

    def __init__(self, spec, output_names, side):
        self.spec, self.output_names, self.side = spec, list(output_names), side

    def __call__(self, element):
        (key, slice_value, outputs), result = element
        inference = result.inference
        if self.side == "reference":
            got = dict(inference) if isinstance(inference, dict) else {self.output_names[0]: inference}
        else:
            got = normalise_inference(self.spec, self.output_names, inference)
        return (key, slice_value, {**outputs, self.side: got}), result.example


class JudgeBundle(beam.DoFn):
    """The last model's ``((key, slice, outputs), PredictionResult)`` -> every precision judged on the example and
    folded into this bundle's ShadowStats; each precision's stats go out at the bundle's end, as (precision,
    ShadowStats): one element a precision and bundle crosses to the combine, not one an example (Beam's "combine
    in the DoFn" pattern). Examples are judged screen.BUNDLE at a time (``shadow.screen``: the records
    ``shadow.example`` gives, the clean rows screened together), so a bundle holds at most that many."""

    def __init__(self, spec, output_names, side, precisions, worst):
        self.carry, self.spec = Carry(spec, output_names, side), spec
        self.precisions, self.worst = tuple(precisions), worst

    def start_bundle(self):
        self.stats = {p: ShadowStats(self.worst) for p in self.precisions}
        self.held = []

    def process(self, element):
        (key, slice_value, outputs), example = self.carry(element)
        self.held.append((key, slice_value, as_feed(self.spec, example), outputs))
        progress("judged")
        if len(self.held) >= BUNDLE:
            self.judge()

    def judge(self):
        for precision in self.precisions:
            examples = [(key, slice_value, feed, outputs["reference"], outputs[precision])
                        for key, slice_value, feed, outputs in self.held]
            for record in judge_bundle(self.spec, precision, examples):
                self.stats[precision].add(record)
        self.held = []

    def finish_bundle(self):
        self.judge()
        for precision, stats in self.stats.items():
            if stats.examples:
                yield GlobalWindows.windowed_value((precision, stats))


class KeyedRead(ReadFile):
    """``ReadFile`` emitting what the first ``KeyedModelHandler`` takes: ((key, slice, {}), the handler's element)."""

    def __init__(self, spec, layout, fmt):
        super().__init__(layout, fmt)
        self.spec = spec

    def emit(self, key, feed, value):
        progress("read")
        return (key, value, {}), element_of(self.spec, feed)


_COUNTS = Counter()  # this process's progress: examples read and judged
_CLOCK = {}


def progress(what):
    """Count ``what`` in this process; print one line at most every PROGRESS_SECONDS to stderr."""
    _COUNTS[what] += 1
    now = time.monotonic()
    start = _CLOCK.setdefault("start", now)
    if now - _CLOCK.setdefault("last", now) >= PROGRESS_SECONDS:
        _CLOCK["last"] = now
        rate = _COUNTS["judged"] / max(now - start, 1e-9)
        print(f"paritygate shadow [pid {os.getpid()}]: read {_COUNTS['read']}, judged {_COUNTS['judged']} "
              f"({rate:.0f} examples/s)", file=sys.stderr, flush=True)


def build(p, settings, output_names, handlers, folder, files):
    """The pipeline's transforms on ``p``; every result goes to ``folder`` as records (beam.records.WriteRecords)."""
    spec = settings.spec
    layout = Layout.of(spec, settings.key_feature, settings.slice_feature)
    read = (p | "Files" >> beam.Create(files)
            | "Read" >> beam.ParDo(KeyedRead(spec, layout, settings.fmt)).with_outputs(DEAD, OUTSIDE, COUNT,
                                                                                      main="good"))
    stream, sides = read.good, list(handlers)
    for side in sides:
        stream = stream | f"RunInference {side}" >> RunInference(KeyedModelHandler(handlers[side]))
        if side != sides[-1]:
            stream = stream | f"Carry {side}" >> beam.Map(Carry(spec, output_names, side))
    judged = stream | "Judge" >> beam.ParDo(JudgeBundle(spec, output_names, sides[-1], settings.precisions,
                                                        settings.worst))
    records = [judged | "Stats" >> beam.CombinePerKey(MergedStatsFn(settings.worst))
               | "Stats record" >> beam.Map(lambda kv: ("stats", kv)),
               read.count | "Read record" >> beam.Map(lambda n: ("read", n)),
               read.dead | "Dead by kind" >> beam.Map(lambda d: (d[0], (d[1], d[2])))
               | "Dead samples" >> beam.combiners.Sample.FixedSizePerKey(DEAD_SAMPLES)
               | "Dead record" >> beam.Map(lambda kv: ("dead", kv)),
               read.dead | "Dead kind" >> beam.Map(lambda d: d[0]) | "Dead count" >> beam.combiners.Count.PerElement()
               | "Dead count record" >> beam.Map(lambda kv: ("dead_count", kv)),
               read.outside | "Outside" >> beam.CombineGlobally(OutsideFn()).without_defaults()
               | "Outside record" >> beam.Map(lambda t: ("outside", t))]
    if settings.key_feature:
        records.append(read.good | "Keys" >> beam.Map(lambda r: r[0][0]) | "Key check" >> beam.CombineGlobally(KeyCheckFn())
                       | "Keys record" >> beam.Map(lambda t: ("keys", t)))
    if settings.dead_letter:
        _ = (read.dead | "Dead JSON" >> beam.Map(_dead_json)
             | "Dead letters" >> beam.io.WriteToText(settings.dead_letter, file_name_suffix=".jsonl"))
    _ = records | beam.Flatten() | "Write" >> beam.ParDo(WriteRecords(folder))


def _dead_json(dead):
    import json

    category, key, reason = dead
    return json.dumps({"category": category, "key": key, "reason": reason})


def output_folder(options):
    """Where the records go: ``--temp_location`` when given (a remote runner's workers must reach it), else a local
    temporary folder (this process's runners: DirectRunner, FnApiRunner, PortableRunner LOOPBACK)."""
    temp = PipelineOptions(list(options)).get_all_options().get("temp_location")
    if temp:
        return f"{temp.rstrip('/')}/paritygate-shadow-{uuid.uuid4().hex}"
    return tempfile.mkdtemp(prefix="paritygate-shadow-")


LOCAL_RUNNER = "FnApiRunner"  # what --runner DirectRunner runs: Beam's DirectRunner would try Prism first


def run(settings, output_names):
    """Run the pipeline; the Outcome. ``output_names``: the reference's output names (TfRunner.output_names)."""
    spec = settings.spec
    handlers = {"reference": reference_handler(spec)}
    served = {"reference": f"paritygate.beam.tf_handler.TFNumpyHandler({spec.reference})"}
    for precision in settings.precisions:
        handlers[precision], served[precision] = candidate_handler(spec, precision, output_names, settings.numerics)
    folder = output_folder(settings.options)
    files = match(settings.data)
    runner = LOCAL_RUNNER if settings.runner == "DirectRunner" else settings.runner
    with worker_import_path(settings.workers):
        building = time.perf_counter()
        p = make_pipeline(runner, settings.options, settings.workers)
        build(p, settings, output_names, handlers, folder, files)
        start = time.perf_counter()  # the pipeline's own time: its workers loading the models, then every record
        p.run().wait_until_finish()
    outcome = Outcome(settings, served, files=files, seconds=time.perf_counter() - start,
                      build_seconds=start - building)
    for kind, value in read_records(folder):
        collect(outcome, kind, value)
    return outcome


def collect(outcome, kind, value):
    """Fold one record the pipeline wrote into ``outcome``."""
    if kind == "stats":
        precision, acc = value
        outcome.stats[precision] = outcome.stats[precision].merge(acc) if precision in outcome.stats else acc
    elif kind == "read":
        outcome.read += value
    elif kind == "dead":
        outcome.dead_samples.setdefault(value[0], []).extend(value[1])
    elif kind == "dead_count":
        outcome.dead[value[0]] += value[1]
    elif kind == "outside":
        outcome.outside = value if outcome.outside is None else outcome.outside.merge(value)
    elif kind == "keys":
        outcome.keys = value
