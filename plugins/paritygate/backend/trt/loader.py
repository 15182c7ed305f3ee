"""TensorRT engines from the shared ONNX artifacts, or from prebuilt .plan files, each checked against the config.

Every precision builds a STRONGLY TYPED network from its own ONNX artifact (fp32; fp16 converted with some ops
kept in fp32; int8 explicit Q/DQ): TensorRT 11 removed the FP16/INT8 builder flags and calibrators
(TensorRT docs, "Migrating from TensorRT 10.x to 11.x"), and a strongly typed network runs each tensor in the
type the artifact gives it, so TensorRT and ONNX Runtime run the same arithmetic. TF32 is off: TensorRT enables
it by default (NVIDIA/TensorRT#1824) and it changes fp32 matmul/conv results (NVIDIA/TensorRT#4492).

Loaders are lazy callables in Polygraphy's manner: ``EngineFromPath(EngineFromOnnx(onnx, spec, "fp16"), spec)``
does nothing until called.
"""

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from paritygate.backend.base import RunnerError
from paritygate.backend.cache import STATS, cache_root, hash_path
from paritygate.backend.trt import util
from paritygate.common.numerics import PRECISIONS
from paritygate.lazy import lazy_import

trt = lazy_import(util.trt_module())
pg_trt = lazy_import("polygraphy.backend.trt")
pg_logger = lazy_import("polygraphy.logger")


