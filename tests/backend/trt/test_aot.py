"""paritygate.backend.trt.aot and .layers: TensorRT-RTX's real parser and builder, run ahead of time on this CPU-only
machine in a child process; what its log says made data (layers, fusions, datatypes, warnings, a rejection's node)."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tests.backend.trt.conftest import make_spec

pytest.importorskip("tensorrt_rtx")
onnx = pytest.importorskip("onnx")
h, T = onnx.helper, onnx.TensorProto
CONFORMANCE = Path(__file__).resolve().parents[3] / "conformance"


def _save(path, nodes, inputs, outputs, inits=(), dtype=T.FLOAT):
    graph = h.make_graph(nodes, path.stem, [h.make_tensor_value_info(n, dtype, s) for n, s in inputs],
                         [h.make_tensor_value_info(n, dtype, s) for n, s in outputs], list(inits))
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def conv_relu(path, dtype=T.FLOAT16):
    w = onnx.numpy_helper.from_array(np.ones((4, 3, 3, 3), onnx.helper.tensor_dtype_to_np_dtype(dtype)), "w")
    return _save(path, [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv0"),
                        h.make_node("Relu", ["c"], ["y"], name="relu0")],
                 [("x", ["N", 3, 8, 8])], [("y", ["N", 4, 8, 8])], [w], dtype)


def rms_norm_fp16(path):
    """y = x / sqrt(mean(x^2) + eps), all FP16: the graph issue 29 saw TensorRT-RTX warn about."""
    eps = onnx.numpy_helper.from_array(np.array(1e-6, np.float16), "eps")
    nodes = [h.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             h.make_node("ReduceMean", ["sq"], ["ms"], name="mean", keepdims=1),
             h.make_node("Add", ["ms", "eps"], ["var"], name="add_eps"), h.make_node("Sqrt", ["var"], ["rms"], name="root"),
             h.make_node("Div", ["x", "rms"], ["y"], name="norm")]
    return _save(path, nodes, [("x", ["N", 64])], [("y", ["N", 64])], [eps], T.FLOAT16)


def pads_of_a_shape(path):
    """x float32 [N, L, 4] padded at the end of L by L % 4, its pads computed at run time from a Pad of a shape
    tensor whose own pads depend on x's rank: the shape arithmetic tf2onnx writes for a dilated Conv1D's
    SpaceToBatchND (SpliceAI 1.3.1; 13 of its nodes). TensorRT-RTX 1.7's CPU-only build of it calls CUDA."""
    c = lambda name, v: onnx.numpy_helper.from_array(np.array(v, np.int64), name)
    nodes = [h.make_node("Shape", ["x"], ["length"], start=1, end=2), h.make_node("Mod", ["length", "four"], ["r"]),
             h.make_node("Concat", ["zero", "r"], ["pr"], axis=0), h.make_node("Unsqueeze", ["pr", "zero"], ["row"]),
             h.make_node("Pad", ["row", "first"], ["rows"]), h.make_node("Shape", ["x"], ["shape"]),
             h.make_node("Size", ["shape"], ["rank"]), h.make_node("Sub", ["rank", "two"], ["k"]),
             h.make_node("Mul", ["last", "k"], ["more"]), h.make_node("Pad", ["rows", "more"], ["table"]),
             h.make_node("Transpose", ["table"], ["columns"], perm=[1, 0]),
             h.make_node("Reshape", ["columns", "flat"], ["pads"]), h.make_node("Pad", ["x", "pads"], ["y"], name="pad_x")]
    inits = [c("four", [4]), c("zero", [0]), c("first", [1, 0, 0, 0]), c("last", [0, 0, 1, 0]), c("flat", [-1]),
             c("two", 2)]
    return _save(path, nodes, [("x", ["N", "L", 4])], [("y", ["N", "M", 4])], inits)


def settings(spec):
    from paritygate.backend.trt.util import build_settings

    return build_settings(spec)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))


