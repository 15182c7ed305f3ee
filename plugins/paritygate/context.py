"""The run's context: what computing a check needs, apart from what the run records.

The session (``paritygate.session``) records results and writes the report; this holds the choices checks compute
with (the candidate runtime, the ops the fp16 artifact keeps in FP32) and a typed cache of what is loaded or
computed once per process. Backends take it, a spec and arrays; they never see the session. ``replay`` builds
one of these without pytest.
"""

import platform
from dataclasses import dataclass, field

from paritygate.lazy import dist_version as _version


@dataclass
class RunContext:
    runtime: str = "onnxruntime"  # the candidate runtime: onnxruntime | tensorrt
    fp16_keep_fp32: tuple = None  # ops kept in FP32 in the fp16 artifact (None: the loader's default list)
    numerics: str = "strict"  # --parity-numerics: strict FP16 emulation on ONNX Runtime CPU, or ort
    reference_cache: bool = False  # --parity-cache: TF outputs served from paritygate.backend.reference_cache (replay: live)
    beam_runner: str = None  # --parity-beam-runner (None: the local runners)
    beam_options: tuple = ()  # --parity-beam-option pass-through
    localize: bool = True  # --parity-localize: explain and repair failing fp16/int8 checks (judge.divergence)
    reproducer_dir: object = None  # where failing inputs are saved (--parity-report DIR/reproducers, else the cache's)
    device_class: str = "cpu"  # latency budget class (--parity-device-class, or derived from the GPU)
    serial: bool = True  # False on an xdist worker: latency is never measured beside other work
    update_goldens: bool = False  # --parity-update-goldens: the goldens are being rewritten, not read
    # -- once per process, each keyed by what it depends on --------------------------------------------------
    references: dict = field(default_factory=dict)  # model -> backend.runtimes.ReferenceRunner
    live_references: dict = field(default_factory=dict)  # model -> the reference running TF, never the cache
    candidates: dict = field(default_factory=dict)  # (runtime, model, precision) -> the fed candidate runner
    failed_candidates: dict = field(default_factory=dict)  # (runtime, model, precision) -> the build's error
    mappings: dict = field(default_factory=dict)  # model -> the resolved input/output mapping (backend.iomap)
    computed_dtypes: dict = field(default_factory=dict)  # (runtime, model, precision) -> float16 or None
    precision_coverage: dict = field(default_factory=dict)  # (model, precision) -> the artifact's coverage or None
    preflight_runners: dict = field(default_factory=dict)  # model -> a bare fp32 ONNX Runtime runner (preflight)
    reference_sets: dict = field(default_factory=dict)  # model -> inputs.goldens.Golden (goldens, or live TF)
    input_pools: dict = field(default_factory=dict)  # model -> inputs.strategies.InputPool
    noise: dict = field(default_factory=dict)  # model -> judge.reference_noise.ReferenceNoise
    reference_latency: dict = field(default_factory=dict)  # (model, batch, profile) -> the TF reference's row
    plan_books: dict = field(default_factory=dict)  # (model, precision) -> plans.PlanBook (judge.divergence)
    beam_subjects: dict = field(default_factory=dict)  # model -> beam.contract.HandlerUnderTest
    beam_expectations: list = None  # known upstream defects (beam.expectations), read once
    environment: dict = None  # versions and device (session.environment), read once

    def versions(self):
        """Versions and device (``environment()``), read once."""
        if self.environment is None:
            self.environment = environment()
        return self.environment

    def save_reproducer(self, spec, precision, check, inputs, failures):
        """Save ``inputs`` as a reproducer of ``check`` (paritygate.inputs.reproducer); returns its paths and the
        replay command, for the result's ``reproducer``."""
        from paritygate.backend.cache import cache_root
        from paritygate.inputs.reproducer import save_reproducer

        folder = self.reproducer_dir or cache_root() / "reproducers"
        return save_reproducer(folder, spec, precision, check, self.runtime, inputs, failures, self.fp16_keep_fp32)

    def output_names(self, spec):
        """Reference output name -> candidate output name for ``spec``: the config's ``[models.outputs]`` completed
        with the mapping resolved when the candidate was built (the spec itself is never written to)."""
        mapping = self.mappings.get(spec.name)
        if mapping is None:
            return dict(spec.outputs)
        return {**spec.outputs, **{r: m["candidate"] for r, m in mapping["outputs"].items() if m["rule"] != "name"}}


def environment():
    """Versions and device, read from package metadata: nothing heavy is imported."""
    from paritygate.gpu import device as _gpu

    probe = _gpu.probe()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        "onnxruntime": _version("onnxruntime") or _version("onnxruntime-gpu"),
        "onnx": _version("onnx"),
        "tf2onnx": _version("tf2onnx"),
        "tensorrt": _version("tensorrt") or _version("tensorrt-cu12") or _version("tensorrt-cu13"),
        "apache-beam": _version("apache-beam"),
        "gpu": probe.describe() if probe.available else None,
        "gpu_unavailable_reason": probe.reason,
    }
