"""``paritygate shadow CONFIG --data PATTERN --report DIR``: the gate as one Beam pipeline over recorded traffic
(paritygate.shadow). Exit status as ``paritygate run``: 0 pass, 1 a check failed or was inconclusive, 3 the
pipeline or a tool failed, 4 usage (config, data pattern, model)."""

import sys
import time
from pathlib import Path

from paritygate.backend import registry
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
    shadow.add_argument("--worst", type=int, default=10, metavar="K", help="worst examples kept (default: %(default)s)")
    shadow.add_argument("--numerics", choices=NUMERICS, default=DEFAULT_NUMERICS, help="how ONNX Runtime computes "
                        "float16 artifacts, as --parity-numerics (default: %(default)s)")
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
    report = Path(args.report)
    return Settings(spec, tuple(args.precisions or spec.precisions), args.data, args.format, args.runner,
                    tuple(args.beam_option), args.workers, args.worst, args.key_feature, args.slice_feature,
                    args.numerics, dead_letter=str(report / "dead-letter" / "records"))


def main(args):
    from paritygate.models.config import ConfigError

    try:
        spec = _spec(args)
        budget = _budget(args)
        settings = settings_of(args, spec)
    except (ConfigError, ValueError, OSError) as err:
        print(f"paritygate shadow: error: {err}", file=sys.stderr)
        return USAGE
    try:
        data = _run(settings, budget, Path(args.report))
    except Exception as err:  # noqa: BLE001 - the pipeline, a runtime or a handler failed: said, exit 3
        print(f"paritygate shadow: error: the pipeline failed: {type(err).__name__}: {err}", file=sys.stderr)
        return INTERNAL
    return _summary(data, args.report)


def _run(settings, budget, report):
    from paritygate.backend.tf.runner import TfRunner
    from paritygate.context import environment
    from paritygate.report import SCHEMA, write_data
    from paritygate.shadow.pipeline import run
    from paritygate.shadow.results import dead_letter_finding, precision_results

    spec = settings.spec
    output_names = list(TfRunner(Path(spec.reference), spec.signature).activate().output_names)
    started = time.time()
    outcome = run(settings, output_names)
    checks = [r for p in settings.precisions
              for r in precision_results(spec, p, outcome.stats[p], outcome.read, *budget, report / "reproducers")]
    finding = dead_letter_finding(spec, outcome)
    data = {"schema": SCHEMA, "environment": environment(), "runtime": registry.CPU, "numerics": settings.numerics,
            "config": str(spec.source), "device_class": None,
            "time": {"wall": round(time.time() - started, 3)},
            "checks": [c.to_dict() for c in sorted(checks, key=lambda c: (c.model, c.precision or "", c.check))],
            "findings": [finding] if finding else [],
            "shadow": {"data": settings.data, "format": settings.fmt, "runner": settings.runner, "options": list(settings.options),
                       "workers": settings.workers, "read": outcome.read, "dead_letters": dict(outcome.dead),
                       "dead_letter_files": settings.dead_letter, "handlers": outcome.handlers,
                       "pipeline_seconds": round(outcome.seconds, 3),
                       "examples_per_second": round(outcome.read / outcome.seconds, 1) if outcome.seconds else None}}
    write_data(data, report)
    return data


def _summary(data, report):
    from paritygate.result import read_checks
    from paritygate.verdict import FAILING

    run = data["shadow"]
    print(f"paritygate shadow: read {run['read']} examples, judged them in {run['pipeline_seconds']:.1f} s "
          f"({run['examples_per_second']} examples/s, runner {run['runner']}, {run['workers']} worker(s))")
    if run["dead_letters"]:
        total = sum(run["dead_letters"].values())
        print(f"paritygate shadow: {total} record(s) went to the dead-letter output, not judged: "
              f"{run['dead_letters']} -> {run['dead_letter_files']}-*.jsonl")
    checks = read_checks(data["checks"])
    for c in checks:
        text = "; ".join(c.failures or c.errors or []) or c.details.get("message", "")
        print(f"  {c.model} {c.precision} {c.check}: {c.status.upper()} {text}")
        if c.reproducer:
            print(f"    replay: {c.reproducer['command']}")
    print(f"paritygate shadow: wrote {Path(report) / 'parity-report.json'}, .md and .html")
    return FAILED if any(c.status in FAILING for c in checks) else 0
