"""paritygate.backend.onnx.artifacts.loader: the ONNX artifact per precision, cached by content.

fp32 converts a real SavedModel with tf2onnx (once per session); fp16 keeps float32 I/O and the FP32-kept op
list; int8 has Q/DQ nodes and refuses bad calibration data naming the file and the array."""

import dataclasses
import json
import shutil

import numpy as np
import pytest

from paritygate.backend import cache
from paritygate.backend.base import RunnerError
from paritygate.backend.cache import STATS, report_path
from paritygate.backend.onnx.artifacts import loader
from paritygate.backend.onnx.artifacts.validate import ArtifactError
from paritygate.inputs.sets import InputSetError
from paritygate.verdict import SuiteError
from tests.conftest import make_onnx, scale, toy_spec

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx

FLOAT, FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
X = np.linspace(-1, 1, 7, dtype=np.float32).reshape(7, 1)


def run(path, feed):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def elem_types(model):
    """Tensor name -> elem_type for the graph's inputs, outputs, initializers and inferred values."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    types.update({t.name: t.data_type for t in inferred.initializer})
    return types


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    path = tmp_path_factory.mktemp("calib") / "calib.npz"
    np.savez(path, x=np.random.default_rng(0).uniform(-1, 1, (32, 1)).astype(np.float32))
    return path


@pytest.fixture(scope="module")
def toy(toy_saved_model, calibration, parity_cache):
    """The toy model's spec (no `onnx`: fp32 comes from tf2onnx) and the STATS of its first fp32 build."""
    spec = toy_spec(name="loader_toy", reference=toy_saved_model, source=toy_saved_model.parent / "parity.toml",
                    precisions=("fp32", "fp16", "int8"), calibration=calibration)  # a name no other test builds
    before = dict(STATS)
    with pytest.MonkeyPatch.context() as mp:  # module-scoped: built before the tests' own environment is set
        mp.setenv("PARITYGATE_CACHE", str(parity_cache))
        path = loader.fp32_onnx(spec)
    return spec, path, STATS["builds"] - before["builds"]


# -- fp32 --------------------------------------------------------------------------------------------
@pytest.mark.tf
def test_fp32_converts_the_saved_model_with_tf2onnx(toy, parity_cache):
    _, path, builds = toy
    # builds: 1, or 0 where xdist ran this module's tests apart and the module fixture was made again
    assert builds <= 1 and path.parent == parity_cache / "onnx" and path.name.startswith("loader_toy-fp32-")
    made = json.loads(cache.report_path(path).read_text())
    assert made["converter"] == "tf2onnx" and "paritygate.backend.onnx.artifacts.convert" in made["command"]  # its CLI
    model = loader.load_checked(path)
    assert [i.name for i in model.graph.input] == ["x"] and [o.name for o in model.graph.output] == ["y", "z"]
    assert [op.version for op in model.opset_import if op.domain in ("", "ai.onnx")] == [loader.OPSET]
    out = run(path, {"x": X})
    np.testing.assert_allclose(out["y"], 5 * X, rtol=1e-6)
    np.testing.assert_allclose(out["z"], 2 * X, rtol=1e-6)


@pytest.mark.tf
def test_fp32_second_call_builds_nothing(toy):
    spec, path, _ = toy
    before = dict(STATS)
    assert loader.fp32_onnx(spec) == path
    assert STATS["builds"] == before["builds"] and STATS["hits"] == before["hits"] + 1


@pytest.mark.tf
def test_fp32_key_changes_with_the_reference_and_signature(toy, tmp_path, monkeypatch):
    spec, path, _ = toy
    built = []
    monkeypatch.setattr(loader, "_convert", lambda s, out, key: (built.append(s), out.write_bytes(b"fake"))[-1])
    changed = tmp_path / "changed"
    shutil.copytree(spec.reference, changed)
    assert loader.fp32_onnx(toy_spec(name=spec.name, reference=changed, source=spec.source)) == path  # same content: same key
    assert built == []
    (changed / "saved_model.pb").write_bytes((changed / "saved_model.pb").read_bytes() + b"\0")
    other = loader.fp32_onnx(toy_spec(name=spec.name, reference=changed, source=spec.source))
    resigned = loader.fp32_onnx(toy_spec(name=spec.name, reference=spec.reference, source=spec.source,
                                        signature="other"))
    assert len({path, other, resigned}) == 3 and len(built) == 2


