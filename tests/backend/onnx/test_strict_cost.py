"""Cost of strict FP16 numerics on the bundled models (issue 15 budget: strict may cost at most 1.5x ONNX Runtime's
FP32 time on the same model). A pytest-benchmark measurement, not a timed assertion: run it with
``pytest tests/backend/onnx/test_strict_cost.py -m slow -p no:xdist --benchmark-enable``; each row's
``extra_info`` holds the FP32 and ORT-own medians and the ratios, timed interleaved with the strict run.

Beside it, the exactness the deferral must keep: the artifact the checks and localization run (rounding deferred
past Relu / Clip so ONNX Runtime fuses them) gives the values of the same rewrite without deferral (every float16
tensor outside a fused kernel rounded where it is produced), on the goldens, bit for bit as numbers.

Both use the artifact cache the README's commands use: the bundled models' converted ONNX, built once by whichever
run needs it first (a fresh cache here converted the three models again in every run of the suite: 9 s of CPU)."""

import time

import numpy as np
import pytest

from paritygate.backend.onnx import loader, strict

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")
pytestmark = [pytest.mark.onnx, pytest.mark.tf, pytest.mark.slow]
MODELS = ("mobilenet", "bert", "ssd")
BATCH = 8


@pytest.fixture(scope="module")
def bundled():
    pytest.importorskip("tensorflow")
    from paritygate.context import RunOptions
    from paritygate.inputs import goldens

    return {m.name: (m, goldens.load_golden(m).inputs) for m in RunOptions().models if m.name in MODELS}


def session(path):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_feed(spec, sess, inputs):
    from paritygate.backend import iomap

    names = iomap.input_map(spec, [i.name for i in sess.get_inputs()])
    return {names.get(k, k): v[:BATCH] for k, v in inputs.items()}


def median_ms(sess, feed, calls=100):
    sess.run(None, feed)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


@pytest.mark.parametrize("name", MODELS)
def test_deferring_the_rounding_changes_no_strict_value(bundled, name):
    spec, inputs = bundled[name]
    fp16 = loader.fp16_onnx(spec)
    checked, plain = session(strict.strict_onnx(fp16)), session(strict.strict_onnx(fp16, defer=False))
    feed = onnx_feed(spec, checked, {k: v for k, v in inputs.items()})
    for a, b in zip(checked.run(None, feed), plain.run(None, feed)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", MODELS)
def test_strict_fp16_cost_against_fp32(benchmark, bundled, name):
    spec, inputs = bundled[name]
    fp16 = loader.fp16_onnx(spec)
    runs = {"fp32": session(loader.fp32_onnx(spec)), "ort": session(fp16), "strict": session(strict.strict_onnx(fp16))}
    feeds = {k: onnx_feed(spec, s, inputs) for k, s in runs.items()}
    medians = {k: [] for k in runs}
    for _ in range(5):  # interleaved, so a load change on the shared machine hits every variant alike
        for k, s in runs.items():
            medians[k].append(median_ms(s, feeds[k]))
    ms = {k: float(np.median(v)) for k, v in medians.items()}
    benchmark.pedantic(runs["strict"].run, args=(None, feeds["strict"]), rounds=200, iterations=1, warmup_rounds=20)
    benchmark.extra_info.update(batch=BATCH, **{f"{k}_ms": round(v, 4) for k, v in ms.items()},
                                strict_vs_fp32=round(ms["strict"] / ms["fp32"], 2),
                                ort_fp16_vs_fp32=round(ms["ort"] / ms["fp32"], 2))
