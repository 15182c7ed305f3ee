"""paritygate.common.digest: one digest of arrays, equal exactly when names, dtypes, shapes and bytes are."""

import numpy as np

from paritygate.common.digest import digest


def test_equal_arrays_digest_alike_whatever_the_mapping_order_or_memory_layout():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert digest({"x": a, "y": a + 1}) == digest({"y": a + 1, "x": np.asfortranarray(a)})


def test_name_dtype_shape_and_bytes_each_change_the_digest():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    seen = {digest({"x": a}), digest({"z": a}), digest({"x": a.astype(np.float64)}), digest({"x": a.reshape(3, 2)}),
            digest({"x": a + 1}), digest(a)}
    assert len(seen) == 6
