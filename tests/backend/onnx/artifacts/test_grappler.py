"""paritygate.backend.onnx.artifacts.grappler: grappler run with the weights standing in gives grappler's own graph,
byte for byte, or grappler runs on the real graph."""

import numpy as np
import pytest

from paritygate.backend.onnx.artifacts import grappler

tf = pytest.importorskip("tensorflow")
tf_loader = pytest.importorskip("tf2onnx.tf_loader")
pytestmark = pytest.mark.tf

STAND_IN_BYTES = 1024


def frozen(kind, subnormal=False):
    """A frozen GraphDef: x [2, 8, 8, 4] -> Conv2D (filter w through two Identity) -> ... -> MatMul with ``dense``
    (through Identity and Reshape) -> out. ``kind``: "mul", a Mul by a constant after the Conv2D (grappler merges it
    into the filter); "add", a weight added to x and then a constant (grappler adds the two constants); "transpose",
    a weight through Transpose (which changes its values' order)."""
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 8, 8, 4], name="x")
        filters = rng.standard_normal((3, 3, 4, 16)).astype(np.float32)
        filters[0, 0, 0, 0] = 1e-40 if subnormal else filters[0, 0, 0, 0]
        y = tf.nn.conv2d(x, tf.identity(tf.identity(tf.constant(filters, name="w"))), 1, "SAME")
        if kind == "mul":
            y = y * tf.constant(rng.standard_normal(16).astype(np.float32))
        flat = tf.reshape(y, [-1, 1024])
        dense = tf.constant(rng.standard_normal((64, 16, 10)).astype(np.float32), name="dense")
        z = tf.matmul(flat, tf.reshape(tf.identity(dense), [1024, 10]))
        if kind == "add":
            z = tf.concat([z, (flat + tf.identity(tf.constant(rng.standard_normal(1024).astype(np.float32)))) + 2.0], 1)
        if kind == "transpose":
            z = z + tf.matmul(flat, tf.transpose(tf.constant(rng.standard_normal((10, 1024)).astype(np.float32))))
        tf.identity(z, name="out")
    return graph.as_graph_def(add_shapes=True)


def optimize(graph_def):
    """(grappler.optimized's graph, tf2onnx's grappler on the real graph, the largest constant each run was given)."""
    largest = []

    def tf_optimize(inputs, outputs, given):
        largest.append(max(n.attr["value"].tensor.ByteSize() for n in given.node if n.op == "Const"))
        return tf_loader.tf_optimize(inputs, outputs, given)

    with tf.Graph().as_default():
        ours = grappler.optimized(["x:0"], ["out:0"], graph_def, tf_optimize, STAND_IN_BYTES)
        theirs = tf_loader.tf_optimize(["x:0"], ["out:0"], graph_def)
    return ours, theirs, largest


def same(a, b):
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def test_weights_stand_in_and_grapplers_own_graph_comes_back():
    """Identity and Reshape carry the stand-ins; grappler's merge of the Mul into the Conv2D's filter is computed
    again from the real filter: two runs, none given a weight, and grappler's own bytes."""
    graph_def = frozen("mul")
    assert sorted(grappler.carried(graph_def, STAND_IN_BYTES)) == ["dense", "w"]
    ours, theirs, largest = optimize(graph_def)
    assert any(n.name.endswith(grappler.MERGED) for n in theirs.node)  # the merge happened
    assert len(largest) == 2 and max(largest) < STAND_IN_BYTES
    assert same(ours, theirs)


def test_a_weight_grappler_computes_with_sends_it_to_the_real_graph():
    """grappler adds the weight and the constant after it (a value the stand-ins cannot give): the two runs differ
    there, and grappler runs a third time, on the real graph."""
    ours, theirs, largest = optimize(frozen("add"))
    assert len(largest) == 3 and largest[-1] >= STAND_IN_BYTES
    assert same(ours, theirs)


def test_a_subnormal_weight_is_not_merged_here():
    """TensorFlow may flush a subnormal value to zero where numpy does not: that merge is left to grappler."""
    ours, theirs, largest = optimize(frozen("mul", subnormal=True))
    assert len(largest) == 3
    assert same(ours, theirs)


def test_a_weight_whose_values_a_folded_node_reorders_keeps_them():
    graph_def = frozen("transpose")
    plan = grappler.carried(graph_def, STAND_IN_BYTES)
    assert sorted(plan) == ["dense", "w"] and len(plan["dense"]) == 2  # its Identity and Reshape
    ours, theirs, largest = optimize(graph_def)
    assert len(largest) == 2 and max(largest) >= STAND_IN_BYTES  # the transposed weight, as it is
    assert same(ours, theirs)
