"""paritygate.backend.trt.runner: the feed checks and the lifecycle on any machine; the CUDA plumbing on a GPU
against a fake engine (no TensorRT needed); real engines under the gpu/trt markers."""

import types

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.trt import loader, runner, util
from paritygate.backend.trt.runner import TrtRunner, check_feed
from paritygate.lazy import MissingDependency

from .conftest import make_spec

X = util.TensorInfo("x", True, (-1, 4), np.dtype("float32"), ((1, 4), (4, 4), (4, 4)))


@pytest.fixture
def tensorrt_present(monkeypatch):
    monkeypatch.setattr(util, "trt_missing_reason", lambda: None)


# -- lifecycle without TensorRT -------------------------------------------------------------------------
def test_construction_is_lazy_and_activation_names_the_gpu_extra(monkeypatch):
    monkeypatch.setattr(util, "trt_missing_reason", lambda: "tensorrt is not installed (pip install 'paritygate[gpu]')")
    made = TrtRunner(lambda: pytest.fail("loaded an engine before activation"), name="tensorrt:m:fp16")
    with pytest.raises(MissingDependency, match=r"pip install 'paritygate\[gpu\]'"):
        made.activate()
    assert not made.is_active


def test_infer_before_activate_is_refused():
    with pytest.raises(RunnerError, match=r"tensorrt:m: infer\(\) called before activate\(\)"):
        TrtRunner(object(), name="tensorrt:m").infer({"x": np.zeros((1, 4), np.float32)})


def test_a_loader_that_gives_no_engine_is_named(tensorrt_present):
    with pytest.raises(RunnerError, match="tensorrt:m: expected a TensorRT engine or a loader of one, got dict"):
        TrtRunner(dict, name="tensorrt:m").activate()


def test_a_plan_path_is_deserialized_with_the_loaders_spec(tensorrt_present, monkeypatch, tmp_path):
    """EngineFromOnnx returns a .plan path: the runner loads it with EngineFromPath(path, loader.spec)."""
    seen = []

    class FakeEngineFromPath:
        def __init__(self, path, spec):
            seen.append((path, spec))

        def __call__(self):
            raise RunnerError("stop here")

    class PlanLoader:
        spec = make_spec()

        def __call__(self):
            return tmp_path / "e.plan"

    monkeypatch.setattr(runner, "EngineFromPath", FakeEngineFromPath)
    with pytest.raises(RunnerError, match="stop here"):
        TrtRunner(PlanLoader()).activate()
    assert seen == [(tmp_path / "e.plan", PlanLoader.spec)]


# -- the feed check ---------------------------------------------------------------------------------------
def test_check_feed_accepts_every_batch_the_profile_admits():
    for batch in range(1, 5):
        check_feed([X], {"x": np.zeros((batch, 4), np.float32)}, "trt")


@pytest.mark.parametrize("feed, words", [
    ({}, ["trt: the feed lacks input 'x'", "['x']"]),
    ({"x": np.zeros((1, 4), np.float32), "z": np.zeros(1)}, ["trt: the feed has 'z'", "not an input"]),
    ({"x": np.zeros((1, 4), np.float64)}, ["input 'x' is float64, the engine takes float32"]),
    ({"x": np.zeros((1, 5), np.float32)}, ["input 'x' has shape [1, 5], the engine takes [-1, 4]"]),
    ({"x": np.zeros((4,), np.float32)}, ["input 'x' has shape [4]"]),
    ({"x": np.zeros((5, 4), np.float32)}, ["input 'x' has batch 5, optimization profile 0 admits 1..4"]),
    ({"x": np.zeros((0, 4), np.float32)}, ["input 'x' has batch 0, optimization profile 0 admits 1..4"]),
], ids=["missing", "extra", "dtype", "dim", "rank", "batch-high", "batch-zero"])
def test_check_feed_names_the_tensor_and_what_was_expected(feed, words):
    with pytest.raises(RunnerError) as err:
        check_feed([X], feed, "trt")
    for word in words:
        assert word in str(err.value)


# -- CUDA plumbing on a real GPU, with a fake engine (no TensorRT) ----------------------------------------
class _FakeEngine:
    """The tensor-name API surface the runner uses. Its context "computes" every output as a device-to-device
    copy of input x, enqueued on the stream execute_async_v3 is given."""

    OUTPUTS = ("copy_a", "copy_b")

    def __init__(self, max_batch):
        self.max_batch = max_batch
        self.num_io_tensors = 1 + len(self.OUTPUTS)
        self.num_optimization_profiles = 1

    def get_tensor_name(self, index):
        return ("x", *self.OUTPUTS)[index]

    def get_tensor_mode(self, name):
        return "INPUT" if name == "x" else "OUTPUT"

    def get_tensor_shape(self, name):
        return (-1, 4)

    def get_tensor_dtype(self, name):
        return "FLOAT"

    def get_tensor_profile_shape(self, name, index):
        return [(1, 4), (self.max_batch, 4), (self.max_batch, 4)]

    def create_execution_context(self):
        return _FakeContext()


