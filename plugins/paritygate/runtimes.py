"""Build (once per process) the reference and candidate runners for a model, checking the input spec."""

from paritygate.backend.base import RunnerError


def check_input_spec(spec, metadata, what):
    """The config's input spec must match the model's inputs by name, rank, dtype and fixed dims."""
    names, want = set(metadata), set(spec.inputs)
    if names != want:
        raise RunnerError(f"{what}: model inputs are {sorted(names)}, but {spec.where('inputs')} declares "
                          f"{sorted(want)}")
    for name, tensor in spec.inputs.items():
        dtype, shape = metadata[name]
        if len(shape) != len(tensor.shape):
            raise RunnerError(f"{what}: input '{name}' has rank {len(shape)} {list(shape)}, config declares "
                              f"rank {len(tensor.shape)} {list(tensor.shape)}")
        if dtype != tensor.dtype:
            raise RunnerError(f"{what}: input '{name}' has dtype {dtype}, config declares {tensor.dtype}")
        for axis, (have, declared) in enumerate(zip(shape[1:], tensor.shape[1:]), start=1):
            if have not in (-1, declared):
                raise RunnerError(f"{what}: input '{name}' dimension {axis} is {have}, config declares {declared}")


def reference_runner(session, spec):
    key = ("reference", spec.name)
    if key not in session.cache:
        from paritygate.backend.tf.runner import TfRunner

        runner = TfRunner(spec.reference, spec.signature, name=f"tensorflow:{spec.name}").activate()
        check_input_spec(spec, runner.input_metadata(), f"{spec.reference} (signature '{spec.signature}')")
        session.cache[key] = runner
    return session.cache[key]


def candidate_runner(session, spec, precision):
    key = ("candidate", session.runtime, spec.name, precision)
    if key not in session.cache:
        session.cache[key] = _build_candidate(session, spec, precision)
    return session.cache[key]


def _build_candidate(session, spec, precision):
    from paritygate.backend.onnx.loader import onnx_artifact

    if session.runtime == "tensorrt":
        from paritygate.backend.trt.loader import EngineFromOnnx, EngineFromPath
        from paritygate.backend.trt.runner import TrtRunner
        from paritygate.cache import cache_root

        if precision in spec.engines:
            loader = EngineFromPath(spec.engines[precision], spec)
            what = str(spec.engines[precision])
        else:
            loader = EngineFromOnnx(onnx_artifact(spec, precision, session.fp16_keep_fp32), spec, precision, cache_root() / "trt")
            what = f"TensorRT engine for {spec.name} {precision}"
        runner = TrtRunner(loader, name=f"tensorrt:{spec.name}:{precision}").activate()
    else:
        from paritygate.backend.onnxrt.runner import OnnxrtRunner

        path = onnx_artifact(spec, precision, session.fp16_keep_fp32)
        runner = OnnxrtRunner(path, name=f"onnxruntime:{spec.name}:{precision}").activate()
        what = str(path)
    check_input_spec(spec, runner.input_metadata(), what)
    return runner
