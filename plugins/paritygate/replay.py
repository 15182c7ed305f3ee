"""Reproducers: a failing example saved as an ``.npz`` (allow_pickle=False) plus Polygraphy's inputs JSON, and
the command that replays *the check that failed* on it:

    python -m paritygate.replay FILE.npz [--check CHECK] [--runtime onnxruntime|tensorrt]

Exit status: 0 the check passes on the saved inputs (not reproduced), 1 it fails (reproduced), 2 usage,
3 error (the file, its config or a runtime could not be loaded: nothing was judged).

Replay builds only the runners it needs, from a small ``RuntimeSettings`` (no pytest session).
"""

import argparse
import hashlib
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

META = "__meta__"
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3
REPEATS = 3  # determinism: runs of the same feed, as conformance/test_properties.py::test_determinism


class ReplayError(Exception):
    """The reproducer, its config or a runtime could not be loaded; the message names the file."""


def save_reproducer(folder, spec, precision, check, runtime, inputs, failures, fp16_keep_fp32=None):
    """Write ``<model>-<precision>-<check>-<hash>.npz`` (+ Polygraphy inputs JSON) under ``folder``; returns the
    paths and the one-line replay command."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(v).tobytes() for v in inputs.values())).hexdigest()[:12]
    stem = folder / f"{spec.name}-{precision}-{check}-{digest}"
    meta = {"config": str(spec.source), "model": spec.name, "precision": precision, "check": check,
            "runtime": runtime, "fp16_keep_fp32": list(fp16_keep_fp32) if fp16_keep_fp32 is not None else None,
            "failures": failures[:20]}
    npz = stem.with_suffix(".npz")
    np.savez(npz, **{f"input:{k}": v for k, v in inputs.items()}, **{META: np.array(json.dumps(meta))})
    out = {"npz": str(npz), "command": f"python -m paritygate.replay {shlex.quote(str(npz))}"}
    try:
        from polygraphy.json import save_json

        polygraphy_json = stem.with_suffix(".polygraphy-inputs.json")
        save_json([dict(inputs)], str(polygraphy_json))  # a list of feed dicts: `polygraphy run --load-inputs`
        out["polygraphy_inputs"] = str(polygraphy_json)
    except ImportError:
        out["polygraphy_inputs"] = None  # polygraphy not installed (pip install polygraphy)
    return out


def load_reproducer(path):
    """(meta, inputs) of a saved reproducer; ReplayError naming the file when it is not one."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data[META]))
            inputs = {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith("input:")}
    except (OSError, ValueError, KeyError) as err:
        raise ReplayError(f"{path}: not a paritygate reproducer (.npz with {META} and input:<name> arrays): "
                          f"{err}") from err
    missing = sorted({"config", "model", "precision", "check", "runtime"} - set(meta))
    if missing or not inputs:
        raise ReplayError(f"{path}: reproducer lacks {missing or 'input arrays'}")
    return meta, inputs


@dataclass
class Replayed:
    check: str
    passed: bool
    lines: list = field(default_factory=list)  # what was compared, one line each


# -- one function per replayable check: (settings, spec, precision, inputs) -> Replayed ----------------------
def _parity(check, compare_task):
    def run(settings, spec, precision, inputs):
        from paritygate.checks import compare
        from paritygate.runtimes import candidate_runner, reference_runner

        ref = reference_runner(settings, spec).infer(inputs)
        cand = candidate_runner(settings, spec, precision).infer(inputs)
        result = compare(spec, precision, ref, cand, compare_task=compare_task)
        lines = [("PASS " if o.passed else "FAIL ") + o.describe() for o in result.outputs]
        lines += [f"task: {result.task}"] if result.task else []
        return Replayed(check, result.passed, lines + result.failures)

    return run


