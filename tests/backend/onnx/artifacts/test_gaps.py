"""paritygate.backend.onnx.artifacts.gaps: a converter's own error out of its log, and the known converter gaps
(``gaps.json``) named with their fix."""

import re

from paritygate.backend.onnx.artifacts.gaps import gap_line, known_gap, table, tool_error
from paritygate.backend.onnx.artifacts.validate import ArtifactError

# tf2onnx 1.17's stderr shape: INFO lines before and after its ERROR lines, then the exception that ended it
LOG = """2026-11-28 09:01:02,000 - INFO - Using tensorflow=2.21.0, onnx=1.23.2, tf2onnx=1.17.0/ba6f5e
2026-11-28 09:01:03,000 - INFO - Using opset <onnx, 17>
2026-11-28 09:01:09,000 - ERROR - Tensorflow op [StatefulPartitionedCall/dense/Gelu/Erfc: Erfc] is not supported
2026-11-28 09:01:09,000 - ERROR - Unsupported ops: Counter({'Erfc': 2})
2026-11-28 09:01:10,000 - INFO - Optimizing ONNX model
Traceback (most recent call last):
  File "tf2onnx/convert.py", line 710, in main
tf2onnx.tf_utils.UnsupportedOpError: Erfc
2026-11-28 09:01:11,000 - INFO - Post-optimizer: done
2026-11-28 09:01:11,000 - INFO - Model inputs: ['input_ids', 'attention_mask']
"""


def test_the_tools_own_error_not_the_last_lines_of_its_log():
    said = tool_error(LOG, 1)
    assert said.startswith("2026-11-28 09:01:09,000 - ERROR - Tensorflow op [StatefulPartitionedCall/dense/Gelu/Erfc")
    assert "Unsupported ops: Counter({'Erfc': 2})" in said and "UnsupportedOpError: Erfc" in said
    assert "Post-optimizer" not in said and "Model inputs" not in said and "Using opset" not in said
    assert tool_error("line one\nline two\n", 1) == "line one | line two"  # flagged nothing: the last lines


def test_a_converter_killed_by_a_signal_says_so_first():
    assert tool_error("INFO - Using opset <onnx, 17>\n", -9).startswith("killed by SIGKILL (most often the "
                                                                       "out-of-memory killer")


def test_every_known_gap_is_complete_and_its_pattern_compiles():
    for entry in table():
        assert set(entry) == {"id", "converter", "match", "gap", "fix", "source"}, entry
        assert all(isinstance(v, str) and v for v in entry.values()), entry
        re.compile(entry["match"])


def test_keras3_exact_gelu_is_named_in_one_line_with_its_fix():
    """ONNX's checker on tf2onnx 1.17's conversion of Keras 3's exact gelu (measured: a 2-layer encoder, hidden 64)."""
    checker = ("No Op registered for Erfc with domain_version of 17 ==> Context: Bad node spec for node. Name: "
               "StatefulPartitionedCall/functional_1/dense_1/Gelu/Erfc OpType: Erfc")
    assert known_gap("tf2onnx", checker)["id"] == "erfc"
    assert known_gap("fp16 builder", checker) is None  # a gap is its converter's
    err = ArtifactError("tf2onnx", "onnx.checker.check_model(full_check=True)", checker)
    text = str(err)
    assert "\n" not in text and err.gap == "erfc"
    assert text.startswith("tf2onnx cannot convert this model: known converter gap 'erfc': Keras 3's exact gelu")
    assert "fix: use approximate GELU" in text and 'onnx = "model.onnx"' in text and text.endswith(f"{checker})")
    assert gap_line(known_gap("tf2onnx", checker)) in text
