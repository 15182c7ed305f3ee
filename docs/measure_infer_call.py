"""The slowest single inference call here, for the inference time limit's default (docs/limits.md, "Inference time";
paritygate/backend/deadline.py): keras.applications.ResNet50 (25.6 M parameters, random weights: no download) as a
team's TensorFlow reference, its first call (tracing included) and the next, at batch 1 and 8, through the suite's
own runner (the bound around each call included).

    flock /work/coord/heavy.lock .venv/bin/python docs/measure_infer_call.py
"""

import tempfile
import time

import keras
import numpy as np

from paritygate.backend.tf.runner import TfRunner

with tempfile.TemporaryDirectory() as folder:
    keras.applications.ResNet50(weights=None).export(f"{folder}/resnet50", verbose=False)
    runner = TfRunner(f"{folder}/resnet50").activate()
    name = next(iter(runner.input_metadata()))
    for batch in (1, 8):
        feed = {name: np.random.default_rng(0).uniform(-1, 1, (batch, 224, 224, 3)).astype(np.float32)}
        seconds = []
        for _ in range(2):
            start = time.perf_counter()
            runner.infer(feed)
            seconds.append(time.perf_counter() - start)
        print(f"resnet50 TF batch {batch}: first call {seconds[0]:.2f} s, next {seconds[1]:.2f} s")
