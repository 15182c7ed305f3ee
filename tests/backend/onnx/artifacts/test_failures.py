"""paritygate.backend.onnx.artifacts.failures: a failure is computed once (issue 37). A Keras 3 encoder with exact
gelu (2 layers, hidden 64), which tf2onnx 1.17 converts to an ``Erfc`` node ONNX does not have: one ``error`` naming
the known gap and its fix, the other checks of the model skip naming it, and a rerun reads the recorded failure
instead of converting again. Real Keras, tf2onnx and ONNX."""

import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")  # before TF: pytester restores sys.modules, and re-importing onnx after TF aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")
keras = pytest.importorskip("keras")

from tests.conftest import write_config

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]
CONFORMANCE = Path(__file__).resolve().parents[4] / "conformance"
SEQ, VOCAB = 16, 100


def exact_gelu_encoder(path, layers=2, hidden=64, heads=2):
    """A BERT-style encoder: Embedding, ``layers`` x (self-attention, LayerNorm, Dense with Keras 3's exact gelu,
    LayerNorm), [CLS] softmax over 2."""
    keras.utils.set_random_seed(0)
    ids = keras.Input((SEQ,), dtype="int32", name="input_ids")
    mask = keras.Input((SEQ,), dtype="int32", name="attention_mask")
    x = keras.layers.Embedding(VOCAB, hidden)(ids)
    attend = keras.ops.cast(mask[:, None, :], "bool")
    for _ in range(layers):
        x = keras.layers.LayerNormalization()(x + keras.layers.MultiHeadAttention(heads, hidden // heads)(
            x, x, attention_mask=attend))
        h = keras.layers.Dense(hidden * 4, activation="gelu")(x)  # keras.activations.gelu: approximate=False
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(hidden)(h))
    keras.Model([ids, mask], keras.layers.Dense(2, activation="softmax")(x[:, 0])).save(path)
    return path


def run(pytester, reference):
    cfg = write_config(pytester.path, {"models": [{
        "name": "encoder", "reference": str(reference), "precisions": ["fp32", "fp16"], "max_batch": 2,
        "task": "classification", "inputs": {
            "input_ids": {"shape": [-1, SEQ], "dtype": "int32", "range": [0, VOCAB - 1]},
            "attention_mask": {"shape": [-1, SEQ], "dtype": "int32", "range": [0, 1], "not_all": [0]}}}]})
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE / "test_parity.py"), "-k", "engine_builds or matches_reference",
                                f"--parity-config={cfg}", f"--parity-report={report}", "-p", "no:cacheprovider",
                                "-p", "no:xdist")
    checks = json.loads((report / "parity-report.json").read_text())["checks"]
    return result, {(c["precision"], c["check"]): c for c in checks}


def test_a_converter_gap_is_one_error_with_its_fix_and_is_not_converted_again(pytester, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PARITYGATE_CACHE", str(cache))
    reference = exact_gelu_encoder(tmp_path / "encoder.keras")
    result, checks = run(pytester, reference)
    status = {k: c["status"] for k, c in checks.items()}
    first = ("fp32", "engine_builds")
    assert status.pop(first) == "error" and set(status.values()) == {"skip"}, result.stdout.str()[-3000:]
    message = checks[first]["details"]["message"]
    assert "ArtifactError: tf2onnx cannot convert this model: known converter gap 'erfc'" in message, message
    assert "fix: use approximate GELU" in message and "No Op registered for Erfc" in message
    for key, check in checks.items():  # the others name it, in a line of their own
        if key != first:
            assert "engine_builds [fp32] erred with it (known converter gap 'erfc')" in check["details"]["reason"], \
                (key, check["details"])
    body = result.stdout.str().split("short test summary info")[0]  # the summary line's length follows the terminal's width
    assert body.count("known converter gap 'erfc'") == 1, "said once"
    (recorded,) = (cache / "onnx").glob("failed-*.json")
    assert json.loads(recorded.read_text())["converter"] == "tf2onnx"

    import subprocess

    def no_tf2onnx(cmd, *args, **kwargs):  # a rerun must not convert: the recorded failure answers
        assert "tf2onnx.convert" not in cmd, cmd
        return subprocess_run(cmd, *args, **kwargs)

    subprocess_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", no_tf2onnx)
    again, checks = run(pytester, reference)
    assert checks[first]["status"] == "error" and "recorded by an earlier run" in checks[first]["details"]["message"]
    assert str(recorded) in checks[first]["details"]["message"], again.stdout.str()[-3000:]