def test_a_conv_relu_builds_into_one_fp16_kernel_with_its_layer_report(tmp_path):
    from paritygate.backend.trt import aot, layers

    spec = make_spec(inputs={"x": ((-1, 3, 8, 8), "float16")})
    report = aot.engine_report(conv_relu(tmp_path / "cr.onnx"), settings(spec))
    assert report["built"] and report["error"] is None and report["builder"].startswith("TensorRT-RTX 1.")
    assert Path(report["plan"]).stat().st_size == report["bytes"] > 0
    conv = [k for k in layers.kernels(report["layers"]) if "conv0" in k["onnx_nodes"]]
    assert conv and conv[0]["onnx_nodes"] == ["conv0", "relu0"]  # the builder fused the Relu into the Conv
    assert ["conv0", "relu0"] in layers.fused_groups(report["layers"])
    cov = layers.coverage(report["layers"], "fp16")
    assert cov["kernel_share"] == 1.0 and cov["tensor_datatypes"] == {"Half": cov["tensors"]}
    assert layers.coverage(report["layers"], "int8")["kernels_in_precision"] == 0


def test_a_report_is_cached_by_the_onnx_bytes(tmp_path):
    from paritygate.backend.trt import aot

    spec = make_spec(inputs={"x": ((-1, 3, 8, 8), "float32")})
    path = conv_relu(tmp_path / "fp32.onnx", T.FLOAT)
    first = aot.engine_report(path, settings(spec))
    files = sorted((tmp_path / "cache" / "trt-rtx").iterdir())
    assert aot.engine_report(path, settings(spec)) == first  # served from the cache: no second child
    assert sorted((tmp_path / "cache" / "trt-rtx").iterdir()) == files
    assert layers_in(first) == {"Float"}


def layers_in(report):
    from paritygate.backend.trt import layers

    return set(layers.coverage(report["layers"], "fp32")["tensor_datatypes"])


def test_fp16_layernorm_warning_is_kept(tmp_path):
    from paritygate.backend.trt import aot

    spec = make_spec(inputs={"x": ((-1, 64), "float16")})
    report = aot.engine_report(rms_norm_fp16(tmp_path / "rms.onnx"), settings(spec))
    assert report["built"]
    assert any("layernorm" in w.lower() and "FP16" in w for w in report["warnings"]), report["warnings"]


def test_a_rejection_names_the_node_and_op(tmp_path):
    """Asymmetric activations (a non-zero zero point), as onnxruntime's quantize_static writes by default."""
    from paritygate.backend.trt import aot

    inits = [onnx.numpy_helper.from_array(np.float32(0.01), "s"), onnx.numpy_helper.from_array(np.uint8(128), "z")]
    path = _save(tmp_path / "asym.onnx", [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant_x"),
                                          h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant_x")],
                 [("x", ["N", 4])], [("y", ["N", 4])], inits)
    report = aot.engine_report(path, settings(make_spec()))
    assert not report["built"] and "plan" not in report
    error = report["error"]
    assert error["node"] == "quant_x" and error["op"] == "QuantizeLinear"
    assert "Non-zero zero point is not supported" in error["message"]


def test_a_builder_that_calls_cuda_where_there_is_none_could_not_run_it_did_not_reject(tmp_path):
    """SpliceAI's case (issue 37): the build stops on "cudaError 35: CUDA driver version is insufficient". That is the
    machine's, not the artifact's: the report says the builder could not run (``error.cannot_run``)."""
    from paritygate.backend.trt import aot

    spec = make_spec(inputs={"x": ((-1, -1, 4), "float32")})
    spec.inputs["x"] = dataclasses.replace(spec.inputs["x"], profile=((1, 16, 4), (4, 32, 4), (4, 64, 4)))
    report = aot.engine_report(pads_of_a_shape(tmp_path / "pads.onnx"), settings(spec))
    if report["built"]:
        pytest.skip("this machine has a CUDA driver: TensorRT-RTX built the graph")
    error = report["error"]
    assert "cudaError 35" in error["message"] and error["op"] == "Pad", error
    assert error["cannot_run"] == "the builder called CUDA, which this machine does not have"


def test_cannot_run_tells_the_machines_failures_from_the_artifacts():
    from paritygate.backend.trt.layers import cannot_run

    logged = ("[checkMacros.cpp::catchCudaError::250] Error Code 1: Cuda Runtime (In catchCudaError at "
              "/_src/common/dispatch/checkMacros.cpp:250 (cudaError 35: CUDA driver version is insufficient for CUDA "
              "runtime version))")  # TensorRT-RTX 1.7.1.116 on SpliceAI 1.3.1's fp32 ONNX, this machine
    assert cannot_run([logged]) == "the builder called CUDA, which this machine does not have"
    assert cannot_run(["std::bad_alloc"]) == "the builder ran out of host memory"
    assert cannot_run(["ModelImporter.cpp:...: ERROR: ... Non-zero zero point is not supported"]) is None


def test_an_unnamed_unsupported_node_keeps_the_parsers_code_index_and_op(tmp_path):
    """Det, which TensorRT-RTX's parser does not support, unnamed (as converters leave nodes): the line once read
    "[8] false at node 'None'"; it keeps the parser's error code name, the node's index and its op."""
    from paritygate.backend.engines import cannot_build
    from paritygate.backend.trt import aot

    nodes = [h.make_node("Identity", ["x"], ["a"]), h.make_node("Det", ["a"], ["d"]),
             h.make_node("Unsqueeze", ["d", "axis"], ["y"])]
    path = _save(tmp_path / "det.onnx", nodes, [("x", ["N", 3, 3])], [("y", ["N", 1])],
                 [onnx.numpy_helper.from_array(np.array([1], np.int64), "axis")])
    spec = make_spec(inputs={"x": ((-1, 3, 3), "float32")})
    report = aot.engine_report(path, settings(spec))
    error = report["error"]
    assert not report["built"] and (error["node"], error["op"], error["node_index"]) == (None, "Det", 1), error
    assert error["code"] == "UNSUPPORTED_NODE", error
    assert error["message"].startswith("UNSUPPORTED_NODE (parser error 8, in checkDet): "), error
    line = cannot_build(spec, "fp32", {**report, "artifact": str(path)})
    assert " at node #1 (unnamed, op Det): UNSUPPORTED_NODE (parser error 8, in checkDet)" in line, line
    assert "'None'" not in line


def test_a_file_the_parser_cannot_read_is_a_rejection_not_a_crash(tmp_path):
    from paritygate.backend.trt import aot

    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"not an onnx file")
    report = aot.engine_report(path, settings(make_spec()))
    assert not report["built"] and report["error"]["message"]