def _batch_invariance(settings, spec, precision, inputs):
    """Each element alone (batch of 1) vs in the saved batch and moved within it: the candidate only."""
    from paritygate.checks import compare
    from paritygate.runtimes import candidate_runner

    candidate = candidate_runner(settings, spec, precision)
    together = candidate.infer(inputs)
    n = len(next(iter(inputs.values())))
    order = np.roll(np.arange(n), 1)
    shuffled = candidate.infer({k: v[order] for k, v in inputs.items()})
    back = {c: r for r, c in spec.outputs.items()}  # candidate vs candidate: undo the output name mapping
    lines, passed = [], True
    for i in range(n):
        alone = {back.get(k, k): v for k, v in candidate.infer({k: v[i:i + 1] for k, v in inputs.items()}).items()}
        for other, label in (({k: v[i:i + 1] for k, v in together.items()}, f"element {i} of a batch of {n}"),
                             ({k: v[np.flatnonzero(order == i)] for k, v in shuffled.items()},
                              f"element {i} moved within the batch")):
            result = compare(spec, precision, alone, other, compare_task=False)
            passed &= result.passed
            lines += [f"{'PASS' if o.passed else 'FAIL'} {label} vs alone: {o.describe()}" for o in result.outputs]
    return Replayed("batch_invariance", passed, lines)


def _determinism(settings, spec, precision, inputs):
    from paritygate.runtimes import candidate_runner

    candidate = candidate_runner(settings, spec, precision)
    first = candidate.infer(inputs)
    lines, passed = [], True
    for attempt in range(2, REPEATS + 1):
        again = candidate.infer(inputs)
        for name, value in first.items():
            same = np.array_equal(value, again[name], equal_nan=True)
            passed &= same
            diff = 0.0 if same else float(np.nanmax(np.abs(value.astype(float) - again[name])))
            lines.append(f"{'PASS' if same else 'FAIL'} output '{name}' run 1 vs run {attempt}: "
                         f"{'bit-identical' if same else f'max abs difference {diff:.3g}'}")
    return Replayed("determinism", passed, lines)


REPLAYS = {"matches_reference": _parity("matches_reference", compare_task=True),
           "property_parity": _parity("property_parity", compare_task=False),
           "batch_invariance": _batch_invariance, "determinism": _determinism}


def replay(path, check=None, runtime=None):
    """Replay the check a reproducer was saved by (or ``check``) on its inputs; returns a ``Replayed``."""
    from paritygate.backend.base import RunnerError
    from paritygate.config import ConfigError, load_config
    from paritygate.runtimes import RuntimeSettings
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
    keep = meta.get("fp16_keep_fp32")
    settings = RuntimeSettings(runtime or meta["runtime"], tuple(keep) if keep is not None else None)
    try:
        return REPLAYS[check](settings, spec, meta["precision"], inputs)
    except (RunnerError, SuiteError, OSError) as err:
        raise ReplayError(f"{path}: {type(err).__name__}: {err}") from err


def parser():
    p = argparse.ArgumentParser(prog="python -m paritygate.replay",
                                description="Replay the check that failed on a saved reproducer's inputs.",
                                epilog="exit status: 0 passes (not reproduced), 1 fails (reproduced), 2 usage, "
                                       "3 error (the file, its config or a runtime could not be loaded)")
    p.add_argument("file", metavar="FILE", help="a reproducer .npz (printed by the failing run)")
    p.add_argument("--check", choices=sorted(REPLAYS), default=None,
                   help="the check to replay (default: the one that failed, recorded in FILE)")
    p.add_argument("--runtime", choices=("onnxruntime", "tensorrt"), default=None,
                   help="candidate runtime (default: the one recorded in FILE)")
    return p


def main(argv=None):
    """The CLI; returns the exit status (``paritygate replay FILE`` calls this too)."""
    try:
        args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2): argparse has printed why
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    try:
        result = replay(args.file, check=args.check, runtime=args.runtime)
    except ReplayError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    print(f"check: {result.check}")
    for line in result.lines:
        print(line)
    print("not reproduced: the candidate passes" if result.passed else "reproduced: the candidate still fails")
    return EXIT_PASS if result.passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