class _FakeContext:
    def __init__(self):
        self.shapes, self.addresses = {}, {}

    def set_input_shape(self, name, shape):
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        return self.shapes["x"]

    def set_tensor_address(self, name, ptr):
        self.addresses[name] = ptr
        return ptr != 0

    def execute_async_v3(self, stream):
        from cuda.bindings import runtime as cudart

        nbytes = int(np.prod(self.shapes["x"])) * 4
        for name in _FakeEngine.OUTPUTS:
            err, = cudart.cudaMemcpyAsync(self.addresses[name], self.addresses["x"], nbytes,
                                          cudart.cudaMemcpyKind.cudaMemcpyDeviceToDevice, stream)
            assert int(err) == 0, err
        return True


@pytest.mark.gpu
def test_cuda_plumbing_against_a_fake_engine(tensorrt_present, monkeypatch):
    pytest.importorskip("cuda.bindings")
    fake_trt = types.SimpleNamespace(TensorIOMode=types.SimpleNamespace(INPUT="INPUT"),
                                     nptype=lambda dtype: np.float32)
    monkeypatch.setattr(loader, "trt", fake_trt)
    rng = np.random.default_rng(0)
    with TrtRunner(_FakeEngine(max_batch=8), name="fake") as fake:
        assert fake.input_metadata() == {"x": (np.dtype("float32"), (-1, 4))}
        kept = []
        for batch in (1, 8, 3, 8):
            x = rng.standard_normal((batch, 4)).astype(np.float32)
            out = fake.infer({"x": x})
            assert list(out) == ["copy_a", "copy_b"]
            for value in out.values():
                np.testing.assert_array_equal(value, x)
                assert value.flags.owndata and value.flags.c_contiguous
            kept.append((x, out))
            assert fake.last_compute_ms >= 0 and fake.last_e2e_ms > 0
        for x, out in kept:  # later infers did not overwrite earlier results
            np.testing.assert_array_equal(out["copy_a"], x)
        assert not np.shares_memory(kept[1][1]["copy_a"], kept[3][1]["copy_a"])
    assert fake._cuda is None and fake.context is None


# -- real engines (gpu + trt) ----------------------------------------------------------------------------
def _runner(onnx, spec, tmp_path, precision="fp32"):
    pytest.importorskip("tensorrt")
    return TrtRunner(loader.engine_loader(spec, precision, onnx, tmp_path), name=f"tensorrt:{spec.name}:{precision}")


@pytest.mark.gpu
@pytest.mark.trt
def test_times5_for_every_batch_up_to_max_batch(times5_onnx, tmp_path):
    rng = np.random.default_rng(1)
    with _runner(times5_onnx, make_spec(max_batch=4), tmp_path) as trt_runner:
        assert trt_runner.input_metadata() == {"x": (np.dtype("float32"), (-1, 4))}
        for batch in (1, 2, 3, 4, 1):
            x = rng.uniform(-1, 1, (batch, 4)).astype(np.float32)
            out = trt_runner.infer({"x": x})
            assert list(out) == ["y"] and out["y"].shape == (batch, 4) and out["y"].dtype == np.float32
            np.testing.assert_allclose(out["y"], 5 * x, rtol=0, atol=0)  # 5x is exact in fp32
            assert trt_runner.last_compute_ms > 0 and trt_runner.last_e2e_ms >= trt_runner.last_compute_ms
            assert trt_runner.last_inference_time > 0
        with pytest.raises(RunnerError, match=r"input 'x' has batch 5, optimization profile 0 admits 1\.\.4"):
            trt_runner.infer({"x": np.zeros((5, 4), np.float32)})


@pytest.mark.gpu
@pytest.mark.trt
def test_outputs_are_fresh_arrays(times5_onnx, tmp_path):
    with _runner(times5_onnx, make_spec(max_batch=4), tmp_path) as trt_runner:
        first = trt_runner.infer({"x": np.ones((4, 4), np.float32)})
        second = trt_runner.infer({"x": np.full((4, 4), 2, np.float32)})
    np.testing.assert_array_equal(first["y"], np.full((4, 4), 5, np.float32))
    np.testing.assert_array_equal(second["y"], np.full((4, 4), 10, np.float32))
    assert not np.shares_memory(first["y"], second["y"]) and first["y"].flags.owndata


@pytest.mark.gpu
@pytest.mark.trt
def test_two_outputs_by_name(two_outputs_onnx, tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 6
    with _runner(two_outputs_onnx, make_spec(max_batch=3, name="two"), tmp_path) as trt_runner:
        out = trt_runner.infer({"x": x})
    assert sorted(out) == ["double", "negated"]
    np.testing.assert_array_equal(out["double"], x + x)
    np.testing.assert_array_equal(out["negated"], -x)
