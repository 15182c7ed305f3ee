"""paritygate.backend.onnx.strict.round16: ``Round16`` gives ONNX Runtime's Cast pair values bit for bit (NaN where
NaN), the probe catches a kernel that rounds otherwise, ``fuse`` replaces only the strict rewrite's roundings, and
without a C compiler strict artifacts keep their Cast pairs."""

import os

import numpy as np
import pytest

from paritygate.backend.onnx.strict import rewrite, round16, twin
from paritygate.backend.onnx.strict.loader import strict_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx
T = onnx.TensorProto
# Every STRIDE-th float32 bit pattern, its low bits cycling through every value (k * STRIDE + k % STRIDE): 2^26
# values, 0.4 s. PARITYGATE_ROUND16_STRIDE=1 checks all 2^32 (passed here: 27 s).
STRIDE = int(os.environ.get("PARITYGATE_ROUND16_STRIDE", "64"))


@pytest.fixture(scope="module")
def library():
    built = round16.library()
    if built is None:
        pytest.skip("Round16 could not be built here (no C compiler; its stderr line says why)")
    return built


def test_round16_rounds_every_probed_and_strided_pattern_as_the_cast_pair_does(library):
    pair, fused = round16.sessions(library)
    assert round16.mismatches(pair, fused, round16.probe_values()) == 0
    step = 1 << 24
    for start in range(0, 1 << 32, step * STRIDE):
        k = np.arange(start // STRIDE, start // STRIDE + step, dtype=np.uint64)
        bits = (k * STRIDE + k % STRIDE).astype(np.uint32)
        assert round16.mismatches(pair, fused, bits.view(np.float32)) == 0, f"bit patterns from {start:#x}"


@pytest.mark.parametrize("wrong", ["copies", "truncates"])
def test_the_probe_catches_a_kernel_that_rounds_otherwise(library, tmp_path, wrong):
    """The same source copying its input, or truncating it to an integer: the probe must see it."""
    body = {"copies": "for (size_t j = 0; j < n; ++j) y[j] = x[j];\n  return;",
            "truncates": "for (size_t j = 0; j < n; ++j) y[j] = (float)(int)x[j];\n  return;"}
    source = round16.SOURCE.read_text().replace("size_t i = 0;\n", f"{body[wrong]}\n  size_t i = 0;\n", 1)
    (tmp_path / "round16.c").write_text(source)
    lib = tmp_path / "libwrong.so"
    round16._compile(os.environ.get("CC") or "cc", lib, tmp_path / "round16.c")
    assert round16._probe(lib) > 1000


def test_fuse_replaces_the_rounding_pairs_of_float_tensors_only(tmp_path, parity_cache):
    """The overflow model's strict artifact: its rounding pairs become Round16; the Casts at its float16 I/O stay, and
    so does a pair that reads an int32 tensor (it rounds integers, which Round16 does not take)."""
    from tests.backend.onnx.strict.test_rewrite import overflow_model

    path = tmp_path / "overflow.onnx"
    onnx.save(overflow_model(), str(path))  # float16 I/O: a widening Cast in, a narrowing Cast out
    model = onnx.load(str(strict_onnx(path)))
    pairs = sum(rewrite.ROUND in n.name and n.output[0] not in {o.name for o in model.graph.output}
                for n in model.graph.node)
    h = onnx.helper
    model.graph.input.append(h.make_tensor_value_info("k", T.INT32, ["N", 1]))
    model.graph.node.extend([h.make_node("Cast", ["k"], ["k16"], to=T.FLOAT16), h.make_node("Cast", ["k16"], ["kf"], to=T.FLOAT)])
    model.graph.output.append(h.make_tensor_value_info("kf", T.FLOAT, ["N", 1]))
    casts = sum(n.op_type == "Cast" for n in model.graph.node)
    types = {v.name: v.type.tensor_type.elem_type
             for v in onnx.shape_inference.infer_shapes(model).graph.value_info} | {"k": T.INT32}
    assert round16.fuse(model, types) == pairs > 0
    kinds = [n.op_type for n in model.graph.node]
    assert kinds.count(round16.OP) == pairs and kinds.count("Cast") == casts - 2 * pairs > 2
    assert round16.fuse(model, types) == 0  # nothing left to fuse


@pytest.mark.parametrize("threads", [None, 1])
def test_the_overflow_model_runs_fused_with_the_strict_values(library, tmp_path, parity_cache, threads):
    """No Conv, so the twin is the optimized strict artifact with Round16 kernels: FP16's overflow at x = 2 is still
    inf, and every value equals the strict artifact's."""
    from paritygate.backend.onnxrt.runner import OnnxrtRunner
    from tests.backend.onnx.strict.test_rewrite import overflow_model

    path = tmp_path / "overflow.onnx"
    onnx.save(overflow_model(io=T.FLOAT), str(path))
    checked = strict_onnx(path)
    x = {"x": np.array([[0.5], [1.0], [2.0], [np.nan], [-3.0]], np.float32)}
    built, level, library = twin.runnable(checked)
    plain, fused = (OnnxrtRunner(path, threads=threads, **options).activate().infer(x)["y"]
                    for path, options in ((checked, {}), (built, {"level": level, "library": library})))
    assert np.isinf(plain[2, 0]) and np.isinf(plain[4, 0])
    np.testing.assert_array_equal(fused, plain)


def test_without_a_compiler_there_is_no_library_and_stderr_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CC", str(tmp_path / "no-compiler"))
    round16.library.cache_clear()
    try:
        assert round16.library() is None
    finally:
        round16.library.cache_clear()
    assert "round16.c: not used (OSError: no C compiler" in capsys.readouterr().err
