"""paritygate.backend.onnx.artifacts.convert: tf2onnx's command line with its garbage collected as it goes makes the
same ONNX graph as tf2onnx's own, and collects only when the process grew."""

import copy
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


def test_freezing_with_stand_ins_gives_tensorflows_own_graph(toy_saved_model, monkeypatch):
    """``frozen_graph_def`` (every float constant standing in while the function is made: STAND_IN_BYTES 0) gives the
    GraphDef tf2onnx's freezing gives: the same bytes, the weights' values included."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    loaded = tf.saved_model.load(str(toy_saved_model))  # kept: the function reads its variables
    func = loaded.signatures["serving_default"]
    theirs = convert_variables_to_constants_v2(func, lower_control_flow=False, aggressive_inlining=True)
    theirs = theirs.graph.as_graph_def(add_shapes=True)
    monkeypatch.setattr(convert, "STAND_IN_BYTES", 0)
    kept = {}
    real = convert._stand_ins

    def stand_ins(graph_def):
        light, values = real(graph_def)
        kept.update(values)
        return light, values

    monkeypatch.setattr(convert, "_stand_ins", stand_ins)
    ours = convert.frozen_graph_def(func)
    assert kept  # the toy's weights stood in
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)


def test_tf2onnx_nodes_copy_and_update_to_the_same_graph(monkeypatch):
    """``node_deepcopy`` leaves out the NodeProto's stale attributes and ``_update_proto`` writes them into a fresh
    one, which ``Node.attr`` then holds: the graph tf2onnx makes from the copy is the same bytes as with its own."""
    from tf2onnx import graph as tf2onnx_graph

    def made(patched):
        with monkeypatch.context() as patch:
            if patched:
                patch.setattr(tf2onnx_graph.Node, "__deepcopy__", convert.node_deepcopy, raising=False)
                patch.setattr(tf2onnx_graph.Node, "update_proto", convert._update_proto(tf2onnx_graph.Node.update_proto))
            graph = tf2onnx_graph.Graph([], opset=17)
            weights = graph.make_const("w", np.arange(12, dtype=np.float32).reshape(3, 4))
            graph.make_node("Transpose", [weights.output[0]], attr={"perm": [1, 0]}, outputs=["t"], name="transpose")
            graph.add_graph_output("t", onnx.TensorProto.FLOAT, [4, 3])
            copied = copy.deepcopy(graph)
            if patched:
                assert all(len(node.op.attribute) == 0 for node in copied.get_nodes())
            copied.update_proto()
            if patched:
                const = copied.get_node_by_output(weights.output[0])
                assert const.attr["value"] == const.op.attribute[0]
            return copied.make_graph("t", graph_name="g").SerializeToString(deterministic=True)

    assert made(True) == made(False)
