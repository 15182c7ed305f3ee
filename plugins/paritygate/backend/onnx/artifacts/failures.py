"""A conversion that failed, kept in the artifact cache: a rerun says the same error at once instead of converting
again (a BERT-base-size tf2onnx conversion that fails takes about two minutes and 12 GB each time).

Only a failure that depends on nothing but the artifact's cache key is kept (``ArtifactError.lasting``): tf2onnx
exiting with an error, or its output failing the ONNX checker or strict shape inference. The key hashes the
reference's bytes, the signature, the opset and the versions of tf2onnx, TensorFlow and the Keras export, so the
same key converts to the same failure; a changed model or an upgraded tool is a new key, and converts again. What
is not kept: a converter killed by a signal (the out-of-memory killer, a timeout: the machine's state, not the
model's) and a smoke run that failed (it runs the config's inputs, which the key does not hash); within a run such
a failure is computed once all the same (``backend.engines.FAILED_CANDIDATES``).

The record is ``<cache>/onnx/failed-<key>.json``; deleting it makes the next run convert again.
"""

import json
import os
import tempfile
from pathlib import Path

from paritygate.backend.cache import cache_root
from paritygate.backend.onnx.artifacts.validate import ArtifactError

FIELDS = ("converter", "step", "message", "node")


def record_path(key):
    return cache_root() / "onnx" / f"failed-{key}.json"


def recorded(key):
    """The ``ArtifactError`` an earlier run recorded under ``key``, or None."""
    path = record_path(key)
    try:
        said = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(said, dict) or not all(isinstance(said.get(k), (str, type(None))) for k in FIELDS):
        return None  # not a record this module wrote: ignored, and overwritten by the next failure
    note = f" (recorded by an earlier run: {path}; delete it to convert again)"
    return ArtifactError(said["converter"], said["step"], f"{said['message']}{note}", said["node"], lasting=True)


def record(key, err):
    """Keep ``err`` under ``key`` when it is a lasting failure; returns ``err``."""
    if not getattr(err, "lasting", False):
        return err
    path = record_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "w") as fh:
        json.dump({k: getattr(err, k) for k in FIELDS}, fh, indent=1)
    os.replace(tmp, Path(path))
    return err
