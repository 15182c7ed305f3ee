"""Failing inputs saved as reproducers: an ``.npz`` (allow_pickle=False) plus Polygraphy's inputs JSON,
with a one-line command that replays the comparison: ``python -m paritygate.replay <file>.npz``."""

import hashlib
import json
import shlex
import sys
from pathlib import Path

import numpy as np

META = "__meta__"


def save_reproducer(folder, spec, precision, check, runtime, inputs, failures):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(v).tobytes() for v in inputs.values())).hexdigest()[:12]
    stem = folder / f"{spec.name}-{precision}-{check}-{digest}"
    meta = {"config": str(spec.source), "model": spec.name, "precision": precision, "check": check,
            "runtime": runtime, "failures": failures[:20]}
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
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data[META]))
        inputs = {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith("input:")}
    return meta, inputs


def replay(path, argv_runtime=None):
    """Re-run the reference and the candidate on a reproducer's inputs; returns the ParityResult."""
    from paritygate.checks import compare
    from paritygate.config import load_config
    from paritygate.runtimes import candidate_runner, reference_runner
    from paritygate.session import ParitySession

    meta, inputs = load_reproducer(path)
    specs = {s.name: s for s in load_config(meta["config"])}
    spec = specs[meta["model"]]
    session = ParitySession(config_path=meta["config"], runtime=argv_runtime or meta["runtime"])
    ref = reference_runner(session, spec).infer(inputs)
    cand = candidate_runner(session, spec, meta["precision"]).infer(inputs)
    return compare(spec, meta["precision"], ref, cand)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m paritygate.replay REPRODUCER.npz", file=sys.stderr)
        return 2
    result = replay(argv[0])
    for o in result.outputs:
        print(("PASS " if o.passed else "FAIL ") + o.describe())
    if result.task:
        print(f"task: {result.task}")
    print("reproduced: the candidate still fails" if result.failures else "not reproduced: the candidate passes")
    return 1 if result.failures else 0
