"""paritygate.backend.onnx.strict.loader: strict numerics' one entry point. An fp16 artifact becomes its strict
rewrite, and for ONNX Runtime's CPU provider its twin with the session settings the twin needs; an FP32 artifact,
or any artifact under ``--parity-numerics=ort``, stays itself; a runner given what ``computed`` returns computes the
strict values, FP16's overflow included."""

import numpy as np
import pytest

from paritygate.backend.onnx.strict import twin
from paritygate.backend.onnx.strict.loader import Computed, computed, strict_onnx
from tests.backend.onnx.strict.test_rewrite import overflow_model
from tests.backend.onnx.strict.test_twin import conv_chain, conv_chain_fp16, inputs

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx
T = onnx.TensorProto


@pytest.fixture
def fp16_chain(tmp_path, parity_cache):
    path = tmp_path / "chain.fp16.onnx"
    onnx.save(conv_chain_fp16(), str(path))
    return path


def test_an_fp16_artifact_becomes_its_strict_rewrite_and_on_the_cpu_its_twin(fp16_chain):
    strict = strict_onnx(fp16_chain)
    assert strict != fp16_chain and "-strict-" in strict.name
    assert computed(fp16_chain) == Computed(strict, strict)  # another provider runs the rewrite as it is
    assert computed(fp16_chain, twin=True) == Computed(strict, *twin.runnable(strict))


def test_an_artifact_stays_itself_without_float16_tensors_or_under_ort_numerics(fp16_chain, tmp_path):
    assert computed(fp16_chain, "ort", twin=True) == Computed(fp16_chain, fp16_chain)
    fp32 = tmp_path / "chain.onnx"
    onnx.save(conv_chain(), str(fp32))
    assert computed(fp32, twin=True) == Computed(fp32, fp32)


@pytest.mark.parametrize("use_twin", [False, True], ids=["rewrite", "twin"])
def test_a_runner_given_what_computed_returns_computes_the_strict_values(fp16_chain, tmp_path, use_twin):
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    run = computed(fp16_chain, twin=use_twin)
    with OnnxrtRunner(run.path, level=run.level, library=run.library) as runner:
        y = runner.infer(inputs())["y"]
    with OnnxrtRunner(strict_onnx(fp16_chain)) as runner:
        np.testing.assert_array_equal(y, runner.infer(inputs())["y"])  # equal as numbers, NaN where NaN
    finite = np.isfinite(y).all(axis=(1, 2, 3))
    assert finite[1:6].all() and not finite[6:].any()  # FP16's overflow reaches the output at the large inputs
    path = tmp_path / "overflow.onnx"
    onnx.save(overflow_model(io=T.FLOAT), str(path))
    run = computed(path, twin=use_twin)
    with OnnxrtRunner(run.path, level=run.level, library=run.library) as runner:
        assert np.isinf(runner.infer({"x": np.array([[2.0]], np.float32)})["y"][0, 0])
