"""paritygate.backend.onnx.graph.dtypes: the element type codes written once as numbers are onnx.TensorProto's."""

import pytest

from paritygate.backend.onnx.graph import dtypes

onnx = pytest.importorskip("onnx")
T = onnx.TensorProto


def test_the_codes_are_onnx_tensorproto_s():
    assert (dtypes.FLOAT, dtypes.FLOAT16, dtypes.DOUBLE, dtypes.BFLOAT16) == (T.FLOAT, T.FLOAT16, T.DOUBLE, T.BFLOAT16)
    assert dtypes.FLOATS == (T.FLOAT, T.FLOAT16)
    assert dtypes.INTEGERS == {T.UINT8, T.INT8, T.UINT16, T.INT16, T.INT32, T.INT64, T.UINT32, T.UINT64}
    assert {k: onnx.helper.tensor_dtype_to_np_dtype(k).name for k in dtypes.FLOAT_NAMES} == dtypes.FLOAT_NAMES