class EngineFromOnnx:
    """Build (or fetch from the engine cache) the engine for one ONNX artifact; calling it returns the
    ``<cache_dir>/engines/<key>.plan`` path, with a ``<key>.json`` sidecar beside it.

    The key hashes the ONNX bytes, the precision, the TensorRT version, the GPU name and compute capability,
    and the builder settings (strongly typed, tf32, profile shapes), so a warm call builds nothing and a
    changed input is never served a stale engine.

    Args:
        onnx_path: the ONNX artifact, or a callable returning it (called once, on first use).
        spec: the model's ModelSpec (profile shapes come from ``max_batch`` and ``inputs``).
        precision: "fp32", "fp16" or "int8": the artifact's precision (the network is strongly typed).
        cache_dir: defaults to ``$PARITYGATE_CACHE/trt`` (paritygate.backend.cache.cache_root()).
        tf32: allow TF32 in fp32 matmuls/convs (default False, for every precision).
        opt_batch: the batch TensorRT tunes kernels for (default ``max_batch``).
        identity: {"tensorrt", "gpu", "compute_capability"} to key on (default: this TensorRT and GPU).
    """

    def __init__(self, onnx_path, spec, precision, cache_dir=None, tf32=False, opt_batch=None, identity=None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self._onnx = onnx_path
        self.spec = spec
        self.precision = precision
        self.cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "trt"
        self.settings = util.build_settings(spec, tf32=tf32, opt_batch=opt_batch)
        self._identity = identity

    def onnx_path(self):
        if callable(self._onnx):
            self._onnx = self._onnx()
        onnx = Path(self._onnx)
        if not onnx.is_file():
            raise RunnerError(f"{onnx}: ONNX artifact not found (model '{self.spec.name}', {self.precision})")
        return onnx

    def identity(self):
        if self._identity is None:
            self._identity = util.current_identity()
        return self._identity

    def plan_path(self, onnx_sha256=None):
        """Where the engine for the current ONNX bytes, TensorRT and GPU lives (built or not)."""
        sha = onnx_sha256 or hash_path(self.onnx_path())
        key = util.engine_key(sha, self.precision, self.identity(), self.settings)
        return self.cache_dir / "engines" / f"{key}.plan"

    def __call__(self):
        sha = hash_path(self.onnx_path())
        plan = self.plan_path(sha)
        if plan.is_file() and util.read_sidecar(plan) is not None:
            STATS["hits"] += 1
            return plan
        start = time.perf_counter()
        _write_atomic(plan, self._build())
        _write_atomic(util.sidecar_path(plan), util.sidecar_text(
            self.identity(), model=self.spec.name, precision=self.precision, onnx=str(self.onnx_path()),
            onnx_sha256=sha, settings=self.settings, build_seconds=round(time.perf_counter() - start, 3),
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")))
        STATS["builds"] += 1
        return plan

    # -- the Polygraphy pipeline ------------------------------------------------------------------------
    def network_loader(self):
        """NetworkFromOnnxPath(strongly_typed=True): a callable giving (builder, network, parser)."""
        util.require_trt()
        util.trt_logger()  # before Polygraphy makes its own: TensorRT keeps one logger per process
        return pg_trt.NetworkFromOnnxPath(str(self.onnx_path()), strongly_typed=True)

    def config_loader(self):
        """CreateConfig(tf32=..., one profile batch 1..max_batch, the timing cache): (builder, network) -> config."""
        profile = pg_trt.Profile()
        for name, (low, opt, high) in self.settings["profile"].items():
            profile.add(name, min=tuple(low), opt=tuple(opt), max=tuple(high))
        timing = self.timing_cache_path()
        return pg_trt.CreateConfig(tf32=self.settings["tf32"], profiles=[profile],
                                   load_timing_cache=str(timing) if timing.is_file() else None)

    def timing_cache_path(self):
        return self.cache_dir / util.timing_cache_name(self.identity())

    def _build(self):
        util.require_trt()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        G_LOGGER = pg_logger.G_LOGGER
        util.take_messages()  # forget what earlier work logged
        try:
            with G_LOGGER.verbosity(G_LOGGER.WARNING):
                build = pg_trt.EngineBytesFromNetwork(self.network_loader(), config=self.config_loader(),
                                                      save_timing_cache=str(self.timing_cache_path()))
                return build()
        except Exception as err:  # Polygraphy raises PolygraphyException; the bindings raise their own
            said = util.take_messages()
            timing = self.timing_cache_path()
            hint = f"; if this persists, delete the timing cache {timing}" if timing.is_file() else ""
            raise RunnerError(f"{self.onnx_path()}: TensorRT could not build the {self.precision} engine for model "
                              f"'{self.spec.name}' ({util.describe(self.identity())}): {str(err).strip()[:600]}"
                              + (f"; TensorRT said: {said}" if said else "") + hint) from err


class EngineFromPath:
    """Deserialize a .plan (a path, or a callable returning one) and check it against ``spec``; calling it
    returns the trt.ICudaEngine.

    A sidecar JSON we wrote beside the plan is compared with this TensorRT and GPU first, so an engine built
    elsewhere is refused with both named; when deserialization fails, the error quotes TensorRT's log.
    ``spec=None`` skips the config check (the runner's input metadata is still checked by the caller).
    """

    def __init__(self, path, spec=None, identity=None):
        self._path = path
        self.spec = spec
        self._identity = identity
        self.runtime = None  # kept alive as long as this loader: engines must not outlive their runtime

    def identity(self):
        if self._identity is None:
            self._identity = util.current_identity()
        return self._identity

    def __call__(self):
        path = Path(self._path() if callable(self._path) else self._path)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise RunnerError(f"{path}: cannot read TensorRT engine: {err.strerror or err}") from err
        if not data:
            raise RunnerError(f"{path}: TensorRT engine file is empty")
        built = util.read_sidecar(path)
        if built is not None:
            message = util.mismatch_message(path, built, self.identity())
            if message:
                raise RunnerError(message)
        engine = self._deserialize(path, data)
        if self.spec is not None:
            util.check_io(engine_io(engine), self.spec, str(path))
        return engine

    def _deserialize(self, path, data):
        util.require_trt()
        logger = util.trt_logger()
        util.take_messages(logger)
        try:
            trt.init_libnvinfer_plugins(logger, "")  # engines with plugin layers need the registry filled
            self.runtime = trt.Runtime(logger)
            engine = self.runtime.deserialize_cuda_engine(data)
        except Exception as err:  # noqa: BLE001 - the bindings raise several types for bad input
            engine, said = None, f"{type(err).__name__}: {err}"
        else:
            said = None
        said = "; ".join(s for s in (said, util.take_messages(logger)) if s)
        if engine is None:
            raise RunnerError(f"{path}: TensorRT could not deserialize this engine ({util.describe(self.identity())}): "
                              f"{said or 'TensorRT gave no reason (see its log above)'}; a file that is not a "
                              "TensorRT plan, or one built by another TensorRT version or for another GPU, fails so")
        return engine


def engine_loader(spec, precision, onnx_path, cache_dir=None, **build_options):
    """The loader for one model and precision: the configured prebuilt engine when there is one
    (``engines = {fp16 = "x.plan"}``), else one built from the ONNX artifact (a path, or a callable that
    makes it, so that no ONNX is converted for a prebuilt engine)."""
    if precision in spec.engines:
        return EngineFromPath(spec.engines[precision], spec)
    return EngineFromPath(EngineFromOnnx(onnx_path, spec, precision, cache_dir, **build_options), spec)


def engine_io(engine):
    """The engine's I/O tensors (TensorInfo) through the TensorRT 10 tensor-name API."""
    io = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        shape = tuple(engine.get_tensor_shape(name))
        profile = None
        if is_input and engine.num_optimization_profiles > 0 and -1 in shape:
            profile = tuple(tuple(s) for s in engine.get_tensor_profile_shape(name, 0))
        io.append(util.TensorInfo(name, is_input, shape, numpy_dtype(engine.get_tensor_dtype(name)), profile))
    return io


def numpy_dtype(trt_dtype):
    try:
        return np.dtype(trt.nptype(trt_dtype))
    except TypeError:  # bf16, fp8, fp4, int4: no numpy type
        return getattr(trt_dtype, "name", str(trt_dtype))


def _write_atomic(target, payload):
    """Write to a temporary file beside ``target`` and rename it into place (xdist workers may race)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}-", suffix=target.suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload.encode() if isinstance(payload, str) else payload)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
