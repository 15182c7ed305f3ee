"""``paritygate shadow CONFIG --data PATTERN --report DIR``: the gate as one Beam pipeline over recorded traffic
(paritygate.shadow). Exit status as ``paritygate run``: 0 pass, 1 a check failed or was inconclusive, 3 the
pipeline or a tool failed, 4 usage (config, data pattern, model; data of which no record could be judged, keys
that repeat: with a report)."""

import sys
import time
from pathlib import Path

from paritygate.common.escape import one_line
from paritygate.common.numerics import DEFAULT_NUMERICS, NUMERICS

FAILED, INTERNAL, USAGE = 1, 3, 4


def add_parser(sub):
    shadow = sub.add_parser("shadow", help="judge candidates on recorded traffic as one Beam pipeline",
                            description="Run the reference and each candidate precision over recorded traffic "
                            "with Beam RunInference, judge every example with the checks' comparator and gate the "
                            "flip rate on its Clopper-Pearson interval (docs/shadow.md).")
    shadow.add_argument("config", metavar="CONFIG", help="the model config (TOML)")
    shadow.add_argument("--data", metavar="PATTERN", required=True, help="the recorded traffic: a file glob "
                        "(local, or any Beam filesystem); shard it into at least as many files as workers")
    shadow.add_argument("--format", choices=("tfrecord", "npz", "parquet"), default="tfrecord",
                        help="tf.train.Example TFRecords, .npz shards or Parquet (default: %(default)s)")
    shadow.add_argument("--model", metavar="NAME", help="the config's model to judge (default: its only model)")
    shadow.add_argument("--precisions", nargs="+", metavar="P", help="candidate precisions (default: the model's)")
    shadow.add_argument("--report", metavar="DIR", required=True, help="write parity-report.json/.md/.html, the "
                        "dead-letter files and the reproducers into DIR")
    shadow.add_argument("--runner", default="DirectRunner", help="Beam runner (default: %(default)s)")
    shadow.add_argument("--beam-option", action="append", default=[], metavar="OPTION",
                        help="a Beam pipeline option, repeatable, e.g. --beam-option=--job_endpoint=embed")
    shadow.add_argument("--workers", type=int, default=1, metavar="N", help="DirectRunner worker processes "
                        "(--direct_running_mode=multi_processing) (default: %(default)s)")
    shadow.add_argument("--accuracy-target", choices=("99", "99.9"), default="99", help="MLPerf Inference accuracy "
                        "target the flip budget comes from: 99 -> 1%%, 99.9 -> 0.1%% (default: %(default)s)")
    shadow.add_argument("--flip-budget", type=float, metavar="RATE", help="a flip budget of your own (a rate in "
                        "[0, 1]; recorded with 'command line' as its source)")
    shadow.add_argument("--key-feature", metavar="NAME", help="the feature holding each record's key (default: "
                        "file name and record index)")
    shadow.add_argument("--slice-feature", metavar="NAME", help="the feature to slice the statistics by")
    shadow.add_argument("--min-group-examples", type=int, metavar="N", help="gate a reference class or slice only "
                        "from N examples on (default: the fewest at which a rate with no event could pass the "
                        "budget: 368 at 1%%, 3688 at 0.1%%); smaller ones are reported, not gated")
    shadow.add_argument("--worst", type=int, default=10, metavar="K", help="worst examples kept (default: %(default)s)")
    shadow.add_argument("--numerics", choices=NUMERICS, default=DEFAULT_NUMERICS, help="how ONNX Runtime computes "
                        "float16 artifacts, as --parity-numerics (default: %(default)s)")
    shadow.add_argument("--max-infer-s", metavar="SECONDS", help="the longest one inference call of the suite's "
                        "runners (reference, ONNX Runtime candidates) may run before the run stops with an error, as "
                        "--parity-max-infer-s (default: PARITYGATE_MAX_INFER_S or 600)")
    return shadow


def _budget(args):
    from paritygate.shadow.results import FLIP_BUDGET, FLIP_SOURCE, HIGH_ACCURACY_BUDGET, HIGH_ACCURACY_SOURCE

    if args.flip_budget is not None:
        if not 0 <= args.flip_budget <= 1:
            raise ValueError(f"--flip-budget {args.flip_budget}: a rate in [0, 1]")
        return args.flip_budget, f"--flip-budget {args.flip_budget} (command line)"
    return (HIGH_ACCURACY_BUDGET, HIGH_ACCURACY_SOURCE) if args.accuracy_target == "99.9" else (FLIP_BUDGET,
                                                                                               FLIP_SOURCE)


