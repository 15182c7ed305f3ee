"""What a candidate computes in its precision, read from its artifact once per run: the float dtype it computes
(``computed_dtype``: the batch-invariance bound's unit roundoff) and how much of its work is done in the precision
(``precision_coverage``: ``details.precision_coverage``, which judge.coverage rules on). The runners themselves
are ``backend.runtimes``'."""

import numpy as np

from paritygate.common.memo import ArtifactKey, Memo, PrecisionKey

COMPUTED_DTYPES = Memo("computed_dtypes", key=ArtifactKey)  # numpy.float16 or None
PRECISION_COVERAGE = Memo("precision_coverage", key=PrecisionKey)  # the coverage dict, None for a prebuilt engine


def computed_dtype(ctx, spec, precision):
    """numpy.float16 when the candidate at ``precision`` computes float16 tensors (an ONNX artifact that holds
    them, or a TensorRT fp16 engine), else None: the batch-invariance bound's unit roundoff comes from it."""
    def read():
        if ctx.runtime_entry.own_engine:  # an engine of the precision
            return np.float16 if precision == "fp16" else None
        import onnx

        from paritygate.backend.onnx.artifacts.loader import onnx_artifact
        from paritygate.backend.onnx.strict.rewrite import float16_tensors

        path = onnx_artifact(spec, precision, ctx.fp16_keep_fp32)
        return np.float16 if float16_tensors(onnx.load(str(path))) else None

    return COMPUTED_DTYPES.get(ctx, ArtifactKey(ctx.runtime, spec.name, precision), read)


def precision_coverage(ctx, spec, precision):
    """``details.precision_coverage`` of the ONNX artifact at ``precision`` (paritygate.backend.onnx.lint.coverage),
    measured once per run on one sample batch within the config's ranges; None for a prebuilt engine."""
    if ctx.runtime_entry.own_engine and precision in spec.engines:
        return None
    return PRECISION_COVERAGE.get(ctx, PrecisionKey(spec.name, precision),
                                  lambda: _measure(spec, precision, ctx.fp16_keep_fp32))


def _measure(spec, precision, fp16_keep_fp32):
    import onnx

    from paritygate.backend import iomap
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.onnx.lint import coverage
    from paritygate.inputs.strategies import sample_inputs

    path = onnx_artifact(spec, precision, fp16_keep_fp32)
    graph_inputs = onnx.load(str(path)).graph.input
    names = iomap.input_map(spec, [i.name for i in graph_inputs])
    types = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in graph_inputs}
    sample = sample_inputs(spec, 1, np.random.default_rng(0))
    feed = {names.get(k, k): v.astype(types[names.get(k, k)]) for k, v in sample.items()}
    found = coverage.measure(path, precision, feed)
    minimum = spec.min_precision_coverage
    found.update(minimum=coverage.MIN_MAC_SHARE if minimum is None else minimum,
                 minimum_source="coverage.MIN_MAC_SHARE (docs/strict-numerics.md, 'Precision coverage')" if minimum is None
                 else spec.where("min_precision_coverage"),
                 artifact=str(path), judged="own" if precision in spec.onnx_artifacts else "suite-built")
    return found
