"""Time to a verdict on a team's model, cold and warm (issue 19): MTCNN's ONet as a team has it (mtcnn 1.0.0's
Keras code and weights, saved with ``tf.saved_model.save``; the suite converts it), judged at fp32/fp16/int8 by
``paritygate run`` twice: cold (an empty ``$PARITYGATE_CACHE``), then warm (the same config, nothing changed).
A measurement, not a timed assertion; it prints a Markdown table and each run's summary lines.

    .venv/bin/python docs/measure_rerun.py [WORK_DIR]      # needs tests/thirdparty/install (.thirdparty/mtcnn-1.0.0)

Also, with ``--basic-pitch``: basic-pitch 0.4.0 at three precisions, cold (tests/thirdparty/parity.toml's entry);
with ``--scaling``: the bundled conformance suite over 1, 2 and 4 of the bundled models at fp32/fp16/int8
(``-k`` on model names; every reference batch computed live, ``--parity-cache=off``, artifacts cached), serial and
with two xdist workers.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MTCNN = ROOT / ".thirdparty" / "mtcnn-1.0.0"
PARITYGATE = Path(sys.executable).parent / "paritygate"
CONFIG = """[[models]]
name = "onet"  # MTCNN's ONet (mtcnn 1.0.0): 48x48 face crops -> box offsets, landmarks, face probability
reference = "onet"
precisions = ["fp32", "fp16", "int8"]
max_batch = 8
calibration = "calib.npz"
[models.inputs.image]
shape = [-1, 48, 48, 3]
dtype = "float32"
range = [-1.0, 1.0]  # mtcnn/utils/images.py normalizes pixels as (x - 127.5) / 128
"""


def export_onet(out):
    import tensorflow as tf

    sys.path.insert(0, str(MTCNN))
    from mtcnn.network.onet import ONet
    from mtcnn.utils.tensorflow import load_weights

    model = ONet()
    model.build()
    model.set_weights(load_weights(str(MTCNN / "mtcnn" / "assets" / "weights" / "onet.lz4")))
    module = tf.Module()
    module.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, 48, 48, 3], tf.float32, name="image")])
    def serve(image):
        bbox_reg, landmarks, face_prob = model(image)
        return {"bbox_reg": bbox_reg, "landmarks": landmarks, "face_prob": face_prob}

    module.serve = serve
    tf.saved_model.save(module, str(out / "onet"), signatures={"serving_default": serve})


def faces(out):
    """ONet's own kind of input: the 48x48 faces tests/thirdparty/make_inputs.py drew for PNet."""
    with np.load(ROOT / "tests" / "thirdparty" / "calibration" / "pnet.npz") as z:
        calib = z["image@48x48x3"]
    with np.load(ROOT / "tests" / "thirdparty" / "inputs" / "pnet.npz") as z:
        rows = z["image@48x48x3"]
    np.savez(out / "calib.npz", image=calib)
    (out / "inputs").mkdir(exist_ok=True)
    np.savez(out / "inputs" / "onet.npz", image=np.concatenate([rows, calib[:12]]))


def run(folder, cache, config="parity.toml", *extra):
    env = {**os.environ, "PARITYGATE_CACHE": str(cache), "HYPOTHESIS_PROFILE": "ci"}
    start = time.perf_counter()
    done = subprocess.run([str(PARITYGATE), "run", config, "-p", "no:xdist", "-p", "no:cacheprovider", "-m",
                           "not latency", "-q", *extra], cwd=folder, env=env, capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - start
    lines = [l for l in done.stdout.splitlines() if l.startswith("paritygate: ") or " passed" in l or " failed" in l]
    return wall, done.returncode, lines


def summary(lines):
    keep = ("artifact cache", "reference cache", "time:", "runtime ")
    return [l for l in lines if any(k in l for k in keep)] + [l for l in lines if not l.startswith("paritygate")]


def onet(work):
    folder = work / "onet"
    folder.mkdir(parents=True, exist_ok=True)
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from docs.measure_rerun import export_onet; "
            f"from pathlib import Path; export_onet(Path({str(folder)!r}))")  # TensorFlow in a process of its own
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    faces(folder)
    (folder / "parity.toml").write_text(CONFIG)
    # the team's committed goldens, made once beforehand (their own cache): the warm rerun checks them live
    run(folder, work / "cache-goldens", "parity.toml", "-k", "goldens_reproduce", "--parity-update-goldens")
    cache = work / "cache-onet"
    shutil.rmtree(cache, ignore_errors=True)
    cold = run(folder, cache)
    warm = run(folder, cache)
    print("| run | wall s | exit |\n| --- | --- | --- |")
    print(f"| cold | {cold[0]:.1f} | {cold[1]} |\n| warm | {warm[0]:.1f} | {warm[1]} |")
    print(f"\nwarm / cold: {warm[0] / cold[0]:.0%}\n\ncold:\n" + "\n".join(summary(cold[2])))
    print("\nwarm:\n" + "\n".join(summary(warm[2])))


def basic_pitch(work):
    sys.path.insert(0, str(ROOT))
    from tests.thirdparty.conftest import one_model_config

    folder = work / "basic_pitch"
    one_model_config("basic_pitch", folder, drop=("beam",))
    cache = work / "cache-basic-pitch"
    shutil.rmtree(cache, ignore_errors=True)
    cold = run(folder, cache)
    warm = run(folder, cache)
    print(f"basic-pitch, three precisions, cold: {cold[0]:.1f} s wall, exit {cold[1]}\n" + "\n".join(summary(cold[2])))
    print(f"warm rerun: {warm[0]:.1f} s wall ({warm[0] / cold[0]:.0%} of cold), exit {warm[1]}\n"
          + "\n".join(summary(warm[2])))


def scaling():
    sets = {1: "mobilenet", 2: "mobilenet or bert", 4: "mobilenet or bert or ssd or linear"}
    print("| models | checks | serial s | -n 2 s |\n| --- | --- | --- | --- |")
    for n, select in sets.items():
        walls = []
        for workers in ([], ["-n", "2"]):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pytest", "conformance", "-m", "not latency", "-k", select,
                                   "--parity-cache=off", "-q", "-p", "no:cacheprovider",
                                   *(workers or ["-p", "no:xdist"])], cwd=ROOT, capture_output=True, text=True,
                                  env={**os.environ, "HYPOTHESIS_PROFILE": "ci"}, check=False)
            walls.append(time.perf_counter() - start)
            last = done.stdout.strip().splitlines()[-1]
        checks = sum(int(x) for x in re.findall(r"(\d+) (?:passed|failed|xfailed|skipped)", last))
        print(f"| {n} | {checks} | {walls[0]:.1f} | {walls[1]:.1f} |", flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    work = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="paritygate-rerun-"))
    if "--scaling" in sys.argv:
        scaling()
    elif "--basic-pitch" in sys.argv:
        basic_pitch(work)
    else:
        onet(work)
