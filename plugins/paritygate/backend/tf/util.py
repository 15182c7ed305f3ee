"""What kind of TensorFlow reference a path is, and which Keras reads it.

A ``.keras`` file is Keras 3's. A ``.h5`` / ``.hdf5`` file is a legacy Keras 2 file: tf_keras (Keras 2) reads it
when installed; otherwise Keras 3, which reads most Keras 2 HDF5 files (fer's CNN, measured: outputs within
1e-6 of tf_keras's), but not every layer config (nakdimon's LSTM: ``time_major``). Anything else is a SavedModel.

A Keras file can hold Python code that loading runs: a ``Lambda`` layer keeps its function as marshalled bytecode
(or a function name to look up). tf_keras ignores ``safe_mode`` for ``.h5``, so ``load_keras`` reads the file's
model config itself (h5py for ``.h5``, ``config.json`` for ``.keras``) and refuses such layers before any Keras reads
the file, unless the run names the risk: ``--parity-allow-unsafe-deserialization`` (``paritygate init
--allow-unsafe-deserialization``), which sets ``PARITYGATE_ALLOW_UNSAFE_DESERIALIZATION=1`` for the run's processes.
"""

import json
import os
from pathlib import Path

from paritygate.backend.base import RunnerError
from paritygate.common.escape import one_line
from paritygate.lazy import available, dist_version, lazy_import

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
LEGACY_SUFFIXES = (".h5", ".hdf5")
REFERENCE_KINDS = "a SavedModel folder, a .keras file or a legacy Keras 2 .h5/.hdf5 file"


def is_keras(path):
    """A Keras file (Keras 3 ``.keras`` or legacy Keras 2 ``.h5`` / ``.hdf5``), not a SavedModel folder."""
    return Path(path).suffix.lower() in KERAS_SUFFIXES


def is_legacy_keras(path):
    return Path(path).suffix.lower() in LEGACY_SUFFIXES


def keras_for(path):
    """The Keras module that reads ``path``: tf_keras for a legacy file when installed, else Keras 3."""
    if is_legacy_keras(path) and available("tf_keras"):
        return lazy_import("tf_keras")
    return lazy_import("keras")


def keras_name(path):
    """'tf_keras 2.21.0' / 'keras 3.15.1': the loader of ``path`` with its version (cache keys, messages)."""
    module = "tf_keras" if is_legacy_keras(path) and available("tf_keras") else "keras"
    return f"{module} {dist_version(module.replace('_', '-'))}"


def tf_keras_hint():
    """The exact install line for tf_keras, matching the installed TensorFlow."""
    version = dist_version("tensorflow-cpu", "tensorflow") or ""
    pin = ".".join(version.split(".")[:2])
    return (f"pip install --no-deps 'tf-keras=={pin}.*'" if pin else "pip install --no-deps tf-keras") + \
        " (--no-deps: tf-keras declares `tensorflow`, which would install beside tensorflow-cpu)"


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"  # HDF5 file format spec, "Format Signature": at byte 0 (or 512, 1024, ...)


def check_keras_file(path):
    """Refuse a file that cannot be a Keras model before Keras reads it (Keras 3 says "File not found" for a
    ``.keras`` file that exists but is no zip archive)."""
    path = Path(path)
    if not path.is_file():
        raise RunnerError(f"{path}: Keras model file not found")
    if path.suffix.lower() == ".keras":
        import zipfile

        if not zipfile.is_zipfile(path):
            raise RunnerError(f"{path}: not a Keras archive: a .keras file is a zip archive (config.json, "
                              "model.weights.h5), this one is not a zip archive")
    elif is_legacy_keras(path):
        with open(path, "rb") as f:
            head = f.read(8 * 1024)
        if not any(head[at:at + 8] == HDF5_SIGNATURE for at in (0, 512, 1024, 2048, 4096)):
            raise RunnerError(f"{path}: not a Keras {path.suffix} file: no HDF5 signature")


