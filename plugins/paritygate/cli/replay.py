"""Reproducers: a failing example saved as an ``.npz`` (allow_pickle=False) plus Polygraphy's inputs JSON, and
the command that replays *the check that failed* on it:

    paritygate replay FILE.npz      (or python -m paritygate.cli.replay FILE.npz [--check CHECK] [--runtime ...])

Exit status: 0 the check passes on the saved inputs (not reproduced), 1 it fails (reproduced: a candidate that
crashes on them too, as in the run), 2 usage, 3 error (the file, its config or a runtime could not be loaded:
nothing was judged).

Replay builds only the runners it needs, from a ``paritygate.context.RunContext`` (no pytest session).
"""

import argparse
import sys

from paritygate.inputs.reproducer import ReplayError, load_reproducer, save_reproducer  # noqa: F401 (re-exported)
from paritygate.result import CheckResult

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3


def replayed(check, spec, precision, passed, lines, subject="the candidate"):
    """A replay's CheckResult: ``details["lines"]`` says what was compared, one line each, and ``subject`` who the
    check judges (the candidate, or the reference for ``reference_unstable``)."""
    return CheckResult(spec.name, precision, check, "pass" if passed else "fail",
                       failures=[] if passed else list(lines),
                       details={"lines": list(lines), "subject": subject})


# -- one function per replayable check: (settings, spec, precision, inputs, meta) -> CheckResult ------------
def _matches_reference(settings, spec, precision, inputs, meta):
    """The candidate vs the live TF reference on the saved inputs: the elementwise policy and the task metric."""
    from paritygate.backend.runtimes import candidate_runner, reference_runner, resolved_spec
    from paritygate.inputs.goldens import Golden
    from paritygate.judge import conditioning, kernel_order
    from paritygate.judge.parity import judge_outputs

    reference = reference_runner(settings, spec)
    ref, cand = reference.infer(inputs), candidate_runner(settings, spec, precision).infer(inputs)
    outputs, task, failures = judge_outputs(resolved_spec(settings, spec), precision, ref, cand)
    floors = [None]
    if failures and kernel_order.applies(precision):  # as the check judged: the second kernel order where it fails
        floors, _ = kernel_order.floors(settings, spec, precision, [Golden(inputs, ref)])
        outputs, task, failures = judge_outputs(resolved_spec(settings, spec), precision, ref, cand, floors=floors[0])
    runs = conditioning.measured(spec, inputs, reference.infer) if failures else None
    if runs is not None and runs.conditioning() is not None:  # where it would fail, as the check judged it
        outputs, task, failures = judge_outputs(resolved_spec(settings, spec), precision, ref, cand,
                                                floors=conditioning.floors(runs, floors[0] or {}))
    lines = [("PASS " if o.passed else "FAIL ") + o.describe() for o in outputs]
    lines += [f"task: {task}"] if task else []
    lines += [f"note: input '{n}' was recorded outside its declared range {list(spec.inputs[n].range)} (paritygate "
              "shadow traffic): judged as recorded" for n in meta.get("outside_range") or [] if n in spec.inputs]
    return replayed("matches_reference", spec, precision, not failures, lines + failures)


def _property(check):
    """The property's own per-input check (``paritygate.judge.properties.CHECKS``), with the reference run in every
    configuration the candidate is judged in, exactly as the property ran it on this input."""

    def run(settings, spec, precision, inputs, meta):
        from paritygate.backend.runtimes import resolved_spec
        from paritygate.judge.properties import CHECKS
        from paritygate.judge.reference_noise import Ledger, reference_noise
        from paritygate.judge.runs import once

        ledger = Ledger()
        candidate = once(settings, spec, precision)
        judge = CHECKS[check](resolved_spec(settings, spec), precision, candidate, ledger)
        profile = reference_noise(settings, spec).profile(inputs)
        try:
            judge(inputs, profile)
        except AssertionError as err:
            return replayed(check, spec, precision, False, str(err).splitlines() + _unstable_lines(ledger))
        return replayed(check, spec, precision, True,
                        [f"PASS {o.describe()}" for o in ledger.worst.values()] + _unstable_lines(ledger))

    return run