@pytest.mark.tf
def test_a_second_model_over_the_same_reference_reuses_the_conversion_and_validates_it_on_its_inputs(
        toy, parity_cache, monkeypatch):
    """Two models of a config over one SavedModel: tf2onnx runs once; the second model's artifact is a copy of the
    first one's, validated on its own inputs (a range its smoke feed cannot run would still stop it)."""
    import subprocess

    spec, path, _ = toy
    ran = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: ran.append(cmd) or real(cmd, **kw))
    twin = loader.fp32_onnx(dataclasses.replace(spec, name="loader_toy_again"))
    assert twin != path and twin.name.startswith("loader_toy_again-fp32-") and twin.read_bytes() == path.read_bytes()
    assert not [c for c in ran if "paritygate.backend.onnx.artifacts.convert" in c or "tf2onnx.convert" in c]
    report = json.loads(report_path(twin).read_text())  # copied from this model's file, or another test's twin
    key = path.name.split("-fp32-")[1]
    assert report["copied_from"].endswith(f"-fp32-{key}") and report["converter"] == "tf2onnx"
    np.testing.assert_allclose(run(twin, {"x": X})["y"], 5 * X, rtol=1e-6)


def test_fp32_given_onnx_is_used_as_is(toy_onnx, parity_cache):
    before = dict(STATS)
    assert loader.fp32_onnx(toy_spec(onnx=toy_onnx)) == toy_onnx
    assert STATS == before


def test_corrupt_onnx_file_is_a_runner_error_naming_the_file(tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a ModelProto")
    with pytest.raises(RunnerError, match=rf"^{bad}: not a valid ONNX model"):
        loader.fp32_onnx(toy_spec(onnx=bad))
    with pytest.raises(RunnerError, match=rf"^{tmp_path / 'missing.onnx'}: cannot read ONNX model: file not found"):
        loader.load_checked(tmp_path / "missing.onnx")


def test_invalid_graph_is_a_runner_error_naming_the_file(tmp_path):
    model = onnx.load(str(make_onnx(tmp_path / "ok.onnx")))
    model.graph.node[1].input[0] = "nowhere"  # y = nowhere * 5: an undefined input
    bad = tmp_path / "dangling.onnx"
    onnx.save(model, str(bad))
    with pytest.raises(RunnerError, match=rf"^{bad}: not a valid ONNX model: .*nowhere"):
        loader.load_checked(bad)


def test_corrupt_keras_reference_names_the_file_and_caches_nothing(tmp_path, parity_cache):
    keras_file = tmp_path / "model.keras"
    keras_file.write_bytes(b"zip")
    with pytest.raises(RunnerError, match=rf"^{keras_file}: not a Keras archive: a .keras file is a zip archive"):
        loader.fp32_onnx(toy_spec(reference=keras_file))
    assert not [p for p in parity_cache.rglob("*") if "toy-" in p.name and p.is_file() and "keras" in str(p)]


# -- fp16 --------------------------------------------------------------------------------------------
def softmax_onnx(path):
    """y = Softmax(x @ W), x float32 [N, 4]."""
    h = onnx.helper
    w = h.make_tensor("W", FLOAT, [4, 4], np.linspace(-1, 1, 16, dtype=np.float32).tolist())
    nodes = [h.make_node("MatMul", ["x", "W"], ["logits"]), h.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    return make_onnx(path, nodes, outputs=("y",), width=4, initializers=[w])


@pytest.mark.tf
def test_fp16_keeps_float32_io_and_is_cached(toy):
    spec = toy[0]
    before = dict(STATS)
    path = loader.fp16_onnx(spec)
    assert STATS["builds"] == before["builds"] + 1
    model = onnx.load(str(path))
    assert {v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]} == {FLOAT}
    assert FLOAT16 in {t.data_type for t in model.graph.initializer} | \
        {a.t.data_type for n in model.graph.node for a in n.attribute if a.type == onnx.AttributeProto.TENSOR}
    out = run(path, {"x": X})
    assert out["y"].dtype == np.float32
    np.testing.assert_allclose(out["y"], 5 * X, rtol=1e-2, atol=1e-2)
    again = dict(STATS)
    assert loader.fp16_onnx(spec) == path and STATS["builds"] == again["builds"]


def test_fp16_keeps_the_listed_ops_in_float32(tmp_path, parity_cache):
    spec = toy_spec(onnx=softmax_onnx(tmp_path / "softmax.onnx"), inputs={"x": ((-1, 4), "float32", (-1, 1))})
    kept = loader.fp16_onnx(spec)
    model = onnx.load(str(kept))
    types = elem_types(model)
    (softmax,) = [n for n in model.graph.node if n.op_type == "Softmax"]
    (matmul,) = [n for n in model.graph.node if n.op_type == "MatMul"]
    assert types[softmax.input[0]] == FLOAT and types[softmax.output[0]] == FLOAT  # Softmax stays float32
    assert types[matmul.output[0]] == FLOAT16  # what is not listed runs in float16
    assert {v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]} == {FLOAT}
    x = np.random.default_rng(1).uniform(-1, 1, (5, 4)).astype(np.float32)
    np.testing.assert_allclose(run(kept, {"x": x})["y"], run(spec.onnx, {"x": x})["y"], atol=1e-2)

    # the list is honoured: without it Softmax runs in float16, and the key changes
    unkept = loader.fp16_onnx(spec, keep_fp32=())
    assert unkept != kept
    model = onnx.load(str(unkept))
    (softmax,) = [n for n in model.graph.node if n.op_type == "Softmax"]
    assert elem_types(model)[softmax.input[0]] == FLOAT16


