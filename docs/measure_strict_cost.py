"""Strict FP16 cost on any model, timed as ``tests/backend/onnx/strict/test_cost.py`` times the bundled ones: the
FP32 ONNX, ONNX Runtime's own run of the fp16 file, its strict artifact as it is and what the candidate runner runs
(its twin on this CPU, ``paritygate.backend.onnx.strict.twin``), each in a process of its own, interleaved over
three rounds; the medians and their ratios to FP32. Inputs: uniform in [-1, 1] (float32) or integers in [1, 40).

    .venv/bin/python docs/measure_strict_cost.py FP32.onnx FP16.onnx 8,64,64,1 [float32|int32] [CALLS]
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

from paritygate.backend.onnx.strict import twin
from paritygate.backend.onnx.strict.loader import strict_onnx
from paritygate.backend.onnxrt.options import session_options
from tests.backend.onnx.strict.test_cost import median_ms_alone


def main(fp32, fp16, shape, dtype="float32", calls="200"):
    shape = [int(v) for v in shape.split(",")]
    rng = np.random.default_rng(0)
    x = rng.integers(1, 40, shape) if dtype == "int32" else rng.uniform(-1, 1, shape)
    checked = strict_onnx(fp16)
    built, level, library = twin.runnable(checked)
    every = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    runs = {"fp32": (fp32, every, None), "ort": (fp16, every, None), "strict": (checked, every, None),
            "checked": (built, level or every, library)}
    medians = {k: [] for k in runs}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            for k, (path, lv, lib) in runs.items():
                options = session_options(level=lv, library=lib)
                name = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).get_inputs()[0].name
                medians[k].append(median_ms_alone(path, lv, {name: x.astype(dtype)}, Path(tmp), int(calls), lib))
    ms = {k: float(np.median(v)) for k, v in medians.items()}
    print(" ".join(f"{k}={v:.3f} ms ({v / ms['fp32']:.2f}x)" for k, v in ms.items()))


if __name__ == "__main__":
    main(*sys.argv[1:])
