"""paritygate.backend.onnx.artifacts.convert: tf2onnx's command line with its garbage collected as it goes makes the
same ONNX graph as tf2onnx's own, and collects only when the process grew."""

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from paritygate.backend.onnx.artifacts import convert

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")
pytestmark = [pytest.mark.tf, pytest.mark.onnx]

ARGS = ["--signature_def", "serving_default", "--opset", "17"]


def test_the_driver_converts_as_tf2onnx_does(toy_saved_model, tmp_path):
    """The same ops, inputs, outputs and values as ``python -m tf2onnx.convert`` (tf2onnx itself names merged
    duplicate constants differently from one run to the next, so names are not compared)."""
    made = {}
    for module in ("tf2onnx.convert", "paritygate.backend.onnx.artifacts.convert"):
        out = tmp_path / f"{module}.onnx"
        subprocess.run([sys.executable, "-m", module, "--saved-model", str(toy_saved_model), *ARGS, "--output", str(out)],
                       check=True, capture_output=True)
        made[module] = onnx.load(str(out))
    ours, theirs = made["paritygate.backend.onnx.artifacts.convert"], made["tf2onnx.convert"]
    assert Counter(n.op_type for n in ours.graph.node) == Counter(n.op_type for n in theirs.graph.node)
    assert [i.name for i in ours.graph.input] == [i.name for i in theirs.graph.input]
    assert [o.name for o in ours.graph.output] == [o.name for o in theirs.graph.output]
    x = {ours.graph.input[0].name: np.linspace(-1, 1, 8, dtype=np.float32).reshape(8, 1)}
    for a, b in zip(*(ort.InferenceSession(m.SerializeToString()).run(None, x) for m in (ours, theirs))):
        np.testing.assert_array_equal(a, b)


def test_garbage_is_collected_only_once_the_process_grew(monkeypatch):
    calls = []
    monkeypatch.setattr(convert.gc, "collect", lambda: calls.append("gc"))
    monkeypatch.setattr(convert, "trim", lambda: calls.append("trim"))
    size = [1000]
    monkeypatch.setattr(convert, "resident", lambda: size[0])
    monkeypatch.setattr(convert, "_LAST", [1000])
    convert.collect()
    assert calls == []
    size[0] += convert.GROWTH_BYTES + 1
    convert.collect()
    assert calls == ["gc", "trim"] and convert._LAST == [size[0]]
    convert.collect(force=True)
    assert calls == ["gc", "trim", "gc", "trim"]