def test_fp16_of_weights_below_the_float16_range_builds_without_warnings(tmp_path, parity_cache):
    # the suite (and users' -W error) turns warnings into errors: clamping tiny weights is expected, not an error
    path = make_onnx(tmp_path / "tiny.onnx", scale("y", 5.0), scale("z", 8.9e-8))
    out = run(loader.fp16_onnx(toy_spec(onnx=path)), {"x": X})
    np.testing.assert_allclose(out["y"], 5 * X, rtol=1e-3)
    np.testing.assert_allclose(out["z"], 8.9e-8 * X, atol=1e-7)  # FP16 subnormal 2**-24 (5.96e-8)


def test_fp16_of_a_graph_with_unnamed_nodes_is_valid(tmp_path, parity_cache):
    path = make_onnx(tmp_path / "unnamed.onnx")
    model = onnx.load(str(path))
    for node in model.graph.node:
        node.name = ""  # valid ONNX; onnxconverter-common names its Casts after the nodes
    onnx.save(model, str(path))
    fp16 = loader.fp16_onnx(toy_spec(onnx=path))
    loader.load_checked(fp16)
    names = [n.name for n in onnx.load(str(fp16)).graph.node]
    assert len(names) == len(set(names))
    out = run(fp16, {"x": X})
    np.testing.assert_allclose(out["y"], 5 * X, rtol=1e-3)
    np.testing.assert_allclose(out["z"], 2 * X, rtol=1e-3)


def test_fp16_key_changes_with_the_fp32_source(tmp_path, parity_cache):
    a = loader.fp16_onnx(toy_spec(onnx=make_onnx(tmp_path / "a.onnx")))
    b = loader.fp16_onnx(toy_spec(onnx=make_onnx(tmp_path / "b.onnx", scale("y", 5.5), scale("z", 2.0))))
    assert a != b


# -- int8 --------------------------------------------------------------------------------------------
@pytest.mark.tf
def test_int8_has_qdq_nodes_and_is_cached(toy):
    spec = toy[0]
    before = dict(STATS)
    path = loader.int8_onnx(spec)
    assert STATS["builds"] == before["builds"] + 1
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops and "MatMul" in ops
    out = run(path, {"x": X})
    np.testing.assert_allclose(out["y"], 5 * X, atol=0.3, rtol=0.1)  # the int8 default tolerance
    again = dict(STATS)
    assert loader.int8_onnx(spec) == path and STATS["builds"] == again["builds"]
    assert loader.onnx_artifact(spec, "int8") == path


