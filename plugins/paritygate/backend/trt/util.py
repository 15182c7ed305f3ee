"""TensorRT helpers: availability, the build's identity and settings, cache keys, sidecars, the logger.

Everything above ``trt_logger`` is pure Python (unit-tested without TensorRT); nothing here imports
tensorrt, polygraphy or cuda at module import.
"""

import collections
import json
import os
from dataclasses import dataclass
from pathlib import Path

from paritygate.backend.base import RunnerError
from paritygate.backend.cache import key_of
from paritygate.lazy import MissingDependency, lazy_import
from paritygate.lazy import dist_version as _version


def trt_module():
    """The TensorRT module this process builds with: ``tensorrt_rtx`` where Polygraphy is bound to TensorRT-RTX
    (``POLYGRAPHY_USE_TENSORRT_RTX``, read once when Polygraphy is imported: ``backend.trt.aot``), else ``tensorrt``."""
    return "tensorrt_rtx" if os.environ.get("POLYGRAPHY_USE_TENSORRT_RTX", "0") != "0" else "tensorrt"


trt = lazy_import(trt_module())

SIDECAR_WRITER = "paritygate.backend.trt"  # marks a sidecar JSON as ours; others beside a .plan are ignored
IDENTITY_KEYS = ("tensorrt", "gpu", "compute_capability")


# -- availability and identity ------------------------------------------------------------------------
def trt_missing_reason():
    """None when tensorrt and polygraphy import; else a reason naming ``pip install 'paritygate[gpu]'``."""
    from paritygate.gpu import device as gpu

    return gpu.trt_reason()


def require_trt():
    reason = trt_missing_reason()
    if reason:
        raise MissingDependency(reason)


def current_identity():
    """What an engine is tied to: TensorRT version, GPU name, compute capability (the first visible GPU,
    the one TensorRT uses: paritygate.gpu.device pins xdist workers through CUDA_VISIBLE_DEVICES)."""
    from paritygate.gpu import device as gpu

    require_trt()
    found = gpu.probe()
    if not found.available:
        raise RunnerError(f"TensorRT needs a GPU: {found.reason}")
    info = found.info()
    return {"tensorrt": trt.__version__, "gpu": info.name, "compute_capability": info.compute_capability}


def describe(identity):
    """'TensorRT 10.9.0 on Tesla T4 (7.5)'."""
    return f"TensorRT {identity['tensorrt']} on {identity['gpu']} ({identity['compute_capability']})"


# -- build settings and cache key -----------------------------------------------------------------------
def profile_shapes(spec, opt_batch=None):
    """Input name -> (min, opt, max) shapes for optimization profile 0: batch 1..max_batch on dim 0.

    opt defaults to max_batch: Beam's RunInference batches elements up to max_batch_size, so serving runs
    at or near the largest batch; pass opt_batch to tune for another size. An input with a ``profile`` in the
    config takes its min/opt/max shapes as written (opt_batch, when given, sets the batch of its opt).
    """
    opt = spec.max_batch if opt_batch is None else opt_batch
    if not 1 <= opt <= spec.max_batch:
        raise ValueError(f"{spec.where('max_batch')}: opt_batch={opt} must lie in 1..{spec.max_batch}")
    shapes = {}
    for name, t in spec.inputs.items():
        if t.profile is None:
            shapes[name] = (t.with_batch(1), t.with_batch(opt), t.with_batch(spec.max_batch))
            continue
        low, best, high = (tuple(s) for s in t.profile)
        shapes[name] = (low, best if opt_batch is None else (opt_batch, *best[1:]), high)
    return shapes


def build_settings(spec, tf32=False, opt_batch=None):
    """Every builder setting that changes the engine (part of the cache key and the sidecar)."""
    shapes = profile_shapes(spec, opt_batch)
    return {"strongly_typed": True, "tf32": bool(tf32),
            "profile": {name: [list(s) for s in mmo] for name, mmo in shapes.items()},
            "polygraphy": _version("polygraphy")}


