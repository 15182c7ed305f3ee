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


@pytest.mark.parametrize("metadata, pattern", [
    ({"image": GOOD["image"]}, (r"model inputs are \['image'\], but parity.toml: model 'toy': key 'inputs' "
                                r"declares \['ids', 'image'\]")),
    ({**GOOD, "extra": (F32, (-1,))}, r"model inputs are \['extra', 'ids', 'image'\]"),
    ({"image": GOOD["image"], "input_ids": GOOD["ids"]}, r"model inputs are \['image', 'input_ids'\]"),
    ({**GOOD, "image": (F32, (-1, 8, 8))}, (r"input 'image' has rank 3 \[-1, 8, 8\], config declares rank 4 "
                                            r"\[-1, 8, 8, 3\]")),
    ({**GOOD, "ids": (np.dtype(np.int64), (-1, 16))}, r"input 'ids' has dtype int64, config declares int32"),
    ({**GOOD, "image": (np.dtype(np.float16), (-1, 8, 8, 3))}, r"input 'image' has dtype float16"),
    ({**GOOD, "image": (F32, (-1, 8, 8, 1))}, r"input 'image' dimension 3 is 1, config declares 3"),
    ({**GOOD, "ids": (I32, (-1, 32))}, r"input 'ids' dimension 1 is 32, config declares 16"),
], ids=["missing", "extra", "renamed", "rank", "dtype", "float16", "channels", "sequence"])
def test_mismatches_name_the_model_and_the_input(metadata, pattern):
    with pytest.raises(RunnerError, match=r"^model.onnx: " + pattern):
        check_input_spec(SPEC, metadata, "model.onnx")