def test_one_child_builds_every_request_each_report_with_its_own_messages(tmp_path):
    """The process's build child serves one build after another (``aot._Builder``): each report holds the messages
    of its own build alone, the layernorm warning in both rms-norm builds and in none of the conv-relu's."""
    from paritygate.backend.trt import aot, layers

    norm = settings(make_spec(inputs={"x": ((-1, 64), "float16")}))
    first = aot.engine_report(rms_norm_fp16(tmp_path / "rms.onnx"), norm)
    child = aot._BUILDER[0].child
    conv = aot.engine_report(conv_relu(tmp_path / "cr.onnx"), settings(make_spec(inputs={"x": ((-1, 3, 8, 8),
                                                                                                "float16")})))
    second = aot.engine_report(rms_norm_fp16(tmp_path / "rms2.onnx"), {**norm, "max_batch_note": 2})  # a new key
    assert aot._BUILDER[0].child is child and child.poll() is None, "one child built all three"
    for report in (first, second):
        assert any("layernorm" in w.lower() for w in report["warnings"]), report["warnings"]
    assert not any("layernorm" in w.lower() for w in conv["warnings"]), conv["warnings"]
    assert {n for k in layers.kernels(conv["layers"]) for n in k["onnx_nodes"]} == {"conv0", "relu0"}, "no other build's"


def test_a_child_that_crashes_is_an_error_with_its_last_words_and_the_next_build_starts_another(tmp_path):
    from paritygate.backend.trt import aot

    spec = make_spec(inputs={"x": ((-1, 3, 8, 8), "float32")})
    path = conv_relu(tmp_path / "fp32.onnx", T.FLOAT)
    with pytest.raises(RuntimeError, match=r"crashed building .*fp32\.onnx \(exit 1\): .*Error"):
        aot.engine_report(path, {**settings(spec), "profile": {"x": "not a profile"}})
    crashed = aot._BUILDER[0].child
    assert crashed.poll() == 1
    assert aot.engine_report(path, settings(spec))["built"]
    assert aot._BUILDER[0].child is not crashed