def engine_key(onnx_sha256, precision, identity, settings):
    """sha256 (24 hex digits) over the ONNX bytes' hash, precision, identity and builder settings."""
    return key_of(onnx=onnx_sha256, precision=precision, settings=settings,
                  **{k: identity[k] for k in IDENTITY_KEYS})


def timing_cache_name(identity):
    """One timing cache per TensorRT version and GPU: a cache from other hardware is rejected by
    IBuilderConfig.set_timing_cache(ignore_mismatch=False), which Polygraphy's CreateConfig uses."""
    gpu = "".join(c if c.isalnum() else "-" for c in identity["gpu"]).strip("-").lower()
    return f"timing-trt{identity['tensorrt']}-{gpu}-sm{identity['compute_capability'].replace('.', '')}.cache"


# -- sidecars -------------------------------------------------------------------------------------------
def sidecar_path(plan):
    """x.plan -> x.json"""
    return Path(plan).with_suffix(".json")


def sidecar_text(identity, **details):
    return json.dumps({"writer": SIDECAR_WRITER, **{k: identity[k] for k in IDENTITY_KEYS}, **details},
                      indent=2, sort_keys=True, default=str) + "\n"


def read_sidecar(plan):
    """The sidecar we wrote beside ``plan``, or None (absent, unreadable or someone else's JSON)."""
    try:
        doc = json.loads(sidecar_path(plan).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("writer") != SIDECAR_WRITER:
        return None
    if not all(isinstance(doc.get(k), str) for k in IDENTITY_KEYS):
        return None
    return doc


def mismatch_message(plan, built, here):
    """None when an engine built for ``built`` runs ``here``; else one line naming both.

    TensorRT engines run only on the TensorRT version and compute capability they were built for
    (TensorRT developer guide, "Engine compatibility"); a different GPU model of the same compute capability
    only draws a TensorRT warning, so the name alone does not refuse the engine.
    """
    if all(built[k] == here[k] for k in ("tensorrt", "compute_capability")):
        return None
    return (f"{plan}: built by TensorRT {built['tensorrt']} for {built['gpu']} ({built['compute_capability']}), "
            f"this is {describe(here)}; rebuild the engine here or drop it from the config to build from ONNX")


# -- engine I/O, checked against the config -------------------------------------------------------------
@dataclass(frozen=True)
class TensorInfo:
    name: str
    is_input: bool
    shape: tuple  # -1 for dynamic dimensions
    dtype: object  # numpy dtype, or the TensorRT type's name where numpy has none (bf16, fp8)
    profile: tuple = None  # inputs: (min, opt, max) shapes of optimization profile 0


def check_io(io, spec, where):
    """The engine's inputs must be the config's, by name, rank, dtype and fixed dims, and optimization
    profile 0 must admit every batch size 1..max_batch. Raises RunnerError naming ``where`` and the tensor."""
    inputs = {t.name: t for t in io if t.is_input}
    missing = [n for n in spec.inputs if n not in inputs]
    if missing:
        raise RunnerError(f"{where}: the engine has no input '{missing[0]}' declared in {spec.where('inputs')}; "
                          f"the engine's inputs are {sorted(inputs)}")
    extra = [n for n in inputs if n not in spec.inputs]
    if extra:
        raise RunnerError(f"{where}: engine input '{extra[0]}' is not declared in {spec.where('inputs')} "
                          f"(declared: {sorted(spec.inputs)})")
    for name, tensor in spec.inputs.items():
        info = inputs[name]
        expected = f"expected {tensor.dtype}{list(tensor.shape)} from {spec.where('inputs')}"
        if len(info.shape) != len(tensor.shape):
            raise RunnerError(f"{where}: input '{name}' has rank {len(info.shape)} {list(info.shape)}, {expected}")
        if info.dtype != tensor.dtype:
            raise RunnerError(f"{where}: input '{name}' is {info.dtype}, {expected}")
        for axis, (have, want) in enumerate(zip(info.shape[1:], tensor.shape[1:]), start=1):
            if have not in (-1, want) and want != -1:
                raise RunnerError(f"{where}: input '{name}' dimension {axis} is {have} "
                                  f"(engine shape {list(info.shape)}), {expected}")
        low, high = batch_range(info)
        if low > 1 or high < spec.max_batch:
            raise RunnerError(f"{where}: input '{name}' optimization profile 0 admits batch {low}..{high}, "
                              f"expected 1..{spec.max_batch} ({spec.where('max_batch')})")


def batch_range(info):
    """(lowest, highest) batch an input admits: its static batch, else profile 0's min/max on dim 0."""
    if info.shape and info.shape[0] != -1:
        return info.shape[0], info.shape[0]
    if info.profile is None:
        return 0, 0
    return info.profile[0][0], info.profile[2][0]


# -- the TensorRT logger --------------------------------------------------------------------------------
_LOGGER = []  # the one logger of this process, created on first use


def trt_logger(record=False):
    """The process's TensorRT logger: it forwards to Polygraphy's G_LOGGER and keeps the latest errors and
    warnings, so a failure can say what TensorRT said (``take_messages``).

    TensorRT keeps a single logger per process and ignores any later one while a builder, runtime or refitter
    lives (NVIDIA/TensorRT#1475), so this logger is also handed to Polygraphy's builders
    (polygraphy/backend/trt/util.py: get_trt_logger returns the module's TRT_LOGGER when set). With ``record`` (a
    process that builds one engine: ``backend.trt.aot``'s child) it also keeps every error and warning in order
    (``errors``, ``warnings``) and the builder's VERBOSE layer report (``verbose``: the messages that start with
    "Layers:"; ``backend.trt.layers``); without it those lists stay empty, so a long GPU run holds only ``recent``.
    """
    if not _LOGGER:
        from polygraphy.backend.trt import util as pg_util

        _LOGGER.append(_make_logger(record))
        if pg_util.TRT_LOGGER is None:
            pg_util.TRT_LOGGER = _LOGGER[0]
    return _LOGGER[0]


def take_messages(logger=None):
    """What TensorRT logged (errors, warnings) since the last call, joined; '' when nothing was captured."""
    logger = logger or trt_logger()
    said = "; ".join(dict.fromkeys(getattr(logger, "recent", ())))
    if hasattr(logger, "recent"):
        logger.recent.clear()
    return said[:800]


def _make_logger(record=False):
    from polygraphy.logger import G_LOGGER, LogMode

    L = trt.Logger  # severities as Polygraphy's own TensorRT logger names them (backend/trt/util.py)
    keep = {L.INTERNAL_ERROR, L.ERROR, L.WARNING}
    forward = {L.INTERNAL_ERROR: G_LOGGER.error, L.ERROR: G_LOGGER.error,
               L.WARNING: lambda msg: G_LOGGER.warning(msg, mode=LogMode.ONCE),
               L.INFO: G_LOGGER.verbose, L.VERBOSE: G_LOGGER.extra_verbose}

    class CapturingLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.recent = collections.deque(maxlen=32)
            self.errors, self.warnings, self.verbose = [], [], []

        def log(self, severity, msg):  # called by TensorRT, which expects no exception back
            try:
                if severity in keep:
                    self.recent.append(str(msg).strip())
                    if record:
                        (self.warnings if severity == L.WARNING else self.errors).append(str(msg).strip())
                elif record and severity == L.VERBOSE and str(msg).startswith("Layers:"):
                    self.verbose.append(str(msg))
                forward.get(severity, G_LOGGER.super_verbose)(msg)
            except Exception:  # noqa: BLE001, S110 - TensorRT calls log() from C++ and expects no exception
                pass

    return CapturingLogger()
