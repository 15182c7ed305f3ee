"""paritygate.backend.trt.loader and .util: the pure parts on any machine (profile shapes, cache keys, sidecars,
the config check, the warm cache, the missing-TensorRT reason); real builds are in test_loader_gpu.py."""

import json
import subprocess
import sys
import types

import numpy as np
import pytest

from paritygate.backend import cache
from paritygate.backend.base import RunnerError
from paritygate.backend.trt import loader, util
from paritygate.gpu import device as gpu
from paritygate.lazy import MissingDependency

from .conftest import A100, T4, make_spec

HEAVY = ("tensorrt", "polygraphy", "cuda", "onnx", "onnxruntime", "tensorflow")


@pytest.fixture
def no_tensorrt(monkeypatch):
    """Make tensorrt look uninstalled (gpu.trt_reason asks paritygate.lazy.available)."""
    monkeypatch.setattr(gpu, "available", lambda name: name not in ("tensorrt", "tensorrt_libs"))


def test_importing_the_trt_backend_imports_no_heavy_module():
    code = ("import json, sys; import paritygate.backend.trt, paritygate.backend.trt.loader, "
            "paritygate.backend.trt.runner, paritygate.backend.trt.util; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


# -- profile shapes and settings ---------------------------------------------------------------------------
def test_profile_spans_batch_1_to_max_batch_and_is_tuned_for_max_batch():
    spec = make_spec(max_batch=8, inputs={"image": ((-1, 3, 32, 32), "float32"), "mask": ((-1, 5), "int64")})
    assert util.profile_shapes(spec) == {
        "image": ((1, 3, 32, 32), (8, 3, 32, 32), (8, 3, 32, 32)),
        "mask": ((1, 5), (8, 5), (8, 5)),
    }


def test_profile_opt_batch_is_a_choice_within_the_range():
    spec = make_spec(max_batch=8)
    assert util.profile_shapes(spec, opt_batch=2)["x"] == ((1, 4), (2, 4), (8, 4))
    with pytest.raises(ValueError, match=r"opt_batch=9 must lie in 1\.\.8"):
        util.profile_shapes(spec, opt_batch=9)


DYNAMIC = ((1, 12, 12, 3), (4, 48, 48, 3), (8, 160, 160, 3))  # the config's profile = { min, opt, max }


def _dynamic_spec():
    from dataclasses import replace

    spec = make_spec(max_batch=8, inputs={"image": ((-1, -1, -1, 3), "float32"), "mask": ((-1, 5), "int64")})
    image = replace(spec.inputs["image"], profile=DYNAMIC)
    return replace(spec, inputs={"image": image, "mask": spec.inputs["mask"]})


def test_profile_of_a_dynamic_input_is_the_configs_min_opt_max():
    spec = _dynamic_spec()
    assert util.profile_shapes(spec) == {"image": DYNAMIC, "mask": ((1, 5), (8, 5), (8, 5))}
    assert util.profile_shapes(spec, opt_batch=2)["image"] == (DYNAMIC[0], (2, 48, 48, 3), DYNAMIC[2])
    assert util.build_settings(spec)["profile"]["image"] == [list(s) for s in DYNAMIC]


def test_the_builder_config_takes_the_configs_profile(tmp_path):
    """The Polygraphy Profile handed to CreateConfig (built without TensorRT: Profile is plain Python)."""
    pytest.importorskip("polygraphy")
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"")
    config = loader.EngineFromOnnx(onnx, _dynamic_spec(), "fp32", cache_dir=tmp_path, identity=A100).config_loader()
    profile = config.profiles[0]
    assert tuple(profile["image"].min) == DYNAMIC[0]
    assert tuple(profile["image"].opt) == DYNAMIC[1]
    assert tuple(profile["image"].max) == DYNAMIC[2]
    assert tuple(profile["mask"].max) == (8, 5)