@pytest.mark.tf
def test_int8_key_changes_with_the_calibration_data(toy, tmp_path):
    spec = toy[0]
    first = loader.int8_onnx(spec)
    other = tmp_path / "calib2.npz"
    np.savez(other, x=np.linspace(-1, 1, 16, dtype=np.float32).reshape(16, 1))
    second = loader.int8_onnx(dataclasses.replace(spec, calibration=other))
    assert second != first


def int8_spec(tmp_path, calibration, **inputs):
    return toy_spec(onnx=make_onnx(tmp_path / "toy.onnx"), precisions=("fp32", "int8"), calibration=calibration,
                    **({"inputs": inputs} if inputs else {}))


def test_int8_without_calibration(tmp_path):
    with pytest.raises(RunnerError, match=r"key 'calibration': int8 needs calibration data"):
        loader.int8_onnx(int8_spec(tmp_path, None))


def test_int8_missing_calibration_file_names_the_file(tmp_path):
    missing = tmp_path / "nowhere.npz"
    with pytest.raises(InputSetError, match=rf"^{missing}: cannot read calibration set: file not found"):
        loader.int8_onnx(int8_spec(tmp_path, missing))


def test_int8_calibration_lacking_an_input_names_the_file_and_the_array(tmp_path):
    calib = tmp_path / "calib.npz"
    np.savez(calib, image=np.zeros((4, 1), np.float32))
    with pytest.raises(InputSetError, match=rf"^{calib}: calibration set lacks input\(s\) \['x'\]; "
                                             r"expected arrays \['x'\] \(inputs of model 'toy' in "):
        loader.int8_onnx(int8_spec(tmp_path, calib))


@pytest.mark.parametrize("array", [np.zeros((4, 3), np.float32), np.zeros(4, np.float32),
                                   np.zeros((4, 1), np.float64)], ids=["width", "rank", "dtype"])
def test_int8_calibration_of_the_wrong_shape_or_dtype_names_the_file_and_the_array(tmp_path, array):
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=array)
    with pytest.raises(InputSetError, match=rf"^{calib}: array 'x' is {array.dtype}\[.*\], expected float32 \['N', 1\]"):
        loader.int8_onnx(int8_spec(tmp_path, calib))


def test_int8_calibration_that_pickles_is_refused(tmp_path):
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.array([None, 1], dtype=object))
    with pytest.raises(InputSetError, match=rf"^{calib}: cannot read calibration set: ValueError: it holds object arrays, which are pickles"):
        loader.load_calibration(int8_spec(tmp_path, calib))


# -- validation, reports, the lint policy ------------------------------------------------------------------
def test_a_build_that_fails_validation_is_an_artifact_error_and_caches_nothing(tmp_path, parity_cache):
    """Reshape to a fixed batch of 2: valid ONNX, but the batch-1 smoke run fails in FP16 (and in FP32)."""
    h = onnx.helper
    shape = h.make_tensor("shape", onnx.TensorProto.INT64, [2], [2, 1])
    path = make_onnx(tmp_path / "fixed.onnx", [h.make_node("Reshape", ["x", "shape"], ["y"], name="fixed_batch"),
                                               *scale("z", 2.0)], initializers=[shape])
    before = {p for p in parity_cache.rglob("*")}
    with pytest.raises(ArtifactError, match=r"onnxconverter-common .*smoke run .* at node 'fixed_batch'") as err:
        loader.fp16_onnx(toy_spec(onnx=path))
    assert isinstance(err.value, SuiteError) and err.value.node == "fixed_batch"
    assert {p for p in parity_cache.rglob("*")} - before <= {parity_cache / "onnx"}  # no artifact, temp or report