def test_parse_layers_reads_the_builders_lines():
    from paritygate.backend.trt import layers

    line = ("Name: k1, LayerType: gemm, Inputs: [ { Name: a, Dimensions: [-1,4], Strides: [4,1], StrideOrder: [1,0], "
            "Datatype: Int8, Format: (Linear) Row major linear format }], Constants: [], Outputs: [ { Name: b, "
            "Dimensions: [-1,4], Strides: [4,1], StrideOrder: [1,0], Datatype: Float, Format: (Linear) Row major "
            "linear format }], TacticName: t0, StreamId: 0, Metadata: [ONNX Layer: mm]\x1f[ONNX Layer: dq]")
    shape = "Name: s, LayerType: shape_call, Inputs: [], Constants: [], Outputs: [], TacticName: , StreamId: 0, Metadata: "
    found = layers.parse_layers([f"Layers:\n{shape}\n{line}\n\nI/O Tensors:\n Name: a, IOMode: Input"])
    assert found[1] == {"name": "k1", "type": "gemm", "tactic": "t0", "inputs": [["a", "Int8"]],
                        "outputs": [["b", "Float"]], "onnx_nodes": ["mm", "dq"]}
    assert layers.kernels(found) == [found[1]]
    cov = layers.coverage(found, "int8")
    assert (cov["kernels"], cov["kernels_in_precision"], cov["tensor_datatypes"]) == (1, 1, {"Float": 1, "Int8": 1})


def test_the_engine_row_and_its_finding_in_the_report(pytester, tmp_path):
    """End to end on a team's own all-FP16 rms-norm file: the fp16 ``engine_builds`` row passes, carries the
    layer report and engine-side coverage, and the builder's layernorm warning is a finding in JSON and Markdown."""
    pytest.importorskip("onnxruntime")
    tf = pytest.importorskip("tensorflow")
    from tests.conftest import write_config

    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
    def serve(x):
        return {"y": x * tf.math.rsqrt(tf.reduce_mean(x * x, axis=-1, keepdims=True) + 1e-6)}

    tf.saved_model.save(module, str(tmp_path / "rms"), signatures={"serving_default": serve})
    fp16 = rms_norm_fp16(pytester.path / "rms.fp16.onnx")
    cfg = write_config(pytester.path, {"models": [{
        "name": "rms", "reference": str(tmp_path / "rms"), "onnx": {"fp16": str(fp16)}, "precisions": ["fp16"],
        "max_batch": 4, "task": "regression",
        "inputs": {"x": {"shape": [-1, 64], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE / "test_parity.py"), "-k", "engine_builds", f"--parity-config={cfg}",
                                f"--parity-report={report}", "-p", "no:cacheprovider", "-p", "no:xdist")
    data = json.loads((report / "parity-report.json").read_text())
    (row,) = data["checks"]
    assert row["status"] == "pass", result.stdout.str()
    engine = row["details"]["engine"]
    assert engine["coverage"]["kernel_share"] == 1.0 and engine["layers"]
    assert any(f["kind"] == "engine_warning" and "layernorm" in f["details"]["message"].lower()
               for f in data["findings"])
    markdown = (report / "parity-report.md").read_text()
    assert "engine_warning" in markdown and "What the engine runs" in markdown
    result.stdout.fnmatch_lines(["paritygate: finding engine_warning: rms fp16 engine_builds: TensorRT-RTX * warned: *"])


@pytest.mark.gpu
def test_the_runtime_on_this_gpu_runs_an_engine_or_refuses_in_its_own_words(tmp_path):
    """``--parity-runtime=tensorrt-rtx`` on a GPU: TensorRT-RTX's runtime runs compute capability 8.0/8.6/8.9/12.x
    (docs/engine.md). On any other GPU (the H100/H200 this project borrows are 9.0) the runtime's own refusal is the
    reason the checks skip; on a supported one the probe engine deserializes and runs."""
    from paritygate.backend.trt import aot
    from paritygate.gpu import device

    found = device.probe()
    if not found.available:
        pytest.skip(found.reason)
    said = aot.runtime_refusal()
    capability = found.info().compute_capability
    if capability in ("8.0", "8.6", "8.9") or capability.startswith("12."):
        assert said is None, said
    else:
        assert said is not None and "compute capabilit" in said.lower(), said
