"""The ONNX element types the rewrites name, defined once: ``onnx.TensorProto.DataType`` codes (onnx/onnx.proto:
FLOAT = 1, UINT8 = 2 ... INT64 = 7, FLOAT16 = 10, DOUBLE = 11, UINT32 = 12, UINT64 = 13, BFLOAT16 = 16). The ONNX
IR fixes them, so they are numbers here and importing this module imports no onnx;
tests/backend/onnx/graph/test_dtypes.py checks them against ``onnx.TensorProto``."""

FLOAT, FLOAT16, DOUBLE, BFLOAT16 = 1, 10, 11, 16
FLOATS = (FLOAT, FLOAT16)  # the float types a strict artifact holds (its Cast pairs go to and from these)
FLOAT_NAMES = {FLOAT: "float32", FLOAT16: "float16", BFLOAT16: "bfloat16", DOUBLE: "float64"}
INTEGERS = {2, 3, 4, 5, 6, 7, 12, 13}  # UINT8, INT8, UINT16, INT16, INT32, INT64, UINT32, UINT64
# ops whose attribute names the type of their output (onnx/defs: Cast.to; the generators' and EyeLike's dtype)
TYPE_ATTRS = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
              "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Bernoulli": "dtype"}


def type_attribute(node):
    """The attribute of ``node`` that names its output's element type (``TYPE_ATTRS``), or None."""
    return next((a for a in node.attribute if a.name == TYPE_ATTRS.get(node.op_type)), None)