def _unstable_lines(ledger):
    return [f"note: the reference disagrees with itself on output '{u['output']}' ({u['configuration']} vs the "
            f"whole batch) by {u['max_spread']:.3g}, over the limit {u['limit_at_worst']:.3g}"
            for u in ledger.unstable]


def _reference_unstable(settings, spec, precision, inputs, meta):
    """The reference's own spread on the saved inputs against the limit of the check that found it (named in
    the reproducer's message, ``<model> <check>: ...``)."""
    from paritygate.judge import properties as p
    from paritygate.judge.reference_noise import Ledger, reference_noise

    found_by = str((meta.get("failures") or [""])[0]).split(":", 1)[0].split()[-1:] or ["property_parity"]
    limit, which = p.check_limit(found_by[0], spec, precision)
    ledger, profile = Ledger(), reference_noise(settings, spec).profile(inputs)
    profile.complete()  # each row alone too: the configurations the finding was measured over
    ledger.note_unstable(inputs, profile, limit, which)
    return replayed("reference_unstable", spec, precision, not ledger.unstable,
                    _unstable_lines(ledger) or ["the reference agrees with itself within the check's limit"],
                    subject="the reference")


def _ill_conditioned(settings, spec, precision, inputs, meta):
    """The reference's move under one step of the saved inputs' resolution against the limit of the check that found
    it (paritygate.judge.conditioning): reproduced while K x that move still exceeds the limit."""
    from paritygate.judge import conditioning
    from paritygate.judge import properties as p
    from paritygate.judge.reference_noise import reference_noise

    found_by = str((meta.get("failures") or [""])[0]).split(":", 1)[0].split()[-1:] or ["property_parity"]
    limit, _ = p.check_limit(found_by[0], spec, precision)
    profile, found = reference_noise(settings, spec).profile(inputs), []
    if profile.conditioning() is not None:
        conditioning.note(found, spec, inputs, profile, limit)
    lines = [f"note: one step of the input's resolution moves the reference by {f['reference_move']:.3g} on output "
             f"'{f['output']}': {conditioning.K_REFERENCE:g}x that is {f['factor']:.3g} times the limit "
             f"{f['limit_at_worst']:.3g}" for f in found]
    return replayed(conditioning.KIND, spec, precision, not found,
                    lines or ["the reference moves within the check's limit under one step of its input's resolution"],
                    subject="the reference")


REPLAYS = {"matches_reference": _matches_reference, "property_parity": _property("property_parity"),
           "batch_invariance": _property("batch_invariance"), "determinism": _property("determinism"),
           "reference_unstable": _reference_unstable, "ill_conditioned": _ill_conditioned}


def replay(path, check=None, runtime=None, numerics=None):
    """Replay the check a reproducer was saved by (or ``check``) on its inputs, with the runtime and numerics of the
    run that saved it (or ``runtime`` / ``numerics``); returns its ``CheckResult``, whose ``details["replayed_with"]`` names both."""
    from paritygate.backend.base import CandidateFault, RunnerError
    from paritygate.inputs.sets import InputSetError, check_arrays
    from paritygate.models.config import ConfigError, load_config
    from paritygate.verdict import SuiteError

    meta, inputs = load_reproducer(path)
    check = check or meta["check"]
    if check not in REPLAYS:
        raise ReplayError(f"{path}: check '{check}' has no replay; replayable checks: {', '.join(REPLAYS)}")
    try:
        spec = next((s for s in load_config(meta["config"]) if s.name == meta["model"]), None)
    except ConfigError as err:
        raise ReplayError(f"{path}: its config cannot be loaded: {err}") from err
    if spec is None:
        raise ReplayError(f"{path}: model '{meta['model']}' is not in {meta['config']} any more")
    if meta["precision"] not in spec.precisions:
        raise ReplayError(f"{path}: precision {meta['precision']!r} is not one of model '{spec.name}''s "
                          f"precisions {list(spec.precisions)}")
    outside = meta.get("outside_range") or []  # shadow traffic recorded outside the declared range, as recorded
    if not (isinstance(outside, list) and all(isinstance(n, str) for n in outside)):
        raise ReplayError(f"{path}: reproducer's key 'outside_range': expected a list of input names")
    try:  # the saved inputs as the config declares them: names, dtypes, shapes, finite values, ranges
        check_arrays(spec, path, inputs, "reproducer", recorded_outside=outside)
    except InputSetError as err:
        raise ReplayError(str(err)) from err
    settings = _context(path, meta, spec, runtime, numerics)
    try:
        result = REPLAYS[check](settings, spec, meta["precision"], inputs, meta)
    except CandidateFault as err:  # the run's word for it: the candidate fails (it crashed, or rounds an index)
        result = replayed(check, spec, meta["precision"], False, [f"FAIL the candidate: {err}"])
    except (RunnerError, SuiteError, OSError) as err:
        raise ReplayError(f"{path}: {type(err).__name__}: {err}") from err
    finally:
        settings.close()
    result.details["replayed_with"] = {"runtime": settings.runtime, "numerics": settings.numerics}
    return result