def test_check_io_accepts_any_size_on_a_dynamic_dim_of_the_config():
    spec = _dynamic_spec()
    io = [util.TensorInfo("image", True, (-1, -1, -1, 3), np.dtype("float32"), DYNAMIC),
          util.TensorInfo("mask", True, (-1, 5), np.dtype("int64"), ((1, 5), (8, 5), (8, 5)))]
    util.check_io(io, spec, "engine.plan")


def test_build_settings_are_strongly_typed_without_tf32():
    settings = util.build_settings(make_spec(max_batch=2))
    assert settings["strongly_typed"] is True
    assert settings["tf32"] is False
    assert settings["profile"] == {"x": [[1, 4], [2, 4], [2, 4]]}
    json.dumps(settings)  # goes into the sidecar


# -- cache key ---------------------------------------------------------------------------------------------
KEY_PARTS = {"onnx_sha256": "ab" * 32, "precision": "fp16", "identity": A100,
             "settings": util.build_settings(make_spec(max_batch=4))}
KEY_CHANGES = {
    "onnx bytes": {"onnx_sha256": "cd" * 32},
    "precision": {"precision": "int8"},
    "tensorrt version": {"identity": {**A100, "tensorrt": "10.9.0"}},
    "gpu name": {"identity": {**A100, "gpu": "NVIDIA A100 80GB PCIe"}},
    "compute capability": {"identity": {**A100, "compute_capability": "8.6"}},
    "tf32": {"settings": util.build_settings(make_spec(max_batch=4), tf32=True)},
    "profile shapes": {"settings": util.build_settings(make_spec(max_batch=8))},
    "opt batch": {"settings": util.build_settings(make_spec(max_batch=4), opt_batch=1)},
    "strongly typed": {"settings": {**util.build_settings(make_spec(max_batch=4)), "strongly_typed": False}},
}


def test_engine_key_is_stable():
    assert util.engine_key(**KEY_PARTS) == util.engine_key(**dict(KEY_PARTS))
    assert len(util.engine_key(**KEY_PARTS)) == 24


@pytest.mark.parametrize("change", sorted(KEY_CHANGES))
def test_engine_key_changes_with_each_part(change):
    assert util.engine_key(**{**KEY_PARTS, **KEY_CHANGES[change]}) != util.engine_key(**KEY_PARTS)


def test_timing_cache_is_per_tensorrt_version_and_gpu():
    assert util.timing_cache_name(A100) == "timing-trt10.3.0-nvidia-a100-sxm4-40gb-sm80.cache"
    assert util.timing_cache_name(A100) != util.timing_cache_name({**A100, "tensorrt": "10.9.0"})


# -- sidecars ----------------------------------------------------------------------------------------------
def test_mismatch_names_both_builds(tmp_path):
    plan = tmp_path / "x.plan"
    message = util.mismatch_message(plan, {**A100, "gpu": "NVIDIA A100"}, T4)
    assert message.startswith(f"{plan}: built by TensorRT 10.3.0 for NVIDIA A100 (8.0), "
                              "this is TensorRT 10.9.0 on Tesla T4 (7.5)")


def test_same_tensorrt_and_compute_capability_is_no_mismatch(tmp_path):
    assert util.mismatch_message(tmp_path / "x.plan", A100, A100) is None
    assert util.mismatch_message(tmp_path / "x.plan", A100, {**A100, "gpu": "NVIDIA A100 80GB PCIe"}) is None
    assert util.mismatch_message(tmp_path / "x.plan", A100, {**A100, "compute_capability": "8.6"})


def test_read_sidecar_keeps_only_ours(tmp_path):
    plan = tmp_path / "x.plan"
    assert util.read_sidecar(plan) is None
    util.sidecar_path(plan).write_text(util.sidecar_text(A100, precision="fp16"))
    assert util.read_sidecar(plan)["precision"] == "fp16"
    util.sidecar_path(plan).write_text(json.dumps({"tensorrt": "10.3.0"}))  # someone else's JSON
    assert util.read_sidecar(plan) is None
    util.sidecar_path(plan).write_text("{not json")
    assert util.read_sidecar(plan) is None