def _spec(args):
    from paritygate.models.config import load_config

    models = load_config(Path(args.config))
    if args.model:
        found = [m for m in models if m.name == args.model]
        if not found:
            raise ValueError(f"--model {args.model}: {args.config} has models {[m.name for m in models]}")
        spec = found[0]
    elif len(models) == 1:
        spec = models[0]
    else:
        raise ValueError(f"{args.config} has {len(models)} models {[m.name for m in models]}: name one with --model")
    unknown = sorted(set(args.precisions or ()) - set(spec.precisions))
    if unknown:
        raise ValueError(f"--precisions {unknown}: model '{spec.name}' lists {list(spec.precisions)}")
    return spec


def settings_of(args, spec):
    from paritygate.shadow.pipeline import Settings
    from paritygate.shadow.read import match

    match(args.data)  # ValueError naming the pattern when nothing matches
    if args.workers < 1 or args.worst < 1:
        raise ValueError(f"--workers {args.workers} / --worst {args.worst}: each at least 1")
    if args.min_group_examples is not None and args.min_group_examples < 1:
        raise ValueError(f"--min-group-examples {args.min_group_examples}: at least 1")
    if args.key_feature and args.key_feature in spec.inputs or args.slice_feature and args.slice_feature in spec.inputs:
        raise ValueError(f"--key-feature / --slice-feature: '{args.key_feature or args.slice_feature}' is an input of "
                         f"model '{spec.name}'; name a feature of its own (a request id, a segment)")
    report = Path(args.report)
    return Settings(spec, tuple(args.precisions or spec.precisions), args.data, args.format, args.runner,
                    tuple(args.beam_option), args.workers, args.worst, args.key_feature, args.slice_feature,
                    args.numerics, dead_letter=str(report / "dead-letter" / "records"))


def main(args):
    from paritygate.comparator.task import TaskSpecError
    from paritygate.models.config import ConfigError

    try:
        if args.max_infer_s is not None:
            from paritygate.backend.deadline import configure

            configure(args.max_infer_s, "--max-infer-s")  # this process and its Beam worker processes
        spec = _spec(args)
        budget = _budget(args)
        settings = settings_of(args, spec)
    except (ConfigError, ValueError, OSError) as err:
        print(f"paritygate shadow: error: {one_line(err)}", file=sys.stderr)
        return USAGE
    try:
        data = _run(settings, budget, args.min_group_examples, Path(args.report))
    except TaskSpecError as err:  # the checks' own rule for the output the task judges, and its words
        text = one_line(err).split(" [while running")[0]
        print(f"paritygate shadow: error: {text}", file=sys.stderr)
        return USAGE
    except Exception as err:  # noqa: BLE001 - the pipeline, a runtime or a handler failed: said, exit 3
        print(f"paritygate shadow: error: the pipeline failed: {type(err).__name__}: {one_line(err)[:2000]}",
              file=sys.stderr)
        return INTERNAL
    return _summary(data, args.report)


def _run(settings, budget, min_examples, report):
    """Run the pipeline and write the report (``report.report_data``, the one writer); the report dict."""
    from paritygate.backend.tf.runner import TfRunner
    from paritygate.beam.tf_handler import lending
    from paritygate.context import RunContext
    from paritygate.report import report_data, write_data
    from paritygate.shadow.data import data_result, summary
    from paritygate.shadow.pipeline import run
    from paritygate.shadow.results import precision_results

    spec = settings.spec
    reference = TfRunner(Path(spec.reference), spec.signature).activate()
    started = time.time()
    with lending(reference):  # a pipeline in this process serves from it rather than loading the model again
        outcome = run(settings, list(reference.output_names))
    ctx = RunContext(numerics=settings.numerics, reproducer_dir=report / "reproducers")
    checks = [data_result(spec.name, summary(outcome, settings.key_feature))]
    checks += [r for p in settings.precisions
               for r in precision_results(spec, p, outcome.stats.get(p), outcome.read, *budget, ctx, min_examples)]
    for c in checks:
        c.settle()
    run_info = {"data": settings.data, "format": settings.fmt, "runner": settings.runner,
                "options": list(settings.options), "workers": settings.workers, "read": outcome.read,
                "handlers": outcome.handlers, "pipeline_seconds": round(outcome.seconds, 3),
                "build_seconds": round(outcome.build_seconds, 3),
                "examples_per_second": round(outcome.read / outcome.seconds, 1) if outcome.seconds else None}
    data = report_data(checks, [f for c in checks for f in c.findings], ctx, config=spec.source, device_class=None,
                       time={"wall": round(time.time() - started, 3)}, shadow=run_info)
    write_data(data, report)
    return data


def _summary(data, report):
    from paritygate.report.shadow import terminal_lines
    from paritygate.result import read_checks
    from paritygate.verdict import FAILING

    for line in terminal_lines(data):
        print(line)
    print(f"paritygate shadow: wrote {Path(report) / 'parity-report.json'}, .md and .html")
    checks = read_checks(data["checks"])
    if any(c.check == "shadow_data" and c.status == "error" for c in checks):
        return USAGE  # the data could not serve a verdict: fix it first
    return FAILED if any(c.status in FAILING for c in checks) else 0