def test_built_artifacts_carry_their_report(tmp_path, parity_cache):
    h = onnx.helper
    big = h.make_tensor("big", onnx.TensorProto.FLOAT, [], [90000.0])
    path = make_onnx(tmp_path / "big.onnx", scale("y", 30000.0), [h.make_node("Mul", ["x", "big"], ["z"], name="m")],
                     initializers=[big])
    spec = toy_spec(onnx=path)
    report = loader.artifact_report(spec, "fp16")
    assert report["built_by_suite"] and report["lint"] == [] and [b["node"] for b in report["fp16_blocked"]] == ["m"]
    assert [(f["tensor"], f["kind"], f["stored_as"]) for f in report["constants_out_of_range"]] == \
        [("big", "overflow", "float32")]
    assert report["report"]["converter"].startswith("onnxconverter-common")
    assert cache.report_path(report["artifact"]).exists()
    supplied = loader.artifact_report(spec, "fp32")  # the user's ONNX: linted, nothing built
    assert supplied == {"artifact": str(path), "built_by_suite": False, "lint": [], "fp16_blocked": [],
                        "constants_out_of_range": [], "report": None}


def test_a_lint_finding_the_build_added_is_the_suites_error(tmp_path):
    """An INT32 DequantizeLinear that a build adds stops it; the same finding already in the source does not."""
    h = onnx.helper
    inits = [h.make_tensor("bq", onnx.TensorProto.INT32, [1], [3]), h.make_tensor("bs", onnx.TensorProto.FLOAT, [], [0.5])]
    dq = [h.make_node("DequantizeLinear", ["bq", "bs"], ["b"], name="bias_dq"), h.make_node("Add", ["x", "b"], ["y"]),
          *scale("z", 2.0)]
    with_dq = onnx.load(str(make_onnx(tmp_path / "dq.onnx", dq, initializers=inits)))
    clean = onnx.load(str(make_onnx(tmp_path / "clean.onnx")))
    report = {}
    with pytest.raises(ArtifactError, match=r"^int8 builder built an invalid artifact: TensorRT lint \(1 finding\(s\) "
                                            r"the build added\) failed at node 'bias_dq': DequantizeLinear input 'bq' "
                                            r"is INT32"):
        loader._lint_or_raise(clean, with_dq, report, "int8 builder")
    assert [f["rule"] for f in report["lint"]] == ["type"]
    loader._lint_or_raise(with_dq, with_dq, report, "int8 builder")  # inherited from the source: recorded only
    assert [f["node"] for f in report["lint"]] == ["bias_dq"]


@pytest.mark.tf
@pytest.mark.slow
def test_the_bundled_models_artifacts_pass_the_tensorrt_lint():
    """quantize_static's default made 11 INT32 DequantizeLinear in mobilenet's int8 artifact and 6 in ssd's;
    none of the bundled models' artifacts may carry a finding (they are built into the shared cache, by key)."""
    from paritygate.context import RunOptions

    for spec in RunOptions().models:  # the bundled zoo, built into the cache
        for precision in spec.precisions:
            report = loader.artifact_report(spec, precision)
            assert report["built_by_suite"] and report["lint"] == [], (spec.name, precision, report["lint"])


def test_a_large_models_builds_run_apart_and_make_the_same_artifacts(toy, tmp_path, monkeypatch):
    """Over APART_BYTES, the fp16 and int8 builds run in a process of their own (common.apart) and write what the
    run's own process writes: the same bytes, the same report."""
    from paritygate.common import apart

    spec, src, _ = toy
    calib = loader.load_calibration(spec, groups=True)
    builds = {"fp16": (loader.build_fp16, spec, src, loader.FP16_KEEP_FP32, ()),
              "int8": (loader.build_int8, spec, src, calib, loader.INT8_OPS, ())}
    real, ran = apart.apart, []
    monkeypatch.setattr(apart, "apart", lambda function, *args: ran.append(function) or real(function, *args))
    monkeypatch.setattr("paritygate.common.apart.APART_BYTES", 0)
    for name, (build, *args) in builds.items():
        here, there = tmp_path / f"{name}-here.onnx", tmp_path / f"{name}-there.onnx"
        made = [build(*args, here), loader.apart_if_large(src, build, *args, there)]
        for report in made:  # the first int8 build of a run may compute the calibration ranges the second reuses
            report.pop("calibration_ranges", None)
        assert made[0] == made[1] and here.read_bytes() == there.read_bytes()
    assert ran == [loader.build_fp16, loader.build_int8]