# -- the config check (engine I/O against the ModelSpec) -------------------------------------------------
def _input(name="x", shape=(-1, 4), dtype="float32", low=1, high=4):
    profile = ((low, *shape[1:]), (high, *shape[1:]), (high, *shape[1:])) if shape[0] == -1 else None
    return util.TensorInfo(name, True, shape, np.dtype(dtype), profile)


OUTPUT = util.TensorInfo("y", False, (-1, 4), np.dtype("float32"))


def test_check_io_accepts_a_matching_engine():
    util.check_io([_input(), OUTPUT], make_spec(max_batch=4), "e.plan")


@pytest.mark.parametrize("io, spec_kwargs, words", [
    ([_input(name="z"), OUTPUT], {}, ["e.plan", "no input 'x'", "'z'"]),
    ([_input(), _input(name="mask"), OUTPUT], {}, ["e.plan", "engine input 'mask' is not declared"]),
    ([_input(shape=(-1, 4, 1)), OUTPUT], {}, ["e.plan", "input 'x' has rank 3", "expected float32[-1, 4]"]),
    ([_input(dtype="float16"), OUTPUT], {}, ["e.plan", "input 'x' is float16", "expected float32[-1, 4]"]),
    ([_input(shape=(-1, 5)), OUTPUT], {}, ["e.plan", "input 'x' dimension 1 is 5"]),
    ([_input(high=2), OUTPUT], {}, ["e.plan", "input 'x' optimization profile 0 admits batch 1..2",
                                    "expected 1..4", "'max_batch'"]),
    ([_input(low=2), OUTPUT], {}, ["e.plan", "admits batch 2..4", "expected 1..4"]),
    ([_input(shape=(1, 4)), OUTPUT], {}, ["e.plan", "admits batch 1..1", "expected 1..4"]),
], ids=["name", "extra-input", "rank", "dtype", "fixed-dim", "profile-max", "profile-min", "static-batch"])
def test_check_io_names_the_engine_the_tensor_and_the_expectation(io, spec_kwargs, words):
    with pytest.raises(RunnerError) as err:
        util.check_io(io, make_spec(max_batch=4, **spec_kwargs), "e.plan")
    for word in words:
        assert word in str(err.value)


# -- TensorRT missing ------------------------------------------------------------------------------------
def test_missing_tensorrt_names_the_gpu_extra(no_tensorrt):
    assert "pip install 'paritygate[gpu]'" in util.trt_missing_reason()
    with pytest.raises(MissingDependency, match=r"tensorrt .*pip install 'paritygate\[gpu\]'"):
        util.require_trt()


def test_building_without_tensorrt_raises_missing_dependency(no_tensorrt, tmp_path):
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"onnx")
    with pytest.raises(MissingDependency, match=r"paritygate\[gpu\]"):
        loader.EngineFromOnnx(onnx, make_spec(), "fp32", tmp_path / "cache")()


def test_loading_without_tensorrt_raises_missing_dependency(no_tensorrt, tmp_path):
    plan = tmp_path / "x.plan"
    plan.write_bytes(b"plan")
    with pytest.raises(MissingDependency, match=r"paritygate\[gpu\]"):
        loader.EngineFromPath(plan, make_spec(), identity=A100)()


# -- EngineFromOnnx: the engine cache --------------------------------------------------------------------
@pytest.fixture
def onnx_file(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"pretend ONNX bytes")
    return path


def test_precision_must_be_known(onnx_file, tmp_path):
    with pytest.raises(ValueError, match="precision must be one of"):
        loader.EngineFromOnnx(onnx_file, make_spec(), "bf16", tmp_path)


def test_missing_onnx_artifact_is_named(tmp_path):
    with pytest.raises(RunnerError, match=r"nope\.onnx: ONNX artifact not found \(model 'times5', fp16\)"):
        loader.EngineFromOnnx(tmp_path / "nope.onnx", make_spec(), "fp16", tmp_path, identity=A100)()


