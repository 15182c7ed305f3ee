"""The run's context: what computing a check needs, apart from what the run records.

``RunOptions`` is the run's options as the plugin reads them from pytest's command line (config path, runtime
choice, report folder, baseline, shard, ...): it resolves the models under test, the candidate runtime and the
device class, and makes the run's ``RunContext``. ``RunContext`` holds the choices checks compute with (the
candidate runtime, the ops the fp16 artifact keeps in FP32) and one ``Store`` of what is loaded or computed once
per run: each cache is declared, with its typed key, by the module that computes it (``paritygate.common.memo``).
Backends take it, a spec and arrays; they never see the session (``paritygate.session``, which only records
results and writes the report). ``replay`` builds a RunContext without pytest.
"""

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

from paritygate.backend import registry
from paritygate.common.memo import Memo, Once, Store
from paritygate.common.numerics import DEFAULT_NUMERICS
from paritygate.judge.localization_budget import DEFAULT_SHARE, parse_localize
from paritygate.lazy import available, module_dist
from paritygate.lazy import dist_version as _version

ENVIRONMENT = Memo("environment", key=Once)  # versions and device (environment()), read once per run


@dataclass
class RunContext:
    runtime: str = registry.CPU  # the candidate runtime: a name of backend.registry.RUNTIMES
    fp16_keep_fp32: tuple = None  # ops kept in FP32 in the fp16 artifact (None: the loader's default list)
    numerics: str = DEFAULT_NUMERICS  # --parity-numerics: strict FP16 emulation on ONNX Runtime CPU, or ort
    reference_cache: bool = False  # --parity-cache: TF outputs served from paritygate.backend.reference_cache (replay: live)
    beam_runner: str = None  # --parity-beam-runner (None: the local runners)
    beam_options: tuple = ()  # --parity-beam-option pass-through
    localize: bool = True  # --parity-localize: explain and repair failing fp16/int8 checks (judge.divergence)
    engine_build: bool = True  # --parity-engine-build: TensorRT-RTX's builder in the loop (backend.engines)
    localize_budget: float = DEFAULT_SHARE  # --parity-localize=SHARE: its share of the run (judge.localization_budget)
    started: float = field(default_factory=time.monotonic)  # when the run began: localization's budget counts from it
    reproducer_dir: object = None  # where failing inputs are saved (--parity-report DIR/reproducers, else the cache's)
    device_class: str = "cpu"  # latency budget class (--parity-device-class, or derived from the GPU)
    serial: bool = True  # False on an xdist worker: latency is never measured beside other work
    spin: bool = None  # ONNX Runtime's candidate threads spin-wait (backend.onnxrt.runner); the plugin sets it
    update_goldens: bool = False  # --parity-update-goldens: the goldens are being rewritten, not read
    store: Store = field(default_factory=Store)  # what is computed once per run: each module's Memo (common.memo)
    ahead: object = None  # the thread building fp16/int8 beside the checks (backend.ahead, build_ahead), or None

    @property
    def runtime_entry(self):
        """The candidate runtime's entry (``backend.registry``): how its candidate loads, what it needs, its flags."""
        return registry.get(self.runtime)

    @property
    def numerics_label(self):
        """What this run's fp16/int8 rows are computed with: the --parity-numerics mode, or the runtime's own."""
        return self.runtime_entry.numerics(self.numerics)

    def close(self):
        """End the TensorFlow child processes this context started (``backend.tf.process``: the goldens check's
        reference, the second kernel order's): each memo that holds one closes it (``Store.close``); and the
        builds ahead, once the one under way is done (it writes the run's cache)."""
        if self.ahead is not None:
            self.ahead.stop()
        self.store.close()

    def build_ahead(self, cases):
        """Build ``cases`` ([(spec, precision)] in the run's order, not fp32; ``session.built_ahead``: a serial run's)
        while the checks before them run (``backend.ahead``), on a runtime that runs here."""
        if cases and not self.runtime_entry.refused():
            from paritygate.backend import ahead

            self.ahead = ahead.start(self, cases)

    def release(self, model, precision=None):
        """The run's last check of ``model`` (at ``precision``) is done: close what it held (``Store.release``) and
        give the freed memory back to the system (``common.memory.trim``)."""
        import gc

        from paritygate.common.memory import trim

        released = self.store.release(model, precision)
        if released:  # a session's Python wrappers may sit in reference cycles: collected before the pages go back
            gc.collect()
            trim()
        return released

    def start_goldens(self, checks, alone):
        """Before the checks: start the TensorFlow reference of each goldens check in ``checks`` (key -> its
        model's spec) in a process of its own (``backend.tf.process.start_goldens_reference``) when the run is
        ``alone`` with its TensorFlow (serial, no Beam check) and neither rewrites goldens nor measures latency;
        returns the keys whose reference started (their checks run last)."""
        if self.update_goldens or self.spin or not alone:
            return []
        from paritygate.backend.tf.process import start_goldens_reference

        return [key for key, spec in checks.items() if start_goldens_reference(self, spec)]

    def versions(self):
        """Versions and device (``environment()``), read once per run."""
        return ENVIRONMENT.get(self, Once(), environment)

    def save_reproducer(self, spec, precision, check, inputs, failures, outside_range=()):
        """Save ``inputs`` as a reproducer of ``check`` (paritygate.inputs.reproducer); returns its paths and the
        replay command, for the result's ``reproducer``. ``outside_range``: inputs recorded outside their declared
        range (shadow traffic), which replay then judges as recorded."""
        from paritygate.backend.cache import cache_root
        from paritygate.inputs.reproducer import save_reproducer

        folder = self.reproducer_dir or cache_root() / "reproducers"
        return save_reproducer(folder, spec, precision, check, self.runtime, inputs, failures, self.fp16_keep_fp32,
                               numerics=self.numerics, outside_range=outside_range)


