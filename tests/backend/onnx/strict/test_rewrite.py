"""paritygate.backend.onnx.strict.rewrite: FP16 artifacts computed as a strongly typed engine computes them, and a guard
that fails when ONNX Runtime ever optimizes the FP16 rounding away at a session setting the suite uses."""

import numpy as np
import pytest

from paritygate.backend.onnx.strict import rewrite
from paritygate.backend.onnx.strict.loader import strict_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx
h = onnx.helper
T = onnx.TensorProto
LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")


def overflow_model(elem=T.FLOAT16, io=None):
    """y = ((x*300)*(x*300))*(1/90000), typed ``elem`` inside and ``io`` (default: ``elem``) at the I/O.
    At x = 2 FP16 arithmetic overflows: 600^2 = 360000 > 65504 (IEEE 754 binary16's largest finite value)."""
    io = elem if io is None else io
    dt = onnx.helper.tensor_dtype_to_np_dtype(elem)
    nodes = [h.make_node("Cast", ["x"], ["xh"], to=elem, name="to_half"),
             h.make_node("Mul", ["xh", "a"], ["p"], name="scale_p"), h.make_node("Mul", ["xh", "a"], ["q"], name="scale_q"),
             h.make_node("Mul", ["p", "q"], ["sq"], name="square"), h.make_node("Mul", ["sq", "b"], ["yh"], name="shrink"),
             h.make_node("Cast", ["yh"], ["y"], to=io, name="to_io")]
    inits = [onnx.numpy_helper.from_array(np.array([300], dt), "a"),
             onnx.numpy_helper.from_array(np.array([1 / 90000], dt), "b")]
    graph = h.make_graph(nodes, "overflow", [h.make_tensor_value_info("x", io, ["N", 1])],
                         [h.make_tensor_value_info("y", io, ["N", 1])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def session(model, level="ORT_ENABLE_ALL", threads=None):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def x_at(value, dtype=np.float32):
    return {"x": np.array([[value], [0.5]], dtype)}


@pytest.mark.parametrize("io", [T.FLOAT, T.FLOAT16], ids=["float32-io", "float16-io"])
@pytest.mark.parametrize("threads", [None, 1], ids=["default-threads", "1-thread"])
@pytest.mark.parametrize("level", LEVELS)
def test_onnxruntime_keeps_the_fp16_round_trip(level, threads, io):
    """The guard: if ONNX Runtime ever fuses the Cast(FLOAT16) -> Cast(FLOAT) pair away, x = 2 stops giving inf."""
    emulated, report = rewrite.emulate(overflow_model(io=io))
    feed = x_at(2.0, onnx.helper.tensor_dtype_to_np_dtype(io))
    y = session(emulated, level, threads).run(None, feed)[0]
    assert np.isinf(y[0, 0]), f"{level}, threads={threads}: FP16 overflow lost, got {y[0, 0]}"
    assert y[1, 0] == np.float16(np.float16(0.5 * 300) ** 2 * np.float16(1 / 90000))  # fp16 values, rounded
    half_io = io == T.FLOAT16  # the output Cast then also produces float16
    assert report["rounded"] == 5 + half_io and report["initializers"] == 2 and report["retyped_nodes"] == 1 + half_io


def test_onnxruntime_own_numerics_drop_the_rounding():
    """Why strict numerics exist (measured, onnxruntime 1.31.1): the float16-typed graph gives 3.99, not inf."""
    y = session(overflow_model(io=T.FLOAT), "ORT_DISABLE_ALL").run(None, x_at(2.0))[0]
    if np.isinf(y[0, 0]):
        pytest.skip(f"onnxruntime {ort.__version__} computes this float16 graph in FP16 itself")
    assert y[0, 0] == pytest.approx(4.0, rel=1e-2)


def test_every_suite_session_setting_keeps_the_round_trip(tmp_path, parity_cache):
    """The sessions the suite opens itself: the candidate runner, localization's marked run, the validator."""
    from paritygate.backend.onnx.artifacts import validate
    from paritygate.backend.onnx.diagnosis import localize
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    path = tmp_path / "overflow.onnx"
    onnx.save(overflow_model(io=T.FLOAT), str(path))
    emulated_path = strict_onnx(path)
    runner = OnnxrtRunner(emulated_path).activate()
    assert np.isinf(runner.infer(x_at(2.0))["y"][0, 0])
    assert np.isinf(OnnxrtRunner(emulated_path, threads=1).activate().infer(x_at(2.0))["y"][0, 0])
    emulated = onnx.load(str(emulated_path))
    marked = localize.run_marked(emulated, x_at(2.0), ["sq"])
    assert np.isinf(marked["sq"][0, 0])
    validate.check_runtime(emulated.SerializeToString(), x_at(2.0), "test")


def test_emulation_keeps_names_interface_and_stored_values():
    source = overflow_model(io=T.FLOAT16)
    emulated, _ = rewrite.emulate(source)
    assert [n.name for n in source.graph.node] == [n.name for n in emulated.graph.node
                                                   if not n.name.endswith(rewrite.ROUND) and "__widen" not in n.name]
    assert [i.type.tensor_type.elem_type for i in emulated.graph.input] == [T.FLOAT16]
    assert [o.type.tensor_type.elem_type for o in emulated.graph.output] == [T.FLOAT16]
    stored = {t.name: onnx.numpy_helper.to_array(t) for t in emulated.graph.initializer}
    assert stored["b"].dtype == np.float32 and stored["b"][0] == np.float32(np.float16(1 / 90000))
    inner = [t for t in rewrite.float16_tensors(emulated) if t not in ("x", "y")]  # the interface stays float16
    assert inner and all(t.endswith("__fp16") for t in inner)  # inside, only the rounding Casts' outputs
    assert rewrite.rounded_of(emulated)["sq__fp32"] == "sq"


def test_an_artifact_without_float16_is_run_as_it_is(tmp_path, parity_cache):
    path = tmp_path / "fp32.onnx"
    onnx.save(overflow_model(elem=T.FLOAT), str(path))
    assert rewrite.float16_tensors(onnx.load(str(path))) == []
    assert strict_onnx(path) == path


def test_the_emulated_artifact_is_cached_by_content(tmp_path, parity_cache):
    from paritygate.backend.cache import STATS

    path = tmp_path / "m.onnx"
    onnx.save(overflow_model(io=T.FLOAT), str(path))
    first = strict_onnx(path)
    before = dict(STATS)
    assert strict_onnx(path) == first and STATS["builds"] == before["builds"]
    assert parity_cache in first.parents
    onnx.save(overflow_model(io=T.FLOAT16), str(path))  # new content: a new artifact
    assert strict_onnx(path) != first


def test_converter_made_fp16_overflows_under_strict_only(tmp_path):
    """An fp16 artifact as teams make it (onnxconverter-common, keep_io_types=True): x^2 at x = 300 overflows
    in FP16 (90000 > 65504); strict numerics say so, ONNX Runtime's own return the FP32 answer."""
    float16 = pytest.importorskip("onnxconverter_common.float16")
    g = h.make_graph([h.make_node("Mul", ["x", "x"], ["sq"], name="square"),
                      h.make_node("Mul", ["sq", "k"], ["y"], name="shrink")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, ["N", 1])], [h.make_tensor_value_info("y", T.FLOAT, ["N", 1])],
                     [h.make_tensor("k", T.FLOAT, [], [1e-3])])
    source = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    source.ir_version = 8
    half = float16.convert_float_to_float16(source, keep_io_types=True)
    feed = {"x": np.array([[300.0], [2.0]], np.float32)}
    own = session(half).run(None, feed)[0]
    emulated = session(rewrite.emulate(half)[0]).run(None, feed)[0]
    assert np.isfinite(own[0, 0]) or pytest.skip("this onnxruntime computes FP16 itself")
    assert np.isinf(emulated[0, 0]) and emulated[1, 0] == pytest.approx(4e-3, rel=2 ** -10)


def conv_act_fp16():
    """An onnxconverter-common fp16 artifact (keep_io_types=True) of Conv -> Relu, Conv -> Clip(0, 6) and a Conv
    output read by Relu and Add at once (not deferrable); weights of 3e3, so large inputs overflow FP16."""
    float16 = pytest.importorskip("onnxconverter_common.float16")
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array((rng.normal(0, 1, (4, 3, 3, 3)) * k).astype(np.float32), f"w{i}")
             for i, k in enumerate((3e3, 1.0, 1.0))]
    nodes = [h.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             h.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             h.make_node("Clip", ["c1", "lo", "hi"], ["r1"], name="relu6"),
             h.make_node("Conv", ["x", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c2"], ["r2"], name="relu2"), h.make_node("Add", ["c2", "r2"], ["s2"], name="add2"),
             h.make_node("Concat", ["r0", "r1", "s2"], ["y"], name="cat", axis=1)]
    inits += [onnx.numpy_helper.from_array(np.float32(0), "lo"), onnx.numpy_helper.from_array(np.float32(6), "hi")]
    g = h.make_graph(nodes, "act", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 12, 8, 8])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return float16.convert_float_to_float16(model, keep_io_types=True)


@pytest.mark.parametrize("level", LEVELS)
def test_deferred_rounding_gives_the_values_of_rounding_where_produced(level):
    """Relu/Clip commute with the FP16 rounding: rounding after them (defer=True) gives the values rounding every
    float16 tensor where produced gives (defer=False), on inputs whose Conv outputs overflow FP16, land on
    subnormals, and on NaN. Without the fused kernels (fuse=False), which would absorb the activations."""
    half = conv_act_fp16()
    deferred, report = rewrite.emulate(half, defer=True, fuse=False)
    plain, plain_report = rewrite.emulate(half, defer=False, fuse=False)
    assert report["deferred"] == 2 and report["rounded"] == plain_report["rounded"]  # moved after relu0, relu6
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(0, 1, (4, 3, 8, 8)) * s for s in (1e-9, 1e-6, 1.0, 30.0)]).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    a, b = (session(m, level).run(None, {"x": x})[0] for m in (deferred, plain))
    assert np.isinf(b).any() and (np.abs(b[np.isfinite(b)]) < 2 ** -14).any() and np.isnan(b).any()
    np.testing.assert_array_equal(a, b)  # equal as numbers, NaN where NaN (+0 and -0 compare equal)


