"""Goldens: committed native-TF outputs still reproduce with today's TensorFlow."""

import pytest

pytestmark = [pytest.mark.tf]


def test_goldens_reproduce(request, parity_context, parity_model, parity_result):
    from paritygate.backend.runtimes import live_reference
    from paritygate.cli import commands
    from paritygate.inputs import goldens
    from paritygate.judge.parity import compare, run_batched
    from paritygate.lazy import available, missing_reason
    from paritygate.verdict import mark

    spec = parity_model
    if not available("tensorflow"):
        pytest.skip(missing_reason("tensorflow"))
    if not parity_context.update_goldens and not goldens.golden_path(spec).exists():
        pytest.skip(f"model '{spec.name}' has no goldens ({goldens.golden_path(spec)}); the candidate is "
                    "compared with the live TF reference instead (create goldens with "
                    f"`{commands.regenerate_goldens(spec.source, spec.name)}`)")
    runner = live_reference(parity_context, spec)  # TensorFlow runs here, never the reference-output cache
    if parity_context.update_goldens:
        before = _readable_golden(goldens, spec)
        inputs, labels = goldens.input_set(spec)
        outputs = run_batched(runner, inputs, spec.max_batch)
        path = goldens.write_golden(spec, inputs, outputs, runner.weights_sha256(), labels)
        goldens.load_golden(spec)  # the file just written reads back and matches its manifest (else: error)
        parity_result.details.update(action="regenerated", golden=str(path), previous=_change(before, inputs, outputs))
        # Comparing TF with the file it just wrote would prove nothing: the check's word is `regenerated`.
        mark(request.node, "regenerated")
        return
    golden = goldens.load_golden(spec)
    drift = goldens.reference_drift(spec, runner.weights_sha256())
    parity_result.details["golden"] = str(goldens.golden_path(spec))
    assert drift is None, (f"{spec.reference}: the reference changed since its goldens were made "
                           f"(weights sha256 {drift[0]} -> {drift[1]}); regenerate deliberately with "
                           f"`{commands.regenerate_goldens(spec.source, spec.name)}`")
    today = run_batched(runner, golden.inputs, spec.max_batch)
    result = compare(spec, "fp32", golden.outputs, today, compare_task=False, nonfinite_reference="match",
                     check="goldens_reproduce")
    parity_result.take(result).details["tensorflow"] = parity_context.versions()["tensorflow"]
    assert result.passed, "today's TensorFlow no longer reproduces the goldens:\n" + "\n".join(result.failures)


def _readable_golden(goldens, spec):
    try:
        return goldens.load_golden(spec)
    except goldens.GoldenError as err:
        return str(err)


def _change(before, inputs, outputs):
    """What a regeneration changed, so a rewritten golden is never a silent one."""
    import numpy as np

    if isinstance(before, str):
        return {"state": f"no usable golden before: {before}"}
    same_inputs = set(before.inputs) == set(inputs) and all(
        before.inputs[k].shape == v.shape and np.array_equal(before.inputs[k], v) for k, v in inputs.items())
    if not same_inputs:
        return {"state": "input set changed"}
    return {"state": "same inputs", "max_abs_change": {
        k: float(np.max(np.abs(before.outputs[k].astype(float) - v))) if k in before.outputs and
        before.outputs[k].shape == v.shape and v.size else "output added or reshaped" for k, v in outputs.items()}}
