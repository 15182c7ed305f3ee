"""INT8 outputs on two instruction sets: the bundled models' suite-built int8 artifacts (and any Q/DQ ONNX named on
the command line) run on their golden inputs, single-threaded, with strict numerics (Q/DQ as fake quantization in
FP32) and with ONNX Runtime's own integer kernels; run it natively and under Debian's qemu-user emulating an
AVX2-only CPU, then compare (docs/numerics.md, "INT8").

    .venv/bin/python docs/measure_int8_isa.py prepare OUT/plan.json [NAME=INT8.onnx:FP32.onnx:INPUTS.npz ...]
    .venv/bin/python docs/measure_int8_isa.py run OUT/plan.json OUT/native.npz
    qemu-x86_64 -cpu Haswell .venv/bin/python docs/measure_int8_isa.py run OUT/plan.json OUT/haswell.npz
    .venv/bin/python docs/measure_int8_isa.py compare OUT/plan.json OUT/native.npz OUT/haswell.npz

``run`` imports only NumPy, ONNX Runtime and the suite's runner (no TensorFlow), so it is quick enough emulated.
"""

import json
import sys
from pathlib import Path

import numpy as np


def prepare(plan_path, *extra):
    """{model: {"int8": artifact, "fp32": artifact, "inputs": npz}} for the bundled models (TensorFlow needed), and
    for each ``NAME=INT8.onnx:FP32.onnx:INPUTS.npz`` given (a model with one input: the npz's first array feeds it)."""
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.context import RunOptions
    from paritygate.inputs.goldens import load_golden

    out, folder = {}, Path(plan_path).parent
    for spec in RunOptions().models:
        if "int8" not in spec.precisions:
            continue
        golden = load_golden(spec)
        inputs = folder / f"{spec.name}-inputs.npz"
        np.savez(inputs, **golden.inputs)
        out[spec.name] = {"int8": str(onnx_artifact(spec, "int8")), "fp32": str(onnx_artifact(spec, "fp32")),
                          "inputs": str(inputs), "task": spec.task}
    for item in extra:
        name, _, paths = item.partition("=")
        int8, fp32, inputs = paths.split(":")
        out[name] = {"int8": int8, "fp32": fp32, "inputs": inputs, "task": None}
    Path(plan_path).write_text(json.dumps(out, indent=1))


def run(plan_path, out_path):
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    saved = {}
    for name, item in json.loads(Path(plan_path).read_text()).items():
        with np.load(item["inputs"]) as data:
            feed = {k: data[k] for k in data.files}
        for numerics, path in (("strict", item["int8"]), ("ort", item["int8"]), ("fp32", item["fp32"])):
            with OnnxrtRunner(path, threads=1, numerics="ort" if numerics == "ort" else "strict") as runner:
                inputs = runner.input_metadata()
                if len(inputs) == 1 and not set(feed) & set(inputs):  # one input, named otherwise in the file
                    feed = {next(iter(inputs)): next(iter(feed.values()))}
                outs = runner.infer({k: v.astype(inputs[k][0]) for k, v in feed.items() if k in inputs})
            for output, value in outs.items():
                saved[f"{name}|{numerics}|{output}"] = value
    np.savez(out_path, **saved)


def compare(plan_path, a_path, b_path):
    a, b = np.load(a_path), np.load(b_path)
    print("| model | output | numerics | max abs vs fp32 (A) | max abs vs fp32 (B) | A vs B: max abs | "
          "A vs B: bit-identical | top-1 agreement with fp32 (A / B) |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(a.files):
        name, numerics, output = key.split("|")
        if numerics == "fp32":
            continue
        ref_a, ref_b = a[f"{name}|fp32|{output}"], b[f"{name}|fp32|{output}"]
        x, y = a[key], b[key]
        top = ""
        if x.ndim == 2 and x.shape[1] > 1:
            top = (f"{np.mean(x.argmax(1) == ref_a.argmax(1)):.4f} / {np.mean(y.argmax(1) == ref_b.argmax(1)):.4f}")
        print(f"| {name} | {output} | {numerics} | {np.max(np.abs(x - ref_a)):.4g} | {np.max(np.abs(y - ref_b)):.4g} | "
              f"{np.max(np.abs(x - y)):.3g} | {np.array_equal(x, y)} | {top} |")


if __name__ == "__main__":
    {"prepare": prepare, "run": run, "compare": compare}[sys.argv[1]](*sys.argv[2:])