def _context(path, meta, spec, runtime, numerics):
    """The RunContext a replay runs in: the recorded runtime and numerics (a reproducer written before numerics were
    recorded ran under the default), or the ones given; a runtime that cannot run here is a ReplayError with its
    reason (``backend.registry``)."""
    from paritygate.backend import registry
    from paritygate.common.numerics import DEFAULT_NUMERICS, NUMERICS
    from paritygate.context import RunContext

    runtime, numerics = runtime or meta["runtime"], numerics or meta.get("numerics") or DEFAULT_NUMERICS
    if runtime not in registry.names():
        raise ReplayError(f"{path}: runtime {runtime!r}: expected one of {list(registry.names())}")
    if numerics not in NUMERICS:
        raise ReplayError(f"{path}: numerics {numerics!r}: expected one of {list(NUMERICS)}")
    entry = registry.get(runtime)
    entry.prepare()
    missing = entry.needs([spec])
    if missing:
        raise ReplayError(f"{path}: runtime {runtime} cannot run here: {missing}")
    keep = meta.get("fp16_keep_fp32")
    return RunContext(runtime=runtime, numerics=numerics, fp16_keep_fp32=tuple(keep) if keep is not None else None)


def parser():
    p = argparse.ArgumentParser(prog="python -m paritygate.cli.replay",
                                description="Replay the check that failed on a saved reproducer's inputs.",
                                epilog="exit status: 0 passes (not reproduced), 1 fails (reproduced), 2 usage, "
                                       "3 error (the file, its config or a runtime could not be loaded)")
    p.add_argument("file", metavar="FILE", help="a reproducer .npz (printed by the failing run)")
    p.add_argument("--check", choices=sorted(REPLAYS), default=None,
                   help="the check to replay (default: the one that failed, recorded in FILE)")
    add_run_arguments(p)
    return p


def add_run_arguments(p):
    """--runtime and --numerics (``paritygate replay`` and ``python -m paritygate.cli.replay`` alike)."""
    from paritygate.backend import registry
    from paritygate.common.numerics import NUMERICS

    p.add_argument("--runtime", choices=registry.names(), default=None,
                   help="candidate runtime (default: the one recorded in FILE)")
    p.add_argument("--numerics", choices=NUMERICS, default=None,
                   help="--parity-numerics to replay under (default: the one recorded in FILE; strict where FILE "
                        "records none)")


def main(argv=None):
    """The CLI; returns the exit status (``paritygate replay FILE`` calls this too)."""
    try:
        args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2): argparse has printed why
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    try:
        result = replay(args.file, check=args.check, runtime=args.runtime, numerics=args.numerics)
    except ReplayError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    result.settle()  # what is printed is what the result's JSON holds
    print(f"check: {result.check}")
    print("runtime: {runtime}, numerics: {numerics}".format(**result.details["replayed_with"]))
    for line in result.details["lines"]:
        print(line)
    subject = result.details["subject"]
    print(f"not reproduced: {subject} passes" if result.passed else f"reproduced: {subject} still fails")
    return EXIT_PASS if result.passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
