"""Benchmark of ``paritygate shadow`` (docs/shadow.md, "Measured"): examples/s of the pipeline against a bare loop
running the same two models on the same examples, 1 vs 2 DirectRunner worker processes, and peak memory at two N.

    PYTHONPATH=plugins python docs/bench_shadow.py --n 10000 --modes bare pipeline1 pipeline2
    PYTHONPATH=plugins python docs/bench_shadow.py --n 100000 --modes pipeline1
    PYTHONPATH=plugins python docs/bench_shadow.py --model linear --n 1000000 --modes pipeline1

The bare loop reports its rate from its first record (models loaded) and from loading both models, as the
pipeline's own time (``run().wait_until_finish()``) does: each worker loads its models inside the pipeline.

Model: the bundled mobilenet (or ``--model linear``, y = 5x: Beam's and the judging's cost per example); reference: its TF SavedModel (TFNumpyHandler); candidate: the suite's fp16 artifact
under strict numerics (OnnxRuntimeHandler), batches of the config's max_batch. Each mode runs in its own process;
peak RSS is the largest of that process and its workers (getrusage RUSAGE_CHILDREN: the largest so far, so run one
mode per invocation to read a mode's own peak), with the 1-minute load average before and after. One JSON line per
mode.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "parity.toml"


def make_data(model, n, folder):
    from paritygate.models.bundled import fixtures_dir, zoo_module
    from paritygate.models.config import load_config
    from paritygate.shadow.synthetic import write_tfrecords

    zoo_module("build").ensure_built()
    spec = next(m for m in load_config(CONFIG) if m.name == model)
    inputs = fixtures_dir() / "inputs" / f"{model}_heldout.npz"
    if not list(Path(folder).glob("*.tfrecord")):
        write_tfrecords(folder, spec, inputs if inputs.exists() else inputs.with_name(f"{model}.npz"), n, shards=4)
    return f"{folder}/*.tfrecord"


def bare(model, pattern):
    """TF reference and the strict fp16 ONNX Runtime candidate on the same examples, nothing else."""
    import numpy as np

    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.onnxrt.runner import OnnxrtRunner
    from paritygate.backend.runtimes import computed_artifact
    from paritygate.backend.tf.runner import TfRunner
    from paritygate.models.config import load_config
    from paritygate.shadow.read import Layout, element, match, tfrecord_rows

    spec = next(m for m in load_config(CONFIG) if m.name == model)
    (name,) = spec.inputs
    artifact = computed_artifact(onnx_artifact(spec, "fp16"), "strict")  # built (cached) before the clock starts
    import onnxruntime  # noqa: F401 - imported before the clock, as the pipeline's process has them
    import tensorflow  # noqa: F401

    loading = time.perf_counter()  # as the pipeline's own time, from loading both models to the last result
    ref = TfRunner(spec.reference, spec.signature).activate()
    cand = OnnxrtRunner(artifact).activate()
    (cand_input,) = cand.input_metadata()
    layout, n, start, batch = Layout.of(spec), 0, time.perf_counter(), []
    for path in match(pattern):
        for i, get in tfrecord_rows(path):
            batch.append(element(layout, get, i)[1][name])  # the pipeline's own reader and checks
            if len(batch) == spec.max_batch:
                x = np.stack(batch)
                ref.infer({name: x}), cand.infer({cand_input: x})
                n, batch = n + len(batch), []
    end = time.perf_counter()
    return n, end - start, end - loading


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("mobilenet", "linear"), default="mobilenet")
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--data", default="/tmp/paritygate-bench-shadow")
    parser.add_argument("--modes", nargs="+", default=["bare", "pipeline1", "pipeline2"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = f"{args.data}-{args.model}-{args.n}"
    pattern = make_data(args.model, args.n, folder)
    if args.child == "bare":
        n, seconds, with_loading = bare(args.model, pattern)
        print(json.dumps({"n": n, "seconds": seconds, "examples_per_second": round(n / seconds, 1),
                          "seconds_with_model_loading": with_loading,
                          "examples_per_second_with_model_loading": round(n / with_loading, 1)}))
        return
    for mode in args.modes:
        start, load = time.perf_counter(), os.getloadavg()[0]
        if mode == "bare":
            cmd = [sys.executable, __file__, "--model", args.model, "--n", str(args.n), "--data", args.data,
                   "--child", "bare"]
        else:
            cmd = [sys.executable, "-m", "paritygate.cli.main", "shadow", str(CONFIG), "--model", args.model,
                   "--data", pattern, "--precisions", "fp16", "--workers", mode[-1], "--report",
                   f"{folder}-report-{mode}"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        lines = [line for line in out.stdout.splitlines() if line.startswith(("{", "paritygate shadow: read"))]
        print(json.dumps({"model": args.model, "mode": mode, "n": args.n, "wall_s": round(wall, 1),
                          "peak_rss_mib_so_far": round(rss), "load_before": round(load, 2),
                          "load_after": round(os.getloadavg()[0], 2), "rc": out.returncode, "out": lines}), flush=True)


if __name__ == "__main__":
    main()
