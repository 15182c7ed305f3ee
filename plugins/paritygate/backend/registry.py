"""The candidate runtimes: one ``Runtime`` entry each, and the one place their names are known.

Everything else asks this module (or the run context's ``runtime_entry``, the entry of ``ctx.runtime``): which
runtimes ``--parity-runtime`` and ``paritygate replay --runtime`` offer, how a runtime's candidate is loaded and run,
what it needs installed and why it cannot run here, the numerics label of its fp16/int8 rows, whether it needs a
GPU (the pytest mark its candidate checks carry), whether it builds its own engine and whether TensorRT-RTX's
ahead-of-time build gates its numeric checks. Adding a runtime is one entry in ``RUNTIMES`` plus its backend folder
(its loader and runner: ``backend/onnxrt``, ``backend/trt``); docs/layout.md says so. No module compares a runtime's
name outside this one (tests/backend/test_registry.py checks).
"""

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from paritygate.lazy import available, missing_reason

CPU = "onnxruntime"  # runs on any machine: the default without a GPU, the shadow gate's candidate
_REFUSED = {}  # runtime name -> its refusal on this machine, once per process


@dataclass(frozen=True)
class Runtime:
    """A candidate runtime. ``load(ctx, spec, precision)`` -> (an activated runner, what it runs: a file or an
    engine's description); ``refusal()`` -> why it cannot run on this machine (no GPU, its libraries missing, its
    runtime refusing the GPU), or None; ``run_needs(specs)`` -> what else its candidates of ``specs`` need installed
    (TensorFlow to convert, ...), or None."""

    name: str
    summary: str  # one line for --parity-runtime's help and docs
    load: Callable
    refusal: Callable
    run_needs: Callable
    mark: str = None  # the pytest mark its candidate checks carry (gpu, trt): `pytest -m gpu` selects them
    follows_numerics: bool = False  # computes fp16/int8 as --parity-numerics says (strict / ort); else its own
    numerics_note: str = None  # what its own numerics are (summary line, report), when it does not follow them
    own_engine: bool = False  # builds its own engine from the ONNX, or loads the config's prebuilt one
    engine_gate: bool = False  # TensorRT-RTX's ahead-of-time build gates its numeric checks (docs/engine.md)
    validated: bool = False  # the validation pass runs its fp32 candidate (cheap, and here on any machine)
    files: Callable = None  # (ctx, spec, precision): builds the files its candidate opens (backend.ahead), or None
    environment: dict = field(default_factory=dict)  # set before anything imports its libraries (and in replay)

    @property
    def needs_gpu(self):
        return self.mark is not None

    def numerics(self, mode):
        """The numerics label of its fp16/int8 rows under ``--parity-numerics=mode``: the mode, or its own name."""
        return mode if self.follows_numerics else self.name

    def refused(self):
        """``refusal()``, asked once per process (a runtime's probe can start a child or load CUDA)."""
        if self.name not in _REFUSED:
            _REFUSED[self.name] = self.refusal()
        return _REFUSED[self.name]

    def needs(self, specs):
        """Why its candidates of ``specs`` cannot run here, or None: its own reason first (the skip reason a team
        sees on an unsupported GPU, docs/engine.md), then what the run needs installed."""
        return self.refused() or self.run_needs(specs)

    def prepare(self):
        """Set what must be set before its libraries are imported (the plugin's options, replay)."""
        os.environ.update(self.environment)


def candidate_missing(specs, fp16=True):
    """What an ONNX candidate of ``specs`` needs installed and is not, one ``lazy.missing_reason`` each ("; "-joined),
    or None: onnx and onnxruntime; tensorflow and tf2onnx to convert a model without its own ONNX; with ``fp16``,
    onnxconverter_common for a model with an fp16 precision."""
    needs = ["onnx", "onnxruntime"]
    if any(m.onnx is None for m in specs):  # converted from the TF reference
        needs += ["tensorflow", "tf2onnx"]
    if fp16 and any("fp16" in m.precisions for m in specs):
        needs.append("onnxconverter_common")
    return "; ".join(missing_reason(name) for name in needs if not available(name)) or None


# -- loaders: each builds the candidate from its backend folder's loader and runner -----------------------------
def _runner(runner, what):
    runner.time_as = "candidate"
    runner.activate()
    return runner, what


def _onnxruntime_files(ctx, spec, precision):
    """What ONNX Runtime's CPU provider opens for the candidate: the artifact, or its strict file's twin."""
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.onnx.strict.loader import computed

    return computed(onnx_artifact(spec, precision, ctx.fp16_keep_fp32), ctx.numerics, twin=True)


def _load_onnxruntime(ctx, spec, precision):
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    run = _onnxruntime_files(ctx, spec, precision)
    return _runner(OnnxrtRunner(run.path, name=f"onnxruntime:{spec.name}:{precision}", spin=ctx.spin,
                                numerics=ctx.numerics, level=run.level, library=run.library), str(run.artifact))


def _load_onnxruntime_cuda(ctx, spec, precision):
    """The artifact itself on ONNX Runtime's CUDA provider, TF32 off (``onnxrt.loader.CUDA_TF32``), Q/DQ as ONNX
    Runtime serves them (no fake-quantization setting: its CPU-only QDQ fusions do not touch CUDA nodes)."""
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.onnxrt.loader import SessionFromOnnx, cuda_providers
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    path = onnx_artifact(spec, precision, ctx.fp16_keep_fp32)
    loader = SessionFromOnnx(path, cuda_providers(), spin=ctx.spin, fake_quant=False)
    return _runner(OnnxrtRunner(loader, name=f"onnxruntime-cuda:{spec.name}:{precision}", numerics="ort"), str(path))


