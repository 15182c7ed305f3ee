"""The TF reference under a second valid kernel order: the same model with oneDNN's kernels toggled.

TensorFlow's CPU kernels are oneDNN's (``TF_ENABLE_ONEDNN_OPTS``, on by default on x86-64) or Eigen's; each picks
its own blocking and vector width per instruction set, so each sums a convolution's or matmul's terms in its own
order. Both are TensorFlow's own, valid implementations of the model: how far their FP32 outputs differ on an
input is how far this model's outputs move when only the summation order changes, which is also what separates
TensorFlow from ONNX Runtime on another CPU (``paritygate.judge.reference_noise.kernel_order_spread`` uses it).

The variable is read once, when TensorFlow loads, so the second order runs in a child process
(``backend.tf.process``) started on first need, behind the reference-output cache (its key names the setting),
so a warm rerun starts no child, and a run whose checks never need it (a candidate within the policy without the
widening, judge.reference_noise) starts none either.
"""

import os
from pathlib import Path

from paritygate.backend import cache
from paritygate.backend.base import RunnerError
from paritygate.backend.runtimes import ReferenceRunner, reference_runner
from paritygate.common.memo import Memo, ModelKey
from paritygate.verdict import SuiteError

ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
# The reference under the other oneDNN setting (an AlternateReference); its child process ends with the run
KERNEL_ORDERS = Memo("kernel_orders", key=ModelKey, close=lambda alternate: alternate.process.close())


# TensorFlow's default when the variable is unset (TF 2.9 release notes, "oneDNN CPU performance optimizations ...
# enabled by default on Linux x86 packages and for CPUs with neural-network-focused hardware features such as
# AVX512_VNNI, AVX512_BF16, AMX"; tensorflow/core/util/port.cc, IsMklEnabled). Measured: on this Xeon (avx512_vnni,
# amx) TensorFlow reports oneDNN on; emulating Haswell (AVX2 only) its unset default computes Eigen's numbers.
ONEDNN_CPU_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def effective_setting(environ=None, cpu_flags=None):
    """"1" when TensorFlow in this process runs oneDNN's kernels, else "0": the variable when set (TensorFlow reads
    it as a boolean), else TensorFlow's default for this CPU (``cpu_flags``: /proc/cpuinfo's, read when None)."""
    value = (os.environ if environ is None else environ).get(ONEDNN, "").strip().lower()
    if value:
        return "0" if value in ("0", "false") else "1"
    flags = set(cache.cpu_flags() if cpu_flags is None else cpu_flags)
    return "1" if flags & set(ONEDNN_CPU_FLAGS) else "0"


def alternate_setting(environ=None, cpu_flags=None):
    """The TF_ENABLE_ONEDNN_OPTS of the second order, set explicitly: the opposite of ``effective_setting``."""
    return "0" if effective_setting(environ, cpu_flags) == "1" else "1"


def describe_setting(value):
    return f"{ONEDNN}={value} (oneDNN {'on' if value == '1' else 'off: Eigen kernels'})"


class AlternateReference(ReferenceRunner):
    """The reference (inputs cast as the config says) run with the other oneDNN setting; ``process``: its child."""

    def __init__(self, runner, casts, process, setting):
        super().__init__(runner, casts)
        self.process, self.setting = process, setting

    def infer(self, feed):
        if not self.is_active:  # loaded on first need: a warm rerun reads the cache and starts no child
            try:
                self.activate()
            except RunnerError as err:
                raise SuiteError(f"the TensorFlow reference under {ONEDNN}={self.setting} failed: {err}") from err
        return super().infer(feed)


def alternate_reference(ctx, spec):
    """The model's reference under the other oneDNN setting (once per run, ``KERNEL_ORDERS``)."""
    return KERNEL_ORDERS.get(ctx, ModelKey(spec.name), lambda: _wrap(ctx, spec, *_second_order(ctx, spec)))


def _second_order(ctx, spec):
    """(the runner checks ask: the child behind the reference-output cache, or the child itself; the child; its
    setting); nothing started. Models over one reference and signature (a config's candidates of one model) share
    one child: that of a model in ``KERNEL_ORDERS``, when there is one."""
    from paritygate.backend.tf.process import TfProcessRunner

    for runner, process, setting in [(k.runner, k.process, k.setting) for k in KERNEL_ORDERS.values(ctx)]:
        if process.path == Path(spec.reference) and process.signature == spec.signature:
            return runner, process, setting
    setting = alternate_setting()
    process = TfProcessRunner(spec.reference, spec.signature, name=f"tensorflow:{spec.name}:{ONEDNN}={setting}",
                              env={ONEDNN: setting}, lazy=True)
    process.time_as = "reference"
    if not ctx.reference_cache:
        return process, process, setting
    from paritygate.backend.reference_cache import CachedReference

    return CachedReference(process, onednn=setting), process, setting


def _wrap(ctx, spec, runner, process, setting):
    return AlternateReference(runner, reference_runner(ctx, spec).casts, process, setting)
