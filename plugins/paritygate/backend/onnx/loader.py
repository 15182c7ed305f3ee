"""ONNX artifacts per precision, shared by every runtime, each cached by content hash.

fp32: the configured ONNX, or the reference converted with tf2onnx.
fp16: fp32 converted with onnxconverter-common, I/O kept float32, a stated op list kept in FP32.
int8: explicit Q/DQ ONNX from onnxruntime.quantization.quantize_static, calibrated on the model's inputs.
"""

import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np

from paritygate.backend.base import RunnerError
from paritygate.cache import cached_file, hash_path, key_of
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

OPSET = 17  # tf2onnx 1.17's default target; TensorRT 10's ONNX parser supports opsets 9..20 (TensorRT support matrix)

# Ops whose FP16 execution overflows or loses too much: LayerNorm and softmax reductions overflow in FP16
# (NVIDIA/TensorRT#2564, #3101, #4355); Exp/Pow/Sqrt/Reduce* are the pieces tf2onnx decomposes them into.
FP16_KEEP_FP32 = ("LayerNormalization", "Softmax", "Exp", "Pow", "Sqrt", "ReduceMean", "ReduceSum", "Erf")

# Static Q/DQ quantization that TensorRT accepts: symmetric signed INT8 for activations and weights
# (TensorRT explicit quantization requires zero-point 0: TensorRT developer guide, "Explicit Quantization").
INT8_OPS = ("Conv", "MatMul", "Gemm")


def _version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def load_checked(path):
    """onnx.load + checker, with errors naming the file."""
    path = Path(path)
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except FileNotFoundError as err:
        raise RunnerError(f"{path}: ONNX file not found") from err
    except Exception as err:
        raise RunnerError(f"{path}: not a valid ONNX model: {str(err).splitlines()[0][:300]}") from err
    return model


def fp32_onnx(spec):
    """The fp32 candidate: ``spec.onnx`` when given, else the reference converted with tf2onnx (cached)."""
    if spec.onnx is not None:
        load_checked(spec.onnx)
        return Path(spec.onnx)
    key = key_of(reference=hash_path(spec.reference), signature=spec.signature, opset=OPSET,
                 tf2onnx=_version("tf2onnx"), tf=_version("tensorflow-cpu") or _version("tensorflow"))
    return cached_file("onnx", f"{spec.name}-fp32-{key}", ".onnx", lambda tmp: _convert(spec, tmp))


def _convert(spec, out):
    source = Path(spec.reference)
    if source.suffix == ".keras":
        raise RunnerError(f"{spec.where('reference')}: {source} is a .keras file; tf2onnx converts SavedModels: "
                          "give `onnx = ...` for this model or point `reference` at a SavedModel directory")
    cmd = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(source), "--signature_def",
           spec.signature, "--opset", str(OPSET), "--output", str(out)]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=_quiet_env())
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RunnerError(f"{source}: tf2onnx conversion failed ({' '.join(cmd)}):\n{tail}")