def test_cold_call_builds_once_and_writes_plan_and_sidecar(onnx_file, tmp_path, monkeypatch, stats):
    builds = []
    monkeypatch.setattr(loader.EngineFromOnnx, "_build", lambda self: builds.append(1) or b"PLAN")
    make = loader.EngineFromOnnx(onnx_file, make_spec(), "fp16", tmp_path / "cache", identity=A100)
    plan = make()
    assert plan.parent == tmp_path / "cache" / "engines" and plan.suffix == ".plan"
    assert plan.read_bytes() == b"PLAN"
    sidecar = util.read_sidecar(plan)
    assert {k: sidecar[k] for k in ("tensorrt", "gpu", "compute_capability")} == A100
    assert sidecar["precision"] == "fp16" and sidecar["settings"]["tf32"] is False
    assert sidecar["onnx_sha256"] == cache.hash_path(onnx_file)
    assert loader.EngineFromOnnx(onnx_file, make_spec(), "fp16", tmp_path / "cache", identity=A100)() == plan
    assert builds == [1] and stats == {"hits": 1, "builds": 1}


def test_warm_call_builds_nothing(onnx_file, tmp_path, monkeypatch, stats):
    make = loader.EngineFromOnnx(onnx_file, make_spec(), "int8", tmp_path, identity=A100)
    plan = make.plan_path()
    plan.parent.mkdir(parents=True)
    plan.write_bytes(b"PLAN")
    util.sidecar_path(plan).write_text(util.sidecar_text(A100))
    monkeypatch.setattr(loader.EngineFromOnnx, "_build", lambda self: pytest.fail("a warm call built an engine"))
    assert make() == plan
    assert stats == {"hits": 1, "builds": 0}


def test_plan_without_sidecar_is_rebuilt(onnx_file, tmp_path, monkeypatch, stats):
    """A crash between writing the plan and its sidecar leaves a plan that is not trusted."""
    make = loader.EngineFromOnnx(onnx_file, make_spec(), "fp32", tmp_path, identity=A100)
    make.plan_path().parent.mkdir(parents=True)
    make.plan_path().write_bytes(b"HALF")
    monkeypatch.setattr(loader.EngineFromOnnx, "_build", lambda self: b"PLAN")
    assert make().read_bytes() == b"PLAN" and stats["builds"] == 1


def test_changed_onnx_bytes_or_gpu_change_the_plan_path(onnx_file, tmp_path):
    before = loader.EngineFromOnnx(onnx_file, make_spec(), "fp32", tmp_path, identity=A100).plan_path()
    assert loader.EngineFromOnnx(onnx_file, make_spec(), "fp32", tmp_path, identity=T4).plan_path() != before
    onnx_file.write_bytes(b"other ONNX bytes")
    assert loader.EngineFromOnnx(onnx_file, make_spec(), "fp32", tmp_path, identity=A100).plan_path() != before


