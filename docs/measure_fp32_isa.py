"""FP32 parity on two instruction sets: basic-pitch's SavedModel (TensorFlow, oneDNN on and off) and its authors'
FP32 ONNX (ONNX Runtime) on the rows of tests/thirdparty/inputs/basic_pitch.npz, one row a call; run natively
(AVX-512) and under Debian's qemu-user emulating an AVX2-only CPU, then compare (docs/numerics.md, "FP32 across
CPUs"). TensorFlow is slow emulated (about 10 minutes to load, minutes a row): run a few rows there.

    .venv/bin/python docs/measure_fp32_isa.py run OUT/native-tf.npz tf
    TF_ENABLE_ONEDNN_OPTS=0 .venv/bin/python docs/measure_fp32_isa.py run OUT/native-tf-eigen.npz tf
    .venv/bin/python docs/measure_fp32_isa.py run OUT/native-ort.npz ort
    qemu-x86_64 -cpu Haswell .venv/bin/python docs/measure_fp32_isa.py run OUT/avx2-tf.npz tf 0,1,2   # likewise
    .venv/bin/python docs/measure_fp32_isa.py compare OUT/native-tf.npz OUT/native-tf-eigen.npz OUT/native-ort.npz
    .venv/bin/python docs/measure_fp32_isa.py mutants OUT/native-tf.npz OUT/native-tf-eigen.npz
    .venv/bin/python docs/measure_fp32_isa.py run-nakdimon OUT/nak-tf.npz tf      # likewise with =0, and ort

``compare REF ALT CAND``: per row and output, max |CAND - REF| against the policy (atol = rtol = 1e-5) and against
the FP32 bound max(policy, 2 x max|ALT - REF| over the row). ``mutants``: faulty copies of the ONNX (real fault
classes: weights stored in FP16, one bias or one kernel drifted) judged by the same bound, with the margin.
"""

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / ".thirdparty/basic-pitch-0.4.0/basic_pitch/saved_models/icassp_2022"
INPUTS = ROOT / "tests/thirdparty/inputs/basic_pitch.npz"
ORT_NAMES = {"StatefulPartitionedCall:0": "contour", "StatefulPartitionedCall:1": "note",
             "StatefulPartitionedCall:2": "onset"}  # the SignatureDef's order (backend.iomap pairs them so)
ATOL = RTOL = 1e-5  # comparator/tolerance.py DEFAULTS["fp32"] (TF-TRT)
K = 2.0  # judge/reference_noise.py K_REFERENCE


def _rows(arg):
    return [int(r) for r in arg.split(",")] if arg else list(range(len(np.load(INPUTS)["input_2"])))


