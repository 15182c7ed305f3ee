"""paritygate.backend.onnx.artifacts.index_paths: a float value that becomes an index is not a float to round. On a real
Keras Embedding over float32 token ids (SentiToolKit 0.1.8's input), converted by tf2onnx: onnxconverter-common
alone casts the ids to FP16 (id 4999 -> 5000: ONNX Runtime stops), the suite's fp16 build keeps that path in FP32
(its strict rewrite too), and a team's own file that rounds it is named, node and cause."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")
pytest.importorskip("tensorflow")

from paritygate.backend.onnx.artifacts import fp16, index_paths
from paritygate.backend.onnx.strict import rewrite

pytestmark = [pytest.mark.onnx, pytest.mark.tf]
IDS = np.array([[4999, 2049, 2051, 4097, 0, 3001]], np.float32)  # ids FP16 cannot hold (above 2048, odd)


def run(model, ids=IDS):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: ids})[0]


@pytest.fixture(scope="module")
def source(embedding_model):
    return fp16.name_nodes(onnx.load(str(embedding_model[1])))


def rounding(source, monkeypatch):
    """The suite's fp16 build as it was before index paths: the ids cast to FP16 before the Gather (the file a team
    gets from onnxconverter-common, made valid)."""
    with monkeypatch.context() as patch:
        patch.setattr(index_paths, "keep_fp32", lambda model: [])
        return fp16.convert(source, (), {"ids": np.zeros((1, 6), np.float32)})[0]


def test_rounding_the_token_ids_to_fp16_breaks_the_gather(source, monkeypatch):
    """Premise: converted without the rule, id 4999 reaches the Gather as 5000."""
    with pytest.raises(Exception, match=r"idx=5000 must be within the inclusive range \[-5000,4999\]"):
        run(rounding(source, monkeypatch))


def test_the_suite_build_keeps_the_index_path_in_fp32(source):
    half, report = fp16.convert(source, (), {"ids": np.zeros((1, 6), np.float32)})
    blocked = [b for b in report["fp16_blocked"] if "Gather" in b["reason"]]
    assert blocked and all(b["op"] == "Cast" and "an index, not a float to round" in b["reason"] for b in blocked)
    expected = run(source)
    np.testing.assert_allclose(run(half), expected, atol=2e-3)  # FP16 rounding of the rows and the Dense only
    np.testing.assert_allclose(run(rewrite.emulate(half)[0]), expected, atol=2e-3)  # strict rounds no index either
    assert index_paths.rounded(half) == []


def test_a_team_file_that_rounds_the_ids_is_named_node_and_cause(source, monkeypatch):
    (line,) = index_paths.rounded(rounding(source, monkeypatch))
    assert line.startswith("node '") and "(Cast) carries an index in float16" in line
    assert "into input 1 of Gather" in line and "FP16 holds integers exactly only up to 2048" in line


def test_an_integer_only_shape_path_is_no_index_path():
    """Shape -> Gather -> Concat -> Reshape computes in integers: nothing to keep in FP32."""
    h, T = onnx.helper, onnx.TensorProto
    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape"),
             h.make_node("Gather", ["s", "zero"], ["n"], name="first", axis=0),
             h.make_node("Concat", ["n", "minus1"], ["target"], name="concat", axis=0),
             h.make_node("Reshape", ["x", "target"], ["y"], name="reshape")]
    inits = [h.make_tensor("zero", T.INT64, [1], [0]), h.make_tensor("minus1", T.INT64, [1], [-1])]
    model = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                                      [h.make_tensor_value_info("y", T.FLOAT, None)], inits),
                         opset_imports=[h.make_opsetid("", 17)])
    assert index_paths.index_paths(model) == []


def test_localization_names_the_crash_and_its_index_path(source, monkeypatch):
    """A candidate that crashes cannot be compared node by node: localization names the node ONNX Runtime stopped
    at and the float16 index path that caused it."""
    from paritygate.backend.onnx.diagnosis.localize import crash_site

    half = rounding(source, monkeypatch)
    with pytest.raises(Exception) as crash:
        run(half)
    site = crash_site(half, str(crash.value))
    assert site["crashed_node"].endswith("GatherV2") and site["op_type"] == "Cast"
    assert "idx=5000" in site["crash"] and site["first_node"] in site["cause"]
    assert "carries an index in float16" in site["cause"]


def test_localize_and_repair_reports_the_crash_not_a_tool_error(source, monkeypatch, embedding_model, tmp_path,
                                                               parity_cache):
    """Through the divergence step a failing check runs: the artifact crashes on the failing inputs, and the
    details name where and why instead of "localization failed: RunnerError"."""
    from paritygate.judge import divergence
    from tests.conftest import toy_spec

    onnx.save(rounding(source, monkeypatch), str(tmp_path / "own.fp16.onnx"))
    saved, fp32_path = embedding_model
    spec = toy_spec(reference=saved, onnx=fp32_path, onnx_artifacts={"fp16": tmp_path / "own.fp16.onnx"},
                    precisions=("fp32", "fp16"), inputs={"ids": ((-1, 6), "float32", (0.0, 4999.0))})
    d = divergence.localize_and_repair(spec, "fp16", {"ids": IDS}, {"output_0": run(source)}, fp16_ops=())
    assert "error" not in d, d
    assert d["crashed_node"].endswith("GatherV2") and d["op_type"] == "Cast" and "idx=5000" in d["crash"]
    assert "carries an index in float16" in d["cause"]


def test_a_slice_bound_computed_in_float_is_kept_exact():
    """end = int(floor(n * 0.5)) read by a Slice: the Mul, the Floor and the Cast are the index path. At n = 8195
    FP16 would make n 8196 (its spacing there is 8): the slice would keep 4098 elements, not 4097."""
    h, T = onnx.helper, onnx.TensorProto
    nodes = [h.make_node("Mul", ["n", "half"], ["scaled"], name="mul"),
             h.make_node("Floor", ["scaled"], ["floored"], name="floor"),
             h.make_node("Cast", ["floored"], ["end"], name="cast", to=T.INT64),
             h.make_node("Slice", ["data", "start", "end"], ["y"], name="slice"),
             h.make_node("Mul", ["y", "half"], ["z"], name="scale_out")]
    inits = [h.make_tensor("half", T.FLOAT, [1], [0.5]), h.make_tensor("start", T.INT64, [1], [0])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("n", T.FLOAT, [1]),
                                      h.make_tensor_value_info("data", T.FLOAT, [10000])],
                         [h.make_tensor_value_info("z", T.FLOAT, None)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    assert sorted(b["node"] for b in index_paths.keep_fp32(model)) == ["cast", "floor", "mul"]
    feeds = {"n": np.array([8195.0], np.float32), "data": np.arange(10000, dtype=np.float32) / 1e4}
    half, _ = fp16.convert(model, (), feeds)
    sess = ort.InferenceSession(rewrite.emulate(half)[0].SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(None, feeds)[0].shape == (4097,)  # as the suite runs it: strict FP16 (ORT's own drops roundings)
