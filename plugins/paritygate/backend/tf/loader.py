"""The reference as a SavedModel, for the tools that read SavedModels (tf2onnx).

A SavedModel reference is used as it is. A ``.keras`` file is exported once into the artifact cache as a
SavedModel (a legacy ``.h5`` file likewise, through tf_keras) whose ``serving_default`` signature takes the Keras model's input names and returns a dict by its
``output_names`` (Keras 3 ``keras.export.ExportArchive``), so that the converted ONNX carries the same tensor names
as the Keras reference and every comparison pairs them by name.
"""

from pathlib import Path

from paritygate.backend.base import RunnerError
from paritygate.cache import cached_dir, hash_path, key_of
from paritygate.lazy import dist_version as _version
from paritygate.lazy import lazy_import

tf = lazy_import("tensorflow")

EXPORT_VERSION = "keras-export-archive-v1"  # bump when the export changes: the cache key follows it


def is_keras(path):
    """A Keras 3 ``.keras`` file or a legacy Keras 2 ``.h5`` file (read with tf_keras, as the reference runner does)."""
    return Path(path).suffix in (".keras", ".h5")


def _keras_for(path):
    if Path(path).suffix == ".h5":
        from paritygate.backend.tf.runner import _legacy_keras

        return _legacy_keras(path)
    return lazy_import("keras")


def saved_model_of(spec):
    """(SavedModel directory, signature) for ``spec.reference``: the reference itself, or its cached export."""
    if not is_keras(spec.reference):
        return Path(spec.reference), spec.signature
    key = key_of(keras_file=hash_path(spec.reference), keras=_version("keras"),
                 tf=_version("tensorflow-cpu") or _version("tensorflow"), export=EXPORT_VERSION)
    folder = cached_dir("saved_model", f"{spec.name}-keras-{key}", lambda tmp: export_keras(spec.reference, tmp))
    return folder, "serving_default"


def keras_io(model):
    """(input names, output names) of a loaded Keras model, as the reference runner names them."""
    inputs = [t.name.split(":")[0] for t in model.inputs]
    outputs = list(getattr(model, "output_names", None) or [f"output_{i}" for i in range(len(model.outputs))])
    return inputs, outputs


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"  # HDF5 file format spec, "Format Signature": at byte 0 (or 512, 1024, ...)


def check_keras_file(path):
    """Refuse a file that cannot be a Keras model before Keras reads it (Keras 3 says "File not found" for a
    ``.keras`` file that exists but is no zip archive)."""
    path = Path(path)
    if not path.is_file():
        raise RunnerError(f"{path}: Keras model file not found")
    if path.suffix == ".keras":
        import zipfile

        if not zipfile.is_zipfile(path):
            raise RunnerError(f"{path}: not a Keras archive: a .keras file is a zip archive (config.json, "
                              "model.weights.h5), this one is not a zip archive")
    elif path.suffix == ".h5":
        with open(path, "rb") as f:
            head = f.read(8 * 1024)
        if not any(head[at:at + 8] == HDF5_SIGNATURE for at in (0, 512, 1024, 2048, 4096)):
            raise RunnerError(f"{path}: not a Keras .h5 file: no HDF5 signature")


def load_keras(path):
    check_keras_file(path)
    keras = _keras_for(path)
    try:
        return keras.saving.load_model(str(path), compile=False)
    except Exception as err:  # keras raises many types for a corrupt or foreign file
        raise RunnerError(f"{path}: cannot load Keras model: {err}") from err


def export_keras(path, out):
    """Write the Keras model at ``path`` as a SavedModel into the folder ``out`` (signature serving_default)."""
    keras = _keras_for(path)
    model = load_keras(path)
    inputs, outputs = keras_io(model)
    specs = [tf.TensorSpec(t.shape, t.dtype, name=n) for n, t in zip(inputs, model.inputs)]

    def serve(*args):
        result = model(list(args) if len(args) > 1 else args[0], training=False)
        if isinstance(result, dict):
            return {k: result[k] for k in outputs}
        return dict(zip(outputs, result if isinstance(result, (list, tuple)) else [result]))

    try:
        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.add_endpoint("serve", serve, input_signature=specs)
        archive.write_out(str(out), verbose=False)
    except Exception as err:  # tracing a Keras model raises many types
        from paritygate.backend.onnx.validate import ArtifactError

        raise ArtifactError("keras.export.ExportArchive", f"SavedModel export of {path}",
                            " ".join(str(err).strip().splitlines()[:3])[:600]) from err
