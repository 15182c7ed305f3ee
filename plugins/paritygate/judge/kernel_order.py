"""FP32 parity that holds across CPUs: the reference's own spread under a second valid kernel order.

An FP32 comparison of TensorFlow with ONNX Runtime on one machine compares two summation orders, each chosen per
instruction set by its library's kernels. The fixed policy (TF-TRT's atol = rtol = 1e-5) holds for some models
on some CPUs only: basic-pitch's own FP32 ONNX stays within 1.2e-6 of TensorFlow on an AVX-512 CPU but differs
by 5.5e-5 on an AVX2-only one, while TensorFlow with oneDNN off differs from TensorFlow with oneDNN on by up to
5.5e-5 on the same inputs and the same AVX-512 CPU (docs/numerics.md, "FP32 across CPUs", with the commands).
So at FP32 every elementwise comparison with the reference is judged against

    max(policy limit, K_REFERENCE x s),  s = max over a batch row's elements of |TF(oneDNN on) - TF(oneDNN off)|

on the very inputs compared (``paritygate.backend.kernel_order``; K_REFERENCE = 2 and its triangle-inequality
argument are reference_noise's). The bound is measured, not assumed: a model whose outputs do not move under
another order (spread 0) keeps the policy exactly, and it widens only by what TensorFlow itself does on that
input. FP16 and INT8 are not widened: their policy (1e-2 and above) is over 180 times the largest spread measured.

The spread is per batch row, as the property checks' reference noise is (an order change moves neighbouring
elements by different amounts; a candidate as good as the reference may move where TF happened not to).
"""

import numpy as np

from paritygate.judge.reference_noise import CONFIGURATION, K_REFERENCE, ReferenceRuns
from paritygate.verdict import SuiteError

SOURCE = ("max(policy, 2 x the reference's spread between TF_ENABLE_ONEDNN_OPTS=1 and =0 on that batch row): two "
          "valid FP32 kernel orders of TensorFlow itself (paritygate.judge.kernel_order)")


def applies(precision):
    return precision == "fp32"


def floors(ctx, spec, precision, groups):
    """([per group: {output: K x spread, broadcast to its shape}], the details for the check's result), for
    ``groups`` (``inputs.goldens.Golden``s: each group's ``inputs``); ([None, ...], None) where it does not apply.
    When the second order cannot run (e.g. a Keras file whose custom objects only this process registered), no
    floor widens the policy and the details say why."""
    if not applies(precision):
        return [None] * len(groups), None
    from paritygate.backend.base import run_batched
    from paritygate.backend.kernel_order import alternate_reference, describe_setting
    from paritygate.backend.runtimes import reference_runner

    alternate = alternate_reference(ctx, spec)
    details = {"k": K_REFERENCE, "configuration": describe_setting(alternate.setting), "source": SOURCE}
    out = []
    try:
        for g in groups:
            default = run_batched(reference_runner(ctx, spec), g.inputs, spec.max_batch)
            other = run_batched(alternate, g.inputs, spec.max_batch)
            spread = ReferenceRuns(_numpy(default), {CONFIGURATION: _numpy(other)}, None).spread(kernel_order=True)
            out.append({k: K_REFERENCE * s for k, s in spread.items()})
    except SuiteError as err:
        details["unavailable"] = str(err)
        return [None] * len(groups), details
    details["max_spread"] = {k: float(max(np.max(f[k], initial=0.0) for f in out)) / K_REFERENCE for k in out[0]}
    return out, details


def record(result, details):
    """Put ``details`` and the number of elements the floor widened into the check's result."""
    if details is None:
        return
    widened = sum(int(o.get("widened_by_reference", 0)) for o in result.outputs)
    result.details[CONFIGURATION] = {**details, "widened_elements": widened}


def _numpy(outputs):
    return {k: np.asarray(v) for k, v in outputs.items()}