def test_deferred_rounding_lets_onnxruntime_fuse_the_activation(tmp_path):
    """Why defer: at ORT_ENABLE_ALL the deferred Relu and Clip are fused into their Convs; rounding each Conv
    output first leaves them as separate kernels."""
    half = conv_act_fp16()

    def activations(model):
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.optimized_model_filepath = str(tmp_path / "opt.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return sum(n.op_type in ("Relu", "Clip") for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node)

    assert activations(rewrite.emulate(half, defer=False, fuse=False)[0]) == 3
    assert activations(rewrite.emulate(half, defer=True, fuse=False)[0]) == 1  # relu2 reads c2, which add2 reads too
    assert activations(rewrite.emulate(half)[0]) == 1  # the fused view rounds after relu0 and relu6 as well


def test_a_float16_clip_and_relu_need_no_rounding_of_their_own():
    """Fed FP16 values, Clip with FP16 bounds and Relu return FP16 values: no rounding after them."""
    half = conv_act_fp16()
    emulated, _ = rewrite.emulate(half, defer=False, fuse=False)
    rounded = {n.input[0] for n in emulated.graph.node if n.name.endswith(rewrite.ROUND)}
    assert not {"r0__fp32", "r1__fp32", "r2__fp32"} & rounded and {"c0__fp32", "c1__fp32"} <= rounded
