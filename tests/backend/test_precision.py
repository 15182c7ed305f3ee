"""paritygate.backend.precision: what a candidate computes in its precision, read once per run."""

import numpy as np
import pytest

from paritygate.backend.precision import COMPUTED_DTYPES, PRECISION_COVERAGE, computed_dtype, precision_coverage
from paritygate.common.memo import ArtifactKey, PrecisionKey
from paritygate.context import RunContext
from tests.conftest import make_onnx, toy_spec


def test_a_tensorrt_candidate_computes_float16_at_fp16_only_and_each_runtime_has_its_own_entry():
    spec, ctx = toy_spec(precisions=("fp32", "fp16")), RunContext(runtime="tensorrt")
    assert computed_dtype(ctx, spec, "fp16") is np.float16 and computed_dtype(ctx, spec, "fp32") is None
    assert COMPUTED_DTYPES.peek(ctx, ArtifactKey("tensorrt", "toy", "fp16")) is np.float16
    assert COMPUTED_DTYPES.peek(ctx, ArtifactKey("onnxruntime", "toy", "fp16")) is None, "never read for ORT here"


def test_an_fp32_onnx_computes_no_float16(tmp_path):
    pytest.importorskip("onnx")
    spec = toy_spec(onnx=make_onnx(tmp_path / "toy.onnx"))
    assert computed_dtype(RunContext(), spec, "fp32") is None


def test_a_prebuilt_engine_has_no_precision_coverage_and_a_measured_one_is_read_once_per_run(tmp_path):
    spec = toy_spec(precisions=("fp32", "fp16"), engines={"fp16": tmp_path / "toy.plan"})
    assert precision_coverage(RunContext(runtime="tensorrt"), spec, "fp16") is None  # nothing read: no file here
    ctx, found = RunContext(), {"mac_share": 0.9, "minimum": 0.5}
    PRECISION_COVERAGE.put(ctx, PrecisionKey("toy", "fp16"), found)  # as the first check of the run measured it
    assert precision_coverage(ctx, spec, "fp16") is found
