"""Goldens: committed native-TF outputs still reproduce with today's TensorFlow."""

import pytest

pytestmark = [pytest.mark.tf]


def test_goldens_reproduce(request, parity_context, parity_model, parity_result, parity_record):
    """The committed goldens (``goldens/<model>.npz``, sha256 in ``goldens/manifest.json``) still come out of today's TensorFlow within the FP32 tolerance."""
    import dataclasses

    from paritygate.backend.runtimes import goldens_reference
    from paritygate.common import commands
    from paritygate.inputs import goldens
    from paritygate.judge import kernel_order
    from paritygate.judge.parity import compare, merged, run_batched, shape_records
    from paritygate.lazy import available, missing_reason
    from paritygate.verdict import mark

    spec = parity_model
    if not available("tensorflow"):
        pytest.skip(missing_reason("tensorflow"))
    if not parity_context.update_goldens and not goldens.golden_path(spec).exists():
        pytest.skip(f"model '{spec.name}' has no goldens ({goldens.golden_path(spec)}); the candidate is "
                    "compared with the live TF reference instead (create goldens with "
                    f"`{commands.regenerate_goldens(spec.source, spec.name)}`)")
    # TensorFlow runs here, never the reference-output cache (in a process started at collection, on a warm rerun)
    runner = goldens_reference(parity_context, spec)
    if parity_context.update_goldens:
        before = _readable_golden(goldens, spec)
        groups = [(inputs, run_batched(runner, inputs, spec.max_batch), labels)
                  for inputs, labels in goldens.input_groups(spec)]  # one per shape: a profile's min, opt, max
        inputs, outputs, labels = goldens.group_arrays(groups)
        path = goldens.write_golden(spec, inputs, outputs, runner.weights_sha256(), labels)
        written = goldens.load_golden(spec)  # the file just written reads back and matches its manifest (else: error)
        parity_result.details.update(action="regenerated", golden=str(path), previous=_change(before, groups))
        parity_result.inputs = {"shapes": shape_records(written.groups)}
        # Comparing TF with the file it just wrote would prove nothing: the check's word is `regenerated`.
        mark(request.node, "regenerated")
        return
    golden = goldens.load_golden(spec)
    drift = goldens.reference_drift(spec, runner.weights_sha256())
    where = {"golden": str(goldens.golden_path(spec))}
    if drift is not None:  # the test's own result is the row; else the comparison's (below)
        parity_result.details.update(where)
    assert drift is None, (f"{spec.reference}: the reference changed since its goldens were made "
                           f"(weights sha256 {drift[0]} -> {drift[1]}); regenerate deliberately with "
                           f"`{commands.regenerate_goldens(spec.source, spec.name)}`")
    tf_vs_tf = dataclasses.replace(spec, outputs={})  # both sides by the reference's names: [models.outputs] maps the candidate's
    # goldens made on another CPU differ by its kernels' summation order: held to 2x TF's own order spread at most
    floors, order = kernel_order.floors(parity_context, spec, "fp32", golden.groups)
    results = [compare(tf_vs_tf, "fp32", g.outputs, run_batched(runner, g.inputs, spec.max_batch), compare_task=False,
                       nonfinite_reference="match", check="goldens_reproduce", floors=f)
               for g, f in zip(golden.groups, floors)]
    result = merged(results, golden.groups, results[0]) if len(results) > 1 else results[0]
    kernel_order.record(result, order)
    result.inputs = {"shapes": shape_records(golden.groups, results)}
    parity_record(result).details = {**where, **result.details, "tensorflow": parity_context.versions()["tensorflow"]}
    assert result.passed, "today's TensorFlow no longer reproduces the goldens:\n" + "\n".join(result.failures)


def _readable_golden(goldens, spec):
    try:
        return goldens.load_golden(spec)
    except goldens.GoldenError as err:
        return str(err)


def _change(before, groups):
    """What a regeneration changed, so a rewritten golden is never a silent one (per output, the largest change
    over the shapes)."""
    import numpy as np

    if isinstance(before, str):
        return {"state": f"no usable golden before: {before}"}
    pairs = list(zip(before.groups, groups))
    same_inputs = len(before.groups) == len(groups) and all(
        set(b.inputs) == set(inputs) and all(b.inputs[k].shape == v.shape and np.array_equal(b.inputs[k], v)
                                             for k, v in inputs.items()) for b, (inputs, _, _) in pairs)
    if not same_inputs:
        return {"state": "input set changed"}
    change = {}
    for b, (_, outputs, _) in pairs:
        for k, v in outputs.items():
            same = k in b.outputs and b.outputs[k].shape == v.shape and v.size
            delta = float(np.max(np.abs(b.outputs[k].astype(float) - v))) if same else "output added or reshaped"
            prev = change.get(k, 0.0)  # a reshaped output stays named; else the largest change
            change[k] = prev if isinstance(prev, str) else delta if isinstance(delta, str) else max(prev, delta)
    return {"state": "same inputs", "max_abs_change": change}
