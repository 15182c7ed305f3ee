"""paritygate.backend.onnx.lint.trt_lint: the static TensorRT-compatibility lint, on graphs made in code.

Each rule is shown rejecting the graph that breaks it (an INT32 DequantizeLinear first: what quantize_static made
of the bundled models' Conv biases) and accepting the Q/DQ form TensorRT builds."""

import json

import numpy as np
import pytest

from paritygate.backend.onnx.lint import trt_lint

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx
h = onnx.helper
T = onnx.TensorProto


def model(nodes, initializers=(), opset=17, inputs=(("x", T.FLOAT),), outputs=(("y", T.FLOAT),)):
    graph = h.make_graph(nodes, "lint", [h.make_tensor_value_info(n, t, ["N", 4]) for n, t in inputs],
                         [h.make_tensor_value_info(n, t, None) for n, t in outputs], list(initializers))
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def qdq(zero_type=T.INT8, zero=0):
    """x -> QuantizeLinear -> DequantizeLinear -> y, scale 0.1, per tensor."""
    inits = [h.make_tensor("s", T.FLOAT, [], [0.1]), h.make_tensor("zp", zero_type, [], [zero])]
    return [h.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="quant"),
            h.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dequant")], inits


def rules(findings):
    return sorted((f["rule"], f["node"]) for f in findings)


def test_the_qdq_form_tensorrt_builds_has_no_findings():
    nodes, inits = qdq()
    assert trt_lint.lint(model(nodes, inits)) == []


def test_an_int32_dequantize_linear_is_rejected_with_its_source():
    """quantize_static's INT32 bias: DequantizeLinear(int32 constant) + Add."""
    inits = [h.make_tensor("bias_q", T.INT32, [4], [1, 2, 3, 4]), h.make_tensor("bias_s", T.FLOAT, [], [0.01]),
             h.make_tensor("bias_zp", T.INT32, [], [0])]
    nodes = [h.make_node("DequantizeLinear", ["bias_q", "bias_s", "bias_zp"], ["bias"], name="bias_dq"),
             h.make_node("Add", ["x", "bias"], ["y"], name="add")]
    (finding,) = trt_lint.lint(model(nodes, inits))
    assert finding["rule"] == "type" and finding["node"] == "bias_dq" and finding["op"] == "DequantizeLinear"
    assert "is INT32; TensorRT supports INT8, FP8, INT4" in finding["message"]
    assert finding["source"].startswith("onnx/onnx-tensorrt docs/operators.md @ release/10.1-GA (96e781103cfc)")


def test_a_nonzero_zero_point_is_rejected():
    nodes, inits = qdq(zero=3)
    assert rules(trt_lint.lint(model(nodes, inits))) == [("zero_point", "dequant"), ("zero_point", "quant")]


def test_a_uint8_quantizer_is_rejected():
    nodes, inits = qdq(zero_type=T.UINT8)
    # UINT8 is TensorRT's only as network I/O: the quantizer's output type and the DQ's input type are both wrong
    assert rules(trt_lint.lint(model(nodes, inits))) == [("quantized_type", "quant"), ("type", "dequant")]
    no_zero = [h.make_node("QuantizeLinear", ["x", "s"], ["q"], name="quant"),
               h.make_node("DequantizeLinear", ["q", "s"], ["y"], name="dequant")]
    assert ("quantized_type", "quant") in rules(trt_lint.lint(model(no_zero, inits[:1])))  # ONNX's default: UINT8


def test_quantized_tensors_must_sit_between_a_quantizer_and_a_dequantizer():
    nodes, inits = qdq()
    leak = nodes + [h.make_node("Identity", ["q"], ["z"], name="leak")]
    found = rules(trt_lint.lint(model(leak, inits, outputs=(("y", T.FLOAT), ("z", T.INT8)))))
    assert ("placement", "quant") in found
    computed = [h.make_node("Cast", ["x"], ["xi"], to=T.INT8, name="cast"),
                h.make_node("DequantizeLinear", ["xi", "s", "zp"], ["y"], name="dequant")]
    assert ("placement", "dequant") in rules(trt_lint.lint(model(computed, inits)))


