"""Explicit Q/DQ INT8 with onnxruntime.quantization.quantize_static, in the form TensorRT accepts.

Settings, each with its reason:

- ``QuantFormat.QDQ``, activations and weights ``QInt8``, ``ActivationSymmetric`` / ``WeightSymmetric``: TensorRT
  quantizes with signed INT8 and zero-point 0 only (onnx-tensorrt docs/operators.md: DequantizeLinear on INT8 /
  FP8 / INT4, "`x_zero_point` must be zero"; QuantizeLinear "`y_zero_point` must be 0").
- ``per_channel=True``: weights per output channel (TensorRT developer guide, "Explicit Quantization": per-channel
  scales for weights, per-tensor for activations).
- ``QuantizeBias: False``: quantize_static otherwise stores Conv/Gemm bias as an INT32 DequantizeLinear (its
  docstring, onnxruntime 1.31 quantization/quantize.py "QuantizeBias"), which onnx-tensorrt rejects (INT32 is not
  among DequantizeLinear's types; onnx-tensorrt#850, onnxruntime#17738). The bias stays float; TensorRT fuses it.
- MinMax calibration on the model's calibration rows. The ranges it finds depend on the FP32 graph, the rows and the
  op types quantized, not on the nodes a plan leaves unquantized (``create_calibrator`` is not given them): they are
  kept in ``ranges`` (quantize_static's ``calibration_cache_path``) and read back by every later build of the same
  graph, rows and ops, so a localization search's rebuilds (``judge.divergence``) calibrate once, not once a trial.

One repair before quantizing: a bias initializer shared by several Conv/Gemm nodes gets one copy per node, named
so that no existing tensor is shadowed. quantize_static duplicates shared biases itself, naming the copies
``<name><n>`` without checking the graph's other tensor names (qdq_quantizer.py ``_dup_initializer``): on
basic-pitch 0.4.0 the copy ``...conv1d_252`` is also a Conv output's name, the Conv output is then read as the
bias, and ONNX Runtime refuses the model ("Transpose ... Invalid attribute perm {0, 2, 3, 1}, input shape = {36}").
"""

from paritygate.backend.onnx.graph.names import fresh_name, tensor_names
from paritygate.common import progress
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

CONVERTER = "onnxruntime.quantization.quantize_static"
BIAS_OPS = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}  # op -> index of its bias input (ONNX operator specs)


def settings(ops, exclude=()):
    """The quantize_static keyword arguments (recorded in the artifact's report); ``exclude``: node names left
    unquantized."""
    from onnxruntime import quantization as q

    return {"quant_format": q.QuantFormat.QDQ, "activation_type": q.QuantType.QInt8,
            "weight_type": q.QuantType.QInt8, "per_channel": True, "op_types_to_quantize": list(ops),
            "calibrate_method": q.CalibrationMethod.MinMax, "nodes_to_exclude": list(exclude),
            "extra_options": {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}}


def unshare_biases(model):
    """Give every Conv/Gemm its own bias initializer; returns [(node, original, copy)]."""
    inits = {t.name: t for t in model.graph.initializer}
    taken, seen, copies = tensor_names(model), set(), []
    for node in model.graph.node:
        index = BIAS_OPS.get(node.op_type)
        if index is None or len(node.input) <= index or node.input[index] not in inits:
            continue
        bias = node.input[index]
        if bias in seen:
            copy = onnx.TensorProto()
            copy.CopyFrom(inits[bias])
            copy.name = fresh_name(f"{bias}__bias_of_{node.name or node.op_type}", taken)
            model.graph.initializer.append(copy)
            node.input[index] = copy.name
            copies.append((node.name, bias, copy.name))
        seen.add(bias)
    return copies


def quantize(source, out, feeds, ops, exclude=(), ranges=None):
    """Quantize the float32 ModelProto ``source`` into ``out`` with ``feeds`` (a list of feed dicts by the
    model's input names); returns the build report. ``ranges``: the file of the calibration's tensor ranges, read
    when it exists (the rows are then not run), else written (module doc)."""
    import tempfile
    from pathlib import Path

    from onnxruntime import quantization as q

    model = onnx.ModelProto()
    model.CopyFrom(source)
    copies = unshare_biases(model)
    kwargs = settings(ops, exclude)
    with tempfile.TemporaryDirectory(prefix="paritygate-int8-") as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        onnx.save(model, str(prepared))
        reused = ranges is not None and Path(ranges).is_file()
        with progress.step("calibration rows", total=0 if reused else len(feeds)) as shown:
            q.quantize_static(str(prepared), str(out), _Reader(feeds, shown), **kwargs,
                              calibration_cache_path=None if ranges is None else str(ranges))
    return {"converter": CONVERTER, **({"calibration_ranges": "reused" if reused else "computed"} if ranges else {}),
            "settings": {k: (v.name if hasattr(v, "name") else v) for k, v in kwargs.items()},
            "unshared_biases": [{"node": n, "bias": b, "copy": c} for n, b, c in copies],
            "calibration_rows": len(feeds)}


class _Reader:
    def __init__(self, feeds, shown=None):
        self._it, self.shown = iter(feeds), shown  # shown: the progress step, each row counted

    def get_next(self):
        row = next(self._it, None)
        if row is not None and self.shown is not None:
            self.shown.advance()
        return row
