"""Reference-output cache: the TF reference's outputs for an exact input batch, kept beside the artifact cache.

TensorFlow is the slow side of every check (mobilenet at batch 8: 4.1 ms against ONNX Runtime's 0.28 ms), and
CI runs the gate on every pull request against the same reference. ``CachedReference`` wraps the reference
runner: a batch it has run before is read back from ``$PARITYGATE_CACHE/reference/``, so a warm rerun of an
unchanged config runs no TensorFlow, and imports none, except for the checks that must run it live
(``goldens_reproduce``, latency: ``live()``).

An entry's key hashes everything its outputs depend on:

- the reference's files (sha256 of the SavedModel folder or the Keras file: its weights and its graph; a
  stronger fingerprint than the goldens' weights-only one, which needs TensorFlow to compute), its signature;
- the TensorFlow version (and Keras / tf_keras for a Keras file), the device (CPU model and
  ``TF_ENABLE_ONEDNN_OPTS``; the GPU when the installed TensorFlow can use one);
- the exact batch as TensorFlow receives it: each input's name, dtype, shape and bytes, so a row alone and the
  same row inside a batch are different entries (batch composition);
- the sample: a second run of the same batch (the noise floor's ``repeat``) is its own entry.

A cached value is one sample of a deterministic reference, as a golden is: the noise floor's configurations
(whole batch, repeat, batch 1) are each such a sample, computed live on the run that stored them.
Writes are atomic (a temporary file renamed into place), so xdist workers sharing the cache never read a half
written entry; an unreadable entry is recomputed. ``--parity-cache=off`` runs every batch live.
"""

import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np

from paritygate.backend.base import BaseRunner
from paritygate.backend.cache import cache_root, hash_path, key_of
from paritygate.common.digest import digest
from paritygate.lazy import dist_version

FORMAT = "reference-outputs-v1"  # bump when an entry's layout or key changes
STATS = {"computed": 0, "reused": 0, "live": 0}  # per process; merged from xdist workers by the session
_NAMES = "__names__"
_FILES = {}  # resolved path -> sha256 of the reference's files (once per process)


def fingerprint(path):
    path = Path(path).resolve()
    if path not in _FILES:
        _FILES[path] = hash_path(path)
    return _FILES[path]


def device(onednn=None):
    """Where the reference computes: the CPU model (TF's CPU kernels pick code paths per instruction set), and a
    GPU when the installed TensorFlow can use one. ``onednn``: the TF_ENABLE_ONEDNN_OPTS the reference runs under
    when not this process's (a child's: paritygate.backend.kernel_order)."""
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu += ":" + next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        cpu += ":" + platform.processor()
    cpu += f"|onednn={os.environ.get('TF_ENABLE_ONEDNN_OPTS', '') if onednn is None else onednn}"  # TF warns its oneDNN ops change round-off
    if dist_version("tensorflow") and not dist_version("tensorflow-cpu"):
        from paritygate.gpu import device as gpu

        probe = gpu.probe()
        if probe.available:
            return f"{cpu}|gpu:{probe.describe()}|{os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
    return cpu


def versions(path):
    found = {"tensorflow": dist_version("tensorflow-cpu", "tensorflow")}
    if Path(path).suffix in (".keras", ".h5", ".hdf5"):  # the Keras (or tf_keras) that reads the file computes too
        found.update(keras=dist_version("keras"), tf_keras=dist_version("tf-keras", "tf_keras"))
    return found


def batch_digest(feed):
    """The exact input batch: each input's name, dtype, shape and bytes (``common.digest``)."""
    return digest({k: np.asarray(v) for k, v in feed.items()})


class CachedReference(BaseRunner):
    """The TF reference runner behind the cache. Nothing loads until a batch misses the cache (or a caller asks
    for ``live()``); the input metadata and output names come from the entry the first live load recorded."""

    def __init__(self, runner, onednn=None):
        super().__init__(runner.name)
        self.onednn = onednn  # the reference's TF_ENABLE_ONEDNN_OPTS when it runs under another (device())
        self.runner = runner  # a TfRunner, activated on first need
        self.path, self.signature = runner.path, runner.signature
        self._base = None
        self._meta = None

    @property
    def base_key(self):
        if self._base is None:
            self._base = dict(format=FORMAT, files=fingerprint(self.path), signature=self.signature,
                              device=device(self.onednn), **versions(self.path))
        return self._base

    def describe(self):
        return self.runner.describe()

    def live(self):
        """The TF runner itself, loaded (for the checks that must run TensorFlow: goldens, latency)."""
        if not self.runner.is_active:
            self.runner.activate()
            self._store_metadata()
        return self.runner

    def weights_sha256(self):
        return self.live().weights_sha256()

    @property
    def output_names(self):
        return list(self.metadata()["outputs"])

    @output_names.setter
    def output_names(self, value):  # BaseRunner.__init__ sets None
        pass

    def activate_impl(self):
        self.metadata()  # loads TF only when no entry recorded this reference's inputs and outputs

    def input_metadata_impl(self):
        return {k: (np.dtype(d), tuple(s)) for k, (d, s) in self.metadata()["inputs"].items()}

    def infer_bounded(self, feed):  # a cache read, or the TF runner's own bounded call
        return self.infer_impl(feed)

    def infer_impl(self, feed):
        return self.infer_sample(feed, 0)

    def infer_sample(self, feed, sample):
        """The outputs for ``feed``; ``sample`` > 0 names a further run of the same batch (its own entry)."""
        path = self._entry(key_of(kind="outputs", sample=sample, batch=batch_digest(feed), **self.base_key), ".npz")
        outputs = _read_outputs(path, self.output_names)
        if outputs is not None:
            STATS["reused"] += 1
            return outputs
        outputs = self.live().infer(feed)
        STATS["computed"] += 1
        _write(path, lambda fh: np.savez(fh, **{_NAMES: np.array(list(outputs))},
                                         **{f"o{i}": np.asarray(v) for i, v in enumerate(outputs.values())}))
        return outputs

    def metadata(self):
        if self._meta is None:
            try:
                self._meta = json.loads(self._entry(key_of(kind="metadata", **self.base_key), ".json").read_text())
            except (OSError, ValueError):
                self.live()  # records it
        return self._meta

    def has_metadata(self):
        """Whether an earlier live load recorded this reference's inputs and outputs (nothing is loaded)."""
        return self._entry(key_of(kind="metadata", **self.base_key), ".json").exists()

    def _store_metadata(self):
        meta = {"reference": self.describe(),
                "inputs": {k: [np.dtype(d).str, list(s)] for k, (d, s) in self.runner.input_metadata().items()},
                "outputs": list(self.runner.output_names)}
        self._meta = meta
        path = self._entry(key_of(kind="metadata", **self.base_key), ".json")
        _write(path, lambda fh: fh.write(json.dumps(meta, indent=1).encode()))

    @staticmethod
    def _entry(key, suffix):
        return cache_root() / "reference" / key[:2] / f"{key}{suffix}"


def _read_outputs(path, names):
    """The entry's outputs by name, or None when it is absent or unreadable (then recomputed)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            stored = [str(n) for n in data[_NAMES]]
            outputs = {n: data[f"o{i}"] for i, n in enumerate(stored)}
    except (OSError, ValueError, KeyError, EOFError):
        return None
    return outputs if sorted(outputs) == sorted(names) else None


def _write(path, fill):
    """Write through a temporary file in the same folder, renamed into place (atomic under xdist)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