def test_onnx_path_may_be_a_callable_made_once(onnx_file, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(loader.EngineFromOnnx, "_build", lambda self: b"PLAN")
    make = loader.EngineFromOnnx(lambda: calls.append(1) or onnx_file, make_spec(), "fp32", tmp_path, identity=A100)
    make()
    make()
    assert calls == [1]


def test_engine_loader_prefers_the_configured_engine(onnx_file, tmp_path):
    spec = make_spec(engines={"fp16": tmp_path / "x.plan"})
    made = loader.engine_loader(spec, "fp16", lambda: pytest.fail("converted ONNX for a prebuilt engine"))
    assert isinstance(made, loader.EngineFromPath) and made._path == tmp_path / "x.plan" and made.spec is spec
    built = loader.engine_loader(spec, "fp32", onnx_file, tmp_path / "cache")
    assert isinstance(built._path, loader.EngineFromOnnx) and built._path.cache_dir == tmp_path / "cache"


# -- the Polygraphy pipeline, with the real Polygraphy loaders and a fake build -----------------------------
@pytest.fixture
def fake_build(monkeypatch):
    """Polygraphy's real NetworkFromOnnxPath/CreateConfig/Profile, a recording EngineBytesFromNetwork."""
    pg = pytest.importorskip("polygraphy.backend.trt")
    monkeypatch.setattr(util, "trt_missing_reason", lambda: None)
    monkeypatch.setattr(util, "trt_logger", lambda: None)
    monkeypatch.setattr(util, "take_messages", lambda logger=None: "")
    seen = {"result": b"PLAN"}

    class EngineBytesFromNetwork:
        def __init__(self, network, config=None, save_timing_cache=None):
            seen.update(network=network, config=config, save_timing_cache=save_timing_cache)

        def __call__(self):
            if isinstance(seen["result"], Exception):
                raise seen["result"]
            return seen["result"]

    monkeypatch.setattr(loader, "pg_trt", types.SimpleNamespace(
        NetworkFromOnnxPath=pg.NetworkFromOnnxPath, CreateConfig=pg.CreateConfig, Profile=pg.Profile,
        EngineBytesFromNetwork=EngineBytesFromNetwork))
    return types.SimpleNamespace(pg=pg, seen=seen)


def test_build_is_strongly_typed_with_tf32_off_and_one_profile(fake_build, onnx_file, tmp_path, stats):
    pg, seen = fake_build.pg, fake_build.seen
    make = loader.EngineFromOnnx(onnx_file, make_spec(max_batch=8), "fp16", tmp_path, identity=A100)
    assert make().read_bytes() == b"PLAN"
    network, config = seen["network"], seen["config"]
    assert isinstance(network, pg.NetworkFromOnnxPath) and network.path == str(onnx_file)
    assert network.strongly_typed is True
    assert isinstance(config, pg.CreateConfig)
    assert (config.tf32, config.fp16, config.int8, config.bf16, config.fp8) == (False,) * 5  # no weak typing
    assert [{name: tuple(shapes) for name, shapes in profile.items()} for profile in config.profiles] == [
        {"x": ((1, 4), (8, 4), (8, 4))}]
    timing = tmp_path / util.timing_cache_name(A100)
    assert seen["save_timing_cache"] == str(timing) and config.timing_cache_path is None  # none saved yet
    timing.write_bytes(b"cache")
    assert make.config_loader().timing_cache_path == str(timing)


def test_failed_build_names_the_onnx_the_precision_and_the_gpu(fake_build, onnx_file, tmp_path):
    fake_build.seen["result"] = RuntimeError("Invalid Engine. Please ensure the engine was built correctly")
    with pytest.raises(RunnerError) as err:
        loader.EngineFromOnnx(onnx_file, make_spec(), "int8", tmp_path, identity=A100)()
    assert str(err.value).startswith(f"{onnx_file}: TensorRT could not build the int8 engine for model 'times5' "
                                     "(TensorRT 10.3.0 on NVIDIA A100-SXM4-40GB (8.0)): Invalid Engine.")
    assert not list(tmp_path.rglob("*.plan"))


# -- EngineFromPath before TensorRT is touched -----------------------------------------------------------
def test_unreadable_and_empty_engines_are_named(tmp_path):
    with pytest.raises(RunnerError, match=r"missing\.plan: cannot read TensorRT engine"):
        loader.EngineFromPath(tmp_path / "missing.plan", make_spec(), identity=A100)()
    (tmp_path / "empty.plan").write_bytes(b"")
    with pytest.raises(RunnerError, match=r"empty\.plan: TensorRT engine file is empty"):
        loader.EngineFromPath(tmp_path / "empty.plan", make_spec(), identity=A100)()


def test_engine_built_elsewhere_is_refused_naming_both(tmp_path):
    plan = tmp_path / "x.plan"
    plan.write_bytes(b"PLAN")
    util.sidecar_path(plan).write_text(util.sidecar_text({**A100, "gpu": "NVIDIA A100"}))
    with pytest.raises(RunnerError) as err:
        loader.EngineFromPath(plan, make_spec(), identity=T4)()
    assert str(err.value).startswith(f"{plan}: built by TensorRT 10.3.0 for NVIDIA A100 (8.0), "
                                     "this is TensorRT 10.9.0 on Tesla T4 (7.5)")
