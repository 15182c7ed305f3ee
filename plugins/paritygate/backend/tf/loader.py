"""The reference as a SavedModel, for the tools that read SavedModels (tf2onnx).

A SavedModel reference is used as it is. A Keras file (``.keras``, or a legacy Keras 2 ``.h5`` / ``.hdf5``) is
exported once into the artifact cache as a SavedModel whose ``serving_default`` signature takes the Keras model's
input names and returns a dict by its ``output_names``, so that the converted ONNX carries the same tensor names
as the Keras reference and every comparison pairs them by name. Keras 3 models are written with
``keras.export.ExportArchive``; tf_keras (Keras 2) models with ``tf.saved_model.save`` and a traced signature
(tf_keras has no ExportArchive, and Keras 3's does not track a tf_keras model).
"""

from pathlib import Path

from paritygate.backend.cache import cached_dir, hash_path, key_of
from paritygate.backend.tf.util import is_keras, keras_name, load_keras, output_names
from paritygate.lazy import dist_version as _version
from paritygate.lazy import lazy_import

tf = lazy_import("tensorflow")

__all__ = ["EXPORT_VERSION", "export_keras", "is_keras", "keras_io", "load_keras", "saved_model_of"]

EXPORT_VERSION = "keras-export-v2"  # bump when the export changes: the cache key follows it


def saved_model_of(spec):
    """(SavedModel directory, signature) for ``spec.reference``: the reference itself, or its cached export."""
    if not is_keras(spec.reference):
        return Path(spec.reference), spec.signature
    key = key_of(keras_file=hash_path(spec.reference), keras=keras_name(spec.reference),
                 tf=_version("tensorflow-cpu") or _version("tensorflow"), export=EXPORT_VERSION)
    folder = cached_dir("saved_model", f"{spec.name}-keras-{key}", lambda tmp: export_keras(spec.reference, tmp))
    return folder, "serving_default"


def keras_io(model):
    """(input names, output names) of a loaded Keras model, as the reference runner names them."""
    inputs = [t.name.split(":")[0] for t in model.inputs]
    outputs = output_names(model)
    return inputs, outputs


def export_keras(path, out):
    """Write the Keras model at ``path`` as a SavedModel into the folder ``out`` (signature serving_default)."""
    model = load_keras(path)
    inputs, outputs = keras_io(model)
    specs = [tf.TensorSpec(t.shape, t.dtype, name=n) for n, t in zip(inputs, model.inputs)]

    def serve(*args):
        result = model(list(args) if len(args) > 1 else args[0], training=False)
        if isinstance(result, dict):
            return {k: result[k] for k in outputs}
        return dict(zip(outputs, result if isinstance(result, (list, tuple)) else [result]))

    tool = "tf.saved_model.save" if keras_name(path).startswith("tf_keras") else "keras.export.ExportArchive"
    try:
        if tool == "tf.saved_model.save":
            module = tf.Module()
            module.model = model  # tracked: its variables are saved with the signature
            module.serve = tf.function(serve, input_signature=specs, autograph=False)
            tf.saved_model.save(module, str(out), signatures={"serving_default": module.serve})
        else:
            archive = lazy_import("keras").export.ExportArchive()
            archive.track(model)
            archive.add_endpoint("serve", serve, input_signature=specs)
            archive.write_out(str(out))
    except Exception as err:  # tracing a Keras model raises many types
        from paritygate.backend.onnx.artifacts.validate import ArtifactError

        raise ArtifactError(tool, f"SavedModel export of {path} ({keras_name(path)})",
                            " ".join(str(err).strip().splitlines()[:3])[:600]) from err
