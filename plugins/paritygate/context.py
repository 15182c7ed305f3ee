"""The run's context: what computing a check needs, apart from what the run records.

The session (``paritygate.session``) records results and writes the report; this holds the choices checks compute
with (the candidate runtime, the ops the fp16 artifact keeps in FP32) and a typed cache of what is loaded or
computed once per process. Backends take it, a spec and arrays; they never see the session. ``replay`` builds
one of these without pytest.
"""

from dataclasses import dataclass, field


@dataclass
class RunContext:
    runtime: str = "onnxruntime"  # the candidate runtime: onnxruntime | tensorrt
    fp16_keep_fp32: tuple = None  # ops kept in FP32 in the fp16 artifact (None: the loader's default list)
    numerics: str = "strict"  # --parity-numerics: strict FP16 emulation on ONNX Runtime CPU, or ort
    reference_cache: bool = False  # --parity-cache: TF outputs served from paritygate.backend.reference_cache (replay: live)
    beam_runner: str = None  # --parity-beam-runner (None: the local runners)
    beam_options: tuple = ()  # --parity-beam-option pass-through
    # -- once per process, each keyed by what it depends on --------------------------------------------------
    references: dict = field(default_factory=dict)  # model -> backend.runtimes.ReferenceRunner
    live_references: dict = field(default_factory=dict)  # model -> the reference running TF, never the cache
    candidates: dict = field(default_factory=dict)  # (runtime, model, precision) -> the fed candidate runner
    failed_candidates: dict = field(default_factory=dict)  # (runtime, model, precision) -> the build's error
    mappings: dict = field(default_factory=dict)  # model -> the resolved input/output mapping (backend.iomap)
    computed_dtypes: dict = field(default_factory=dict)  # (runtime, model, precision) -> float16 or None
    precision_coverage: dict = field(default_factory=dict)  # (model, precision) -> the artifact's coverage or None
    preflight_runners: dict = field(default_factory=dict)  # model -> a bare fp32 ONNX Runtime runner (preflight)
    reference_sets: dict = field(default_factory=dict)  # model -> judge.parity.ReferenceSet
    input_pools: dict = field(default_factory=dict)  # model -> inputs.strategies.InputPool
    noise: dict = field(default_factory=dict)  # model -> judge.reference_noise.ReferenceNoise
    reference_latency: dict = field(default_factory=dict)  # (model, batch, profile) -> the TF reference's row
    plan_books: dict = field(default_factory=dict)  # (model, precision) -> plans.PlanBook (judge.divergence)
    beam_subjects: dict = field(default_factory=dict)  # model -> beam.contract.HandlerUnderTest
    beam_expectations: list = None  # known upstream defects (beam.expectations), read once
    environment: dict = None  # versions and device (session.environment), read once

    def output_names(self, spec):
        """Reference output name -> candidate output name for ``spec``: the config's ``[models.outputs]`` completed
        with the mapping resolved when the candidate was built (the spec itself is never written to)."""
        mapping = self.mappings.get(spec.name)
        if mapping is None:
            return dict(spec.outputs)
        return {**spec.outputs, **{r: m["candidate"] for r, m in mapping["outputs"].items() if m["rule"] != "name"}}
