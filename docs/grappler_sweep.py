"""Grappler with the weights standing in (``paritygate/backend/onnx/artifacts/grappler.py``) against grappler on the
real graph, on keras.applications models (weights=None, nothing downloaded) or SavedModels you name: the two graphs'
bytes, how many grappler runs the stand-ins took (2: they held; 3: grappler ran again on the real graph), how many
constants stood in, and how many batch norms grappler merged into a filter (docs/measured.md, "Real-size models").

    python docs/grappler_sweep.py --work /tmp/sweep MobileNetV2 DenseNet121 [/path/to/saved_model ...]

Each model is exported with ``model.export`` into WORK, then converted by ``python -m
paritygate.backend.onnx.artifacts.convert`` up to grappler, where both runs are compared (one line each).
"""

import argparse
import subprocess
import sys
from pathlib import Path

EXPORT = "import keras, sys; keras.utils.set_random_seed(0); getattr(keras.applications, sys.argv[1])(weights=None)" \
         ".export(sys.argv[2], verbose=False)"


def compare(saved_model):
    """In this process: convert ``saved_model`` up to grappler, compare both ways, print one line, exit."""
    import tensorflow as tf
    from tf2onnx import tf_loader

    from paritygate.backend.onnx.artifacts import convert, grappler

    def both(inputs, outputs, graph_def):
        runs = []

        def counted(*args):
            runs.append(1)
            return tf_loader.tf_optimize_grappler(*args)

        with tf.Graph().as_default():
            ours = grappler.optimized(inputs, outputs, graph_def, counted, convert.STAND_IN_BYTES)
        with tf.Graph().as_default():
            theirs = tf_loader.tf_optimize_grappler(inputs, outputs, graph_def)
        same = ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
        print(f"{saved_model}: identical={same} grappler_runs={len(runs)} "
              f"stood_in={len(grappler.carried(graph_def, convert.STAND_IN_BYTES))} "
              f"merged={sum(n.name.endswith(grappler.MERGED) for n in theirs.node)}", flush=True)
        raise SystemExit(0 if same else 1)

    convert._optimized = both
    convert.main(["--saved-model", saved_model, "--signature_def", "serving_default", "--opset", "17",
                  "--output", str(Path(saved_model).with_suffix(".onnx"))])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("models", nargs="+", help="keras.applications names, or SavedModel folders")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    failed = 0
    for model in args.models:
        folder = Path(model) if Path(model).is_dir() else args.work / model
        if not folder.is_dir():
            subprocess.run([sys.executable, "-c", EXPORT, model, str(folder)], check=True)
        found = subprocess.run([sys.executable, __file__, "--compare", str(folder)], capture_output=True, text=True,
                               check=False)
        print(found.stdout.strip() or f"{folder}: failed (exit {found.returncode}): {found.stderr.strip()[-400:]}")
        failed += found.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:
        compare(sys.argv[2])
    sys.exit(main())