def _quiet_env():
    import os

    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def fp16_onnx(spec, keep_fp32=FP16_KEEP_FP32):
    src = fp32_onnx(spec)
    plan = precision_list(spec, "fp16_keep_fp32")  # [models.precision]: node names or op types kept in FP32
    key = key_of(src=hash_path(src), keep=sorted(keep_fp32), occ=_version("onnxconverter-common"),
                 onnx=_version("onnx"), io="float32-outputs-restored", **({"plan": sorted(plan)} if plan else {}))

    def build(out):
        from onnxconverter_common import float16

        source = load_checked(src)
        for i, node in enumerate(source.graph.node):  # the converter names its Casts after nodes: "" collides
            node.name = node.name or f"{node.op_type}__{i}"
        check_precision_list(spec, "fp16_keep_fp32", plan, source)
        floats = {o.name for o in source.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
        with warnings.catch_warnings():  # weights beyond float16 are clamped by design; parity measures the effect
            warnings.filterwarnings("ignore", r"the float32 number .* will be truncated to", UserWarning)
            model = float16.convert_float_to_float16(
                source, keep_io_types=True, op_block_list=list(keep_fp32) + list(float16.DEFAULT_OP_BLOCK_LIST) +
                list(plan), node_block_list=list(plan))
        onnx.save(_restore_float32_outputs(model, floats), str(out))

    return cached_file("onnx", f"{spec.name}-fp16-{key}", ".onnx", build)


def _restore_float32_outputs(model, names):
    """keep_io_types leaves a graph output float16 when a kept-FP32 op (e.g. the final Softmax) produces it:
    cast those outputs back to float32, so that every artifact's I/O stay float32."""
    for out in model.graph.output:
        if out.name in names and out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16:
            half = f"{out.name}_fp16"
            for node in model.graph.node:
                node.input[:] = [half if i == out.name else i for i in node.input]
                node.output[:] = [half if o == out.name else o for o in node.output]
            model.graph.node.append(onnx.helper.make_node("Cast", [half], [out.name], to=onnx.TensorProto.FLOAT))
            out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return model


def load_calibration(spec):
    if spec.calibration is None:
        raise RunnerError(f"{spec.where('calibration')}: int8 needs calibration data, but none is configured")
    try:
        with np.load(spec.calibration, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as err:
        raise RunnerError(f"{spec.calibration}: cannot read calibration .npz: {err}") from err
    missing = sorted(set(spec.inputs) - set(arrays))
    if missing:
        raise RunnerError(f"{spec.calibration}: calibration data lacks input(s) {missing}; "
                          f"expected arrays named {sorted(spec.inputs)}, found {sorted(arrays)}")
    for name, tensor in spec.inputs.items():
        arr = arrays[name]
        if arr.ndim != len(tensor.shape) or arr.shape[1:] != tuple(tensor.shape[1:]) or arr.dtype != tensor.dtype:
            raise RunnerError(f"{spec.calibration}: array '{name}' is {arr.dtype}{list(arr.shape)}, expected "
                              f"{tensor.dtype}{[-1, *tensor.shape[1:]]}")
    return {k: arrays[k] for k in spec.inputs}


def int8_onnx(spec, ops=INT8_OPS):
    calib = load_calibration(spec)
    src = fp32_onnx(spec)
    plan = precision_list(spec, "int8_exclude")  # [models.precision]: node names or op types left unquantized
    key = key_of(src=hash_path(src), calib=hash_path(spec.calibration), ops=sorted(ops),
                 ort=_version("onnxruntime"), onnx=_version("onnx"), **({"plan": sorted(plan)} if plan else {}))

    def build(out):
        from onnxruntime import quantization as q

        from paritygate.iomap import input_map

        names = input_map(spec, [i.name for i in load_checked(src).graph.input])  # reference -> ONNX input names
        check_precision_list(spec, "int8_exclude", plan, load_checked(src))
        n = len(next(iter(calib.values())))
        reader = _Reader([{names[k]: v[i:i + 1] for k, v in calib.items()} for i in range(n)])
        q.quantize_static(str(src), str(out), reader, quant_format=q.QuantFormat.QDQ,
                          activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8,
                          per_channel=True, op_types_to_quantize=[op for op in ops if op not in plan],
                          nodes_to_exclude=list(plan),
                          calibrate_method=q.CalibrationMethod.MinMax,
                          extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})

    return cached_file("onnx", f"{spec.name}-int8-{key}", ".onnx", build)


def precision_list(spec, key):
    """A ``[models.precision]`` list of the model (node names or op types), as a tuple."""
    return tuple((getattr(spec, "precision", None) or {}).get(key, ()))


def check_precision_list(spec, key, entries, model):
    """Every entry must name a node or an op type of the FP32 graph: a typo must not silently keep nothing."""
    names = {n.name for n in model.graph.node} | {n.op_type for n in model.graph.node}
    unknown = [e for e in entries if e not in names]
    if unknown:
        raise RunnerError(f"{spec.where('precision.' + key)}: {unknown} name no node and no op type of the FP32 "
                          f"graph ({len(model.graph.node)} nodes, op types {sorted({n.op_type for n in model.graph.node})})")


class _Reader:
    def __init__(self, feeds):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def onnx_artifact(spec, precision, fp16_keep_fp32=None):
    """Path of the ONNX artifact for ``precision`` (built on first use, then served from the cache)."""
    if precision == "fp16":
        return fp16_onnx(spec, FP16_KEEP_FP32 if fp16_keep_fp32 is None else fp16_keep_fp32)
    return {"fp32": fp32_onnx, "int8": int8_onnx}[precision](spec)
