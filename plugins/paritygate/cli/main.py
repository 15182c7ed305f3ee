"""The ``paritygate`` command: ``init``, ``run``, ``replay``, ``report``, ``shadow``.

Exit codes are pytest's (``pytest.ExitCode``): 0 ok, 1 checks failed, 2 interrupted, 3 internal error,
4 usage error (a wrong command line, a model or file that cannot be read), 5 no tests collected.
``paritygate run`` returns what pytest returns; ``paritygate replay`` its own (paritygate.cli.replay: 0 not
reproduced, 1 reproduced, 2 usage, 3 the file, its config or a runtime could not be loaded).

Every problem is one ``paritygate COMMAND: error:`` line on stderr; a bug of paritygate's is one line too
(exit 3), whose traceback ``--debug`` shows.
"""

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from paritygate import __version__
from paritygate.common.escape import one_line

OK, FAILED, INTERRUPTED, INTERNAL, USAGE = 0, 1, 2, 3, 4  # pytest.ExitCode, without importing pytest here


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 (pytest's "interrupted"); a usage error is pytest's 4
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message}\n")


def build_parser():
    parser = _Parser(prog="paritygate", description="TF -> ONNX -> TensorRT parity and Beam RunInference "
                     "conformance: the pytest suite and its tools.")
    parser.add_argument("--version", action="version", version=f"paritygate {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    init = sub.add_parser("init", help="inspect a model and write a starter config")
    init.add_argument("model", metavar="MODEL", help="the TF reference: a SavedModel folder, a .keras file or a legacy Keras 2 .h5/.hdf5 file")
    init.add_argument("--onnx", metavar="FILE", help="the candidate ONNX file; its names are paired with the "
                      "reference's and written into the config")
    init.add_argument("--onnx-fp16", metavar="FILE", help="your own fp16 ONNX (the file the engine is built from), "
                      "judged as it is")
    init.add_argument("--onnx-int8", metavar="FILE", help="your own int8 (Q/DQ) ONNX, judged as it is")
    init.add_argument("-o", "--output", metavar="PATH", default="parity.toml", help="default: parity.toml")
    init.add_argument("--name", help="model name in the config (default: from MODEL)")
    init.add_argument("--signature", default="serving_default", help="SavedModel signature (default: %(default)s)")
    init.add_argument("--max-batch", type=int, default=4, metavar="N", help="default: %(default)s")
    init.add_argument("--force", action="store_true", help="overwrite PATH")
    init.add_argument("--allow-unsafe-deserialization", action="store_true", help="load a Keras file whose Lambda "
                      "layers hold Python code (run when the file loads); only for a file you trust (default: refused)")

    run = sub.add_parser("run", help="run the conformance suite on a config (further arguments go to pytest)",
                         description="Run the conformance suite on CONFIG. Arguments after CONFIG that are not "
                         "paritygate's go to pytest, e.g. `paritygate run parity.toml -k linear -x`.")
    run.add_argument("config", metavar="CONFIG", help="the model config (TOML)")
    run.add_argument("--report", metavar="DIR", help="write parity-report.json/.md/.html into DIR")

    from paritygate.cli.replay import REPLAYS, add_run_arguments

    replay = sub.add_parser("replay", help="replay a saved reproducer (.npz)", epilog="exit status: 0 passes (not "
                            "reproduced), 1 fails (reproduced), 2 usage, 3 error (the file, its config or a runtime "
                            "could not be loaded)")
    replay.add_argument("file", metavar="FILE", help="a reproducer written by a failing property check")
    replay.add_argument("--check", choices=sorted(REPLAYS), help="the check to replay (default: the one recorded "
                        "in FILE)")
    add_run_arguments(replay)

    report = sub.add_parser("report", help="re-render parity-report.md and .html from a parity-report.json, or "
                            "merge shard reports into one", description="One JSON: re-render its Markdown and "
                            "HTML (exit 0). Several (the shards of one run): merge them into one "
                            "parity-report.json/.md/.html in --out and exit with the merged verdict (0 pass, 1 fail).")
    report.add_argument("json", metavar="JSON", nargs="+", help="a parity-report.json (several: shard reports)")
    report.add_argument("--out", metavar="DIR", help="where to write them (default: beside JSON; required to merge)")

    from paritygate.cli import shadow

    shadow.add_parser(sub)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if extra and args.command != "run":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    command = {"init": _init, "run": _run, "replay": _replay, "report": _report, "shadow": _shadow}[args.command]
    try:
        return command(args, extra)
    except KeyboardInterrupt:
        print(f"paritygate {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as err:
        if args.debug:
            raise
        text = one_line(err)[:500]
        print(f"paritygate {args.command}: error: internal error {type(err).__name__}: {text} (a bug of "
              "paritygate's: rerun with --debug for the traceback and report it)", file=sys.stderr)
        return INTERNAL


def _error(command, err):
    """The one error line of a command: a tool's message on one line, its ANSI colour codes dropped."""
    print(f"paritygate {command}: error: {one_line(err)}", file=sys.stderr)


def _init(args, _extra):
    from paritygate.cli.init import InitError, write_starter

    if args.allow_unsafe_deserialization:
        from paritygate.backend.tf.util import allow_unsafe_deserialization

        allow_unsafe_deserialization()
    try:
        path = write_starter(args.model, args.output, onnx=args.onnx, name=args.name, signature=args.signature,
                             max_batch=args.max_batch, force=args.force,
                             artifacts={"fp16": args.onnx_fp16, "int8": args.onnx_int8})
    except InitError as err:
        _error("init", err)
        return USAGE
    print(f"wrote {path}: check the lines marked # CONFIRM, then run `paritygate run {path}`")
    return OK


def suite_args():
    """What pytest collects: the installed package ``paritygate.conformance``, or the checkout's folder."""
    from paritygate.models.bundled import CONFORMANCE_PACKAGE, _installed, conformance_dir

    return ["--pyargs", CONFORMANCE_PACKAGE] if _installed(CONFORMANCE_PACKAGE) else [str(conformance_dir())]


def _run(args, extra):
    """pytest in a child process: this one has imported paritygate already, which pytest could then not
    assertion-rewrite (the plugin's modules are rewritten when pytest loads them through the entry point)."""
    from paritygate.files import FileRefused, check_file

    config = Path(args.config)
    try:
        check_file(config, "config file", "config")
    except FileRefused as err:
        _error("run", err)
        return USAGE
    pytest_args = [*suite_args(), f"--parity-config={config}"]
    if args.report:
        pytest_args.append(f"--parity-report={args.report}")
    child = subprocess.Popen([*safe_python(), *pytest_args, *extra], env={**os.environ, "PYTHONSAFEPATH": "1"})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the suite too (the terminal's
    try:  # process group): it stops and writes a report that says INTERRUPTED, which this process waits for
        return child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


# Python 3.10 has no -P: the interpreter starts through -c, whose sys.path[0] ('', the current folder) goes first
_SAFE_PYTEST_310 = "import sys; sys.path.pop(0); import pytest; sys.exit(pytest.console_main())"


def safe_python():
    """``python -m pytest`` with no folder the user did not name importable: -P (and PYTHONSAFEPATH=1 for the
    processes it starts: xdist workers, the TensorFlow child) keeps the current folder off sys.path, where a
    ``json.py`` or ``numpy.py`` beside the config would run. The one folder a config makes importable is its
    Beam handler's (docs/limits.md, "The code a config runs")."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "pytest"]
    return [sys.executable, "-c", _SAFE_PYTEST_310]


def _replay(args, _extra):
    from paritygate.cli import replay

    argv = [args.file] + [f"--{k}={v}" for k in ("check", "runtime", "numerics") if (v := getattr(args, k))]
    return int(replay.main(argv) or 0)


def _shadow(args, _extra):
    from paritygate.cli import shadow

    return shadow.main(args)


def _report(args, _extra):
    from paritygate.report import FILES, write_data
    from paritygate.report.merge import MergeError, read_report

    if len(args.json) > 1:
        return _merge(args)
    source = Path(args.json[0])
    try:
        data = read_report(source)
    except MergeError as err:
        _error("report", err)
        return USAGE
    out = Path(args.out) if args.out else source.parent
    try:
        write_data(data, out, FILES[1:])  # the Markdown and HTML; the JSON stays as it is
    except OSError as err:
        print(f"paritygate report: error: {_unwritable(args, out, err)}", file=sys.stderr)
        return USAGE
    print(f"wrote {out / 'parity-report.md'} and {out / 'parity-report.html'}")
    return OK


def _unwritable(args, out, err):
    """One line for a report folder that cannot be written: the option or the folder beside the JSON."""
    where = f"--out {out}" if args.out else f"{out} (beside the JSON; choose another folder with --out DIR)"
    return f"{where}: cannot write the report there: {getattr(err, 'strerror', None) or err}"


def _merge(args):
    from paritygate.report import write_data
    from paritygate.report.merge import MergeError, merge_reports
    from paritygate.report.text import counts, run_fails
    from paritygate.result import read_checks

    if not args.out:
        print("paritygate report: error: merging shard reports needs --out DIR (the shards' own files stay as they "
              "are)", file=sys.stderr)
        return USAGE
    try:
        data = merge_reports(args.json)
    except MergeError as err:
        _error("report", err)
        return USAGE
    try:
        out = write_data(data, Path(args.out))
    except OSError as err:
        print(f"paritygate report: error: {_unwritable(args, Path(args.out), err)}", file=sys.stderr)
        return USAGE
    base, checks = data.get("baseline") or {}, read_checks(data["checks"])
    failed = run_fails(checks) or base.get("new_failures") or any(d.get("gating") for d in base.get("drift", []))
    tally = ", ".join(f"{n} {s}" for s, n in counts(checks).items() if n)
    word = "INTERRUPTED" if data.get("status") == "interrupted" else ("FAIL" if failed else "PASS")
    print(f"paritygate report: {len(args.json)} shards, {len(data['checks'])} checks: {tally}; "
          f"verdict {word}; wrote {out / 'parity-report.json'}, .md and .html")
    for line in data["environment_differs"]:
        print(f"paritygate report: WARNING: shards ran on different environments: {line}")
    return {"INTERRUPTED": INTERRUPTED, "FAIL": FAILED}.get(word, OK)


if __name__ == "__main__":
    sys.exit(main())