UNSAFE_ENV = "PARITYGATE_ALLOW_UNSAFE_DESERIALIZATION"
UNSAFE_FLAGS = "--parity-allow-unsafe-deserialization (paritygate init: --allow-unsafe-deserialization)"
UNSAFE_LAYERS = ("Lambda",)  # Keras layers whose config holds Python code that deserializing them runs


def allow_unsafe_deserialization():
    """Let Keras files with code in them load, in this process and those it starts (the flags' effect)."""
    os.environ[UNSAFE_ENV] = "1"


def unsafe_allowed():
    return os.environ.get(UNSAFE_ENV) == "1"


def keras_config(path):
    """The model config of the Keras file ``path`` as a JSON value, read without Keras, where Keras reads it: the
    ``model_config`` attribute of an .h5/.hdf5 file (h5py), ``config.json`` of a .keras archive. None when there
    is none to read: then no Keras can build a model from the file either, and its loader says why."""
    path = Path(path)
    try:
        if is_legacy_keras(path):
            import h5py

            with h5py.File(path, "r") as f:
                raw = f.attrs.get("model_config")
        else:
            import zipfile

            with zipfile.ZipFile(path) as archive:
                raw = archive.read("config.json") if "config.json" in archive.namelist() else None
        return None if raw is None else json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    except (OSError, ValueError, KeyError, RecursionError):
        return None


def unsafe_layers(config):
    """'name (Class)' of every layer in a Keras model config (nested models and wrappers included) that holds
    code: a class of ``UNSAFE_LAYERS``, or any config with a serialized function (``function_type``)."""
    found, stack = [], [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            inner = node.get("config") if isinstance(node.get("config"), dict) else {}
            if node.get("class_name") in UNSAFE_LAYERS or "function_type" in inner:
                found.append(f"{inner.get('name', node.get('name', '?'))!r} ({node.get('class_name', '?')})")
            stack += list(node.values())
        elif isinstance(node, list):
            stack += node
    return sorted(set(found))


def check_safe(path):
    """Refuse a Keras file holding layers with code (``unsafe_layers``) unless the run allows it."""
    if unsafe_allowed():
        return
    layers = unsafe_layers(keras_config(path) or {})
    if layers:
        raise RunnerError(f"{path}: holds {len(layers)} layer(s) with Python code that loading the file would run: "
                          f"{', '.join(layers[:5])}; refused (not loaded). Only for a file you trust, pass {UNSAFE_FLAGS}")


def load_keras(path):
    """The Keras model at ``path`` (compile=False), once ``check_safe`` passed; a legacy file Keras 3 cannot read
    names tf_keras's install."""
    check_keras_file(path)
    check_safe(path)
    keras = keras_for(path)
    unsafe = {"safe_mode": False} if unsafe_allowed() and not is_legacy_keras(path) else {}
    try:
        return keras.saving.load_model(str(path), compile=False, **unsafe)
    except Exception as err:  # keras raises many types for a corrupt or foreign file
        first = one_line(" ".join(str(err).strip().splitlines()[:2]))[:400]  # no ANSI colour codes
        if is_legacy_keras(path) and not available("tf_keras"):
            raise RunnerError(f"{path}: Keras 3 cannot read this legacy Keras 2 file ({first}); install tf_keras, "
                              f"the Keras 2 loader: {tf_keras_hint()}") from err
        raise RunnerError(f"{path}: cannot load Keras model with {keras_name(path)}: {first}") from err


def output_names(model):
    """A Keras model's output names: ``output_names`` where it has them (tf_keras, Keras 3 functional), else the
    layers that produce its outputs (a Keras 2 Sequential read by Keras 3), else ``output_<i>``."""
    names = list(getattr(model, "output_names", None) or [])
    if not names:
        history = [getattr(t, "_keras_history", None) for t in model.outputs]
        ops = [getattr(h, "operation", None) or getattr(h, "layer", None) for h in history]
        names = [op.name for op in ops] if all(ops) and len({op.name for op in ops}) == len(ops) else []
    return names or [f"output_{i}" for i in range(len(model.outputs))]