def environment():
    """Versions and device, read from package metadata: nothing heavy is imported."""
    from paritygate.backend.trt import aot
    from paritygate.gpu import device as _gpu

    probe = _gpu.probe()
    ort = module_dist("onnxruntime", ("onnxruntime-gpu", "onnxruntime"))
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        "onnxruntime": ort[1] if ort else None,
        "onnxruntime-package": ort[0] if ort else None,  # onnxruntime (CPU) or onnxruntime-gpu (the CUDA provider)
        "onnx": _version("onnx"),
        "tf2onnx": _version("tf2onnx"),
        "tensorrt": _version("tensorrt") or _version("tensorrt-cu12") or _version("tensorrt-cu13"),
        "apache-beam": _version("apache-beam"),
        "tensorrt-rtx": aot.version(),
        "cpu_isa": cpu_isa(),
        "gpu": probe.describe() if probe.available else None,
        "gpu_unavailable_reason": probe.reason,
    }


# The instruction-set extensions that choose ONNX Runtime's and TensorFlow's CPU kernels (integer ones included).
ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16",
             "amx_int8", "amx_bf16", "asimd", "asimddp", "i8mm")


def cpu_isa():
    """This CPU's ``ISA_FLAGS``, as /proc/cpuinfo names them: what a verdict must not depend on."""
    from paritygate.backend.cache import cpu_flags

    flags = set(cpu_flags())
    return [f for f in ISA_FLAGS if f in flags]