def run(out, which, rows=None, onnx_path=None):
    x, res, t = np.load(INPUTS)["input_2"], {}, time.time()
    if which == "tf":
        from paritygate.backend.tf.runner import TfRunner

        runner = TfRunner(MODEL / "nmp")
        runner.activate()
        infer = lambda row: {k: np.asarray(v) for k, v in runner.infer({"input_2": row}).items()}
    else:
        import onnxruntime as ort

        session = ort.InferenceSession(str(onnx_path or MODEL / "nmp.onnx"), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        infer = lambda row: {ORT_NAMES[n]: v for n, v in zip(names, session.run(None, {"serving_default_input_2:0": row}))}
    for i in _rows(rows):
        res.update({f"{k}/{i}": v for k, v in infer(x[i:i + 1]).items()})
        np.savez(out, **res)  # after each row: an emulated run stopped early keeps what it did
        print("row", i, f"{time.time() - t:.0f} s", flush=True)
    return res


NAKDIMON = ROOT / ".thirdparty/nakdimon-0.1.2/nakdimon/Nakdimon.h5", ROOT / ".thirdparty/nakdimon-0.2.1/nakdimon/data/Nakdimon.onnx"
NAKDIMON_LINE = ROOT / "tests/thirdparty/reproducers/nakdimon-fp32-property_parity.npz"  # its former known failure


def run_nakdimon(out, which):
    """nakdimon's Keras .h5 (TensorFlow) or its authors' ONNX on the reproducer line, saved as ``<output>/0``."""
    x = np.load(NAKDIMON_LINE)["input:input_1"]
    if which == "tf":
        from paritygate.backend.tf.runner import TfRunner

        with TfRunner(NAKDIMON[0]) as runner:
            res = {f"{k}/0": np.asarray(v) for k, v in runner.infer({"input_1": x.astype(np.float32)}).items()}
    else:
        import onnxruntime as ort

        session = ort.InferenceSession(str(NAKDIMON[1]), providers=["CPUExecutionProvider"])
        res = {f"{o.name}/0": v for o, v in zip(session.get_outputs(), session.run(None, {"input": x.astype(np.int32)}))}
    np.savez(out, **res)


def _load(path):
    with np.load(path) as data:
        return {tuple(k.rsplit("/", 1)): data[k].astype(np.float64) for k in data.files}


def judge(ref, alt, cand):
    """{(output, row): (max |cand - ref|, policy failures, max excess over the bound (<= 1 passes), 2 x spread)}."""
    out = {}
    for key in sorted(set(ref) & set(alt) & set(cand), key=lambda k: (int(k[1]), k[0])):
        r, d = ref[key], np.abs(cand[key] - ref[key])
        policy = ATOL + RTOL * np.abs(r)
        floor = K * float(np.max(np.abs(alt[key] - r)))
        out[key] = (float(d.max()), int(np.count_nonzero(d > policy)), float(np.max(d / np.maximum(policy, floor))),
                    floor)
    return out


def compare(ref, alt, cand):
    print("| row | output | max abs | over 1e-5 policy | 2 x TF spread | worst / new limit | verdict |\n|---|---|---|---|---|---|---|")
    for (name, row), (d, n, ratio, floor) in judge(_load(ref), _load(alt), _load(cand)).items():
        print(f"| {row} | {name} | {d:.2e} | {n} | {floor:.2e} | {ratio:.3f} | {'pass' if ratio <= 1 else 'FAIL'} |")


def _mutant(model, kind):
    """A copy of the ONNX with one real fault: ``fp16`` every float initializer rounded to FP16 (a converter that
    stored half-precision weights), ``bias`` the last float vector initializer +1e-3, ``kernel`` the largest weight
    tensor scaled by 1 + 1e-3."""
    from onnx import numpy_helper

    floats = [t for t in model.graph.initializer if numpy_helper.to_array(t).dtype == np.float32]
    if kind == "fp16":
        targets = [(t, lambda a: a.astype(np.float16).astype(np.float32)) for t in floats]
    elif kind == "bias":
        targets = [([t for t in floats if numpy_helper.to_array(t).ndim == 1 and t.dims[0] > 1][-1], lambda a: a + 1e-3)]
    else:
        targets = [(max(floats, key=lambda t: numpy_helper.to_array(t).size), lambda a: a * (1 + 1e-3))]
    for t, change in targets:
        t.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(t)).astype(np.float32), t.name))
    return model


def mutants(ref, alt, folder="/tmp"):
    import onnx

    print("| mutant | output | max abs | worst / new limit (> 1 fails) |\n|---|---|---|---|")
    for kind in ("fp16", "bias", "kernel"):
        path = Path(folder) / f"basic-pitch-{kind}.onnx"
        onnx.save(_mutant(onnx.load(str(MODEL / "nmp.onnx")), kind), str(path))
        cand = {tuple(k.rsplit("/", 1)): v.astype(np.float64) for k, v in run(path.with_suffix(".npz"), "ort", None, path).items()}
        per_output = {}
        for (name, _), (d, _, ratio, _) in judge(_load(ref), _load(alt), cand).items():
            per_output[name] = max(per_output.get(name, (0, 0)), (ratio, d))
        for name, (ratio, d) in sorted(per_output.items()):
            print(f"| {kind} | {name} | {d:.2e} | {ratio:.1f} |")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"run": lambda out, which, rows=None: run(out, which, rows), "compare": compare, "mutants": mutants,
     "run-nakdimon": run_nakdimon}[command](*args)
