"""The team's own reduced-precision ONNX (``onnx = { fp32 = "m.onnx", fp16 = "m.fp16.onnx", int8 = "m.int8.onnx" }``):
the file that will be built into the engine, checked before any check runs to be what its key says.

A strongly typed TensorRT engine computes each tensor in the type its ONNX gives it, so an fp16 / int8 ONNX is the
engine's precision plan. Checked here (each failure one ``RunnerError`` naming the file and the key):

- it loads (``onnx.checker``) and ONNX Runtime opens it;
- its inputs pair with the reference's (``paritygate.backend.iomap``; per-side dtypes allowed, ``candidate_dtype``) and
  every reference output has its counterpart among its outputs;
- an ``fp16`` file computes in float16: at least one node writes a float16 tensor (I/O may stay float32);
- an ``int8`` file holds explicit quantization: QuantizeLinear / DequantizeLinear, or QLinear* / *Integer ops.

When its candidate is built (``index_paths.check_own``), not here: a file that carries an index through float16
is the candidate's ``fail``, one line naming the node and the cause.
"""

from paritygate.backend.base import RunnerError
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
             "ConvInteger", "MatMulInteger", "QGemm", "QLinearAdd", "QLinearMul"}


def float16_outputs(model):
    """Node outputs (every graph) that ``model`` types float16."""
    from paritygate.backend.onnx.graph import scopes
    from paritygate.backend.onnx.strict.rewrite import float16_tensors

    produced = {o for n in scopes.nodes(model.graph) for o in n.output}
    return [t for t in float16_tensors(model) if t in produced]


def quantization_nodes(model):
    from paritygate.backend.onnx.graph import scopes

    return [n.name or n.op_type for n in scopes.nodes(model.graph) if n.op_type in QUANT_OPS]


def check_kind(spec, precision, path, model):
    """Raise unless ``model`` (loaded from ``path``) computes in the precision its key says."""
    key = spec.where(f"onnx.{precision}")
    if precision == "fp16" and not float16_outputs(model):
        raise RunnerError(f"{key}: {path} holds no node computing in float16 (every tensor it writes is "
                          f"{_types(model)}): it is not an fp16 artifact; expected an ONNX whose ops compute "
                          "float16 tensors (e.g. onnxconverter-common convert_float_to_float16, ModelOpt AutoCast)")
    if precision == "int8" and not quantization_nodes(model):
        raise RunnerError(f"{key}: {path} holds no QuantizeLinear/DequantizeLinear and no QLinear/Integer node: "
                          "it is not an int8 artifact; expected explicit quantization (e.g. onnxruntime "
                          "quantize_static with QuantFormat.QDQ, ModelOpt)")


def _types(model):
    from paritygate.backend.onnx.graph.scopes import inferred_types

    names = {onnx.TensorProto.DataType.Name(t).lower() for t in inferred_types(model).values() if t}
    return "/".join(sorted(names)) or "untyped"


def check_pairing(spec, precision, path, runner, fp32_outputs):
    """The file's inputs match the config (names through iomap, dtypes, ranks) and it has every output the fp32
    candidate answers with (``fp32_outputs``: the candidate output names the model's mapping resolved)."""
    from paritygate.backend import inputspec

    mapped = inputspec.MappedRunner(runner, inputspec.input_names(spec, runner))
    inputspec.check_input_spec(spec, mapped.input_metadata(), str(path),
                               half=inputspec.half_inputs(spec, precision, runner))
    missing = sorted(set(fp32_outputs) - set(runner.output_names))
    if missing:
        raise RunnerError(f"{spec.where(f'onnx.{precision}')}: {path} lacks output(s) {missing} that pair with "
                          f"the reference's; its outputs are {sorted(runner.output_names)}")


def check_artifact(spec, precision, fp32_outputs=()):
    """Everything above for ``spec.onnx_artifacts[precision]``; returns a short record for the validation report."""
    from paritygate.backend.onnx.artifacts.loader import load_checked
    from paritygate.backend.onnxrt.runner import OnnxrtRunner

    path = spec.onnx_artifacts[precision]
    try:
        model = load_checked(path)
    except RunnerError as err:
        raise RunnerError(f"{spec.where(f'onnx.{precision}')}: {err}") from None
    check_kind(spec, precision, path, model)
    runner = OnnxrtRunner(path, name=f"onnxruntime:{spec.name}:{precision}:own").activate()
    try:
        check_pairing(spec, precision, path, runner, fp32_outputs)
    finally:
        runner.deactivate()
    return {"precision": precision, "path": str(path), "float16_outputs": len(float16_outputs(model)),
            "quantization_nodes": len(quantization_nodes(model))}

