"""paritygate.backend.onnx.strict.twin: what the runner runs for a strict artifact (its roundings moved into ONNX
Runtime's blocked layout, ``nchwc``, and made ``Round16`` kernels, ``round16``) gives the strict artifact's values bit
for bit, overflows included, at every session setting the suite uses, with and without ``Round16``; a tensor whose
channels do not fill their blocks is not moved."""

import json

import numpy as np
import pytest

from paritygate.backend.onnx.strict import rewrite, round16, twin
from paritygate.backend.onnx.strict.loader import strict_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx
h = onnx.helper
T = onnx.TensorProto
SETTINGS = [{"threads": None, "spin": True}, {"threads": None, "spin": False}, {"threads": 1, "spin": True}]


def conv_chain():
    """Conv(32)+Clip(0, 6) -> Conv(18) -> Conv(32) -> Add(residual) -> Conv(16), FP32. 32 and 16 channels fill NCHWc
    blocks of 8 or 16 floats; 18 fills none of them (nor blocks of 4). The 18-channel Conv's weights are large (up to ~8e3, below the
    converter's 1e4 clamp): inputs of ~3 overflow FP16 there."""
    rng = np.random.default_rng(0)

    def w(name, out, inp, k, scale=1.0):
        return onnx.numpy_helper.from_array((rng.normal(0, 1 / np.sqrt(inp * k * k), (out, inp, k, k)) * scale)
                                            .astype(np.float32), name)

    inits = [w("w0", 32, 16, 3), w("w1", 18, 32, 1, 1.5e4), w("w2", 32, 18, 3), w("w3", 16, 32, 1),
             onnx.numpy_helper.from_array(np.float32(0), "lo"), onnx.numpy_helper.from_array(np.float32(6), "hi")]
    nodes = [h.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             h.make_node("Clip", ["c0", "lo", "hi"], ["r0"], name="relu6"),
             h.make_node("Conv", ["r0", "w1"], ["c1"], name="conv1"),
             h.make_node("Conv", ["c1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             h.make_node("Add", ["c2", "r0"], ["s2"], name="residual"),
             h.make_node("Conv", ["s2", "w3"], ["y"], name="conv3")]
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, ["N", 16, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 16, 8, 8])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def conv_chain_fp16():
    """``conv_chain`` as teams make its fp16 artifact: onnxconverter-common, keep_io_types=True."""
    float16 = pytest.importorskip("onnxconverter_common.float16")
    return float16.convert_float_to_float16(conv_chain(), keep_io_types=True)


@pytest.fixture(params=["round16", "cast pairs"])
def chain(request, tmp_path, parity_cache, monkeypatch):
    """The conv chain's strict artifact and its twin: with ``Round16``, and as it is where no C compiler is found."""
    if request.param == "cast pairs":
        monkeypatch.setenv("CC", str(tmp_path / "no-compiler"))
    round16.library.cache_clear()
    request.addfinalizer(round16.library.cache_clear)
    path = tmp_path / "chain.fp16.onnx"
    onnx.save(conv_chain_fp16(), str(path))
    emulated = strict_onnx(path)
    built, level, library = twin.runnable(emulated)
    if level is None:
        pytest.skip(f"ONNX Runtime {ort.__version__} runs no convolution in its NCHWc layout on this CPU")
    assert (library is None) == (request.param == "cast pairs")
    return emulated, built


def inputs():
    """Inputs at scales where nothing, some and every 18-channel output overflows FP16; subnormal outputs; a NaN."""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(0, 1, (2, 16, 8, 8)) * s for s in (1e-7, 1e-3, 0.3, 3.0, 1e3)]).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    return {"x": x}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"threads={s['threads']},spin={s['spin']}")
def test_the_twin_gives_the_strict_values_bit_for_bit(chain, setting):
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    emulated, built = chain
    _, level, library = twin.runnable(emulated)
    y, twin_y = (OnnxrtRunner(path, **setting, **options).activate().infer(inputs())["y"]
                 for path, options in ((emulated, {}), (built, {"level": level, "library": library})))
    finite = np.isfinite(y).all(axis=(1, 2, 3))
    assert finite[1:6].all() and not finite[6:].any(), "the inputs no longer reach FP16's overflow as intended"
    assert np.isnan(y[0]).any()  # the NaN input
    np.testing.assert_array_equal(twin_y, y)  # equal as numbers, NaN where NaN


def test_the_overflow_survives_in_the_twin(chain):
    """The guard for the twin: if ONNX Runtime ever dropped a moved Cast pair (or a Round16 stopped rounding), the
    18-channel Conv's overflow would stop reaching the output: in FP32 it stays finite."""
    from paritygate.backend.onnxrt.options import session_options

    emulated, built = chain
    x = {"x": np.full((1, 16, 8, 8), 3.0, np.float32)}
    fp32 = ort.InferenceSession(conv_chain().SerializeToString(), session_options(), providers=["CPUExecutionProvider"])
    assert np.isfinite(fp32.run(None, x)[0]).all()
    options = session_options(level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL, library=twin.runnable(emulated)[2])
    sess = ort.InferenceSession(str(built), options, providers=["CPUExecutionProvider"])
    assert not np.isfinite(sess.run(None, x)[0]).all(), "the twin lost the FP16 rounding"


def test_only_tensors_that_fill_their_blocks_move(chain):
    from paritygate.backend.cache import report_path

    _, built = chain
    report = json.loads(report_path(built).read_text())
    assert report["moved"] >= 1 and report["left_padded"] >= 1  # the 32-channel tensors move, the 18-channel one not
    nodes = onnx.load(str(built)).graph.node
    assert sum(n.op_type == "ReorderInput" for n in nodes) >= 1
    roundings = {n.op_type for n in nodes if n.op_type == round16.OP or rewrite.ROUND in n.name}
    assert roundings == ({round16.OP} if report["fused"] else {"Cast"})


def test_the_twin_is_cached_per_cpu_and_built_without_conv_only_for_round16(chain, tmp_path):
    from paritygate.backend.cache import STATS, cpu_flags
    from tests.backend.onnx.strict.test_rewrite import overflow_model

    emulated, built = chain
    before = STATS["builds"]
    assert twin.runnable(emulated)[:2] == (built, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert STATS["builds"] == before
    assert len(cpu_flags()) > 1
    path = tmp_path / "noconv.onnx"
    onnx.save(overflow_model(io=T.FLOAT), str(path))
    checked = strict_onnx(path)
    if round16.library() is None:  # no Conv and no Round16: nothing to change
        assert twin.runnable(checked) == (checked, None, None)
    else:
        assert twin.runnable(checked)[1:] == (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, round16.library())


def test_a_twin_that_cannot_be_built_leaves_the_strict_artifact_as_it_is(tmp_path, parity_cache, capsys):
    """A speed-up only: when ONNX Runtime cannot optimize the file (here an op of an unknown domain beside a Conv),
    the runner is given the strict artifact itself, and stderr says why."""
    model = conv_chain()
    model.graph.node.append(h.make_node("Mystery", ["y"], ["z"], domain="example.unknown", name="mystery"))
    model.graph.output[0].name = "z"
    model.opset_import.append(h.make_opsetid("example.unknown", 1))
    path = tmp_path / "odd.onnx"
    onnx.save(model, str(path))
    assert twin.runnable(path) == (path, None, None)
    assert f"{path}: its twin could not be built" in capsys.readouterr().err