class RunOptions:
    """The run's options (``--parity-*``; the plugin builds one from pytest's config, a script from keywords)."""

    def __init__(self, config_path=None, runtime=None, report_dir=None, require_gpu=False, update_goldens=False,
                 device_class=None, beam_runner=None, beam_options=(), fp16_keep_fp32=None, is_xdist_worker=False,
                 localize=True, baseline=None, baseline_fail=(), numerics=DEFAULT_NUMERICS, reference_cache=True,
                 shard=None, max_infer_s=None, allow_unsafe_deserialization=False, engine_build=True):
        from paritygate.backend.deadline import configure, infer_limit_s
        from paritygate.models.config import BUNDLED_CONFIG

        if max_infer_s is not None:  # --parity-max-infer-s: this process, its xdist workers and children
            configure(max_infer_s)
        infer_limit_s()  # a PARITYGATE_MAX_INFER_S that is no number: a ValueError now, not at the first inference
        if allow_unsafe_deserialization:  # --parity-allow-unsafe-deserialization: Keras Lambda layers load
            from paritygate.backend.tf.util import allow_unsafe_deserialization as allow

            allow()

        self.config_path = Path(config_path).absolute() if config_path else BUNDLED_CONFIG  # as given: a link is
        # named as the user wrote it (a loop cannot be resolved at all); load_config resolves what it reads
        self.is_bundled = config_path is None
        self.requested_runtime = runtime  # --parity-runtime (None: derived from the machine, ``runtime``)
        if runtime is not None:
            registry.get(runtime).prepare()  # e.g. Polygraphy binds its loaders to TensorRT-RTX when imported
        self.report_dir = Path(report_dir).resolve() if report_dir else None
        self.require_gpu = require_gpu
        self.update_goldens = update_goldens
        self.device_class_option = device_class
        self.beam_runner = beam_runner
        self.beam_options = list(beam_options)
        self.fp16_keep_fp32 = tuple(op.strip() for op in fp16_keep_fp32.split(",") if op.strip()) \
            if fp16_keep_fp32 is not None else None
        self.is_xdist_worker = is_xdist_worker
        self.engine_build = engine_build not in (False, "off")  # --parity-engine-build on|off: TensorRT-RTX's builder
        # --parity-localize: explain and repair failing fp16/int8 checks (on, off, or the share of the run it may take)
        self.localize, self.localize_budget = parse_localize(localize)
        self.reference_cache = reference_cache  # --parity-cache: TF outputs served from backend.reference_cache
        self.shard = parse_shard(shard)  # --parity-shard=K/N: (K, N), this run judges every N-th model from the K-th
        self.numerics = numerics  # --parity-numerics: strict FP16 emulation (default) or ONNX Runtime's own
        self.baseline_path = Path(baseline).resolve() if baseline else None  # --parity-baseline
        self.baseline_fail = list(baseline_fail)  # --parity-baseline-fail expressions
        self._models = None
        self._context = None

    @property
    def models(self):
        """The ModelSpecs under test; raises ConfigError with a one-line message."""
        if self._models is None:
            from paritygate.models.config import load_config

            check_files = True
            if self.is_bundled:
                # The zoo's SavedModels are rebuilt from committed weights, which needs TensorFlow; without it
                # the models are still listed (collection works) and their TF-needing tests skip.
                check_files = available("tensorflow")
                if check_files:
                    from paritygate.models.bundled import zoo_module

                    zoo_module("build").ensure_built()
            models = load_config(self.config_path, check_files=check_files)
            if self.shard:
                k, n = self.shard
                if n > len(models):
                    from paritygate.models.config import ConfigError

                    raise ConfigError(f"--parity-shard={k}/{n}: {self.config_path} holds {len(models)} model(s), so "
                                      f"shard {k} of {n} would judge none; expected at most {len(models)} shards")
                models = [m for i, m in enumerate(models) if i % n == k - 1]
            self._models = models
        return self._models

    @property
    def runtime(self):
        return self.requested_runtime or registry.default()

    runtime_entry = RunContext.runtime_entry  # the candidate runtime's entry (``backend.registry``)
    numerics_label = RunContext.numerics_label  # what the run's fp16/int8 rows are computed with

    @property
    def device_class(self):
        from paritygate.gpu import device as _gpu

        if self.device_class_option:
            return self.device_class_option
        probe = _gpu.probe()
        return probe.device_class() if probe.available else "cpu"

    def gpu_skip_reason(self, needs_trt=False):
        from paritygate.gpu import device as _gpu

        probe = _gpu.probe()
        if not probe.available:
            return probe.reason
        return _gpu.trt_reason() if needs_trt else None

    def runtime_skip_reason(self):
        """Why the selected candidate runtime cannot run here (None when it can): its entry's ``needs``."""
        return self.runtime_entry.needs(self.models)

    def runtime_refusal(self):
        """Why the selected runtime itself cannot run on this machine (GPU, its libraries, its runtime's word), the
        reason --require-gpu fails on; None when only the run's other needs (TensorFlow, ...) are missing."""
        return self.runtime_entry.refused()

    @property
    def context(self):
        """The run's ``RunContext`` (made on first use): the candidate runtime and the options checks compute with,
        and the store of what the run computes once (``common.memo``)."""
        if self._context is None:
            self._context = RunContext(runtime=self.runtime, fp16_keep_fp32=self.fp16_keep_fp32, numerics=self.numerics,
                                       reference_cache=self.reference_cache, localize=self.localize,
                                       engine_build=self.engine_build,
                                       localize_budget=self.localize_budget,
                                       beam_runner=self.beam_runner, beam_options=tuple(self.beam_options),
                                       reproducer_dir=self.report_dir / "reproducers" if self.report_dir else None,
                                       device_class=self.device_class, serial=not self.is_xdist_worker,
                                       update_goldens=self.update_goldens)
        return self._context

    def close(self):
        """End the processes the run's context started (``backend.tf.process``); makes no context."""
        if self._context is not None:
            self._context.close()


def parse_shard(text):
    """``K/N`` -> (K, N) with 1 <= K <= N; None for None. A ValueError names what was expected."""
    if text is None:
        return None
    k, _, n = str(text).partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"--parity-shard={text}: expected K/N with 1 <= K <= N, e.g. 2/4 (the 2nd of 4 shards)")
    return int(k), int(n)