def _load_tensorrt(ctx, spec, precision):
    from paritygate.backend.cache import cache_root
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.trt.loader import EngineFromOnnx, EngineFromPath
    from paritygate.backend.trt.runner import TrtRunner

    if precision in spec.engines:
        loader, what = EngineFromPath(spec.engines[precision], spec), str(spec.engines[precision])
    else:
        loader = EngineFromOnnx(onnx_artifact(spec, precision, ctx.fp16_keep_fp32), spec, precision,
                                cache_root() / "trt")
        what = f"TensorRT engine for {spec.name} {precision}"
    return _runner(TrtRunner(loader, name=f"tensorrt:{spec.name}:{precision}"), what)


def _load_tensorrt_rtx(ctx, spec, precision):
    """The engine the engine gate saw built (``backend.engines``), run (compute capability 8.x/12.x only)."""
    from paritygate.backend.engines import engine_build
    from paritygate.backend.trt.loader import EngineFromPath
    from paritygate.backend.trt.runner import TrtRunner
    from paritygate.verdict import SuiteError

    built = engine_build(ctx, spec, precision)
    if not (built or {}).get("built"):  # the builder could not run here (engines.builder_fault), or is turned off
        raise SuiteError(f"no TensorRT-RTX engine of '{spec.name}' {precision} to run: "
                         f"{(built or {}).get('error') or 'the builder is not installed or turned off'}")
    plan = built["plan"]
    return _runner(TrtRunner(EngineFromPath(plan, spec), name=f"tensorrt-rtx:{spec.name}:{precision}"), plan)


# -- what each needs: its own reasons first (GPU, its libraries, its runtime's refusal), then the run's ------------
def _gpu_reason(trt=False):
    from paritygate.gpu import device

    probe = device.probe()
    if not probe.available:
        return probe.reason
    return device.trt_reason() if trt else None


def _no_refusal():
    return None


def _cuda_refusal():
    from paritygate.backend.onnxrt.loader import cuda_reason

    return _gpu_reason() or cuda_reason()


def _tensorrt_refusal():
    return _gpu_reason(trt=True)


def _rtx_refusal():
    from paritygate.backend.trt import aot

    return _gpu_reason() or aot.missing_reason() or aot.runtime_refusal()


def _nothing_more(specs):
    return None


def _fp32_conversion(specs):
    return candidate_missing(specs, fp16=False)


RUNTIMES = {r.name: r for r in (
    Runtime(CPU, "ONNX Runtime on the CPU; fp16/int8 computed as --parity-numerics says", _load_onnxruntime,
            _no_refusal, candidate_missing, follows_numerics=True, engine_gate=True, validated=True,
            files=_onnxruntime_files),
    Runtime("onnxruntime-cuda", "ONNX Runtime's CUDA provider (onnxruntime-gpu, the ort-cuda extra), TF32 off",
            _load_onnxruntime_cuda, _cuda_refusal, candidate_missing, mark="gpu",
            numerics_note="ONNX Runtime's CUDA kernels on the artifact as typed: float16 ops in FP16, FP32 ops with "
                          "TF32 off, Q/DQ as ONNX Runtime serves them (docs/gpu.md)"),
    Runtime("tensorrt", "TensorRT engines on an NVIDIA GPU (the gpu extra)", _load_tensorrt, _tensorrt_refusal,
            _nothing_more, mark="trt", own_engine=True, numerics_note="TensorRT's engine (strongly typed, TF32 off)"),
    Runtime("tensorrt-rtx", "TensorRT-RTX engines (compute capability 8.0/8.6/8.9/12.x; docs/engine.md)",
            _load_tensorrt_rtx, _rtx_refusal, _fp32_conversion, mark="gpu", engine_gate=True,
            numerics_note="TensorRT-RTX's engine, as its builder built it",
            environment={"POLYGRAPHY_USE_TENSORRT_RTX": "1"}),  # Polygraphy binds its loaders to it on import
)}


def names():
    """The runtime names, in the order --parity-runtime lists them."""
    return tuple(RUNTIMES)


def option_help():
    """--parity-runtime's help: each runtime with its one line, and the default."""
    listed = "; ".join(f"{r.name} ({r.summary})" for r in RUNTIMES.values())
    return f"candidate runtime: {listed} (default: tensorrt when importable and a GPU is present, else {CPU})"


def get(name):
    """The entry of runtime ``name``; a ValueError names the runtimes there are."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ValueError(f"runtime {name!r}: expected one of {', '.join(RUNTIMES)}") from None


def default():
    """The runtime of a run that names none: tensorrt where it can run (a GPU, TensorRT and Polygraphy), else the CPU."""
    return "tensorrt" if _tensorrt_refusal() is None else CPU


def numerics_label(runtime, mode):
    """The numerics label of ``runtime``'s fp16/int8 rows under ``--parity-numerics=mode`` (the one derivation)."""
    return get(runtime).numerics(mode)


def describe_numerics(label):
    """One line on what the numerics ``label`` computes: a --parity-numerics mode's, or a runtime's own note."""
    from paritygate.common.numerics import DESCRIPTION, describe

    entry = RUNTIMES.get(label)
    if label in DESCRIPTION or entry is None or entry.numerics_note is None:
        return describe(label)
    return f"{label}: {entry.numerics_note}"
