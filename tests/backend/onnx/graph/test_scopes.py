"""paritygate.backend.onnx.graph.scopes: walks and renames that see through subgraphs, on a graph made in code."""

import pytest

from paritygate.backend.onnx.graph import scopes

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx
h = onnx.helper
T = onnx.TensorProto


def nested():
    """outer: a, b -> If(then: reads a and b; else: defines its own b, reads a and it, holds an If reading b)."""
    info = lambda n: h.make_tensor_value_info(n, T.FLOAT, None)
    inner = h.make_graph([h.make_node("Identity", ["b"], ["ib"], name="inner_id")], "inner", [], [info("ib")])
    then_ = h.make_graph([h.make_node("Add", ["a", "b"], ["t"], name="then_add")], "then", [], [info("t")])
    else_ = h.make_graph([h.make_node("Neg", ["a"], ["b"], name="shadow_b"),
                          h.make_node("If", ["c"], ["e"], then_branch=inner, else_branch=inner, name="inner_if")],
                         "else", [], [info("e")])
    graph = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=then_, else_branch=else_, name="outer_if")],
                         "g", [info("a"), info("b"), h.make_tensor_value_info("c", T.BOOL, [])], [info("y")])
    return h.make_model(graph)


def test_graphs_and_nodes_reach_every_level():
    m = nested()
    assert [g.name for g in scopes.graphs(m.graph)] == ["g", "else", "inner", "inner", "then"]  # attributes by name
    assert [n.name for n in scopes.nodes(m.graph)] == ["outer_if", "shadow_b", "inner_if", "inner_id", "inner_id",
                                                       "then_add"]


def test_free_names_are_what_a_graph_reads_from_outside():
    branches = {a.name: a.g for a in nested().graph.node[0].attribute}
    then_, else_ = branches["then_branch"], branches["else_branch"]
    assert scopes.free_names(then_) == {"a", "b"}
    assert scopes.free_names(else_) == {"a", "c"}  # its b is its own, and its If's inner graphs read that b


def test_rename_reads_stops_where_a_nested_graph_defines_the_name():
    m = nested()
    scopes.rename_reads(m.graph, "b", "b2")
    assert {n.name: list(n.input) for n in scopes.nodes(m.graph)} == {
        "outer_if": ["c"], "then_add": ["a", "b2"], "shadow_b": ["a"], "inner_if": ["c"], "inner_id": ["b"]}


def test_inferred_types_set_weights_aside_and_give_them_back():
    """A conv over large float weights, a Reshape to a shape held in an int64 initializer and a Resize by float
    scales: the types inferred with the weights' bytes set aside are those inferred with them (every tensor), and
    the model's bytes are the same afterwards."""
    import numpy as np
    from onnx import numpy_helper as nh

    w = nh.from_array(np.ones((64, 3, 3, 3), np.float32), "w")
    inits = [w, nh.from_array(np.array([1, -1], np.int64), "shape"),
             nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("Resize", ["c", "", "scales"], ["r"]),
             h.make_node("Reshape", ["r", "shape"], ["y"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    before = model.SerializeToString()
    assert len(w.raw_data) > scopes.BULK_BYTES
    expected = scopes.declared_types(onnx.shape_inference.infer_shapes(model))
    assert scopes.inferred_types(model) == expected and set(expected) >= {"c", "r", "y"}
    assert model.SerializeToString() == before
