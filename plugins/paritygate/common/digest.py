"""The suite's one content digest of arrays: artifact and reference-cache keys, reproducer names, Beam element
identities and plan evidence all use it."""

import hashlib
from collections.abc import Mapping


def digest(value):
    """The suite's one content digest of arrays (sha256, hex): each array's name, dtype, shape and bytes, names
    sorted; a mapping digests its items, anything else digests as one unnamed item (a non-array by its type and
    repr). Equal digests mean equal dtype, shape and bytes. (The goldens' manifest keeps its own committed format.)"""
    import numpy as np

    h = hashlib.sha256()
    items = sorted(value.items(), key=lambda kv: kv[0]) if isinstance(value, Mapping) else [("", value)]
    for name, item in items:
        if isinstance(item, np.ndarray):
            h.update(f"{name}|{item.dtype.str}|{item.shape}|".encode())
            h.update(np.ascontiguousarray(item).tobytes())
        else:
            h.update(f"{name}|{type(item).__name__}|{item!r}".encode())
    return h.hexdigest()
