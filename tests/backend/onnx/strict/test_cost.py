"""Cost of strict FP16 numerics on the bundled models (issue 15 budget: strict may cost at most 1.5x ONNX Runtime's
FP32 time on the same model). A pytest-benchmark measurement, not a timed assertion: run it with
``pytest tests/backend/onnx/strict/test_cost.py -m slow -p no:xdist --benchmark-enable``; each row's
``extra_info`` holds the FP32 and ORT-own medians and the ratios, timed interleaved with the strict run.

Beside it, the exactness the deferral must keep: the artifact the checks and localization run (rounding deferred
past Relu / Clip so ONNX Runtime fuses them) gives the values of the same rewrite without deferral (every float16
tensor outside a fused kernel rounded where it is produced), on the goldens, bit for bit as numbers.

Both use the artifact cache the README's commands use: the bundled models' converted ONNX, built once by whichever
run needs it first (a fresh cache here converted the three models again in every run of the suite: 9 s of CPU)."""

import numpy as np
import pytest

from paritygate.backend.onnx.artifacts import loader
from paritygate.backend.onnx.strict.loader import strict_onnx

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


def session(path, level=None, library=None):
    from paritygate.backend.onnxrt.options import session_options

    return ort.InferenceSession(str(path), session_options(level=level, library=library),
                                providers=["CPUExecutionProvider"])


def onnx_feed(spec, sess, inputs):
    from paritygate.backend import iomap

    names = iomap.input_map(spec, [i.name for i in sess.get_inputs()])
    return {names.get(k, k): v[:BATCH] for k, v in inputs.items()}


@pytest.mark.parametrize("name", MODELS)
def test_deferring_the_rounding_changes_no_strict_value(bundled, name):
    spec, inputs = bundled[name]
    fp16 = loader.fp16_onnx(spec)
    checked, plain = session(strict_onnx(fp16)), session(strict_onnx(fp16, defer=False))
    feed = onnx_feed(spec, checked, {k: v for k, v in inputs.items()})
    for a, b in zip(checked.run(None, feed), plain.run(None, feed)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", MODELS)
def test_the_twin_changes_no_strict_value(bundled, name):
    """What the candidate runner runs for a strict artifact on this CPU (``twin``): its values, on the goldens."""
    from paritygate.backend.onnx.strict import round16, twin

    spec, inputs = bundled[name]
    checked = strict_onnx(loader.fp16_onnx(spec))
    built, level, library = twin.runnable(checked)
    assert (level is None) == (name == "bert" and round16.library() is None)  # bert holds no Conv
    a, b = session(checked), session(built, level, library)
    feed = onnx_feed(spec, a, inputs)
    for x, y in zip(a.run(None, feed), b.run(None, feed)):
        np.testing.assert_array_equal(x, y)


TIMED = """
import sys, time, numpy as np, onnxruntime as ort
from paritygate.backend.onnxrt.options import session_options
path, level, inputs, library = sys.argv[1], sys.argv[2], np.load(sys.argv[3]), sys.argv[5] or None
options = session_options(level=getattr(ort.GraphOptimizationLevel, level), library=library)
sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
feed = {k: inputs[k] for k in inputs.files}
for _ in range(min(50, int(sys.argv[4]))):
    sess.run(None, feed)
times = []
for _ in range(int(sys.argv[4])):
    start = time.perf_counter()
    sess.run(None, feed)
    times.append(time.perf_counter() - start)
print(np.median(times) * 1e3)
"""


def median_ms_alone(path, level, feed, tmp_path, calls=200, library=None):
    """The median of ``calls`` calls in a process of its own: a session's intra-op threads spin on after its run, so
    sessions timed in one process take the cores from each other (mobilenet's FP32 run measured 0.11 and 0.19 ms
    in two such runs minutes apart; 0.107-0.110 ms alone)."""
    import subprocess
    import sys

    np.savez(tmp_path / "feed.npz", **feed)
    out = subprocess.run([sys.executable, "-c", TIMED, str(path), level.name, str(tmp_path / "feed.npz"), str(calls),
                          str(library or "")], capture_output=True, text=True, check=True)
    return float(out.stdout)


@pytest.mark.parametrize("name", MODELS)
def test_strict_fp16_cost_against_fp32(benchmark, bundled, name, tmp_path):
    """Each variant in a process of its own, interleaved over 5 rounds so that a load change on the shared machine
    hits every variant alike: FP32, ONNX Runtime's own numerics of the fp16 file, the strict artifact as it is and
    what the candidate runner runs for it (``checked``: its twin on this CPU, ``twin``). A measurement that asserts
    nothing: where pytest-benchmark is off (its default under xdist, the README's test command) it is skipped before
    its 20 timing processes run."""
    if benchmark.disabled:
        pytest.skip("a cost measurement, not a check: run it with -p no:xdist --benchmark-enable (module docstring)")
    from paritygate.backend.onnx.strict import twin

    spec, inputs = bundled[name]
    fp16 = loader.fp16_onnx(spec)
    all_ = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    built, level, library = twin.runnable(strict_onnx(fp16))
    runs = {"fp32": (loader.fp32_onnx(spec), all_, None), "ort": (fp16, all_, None),
            "strict": (strict_onnx(fp16), all_, None), "checked": (built, level or all_, library)}
    feeds = {k: onnx_feed(spec, session(*run), inputs) for k, run in runs.items()}
    medians = {k: [] for k in runs}
    for _ in range(5):
        for k, (p, lv, lib) in runs.items():
            medians[k].append(median_ms_alone(p, lv, feeds[k], tmp_path, library=lib))
    ms = {k: float(np.median(v)) for k, v in medians.items()}
    checked = session(*runs["checked"])
    benchmark.pedantic(checked.run, args=(None, feeds["checked"]), rounds=200, iterations=1, warmup_rounds=20)
    benchmark.extra_info.update(batch=BATCH, round16=library is not None,
                                **{f"{k}_ms": round(v, 4) for k, v in ms.items()},
                                strict_vs_fp32=round(ms["checked"] / ms["fp32"], 2),
                                unmoved_vs_fp32=round(ms["strict"] / ms["fp32"], 2),
                                ort_fp16_vs_fp32=round(ms["ort"] / ms["fp32"], 2))