def test_unsupported_and_foreign_operators_and_opsets():
    unique = model([h.make_node("Unique", ["x"], ["y"], name="uniq")])  # operators.md: Unique | N
    assert rules(trt_lint.lint(unique)) == [("operator", "uniq")]
    foreign = model([h.make_node("Gelu", ["x"], ["y"], name="gelu", domain="com.microsoft")])
    foreign.opset_import.append(h.make_opsetid("com.microsoft", 1))
    assert rules(trt_lint.lint(foreign)) == [("domain", "gelu")]
    relu = [h.make_node("Relu", ["x"], ["y"], name="relu")]
    assert rules(trt_lint.lint(model(relu, opset=21))) == [("opset", None)]  # TensorRT 10.0/10.1: opsets 9..20
    assert trt_lint.lint(model(relu, opset=20)) == []


def test_new_findings_are_those_a_build_added():
    before = [{"rule": "operator", "node": "uniq"}]
    after = before + [{"rule": "type", "node": "bias_dq"}]
    assert trt_lint.new_findings(before, after) == [{"rule": "type", "node": "bias_dq"}]


def test_the_table_records_where_it_came_from():
    data = json.loads(trt_lint.TABLE_PATH.read_text())
    assert data["source"] == {"repo": "onnx/onnx-tensorrt", "path": "docs/operators.md",
                              "commit": "96e781103cfc4adf4a6bb557e94bac8e693f6f4c", "tag": "release/10.1-GA"}
    assert data["opset"] == [9, 20]
    assert data["operators"]["DequantizeLinear"]["types"] == ["INT8", "FP8", "INT4"]
    assert not data["operators"]["Unique"]["supported"]
    assert len(data["operators"]) > 150 and np.all([isinstance(r["supported"], bool)
                                                     for r in data["operators"].values()])


def loop_of(body_nodes, body_inits=()):
    """y = Loop(3 steps, x as the carried value) whose body runs ``body_nodes`` from ``v_in`` to ``v_out``."""
    info = lambda n, t, s=None: h.make_tensor_value_info(n, t, s)
    body = h.make_graph(body_nodes + [h.make_node("Identity", ["c_in"], ["c_out"], name="keep_going")], "body",
                        [info("i", T.INT64, []), info("c_in", T.BOOL, []), info("v_in", T.FLOAT, ["N", 4])],
                        [info("c_out", T.BOOL, []), info("v_out", T.FLOAT, ["N", 4])], list(body_inits))
    inits = [h.make_tensor("steps", T.INT64, [], [3]), h.make_tensor("go", T.BOOL, [], [True])]
    return model([h.make_node("Loop", ["steps", "go", "x"], ["y"], body=body, name="loop")], inits)


def test_subgraphs_are_linted_like_the_top_level_graph():
    """An op TensorRT refuses inside a Loop body is found, and named with the graph that holds it."""
    clean = loop_of([h.make_node("Relu", ["v_in"], ["v_out"], name="relu")])
    assert trt_lint.lint(clean) == []
    unique = loop_of([h.make_node("Unique", ["v_in"], ["v_out"], name="uniq")])  # operators.md: Unique | N
    (finding,) = trt_lint.lint(unique)
    assert (finding["rule"], finding["node"], finding["graph"]) == ("operator", "uniq", "loop/body")


def test_qdq_rules_hold_inside_subgraphs_and_reach_outer_scope_constants():
    """The body quantizes with the outer graph's scale and zero point: a UINT8 zero point there is a finding, an
    INT8 one is not (the constants are resolved across scopes)."""
    for zero_type, expected in ((T.INT8, []), (T.UINT8, [("quantized_type", "quant"), ("type", "dequant")])):
        body = [h.make_node("QuantizeLinear", ["v_in", "s", "zp"], ["q"], name="quant"),
                h.make_node("DequantizeLinear", ["q", "s", "zp"], ["v_out"], name="dequant")]
        m = loop_of(body)
        m.graph.initializer.extend([h.make_tensor("s", T.FLOAT, [], [0.1]), h.make_tensor("zp", zero_type, [], [0])])
        assert rules(trt_lint.lint(m)) == expected
        assert {f["graph"] for f in trt_lint.lint(m)} <= {"loop/body"}


def test_nested_graphs_are_named_by_their_path():
    inner = h.make_graph([h.make_node("Unique", ["x"], ["u"], name="uniq")], "then", [],
                         [h.make_tensor_value_info("u", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Identity", ["x"], ["o"], name="same")], "else", [],
                         [h.make_tensor_value_info("o", T.FLOAT, None)])
    body_if = h.make_node("If", ["c_in"], ["v_out"], then_branch=inner, else_branch=other, name="choose")
    (finding,) = trt_lint.lint(loop_of([body_if]))
    assert (finding["node"], finding["graph"]) == ("uniq", "loop/body/choose/then_branch")
