"""paritygate.runtimes.check_input_spec: the config's inputs must match the model's by name, rank, dtype and
fixed dimensions; each error names the model and the input."""

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.runtimes import check_input_spec
from tests.conftest import toy_spec

SPEC = toy_spec(inputs={"image": ((-1, 8, 8, 3), "float32", (-1, 1)), "ids": ((-1, 16), "int32", (0, 9))})
F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
GOOD = {"image": (F32, (-1, 8, 8, 3)), "ids": (I32, (-1, 16))}


def test_matching_inputs_pass():
    check_input_spec(SPEC, GOOD, "model.onnx")


def test_dynamic_model_dims_accept_any_declared_size():
    check_input_spec(SPEC, {"image": (F32, (-1, -1, -1, 3)), "ids": (I32, (-1, -1))}, "model.onnx")


def test_fixed_model_batch_is_not_checked_here():
    check_input_spec(SPEC, {"image": (F32, (1, 8, 8, 3)), "ids": (I32, (1, 16))}, "engine.plan")


W = "parity.toml: model 'toy': key "


@pytest.mark.parametrize("metadata, pattern", [
    ({"image": GOOD["image"]}, W + r"'inputs': declares inputs \['ids', 'image'\], but model.onnx has inputs \['image'\]"),
    ({**GOOD, "extra": (F32, (-1,))}, W + r"'inputs': .*model.onnx has inputs \['extra', 'ids', 'image'\]"),
    ({"image": GOOD["image"], "input_ids": GOOD["ids"]}, W + r"'inputs': .*has inputs \['image', 'input_ids'\]"),
    ({**GOOD, "image": (F32, (-1, 8, 8))}, W + (r"'inputs.image.shape': declares rank 4 \[-1, 8, 8, 3\], but "
                                               r"model.onnx has input 'image' of rank 3 \[-1, 8, 8\]")),
    ({**GOOD, "ids": (np.dtype(np.int64), (-1, 16))}, W + r"'inputs.ids.dtype': declares int32, but model.onnx has "
                                                          r"input 'ids' of dtype int64"),
    ({**GOOD, "image": (np.dtype(np.float16), (-1, 8, 8, 3))}, W + r"'inputs.image.dtype': .*dtype float16"),
    ({**GOOD, "image": (F32, (-1, 8, 8, 1))}, W + r"'inputs.image.shape': declares dimension 3 = 3, but model.onnx "
                                                  r"has input 'image' with dimension 3 = 1"),
    ({**GOOD, "ids": (I32, (-1, 32))}, W + r"'inputs.ids.shape': declares dimension 1 = 16, .* dimension 1 = 32"),
], ids=["missing", "extra", "renamed", "rank", "dtype", "float16", "channels", "sequence"])
def test_mismatches_name_the_config_key_and_the_model_file(metadata, pattern):
    with pytest.raises(RunnerError, match="^" + pattern):
        check_input_spec(SPEC, metadata, "model.onnx")
