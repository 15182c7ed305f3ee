"""paritygate.backend.onnx.artifacts.fp16 on graphs with subgraphs, made in code after nakdimon 0.2.1's LSTM ``Loop``:
a body that ``Gather``\\ s one step of an outer-scope tensor each iteration, casts its int64 counter to float, and
holds an ``If`` whose branches read the same outer tensor. Whichever of the ``Loop`` and the ``If`` is kept in FP32, the
artifact must be valid and compute the same numbers."""

import numpy as np
import pytest

from paritygate.backend.onnx.artifacts import fp16, validate

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")
pytestmark = pytest.mark.onnx
h = onnx.helper
T = onnx.TensorProto
X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)  # rows, 3 steps


def loop_model():
    """y[r] = a[r, 0] + sum_i (i * a[r, i] if i < 2 else -a[r, i]), a = 2x, over 3 steps."""
    info = lambda name, t, shape=None: h.make_tensor_value_info(name, t, shape)
    branch = lambda name, nodes, out: h.make_graph(nodes, name, [], [info(out, T.FLOAT)])
    then_branch = branch("then", [h.make_node("Gather", ["a", "i"], ["picked"], axis=1, name="then_gather")],
                         "picked")
    else_branch = branch("else", [h.make_node("Gather", ["a", "i"], ["col_e"], axis=1, name="else_gather"),
                                  h.make_node("Neg", ["col_e"], ["negated"], name="else_neg")], "negated")
    body = h.make_graph(
        [h.make_node("Less", ["i", "two"], ["early"], name="is_early"),
         h.make_node("If", ["early"], ["col"], then_branch=then_branch, else_branch=else_branch, name="branch"),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT, name="counter_to_float"),  # nakdimon's Less__140
         h.make_node("Mul", ["col", "fi"], ["weighted"], name="weigh"),
         h.make_node("Add", ["acc_in", "weighted"], ["acc_out"], name="accumulate"),
         h.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "body", [info("i", T.INT64, []), info("cond_in", T.BOOL, []), info("acc_in", T.FLOAT, ["N"])],
        [info("cond_out", T.BOOL, []), info("acc_out", T.FLOAT, ["N"])],
        [h.make_tensor("two", T.INT64, [], [2])])
    inits = [h.make_tensor("k", T.FLOAT, [], [2.0]), h.make_tensor("steps", T.INT64, [], [3]),
             h.make_tensor("go", T.BOOL, [], [True]), h.make_tensor("zero", T.INT64, [], [0])]
    nodes = [h.make_node("Mul", ["x", "k"], ["a"], name="scale"),
             h.make_node("Gather", ["a", "zero"], ["acc0"], axis=1, name="first_step"),
             h.make_node("Loop", ["steps", "go", "acc0"], ["y"], body=body, name="loop")]
    graph = h.make_graph(nodes, "g", [info("x", T.FLOAT, ["N", 3])], [info("y", T.FLOAT, ["N"])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def expected(x):
    a = 2 * x
    return a[:, 0] + 0 * a[:, 0] + 1 * a[:, 1] - 2 * a[:, 2]


def run(model, x=X):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def find(graph, name):
    for node in graph.node:
        if node.name == name:
            return node
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                hit = find(sub, name)
                if hit is not None:
                    return hit
    return None


def cast_to(model, name):
    return find(model.graph, name).attribute[0].i


def test_the_model_computes_what_it_says():
    np.testing.assert_allclose(run(loop_model()), expected(X), rtol=1e-6)


@pytest.mark.parametrize("blocked", [[], ["loop"], ["branch"]])
def test_the_converter_alone_builds_invalid_graphs(blocked):
    """Premise: onnxconverter-common converts the outer ``a`` to float16 and leaves a blocked body (or branch)
    float32, still reading ``a`` (nakdimon: "Inferred elem type differs ... (10) vs (1)" at the body's Gather);
    with nothing blocked, the body's Cast(to=FLOAT) still produces float32 under a float16 value_info."""
    from onnxconverter_common import float16

    plain = float16.convert_float_to_float16(loop_model(), keep_io_types=True, node_block_list=blocked)
    with pytest.raises(validate.ArtifactError, match="failed at node"):
        validate.validate(plain, {"x": X[:1]}, "onnxconverter-common")


@pytest.mark.parametrize("blocked", [[], ["loop"], ["branch"], ["loop", "branch"]])
def test_a_loop_converts_to_a_valid_graph_whichever_part_stays_fp32(blocked):
    half, report = fp16.convert(loop_model(), (), {"x": X[:1]}, keep_nodes=blocked)
    assert report["fp16_blocked"] == [] and report["captures_untyped"] == []
    # a enters the body through one Cast, and the If's branches each through their own from the body's name
    assert [(r["tensor"], r["into"]) for r in report["captures_routed"]] == \
        [("a", "loop"), ("a__in_loop", "branch"), ("a__in_loop", "branch")]
    body_half = "loop" not in blocked
    branch_half = body_half and "branch" not in blocked
    assert cast_to(half, "a__in_loop__cast") == (T.FLOAT16 if body_half else T.FLOAT)
    assert cast_to(half, "counter_to_float") == (T.FLOAT16 if body_half else T.FLOAT)
    assert cast_to(half, "a__in_loop__in_branch__cast") == (T.FLOAT16 if branch_half else T.FLOAT)
    out = run(half)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected(X), atol=4 * 2.0 ** -10)  # a few FP16 roundings of values <= 4


def test_a_capture_of_an_integer_tensor_is_left_as_it_is():
    """Only float32 captures are routed: the body's Gather index ``i`` and ``two`` are its own, ``steps`` int64."""
    model = loop_model()
    routed, untyped = fp16.route_captures(model)
    assert {r["tensor"] for r in routed} == {"a", "a__in_loop"} and untyped == []
    body = find(model.graph, "loop").attribute[0].g
    assert [n.op_type for n in body.node][:1] == ["Cast"] and "a" not in {i for n in body.node[1:] for i in n.input}
    np.testing.assert_allclose(run(model), expected(X), rtol=1e-6)  # routing alone changes nothing in FP32


def test_a_body_node_rejected_in_fp16_is_kept_alone_not_its_whole_loop():
    """The checker names the Loop first and the body's Celu (no float16 in its opset-17 schema) inside it: the
    Celu is kept in FP32 and the rest of the body converted."""
    model = loop_model()
    body = find(model.graph, "loop").attribute[0].g
    nodes = list(body.node)
    k = [n.name for n in nodes].index("weigh")
    nodes[k].output[0] = "weighted_raw"
    nodes.insert(k + 1, h.make_node("Celu", ["weighted_raw"], ["weighted"], name="celu"))
    del body.node[:]
    body.node.extend(nodes)
    onnx.checker.check_model(model, full_check=True)
    half, report = fp16.convert(model, (), {"x": X[:1]})
    (blocked,) = report["fp16_blocked"]
    assert (blocked["node"], blocked["op"]) == ("celu", "Celu") and "failed at node 'loop'" in blocked["reason"]
    assert cast_to(half, "counter_to_float") == T.FLOAT16  # the body itself is FP16
    np.testing.assert_allclose(run(half), run(model), atol=4 * 2.0 ** -10)


def test_an_outer_initializer_a_blocked_body_reads_stays_float32_in_it():
    """A body kept in FP32 that reads an outer weight (0.1, not an FP16 value) reads it in float32: the converter
    would convert the outer initializer (no blocked node reads it directly) and the body would see 0.1 rounded."""
    info = lambda n, t, s=None: h.make_tensor_value_info(n, t, s)
    body = h.make_graph([h.make_node("Mul", ["v_in", "w"], ["v_out"], name="scale_step"),
                         h.make_node("Identity", ["c_in"], ["c_out"], name="keep_going")], "body",
                        [info("i", T.INT64, []), info("c_in", T.BOOL, []), info("v_in", T.FLOAT, ["N", 3])],
                        [info("c_out", T.BOOL, []), info("v_out", T.FLOAT, ["N", 3])])
    inits = [h.make_tensor("w", T.FLOAT, [], [0.1]), h.make_tensor("steps", T.INT64, [], [3]),
             h.make_tensor("go", T.BOOL, [], [True])]
    graph = h.make_graph([h.make_node("Relu", ["x"], ["r"], name="relu"),
                          h.make_node("Loop", ["steps", "go", "r"], ["y"], body=body, name="loop")], "g",
                         [info("x", T.FLOAT, ["N", 3])], [info("y", T.FLOAT, ["N", 3])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    half, report = fp16.convert(model, (), {"x": X[:1]}, keep_nodes=["loop"])
    (split,) = report["initializers_split"]
    assert split == {"tensor": "w", "copy": "w__fp32", "readers": ["loop/body"]}
    inner = {t.name: t for t in find(half.graph, "loop").attribute[0].g.initializer}
    assert inner["w__fp32"].data_type == T.FLOAT
    assert onnx.numpy_helper.to_array(inner["w__fp32"]) == np.float32(0.1)
    np.testing.assert_allclose(run(half), np.maximum(X, 0) * np.float32(0.1) ** 3, rtol=2.0 ** -10)


@pytest.mark.parametrize("blocked", [[], ["branch"]])
def test_strict_emulation_of_a_loop_rounds_inside_its_body(blocked):
    """Strict numerics (backend.onnx.strict.rewrite) rewrite the Loop's body and the If's branches too: nothing stays
    float16 but the rounding Casts' outputs, the artifact is valid, and it computes the FP16 answer (nakdimon's
    fp16 LSTM stopped every check with `error` while the body was left typed float16)."""
    from paritygate.backend.onnx.strict import rewrite

    half, _ = fp16.convert(loop_model(), (), {"x": X[:1]}, keep_nodes=blocked)
    emulated, report = rewrite.emulate(half)
    assert report["rounded"] > 0
    assert all(t.endswith("__fp16") for t in rewrite.float16_tensors(emulated))
    validate.check_graph(emulated, "paritygate strict FP16 emulation", path="loop.onnx")
    np.testing.assert_allclose(run(emulated), expected(X), atol=4 * 2.0 ** -10)
