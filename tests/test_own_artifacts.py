"""The team's own fp16/int8 ONNX (``onnx = { fp32, fp16, int8 }``), made by tools other than the suite's builder
(onnxconverter-common's convert_float_to_float16 and onnxruntime's quantize_static, each with its defaults), judged
as they are: fp16 as FP16 (strict numerics), int8 with its coverage; a file that is not what its key says stops
the run with one line and exit 4; an "fp16" file computing its MACs in FP32 is never a pass."""

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # before TF: pytester restores sys.modules, and re-importing onnx after TF aborts
pytest.importorskip("onnxruntime")
float16 = pytest.importorskip("onnxconverter_common.float16")
pytest.importorskip("tensorflow")

from tests.conftest import write_config

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
h = onnx.helper
T = onnx.TensorProto


def fp32_model():
    """y = x W5, z = x W2 as MatMuls (the toy SavedModel's graph), x float32 [N, 1]."""
    inits = [onnx.numpy_helper.from_array(np.array([[5.0]], np.float32), "w5"),
             onnx.numpy_helper.from_array(np.array([[2.0]], np.float32), "w2")]
    nodes = [h.make_node("MatMul", ["x", "w5"], ["y"], name="mm_y"), h.make_node("MatMul", ["x", "w2"], ["z"], name="mm_z")]
    info = lambda n: h.make_tensor_value_info(n, T.FLOAT, ["N", 1])
    model = h.make_model(h.make_graph(nodes, "toy", [info("x")], [info("y"), info("z")], inits),
                         opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def quantized(folder, source, low=-1.0):
    """quantize_static with its defaults; calibrated on [low, 1]: an asymmetric range gets a non-zero zero point."""
    from onnxruntime.quantization import quantize_static

    class Reader:
        rows = iter([{"x": np.array([[v]], np.float32)} for v in np.linspace(low, 1, 16)])

        def get_next(self):
            return next(self.rows, None)

    onnx.save(source, str(folder / "m.onnx"))
    quantize_static(str(folder / "m.onnx"), str(folder / "m.int8.onnx"), Reader())  # its defaults: QDQ, QInt8
    np.savez(folder / "calib.npz", x=np.linspace(-1, 1, 16, dtype=np.float32).reshape(-1, 1))


def run(pytester, toy_saved_model, onnx_files, precisions, *args, checks="matches_reference", plugins=()):
    cfg = write_config(pytester.path, {"models": [{
        "name": "toy", "reference": str(toy_saved_model), "onnx": onnx_files, "precisions": precisions,
        "max_batch": 4, "task": "regression", "calibration": "calib.npz",
        "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE / "test_parity.py"), "-k", checks,
                                           f"--parity-config={cfg}", f"--parity-report={report}",
                                           "-p", "no:cacheprovider", "-p", "no:xdist", *args, plugins=list(plugins))
    path = report / "parity-report.json"
    rows = json.loads(path.read_text())["checks"] if path.exists() else []
    if checks == "matches_reference":
        return result, {c["precision"]: c for c in rows}
    return result, {(c["precision"], c["check"]): c for c in rows}


def test_team_fp16_and_int8_files_are_judged_as_they_are(pytester, toy_saved_model):
    source = fp32_model()
    quantized(pytester.path, source)
    onnx.save(float16.convert_float_to_float16(source), str(pytester.path / "m.fp16.onnx"))  # defaults: fp16 I/O
    result, checks = run(pytester, toy_saved_model, {"fp32": "m.onnx", "fp16": "m.fp16.onnx", "int8": "m.int8.onnx"},
                         ["fp32", "fp16", "int8"])
    assert {p: c["status"] for p, c in checks.items()} == {"fp32": "pass", "fp16": "pass", "int8": "pass"}, \
        result.stdout.str()
    for precision in ("fp16", "int8"):
        d = checks[precision]["details"]
        cov = d["precision_coverage"]
        assert d["numerics"] == "strict" and cov["judged"] == "own" and cov["artifact"].endswith(f"m.{precision}.onnx")
        assert cov["mac_share"] == 1.0 and cov["macs_total"] == 2, cov  # two 1x1 MatMuls at batch 1
        assert d["candidate"]["built_by_suite"] is False and isinstance(d["candidate"]["lint"], list)


def test_a_file_that_is_not_what_its_key_says_stops_the_run(pytester, toy_saved_model):
    source = fp32_model()
    quantized(pytester.path, source)
    result, checks = run(pytester, toy_saved_model, {"fp32": "m.onnx", "fp16": "m.onnx", "int8": "m.onnx"},
                         ["fp32", "fp16", "int8"])
    assert result.ret == 4 and not checks
    result.stderr.fnmatch_lines(["*key 'onnx.fp16': *m.onnx holds no node computing in float16*",
                                 "*key 'onnx.int8': *m.onnx holds no QuantizeLinear/DequantizeLinear*"])


def test_an_fp16_file_whose_macs_run_in_fp32_is_never_a_pass(pytester, toy_saved_model, monkeypatch):
    """Only the graph's tail in FP16 (the MatMuls blocked): it computes float16 tensors, so it loads and runs,
    but 0% of its multiply-accumulates are FP16: inconclusive, which fails the run. The judge call made that
    verdict (judge.coverage inside judge.parity.candidate_parity), and the recorded row is the judge's own
    CheckResult: the very object it returned, whose record is the report's row."""
    from paritygate.judge import parity
    from paritygate.plugin import SESSION_KEY

    judged, recorded, real = [], [], parity.candidate_parity

    def spy(*args, **kwargs):  # the real judge, its result kept
        found = real(*args, **kwargs)
        judged.append(found[0])
        return found

    class Recorded:
        def pytest_sessionfinish(self, session):
            recorded.extend(session.config.stash[SESSION_KEY].checks)

    monkeypatch.setattr(parity, "candidate_parity", spy)
    source = fp32_model()
    quantized(pytester.path, source)
    disguised = float16.convert_float_to_float16(source, keep_io_types=True, node_block_list=["mm_y", "mm_z"])
    tail = h.make_node("Cast", ["y"], ["y_half"], to=T.FLOAT16, name="tail")  # one float16 tensor, no MACs
    disguised.graph.node.append(tail)
    onnx.save(disguised, str(pytester.path / "m.fp16.onnx"))
    result, checks = run(pytester, toy_saved_model, {"fp32": "m.onnx", "fp16": "m.fp16.onnx"}, ["fp32", "fp16"],
                         plugins=[Recorded()])
    assert checks["fp16"]["status"] == "inconclusive", result.stdout.str()
    assert checks["fp16"]["details"]["precision_coverage"]["mac_share"] == 0.0
    assert "computes 0.0% of its multiply-accumulates in fp16" in checks["fp16"]["details"]["message"]
    assert result.ret == 1
    row = next(c for c in recorded if c.precision == "fp16")
    assert any(row is j for j in judged) and row.status == "inconclusive"
    assert row.to_dict() == checks["fp16"]  # the report's row is that object's record
    assert "computes 0.0% of its multiply-accumulates" in row.inconclusive["message"]


def test_an_int8_file_tensorrts_parser_rejects_fails_before_any_numeric_check(pytester, toy_saved_model):
    """quantize_static's defaults calibrated on [0, 1]: asymmetric activations, a non-zero zero point, which
    TensorRT's ONNX parser rejects (TensorRT-RTX 1.7: "Non-zero zero point is not supported"). ONNX Runtime runs the
    file, and it would match numerically: the row is still a ``fail`` quoting the parser, and no numeric check of int8
    passes (one fail for one faulty file: the later int8 checks skip, naming it)."""
    pytest.importorskip("tensorrt_rtx")
    source = fp32_model()
    quantized(pytester.path, source, low=0.0)
    result, checks = run(pytester, toy_saved_model, {"fp32": "m.onnx", "int8": "m.int8.onnx"}, ["fp32", "int8"],
                         checks="engine_builds or matches_reference")
    status = {k: c["status"] for k, c in checks.items()}
    assert status == {("fp32", "engine_builds"): "pass", ("fp32", "matches_reference"): "pass",
                      ("int8", "engine_builds"): "fail", ("int8", "matches_reference"): "skip"}, result.stdout.str()
    engine = checks[("int8", "engine_builds")]["details"]["engine"]
    assert engine["builder"].startswith("TensorRT-RTX ") and not engine["built"]
    assert "Non-zero zero point is not supported" in engine["error"]["message"]
    assert engine["error"]["op"] == "QuantizeLinear" and engine["error"]["node"]
    message = checks[("int8", "engine_builds")]["details"]["message"]
    assert "TensorRT cannot build this artifact" in message and "Non-zero zero point" in message, message
    assert "engine_builds failed with it" in checks[("int8", "matches_reference")]["details"]["reason"]
    built = checks[("fp32", "engine_builds")]["details"]["engine"]
    assert built["built"] and built["coverage"]["kernels"] >= 1 and built["layers"]


def test_a_team_fp16_file_that_rounds_token_ids_fails_with_one_line_naming_the_node(pytester, embedding_model,
                                                                                    monkeypatch):
    """SentiToolKit's case: the team's fp16 file casts float32 token ids to FP16 before the Embedding's Gather
    (id 4999 -> 5000). A static look at the graph makes it the candidate's fail, naming the node and the cause,
    before any run could crash or silently pick wrong rows."""
    from paritygate.backend.onnx.artifacts import fp16, index_paths

    saved, fp32_path = embedding_model
    with monkeypatch.context() as patch:  # the suite's own build without its index-path rule: the team's file
        patch.setattr(index_paths, "keep_fp32", lambda model: [])
        half, _ = fp16.convert(fp16.name_nodes(onnx.load(str(fp32_path))), (), {"ids": np.zeros((1, 6), np.float32)})
    onnx.save(half, str(pytester.path / "m.fp16.onnx"))
    cfg = write_config(pytester.path, {"models": [{
        "name": "senti", "reference": str(saved), "onnx": {"fp32": str(fp32_path), "fp16": "m.fp16.onnx"},
        "precisions": ["fp32", "fp16"], "max_batch": 2,
        "inputs": {"ids": {"shape": [-1, 6], "dtype": "float32", "range": [0.0, 4999.0]}}}]})
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE / "test_parity.py"), str(CONFORMANCE / "test_properties.py"), "-k",
                                "matches_reference or property_parity", f"--parity-config={cfg}",
                                f"--parity-report={report}", "-p", "no:cacheprovider", "-p", "no:xdist")
    checks = {(c["check"], c["precision"]): c for c in json.loads((report / "parity-report.json").read_text())["checks"]}
    assert {k: c["status"] for k, c in checks.items()} == {
        ("matches_reference", "fp32"): "pass", ("matches_reference", "fp16"): "fail",
        ("property_parity", "fp32"): "pass", ("property_parity", "fp16"): "skip"}, result.stdout.str()
    assert "the fp16 candidate is wrong: matches_reference failed with it" in json.dumps(
        checks[("property_parity", "fp16")]["details"])  # one fail for one faulty file
    text = json.dumps(checks[("matches_reference", "fp16")]["details"])
    assert "m.fp16.onnx rounds an index to FP16: node '" in text and "(Cast) carries an index in float16" in text
    assert "of Gather '" in text and "FP16 holds integers exactly only up to 2048" in text
