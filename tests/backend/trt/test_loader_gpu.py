"""paritygate.backend.trt.loader: real builds under the gpu/trt markers (the pure parts: test_loader.py)."""

import shutil

import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.trt import loader, util

from .conftest import make_spec


# -- real builds (gpu + trt) ----------------------------------------------------------------------------
def _trt():
    return pytest.importorskip("tensorrt")


@pytest.mark.gpu
@pytest.mark.trt
def test_build_then_warm_call_builds_nothing(times5_onnx, tmp_path, stats):
    _trt()
    plan = loader.EngineFromOnnx(times5_onnx, make_spec(max_batch=4), "fp32", tmp_path)()
    assert stats == {"hits": 0, "builds": 1} and plan.stat().st_size > 0
    assert loader.EngineFromOnnx(times5_onnx, make_spec(max_batch=4), "fp32", tmp_path)() == plan
    assert stats == {"hits": 1, "builds": 1}
    assert list(tmp_path.glob("timing-trt*.cache"))  # the timing cache was saved for the next build


@pytest.mark.gpu
@pytest.mark.trt
def test_network_is_strongly_typed_and_config_has_tf32_off(times5_onnx, tmp_path):
    trt = _trt()
    make = loader.EngineFromOnnx(times5_onnx, make_spec(max_batch=4), "fp32", tmp_path)
    builder, network, _parser = make.network_loader()()
    config = make.config_loader()(builder, network)
    assert not config.get_flag(trt.BuilderFlag.TF32)
    if int(trt.__version__.split(".")[0]) < 11:  # TensorRT 11 deprecates the flag: always strongly typed
        assert network.get_flag(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    engine = loader.EngineFromPath(make(), make_spec(max_batch=4))()
    assert [tuple(s) for s in engine.get_tensor_profile_shape("x", 0)] == [(1, 4), (4, 4), (4, 4)]


@pytest.mark.gpu
@pytest.mark.trt
def test_forged_sidecar_names_both_tensorrt_versions(times5_onnx, tmp_path):
    trt = _trt()
    spec = make_spec(max_batch=4)
    plan = tmp_path / "prebuilt.plan"
    shutil.copy(loader.EngineFromOnnx(times5_onnx, spec, "fp32", tmp_path / "cache")(), plan)
    here = util.current_identity()
    util.sidecar_path(plan).write_text(util.sidecar_text({**here, "tensorrt": "0.0.1"}))
    with pytest.raises(RunnerError, match=rf"prebuilt\.plan: built by TensorRT 0\.0\.1 .*this is TensorRT "
                                          rf"{trt.__version__}"):
        loader.EngineFromPath(plan, spec)()


@pytest.mark.gpu
@pytest.mark.trt
def test_corrupt_engine_is_named_with_what_tensorrt_said(tmp_path):
    _trt()
    plan = tmp_path / "corrupt.plan"
    plan.write_bytes(b"not a TensorRT engine " * 64)
    with pytest.raises(RunnerError, match=r"corrupt\.plan: TensorRT could not deserialize this engine"):
        loader.EngineFromPath(plan, make_spec())()


@pytest.mark.gpu
@pytest.mark.trt
def test_engine_that_does_not_fit_the_config_is_refused(times5_onnx, tmp_path):
    _trt()
    plan = loader.EngineFromOnnx(times5_onnx, make_spec(max_batch=4), "fp32", tmp_path)()
    with pytest.raises(RunnerError, match=r"\.plan: input 'x' optimization profile 0 admits batch 1\.\.4, "
                                          r"expected 1\.\.8"):
        loader.EngineFromPath(plan, make_spec(max_batch=8))()
    with pytest.raises(RunnerError, match=r"\.plan: the engine has no input 'z'"):
        loader.EngineFromPath(plan, make_spec(max_batch=4, inputs={"z": ((-1, 4), "float32")}))()
