"""TracedHandler: the suite's outermost wrapper delegates everything and adds one trace per batch."""

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")

from paritygate.beam.handlers import BatchTrace, TracedHandler, element_weight, weight_batching
from tests.beam.toy_handlers import MisreportsBytes, ToyHandler

pytestmark = [pytest.mark.beam, pytest.mark.onnx]


def test_traced_handler_times_each_batch_and_appends_a_trace(toy_onnx_path):
    traced = TracedHandler(ToyHandler(toy_onnx_path, 2, 3))
    batch = [np.float32([1.0]), np.float32([2.0])]
    out = traced.run_inference(batch, traced.load_model())
    *results, trace = out
    assert [r.inference["y"].tolist() for r in results] == [[5.0], [10.0]]
    assert isinstance(trace, BatchTrace) and (trace.size, trace.returned, trace.payload) == (2, 2, 8)
    assert trace.seconds > 0 and len(trace.digests) == 2
    assert traced.batch_elements_kwargs() == {"min_batch_size": 2, "max_batch_size": 3}
    assert traced.get_metrics_namespace() == "paritygate_toy"
    assert traced.get_num_bytes(batch) == 8


def test_traced_handler_passes_wrong_byte_counts_through(toy_onnx_path):
    traced = TracedHandler(MisreportsBytes(toy_onnx_path))
    assert traced.get_num_bytes([np.zeros(3, np.float32)] * 2) == 2


def test_weight_batching_is_what_beams_model_handler_produces():
    kwargs = weight_batching(100)
    assert kwargs["max_batch_weight"] == 100
    assert kwargs["element_size_fn"](("key", np.zeros(5, np.float32))) == 20 == element_weight(np.zeros(5, np.float32))
