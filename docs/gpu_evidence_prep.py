"""Build the folder docs/gpu_evidence.py reads (issue 15, item 5), here on the CPU machine, with TensorFlow.

For each model, under ``OUT/<model>/`` (default OUT: ``.gpuev`` at the repository root):

- ``fp16.onnx``   the fp16 artifact the suite judges (the suite's own builder, default keep-FP32 list);
- ``inputs.npz``  the inputs, keyed by the artifact's graph input names, in its graph input dtypes;
- ``ref.npz``     the TensorFlow reference outputs on them;
- ``strict.npz``  strict FP16 numerics (paritygate.backend.onnx.strict.rewrite, ONNX Runtime CPU; its ``BUILD`` is
  ``strict_build`` in meta.json: a folder made before a change of the rewrite must be made again);
- ``ort.npz``     ONNX Runtime CPU's own numerics on the same file;
- ``meta.json``   the output names (reference -> artifact), the checks (rows of the inputs), each output's fp16
  tolerance with its source, versions.

The inputs, per model (``checks`` in meta.json):

- ``matches_reference``: the bundled models' goldens (``fixtures/goldens/<model>.npz``, first 8 rows); the
  third-party models' input sets (``tests/thirdparty/inputs/<model>.npz``, first 8 rows);
- ``corner:low`` / ``corner:high``: 2 rows with every input at the low / high end of its configured range (the
  corner batches ``property_parity`` draws first; the bundled bert's all-masked batch is ``corner:low``).

Run from the repository root with the project's venv (TensorFlow, ONNX Runtime, onnxconverter-common), after
``tests/thirdparty/install`` for the third-party models (skipped, with a line, when absent):

    .venv/bin/python docs/gpu_evidence_prep.py [OUT [MODEL ...]]
"""

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
BUNDLED = ("linear", "mobilenet", "bert", "ssd")
THIRDPARTY = ("basic_pitch", "nakdimon")
ROWS, CORNER_ROWS = 8, 2


def runs():
    """(name, RunOptions, spec, inputs by reference name) per model: the bundled zoo, then the third-party
    configs (one per model, as tests/thirdparty/conftest.py writes them)."""
    from paritygate.context import RunOptions
    from paritygate.inputs import goldens

    options = RunOptions()
    for spec in options.models:
        if spec.name in BUNDLED:
            yield spec.name, options, spec, goldens.load_golden(spec).inputs
    for name in THIRDPARTY:
        config = thirdparty_config(name)
        if config is None:
            continue
        options = RunOptions(config)
        spec = next(m for m in options.models if m.name == name)
        with np.load(ROOT / "tests" / "thirdparty" / "inputs" / f"{name}.npz") as data:
            yield name, options, spec, {k: data[k] for k in data.files}


def thirdparty_config(name):
    import tempfile

    from tests.conftest import write_config
    from tests.thirdparty.conftest import HERE, missing, thirdparty_tables

    reason = missing(name)
    if reason:
        print(f"skipped {name}: {reason}")
        return None
    table = dict(thirdparty_tables()[name])
    for key in ("reference", "onnx", "calibration"):
        if key in table:
            table[key] = str((HERE / table[key]).resolve())
    return write_config(Path(tempfile.mkdtemp(prefix=f"gpuev-{name}-")), {"models": [table]})


def corner(spec, end, rows=CORNER_ROWS):
    """Every input of ``spec`` at the ``end`` (0: low, 1: high) of its configured range."""
    out = {}
    for name, t in spec.inputs.items():
        shape = [rows if d is None or d < 0 else d for d in t.shape]
        out[name] = np.full(shape, t.range[end], dtype=t.dtype)
    return out


def checks_and_inputs(spec, inputs):
    parts = [("matches_reference", {k: v[:ROWS] for k, v in inputs.items()}),
             ("corner:low", corner(spec, 0)), ("corner:high", corner(spec, 1))]
    checks, start = {}, 0
    for name, part in parts:
        n = len(next(iter(part.values())))
        checks[name] = [start, start + n]
        start += n
    joined = {k: np.concatenate([p[k].astype(inputs[k].dtype) for _, p in parts]) for k in inputs}
    return checks, joined


def prepare(out, name, options, spec, inputs):
    import onnx

    from paritygate import __version__ as paritygate_version
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.onnx.strict import rewrite
    from paritygate.backend.runtimes import candidate_runner, recorded_mapping, reference_runner
    from paritygate.comparator.tolerance import tolerance_for
    from paritygate.judge.parity import run_batched
    from paritygate.lazy import dist_version

    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    checks, feed = checks_and_inputs(spec, inputs)
    ref = run_batched(reference_runner(options.context, spec), feed, spec.max_batch)
    got = {}
    for numerics in ("strict", "ort"):
        options.numerics = options.context.numerics = numerics
        options.context.candidates.pop((options.runtime, spec.name, "fp16"), None)
        got[numerics] = run_batched(candidate_runner(options.context, spec, "fp16"), feed, spec.max_batch)
    mapping = recorded_mapping(options.context, spec)
    outputs = {r: m["candidate"] for r, m in mapping["outputs"].items()}
    inputs_map = {r: m["candidate"] for r, m in mapping["inputs"].items()}
    artifact = Path(onnx_artifact(spec, "fp16", options.fp16_keep_fp32))
    model = onnx.load(str(artifact))
    types = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in model.graph.input}
    (folder / "fp16.onnx").write_bytes(artifact.read_bytes())
    np.savez_compressed(folder / "inputs.npz", **{inputs_map[k]: v.astype(types[inputs_map[k]])
                                                  for k, v in feed.items()})
    np.savez_compressed(folder / "ref.npz", **{outputs[k]: v for k, v in ref.items() if k in outputs})
    for numerics, values in got.items():  # keyed by reference names, or by the artifact's where unmapped
        named = {outputs.get(k, k): v for k, v in values.items() if k in outputs or k in outputs.values()}
        assert set(named) == set(outputs.values()), (name, numerics, sorted(values))
        np.savez_compressed(folder / f"{numerics}.npz", **named)
    tolerances = {}
    for r in outputs:
        tol = tolerance_for(spec, "fp16", r)
        tolerances[r] = {"atol": tol.atol, "rtol": tol.rtol, "source": tol.source}
    meta = {"model": name, "outputs": outputs, "checks": checks, "tolerance": tolerances,
            "rule": "an element fails when |x - ref| > atol + rtol * |ref|, or when x is not finite where ref is "
                    "(numpy.isclose; the check's cosine criterion is left out)",
            "artifact": str(artifact.name), "strict_build": rewrite.BUILD, "made_with": {
                "paritygate": paritygate_version, "onnxruntime": dist_version("onnxruntime"),
                "tensorflow": dist_version("tensorflow"), "onnx": dist_version("onnx"),
                "onnxconverter-common": dist_version("onnxconverter-common")}}
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    size = sum(p.stat().st_size for p in folder.iterdir())
    print(f"{name}: {len(next(iter(feed.values())))} rows, checks {checks}, {size / 2**20:.1f} MiB")


def main(argv):
    out = Path(argv[0]) if argv else ROOT / ".gpuev"
    only = set(argv[1:])  # model names (default: all)
    for name, options, spec, inputs in runs():
        if not only or name in only:
            prepare(out, name, options, spec, inputs)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {total / 2**20:.1f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
