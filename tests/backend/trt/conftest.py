"""Tiny models for the TensorRT backend tests: ModelSpecs made in code and ONNX graphs made with onnx.helper."""

from pathlib import Path

import numpy as np
import pytest

from paritygate.models.config import ModelSpec, TensorSpec

A100 = {"tensorrt": "10.3.0", "gpu": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}
T4 = {"tensorrt": "10.9.0", "gpu": "Tesla T4", "compute_capability": "7.5"}


def make_spec(max_batch=4, inputs=None, engines=None, name="times5"):
    """A ModelSpec without a config file: inputs maps name -> (shape with -1 batch, dtype)."""
    inputs = inputs or {"x": ((-1, 4), "float32")}
    return ModelSpec(name=name, source=Path("parity.toml"), reference=Path("reference"), precisions=("fp32",),
                     max_batch=max_batch,
                     inputs={n: TensorSpec(n, tuple(s), np.dtype(d), (-1.0, 1.0)) for n, (s, d) in inputs.items()},
                     engines=dict(engines or {}))


def _save(graph, path):
    onnx = pytest.importorskip("onnx")
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by TensorRT 10's parser and onnxruntime alike
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _io(name):
    onnx = pytest.importorskip("onnx")
    return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, ["N", 4])


@pytest.fixture
def times5_onnx(tmp_path):
    """y = 5 x, x: float32 [N, 4] with a dynamic batch."""
    onnx = pytest.importorskip("onnx")
    h = onnx.helper
    five = h.make_tensor("five", onnx.TensorProto.FLOAT, [1], [5.0])
    graph = h.make_graph([h.make_node("Mul", ["x", "five"], ["y"])], "times5", [_io("x")], [_io("y")], [five])
    return _save(graph, tmp_path / "times5.onnx")


@pytest.fixture
def two_outputs_onnx(tmp_path):
    """double = x + x and negated = -x, x: float32 [N, 4] with a dynamic batch."""
    onnx = pytest.importorskip("onnx")
    h = onnx.helper
    nodes = [h.make_node("Add", ["x", "x"], ["double"]), h.make_node("Neg", ["x"], ["negated"])]
    graph = h.make_graph(nodes, "two_outputs", [_io("x")], [_io("double"), _io("negated")])
    return _save(graph, tmp_path / "two_outputs.onnx")


@pytest.fixture
def stats(monkeypatch):
    """paritygate.backend.cache.STATS, zeroed for the test."""
    from paritygate.backend import cache

    monkeypatch.setitem(cache.STATS, "hits", 0)
    monkeypatch.setitem(cache.STATS, "builds", 0)
    return cache.STATS
