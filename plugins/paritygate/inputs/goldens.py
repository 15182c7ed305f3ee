"""Golden outputs: native TF outputs for committed input sets, with a sha256 manifest.

Layout beside the config file: ``goldens/<model>.npz`` (arrays ``input:<name>``, ``output:<name>`` and an
optional ``label``) and ``goldens/manifest.json``. Input sets for regeneration come from
``inputs/<model>.npz`` beside the config (arrays by input name, optional ``__labels__``), else are drawn from
the input spec with a fixed seed. ``inputs/<model>_heldout.npz`` (same format, with labels) is a larger
held-out set for the task metrics.
"""

import datetime
import fcntl
import hashlib
import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from paritygate.cli import commands
from paritygate.inputs.sets import InputSetError, check_arrays, check_labels, read_input_set, read_npz
from paritygate.verdict import SuiteError

MANIFEST_SCHEMA = 1


class GoldenError(SuiteError):
    """A golden file is missing, corrupt or does not match its manifest: the suite's own data is broken (status
    ``error``), never the candidate's fault, and never a quiet pass."""


def golden_dir(spec):
    return Path(spec.source).parent / "goldens"


def golden_path(spec):
    return golden_dir(spec) / f"{spec.name}.npz"


def input_set_path(spec):
    return Path(spec.source).parent / "inputs" / f"{spec.name}.npz"


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _array_sha(arr):
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes() + str((arr.dtype, arr.shape)).encode()).hexdigest()


def read_manifest(spec):
    path = golden_dir(spec) / "manifest.json"
    if not path.exists():
        return {"schema": MANIFEST_SCHEMA, "models": {}}
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GoldenError(f"{path}: corrupt golden manifest: {err}") from err
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, dict) or not all(isinstance(e, dict) for e in models.values()):
        raise GoldenError(f"{path}: corrupt golden manifest: expected a JSON object whose 'models' maps each model "
                          "name to its entry (sha256, inputs, outputs); regenerate with --update-goldens")
    return doc


class Golden:
    """A verified golden set: inputs, outputs and optional labels of one model (``source``: where they come from)."""

    def __init__(self, inputs, outputs, labels=None, source="goldens"):
        self.inputs, self.outputs, self.labels, self.source = inputs, outputs, labels, source


def load_golden(spec):
    """Load ``goldens/<model>.npz`` after checking its sha256 and arrays against the manifest."""
    path = golden_path(spec)
    entry = read_manifest(spec)["models"].get(spec.name)
    if entry is None or not path.exists():
        raise GoldenError(f"{path}: no golden for model '{spec.name}' (file or manifest entry missing); "
                          f"create it with `{commands.regenerate_goldens(spec.source, spec.name)}`")
    if not all(isinstance(entry.get(k), t) for k, t in (("sha256", str), ("inputs", dict), ("outputs", dict))):
        raise GoldenError(f"{golden_dir(spec) / 'manifest.json'}: entry of model '{spec.name}' lacks 'sha256', "
                          f"'inputs' or 'outputs'; regenerate with `{commands.regenerate_goldens(spec.source, spec.name)}`")
    actual = _sha256(path)
    if actual != entry["sha256"]:
        raise GoldenError(f"{path}: sha256 {actual[:16]}… does not match the manifest's {entry['sha256'][:16]}… "
                          f"(edited or corrupted); regenerate deliberately with "
                          f"`{commands.regenerate_goldens(spec.source, spec.name)}`")
    try:
        arrays = read_npz(path, "golden .npz")
    except InputSetError as err:
        raise GoldenError(str(err)) from err
    inputs = {k.split(":", 1)[1]: v for k, v in arrays.items() if k.startswith("input:")}
    outputs = {k.split(":", 1)[1]: v for k, v in arrays.items() if k.startswith("output:")}
    for kind, group in (("inputs", inputs), ("outputs", outputs)):
        for name, sha in entry[kind].items():
            if name not in group or _array_sha(group[name]) != sha:
                raise GoldenError(f"{path}: {kind[:-1]} '{name}' does not match its manifest hash")
    if set(inputs) != set(spec.inputs):
        raise GoldenError(f"{path}: golden inputs {sorted(inputs)} differ from the config's {sorted(spec.inputs)}")
    rows = check_arrays(spec, path, inputs, "golden inputs")
    if "label" in arrays:
        check_labels(spec, path, arrays["label"], rows, "golden")
    return Golden(inputs, outputs, arrays.get("label"))


def reference_drift(spec, weights_sha256):
    """The reference weights' current hash vs the one the goldens were made from (None when unchanged)."""
    recorded = read_manifest(spec)["models"].get(spec.name, {}).get("weights_sha256")
    return None if recorded == weights_sha256 else (recorded, weights_sha256)


def heldout_set_path(spec):
    return Path(spec.source).parent / "inputs" / f"{spec.name}_heldout.npz"


def input_set(spec, count=16, seed=0):
    """The committed input set for regeneration, else ``count`` samples drawn from the spec (fixed seed)."""
    path = input_set_path(spec)
    if path.exists():
        found = read_input_set(spec, path)
        return found.inputs, found.labels
    from paritygate.inputs.sampling import sample_inputs

    return sample_inputs(spec, count, np.random.default_rng(seed)), None


def write_golden(spec, inputs, outputs, weights_sha256, labels=None):
    """Write ``goldens/<model>.npz`` and its manifest entry (under a lock: xdist workers share the file)."""
    path = golden_path(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"input:{k}": v for k, v in inputs.items()}
    arrays.update({f"output:{k}": np.asarray(v) for k, v in outputs.items()})
    if labels is not None:
        arrays["label"] = labels
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)
    with _locked_manifest(spec) as manifest:
        manifest["models"][spec.name] = {
            "file": path.name,
            "sha256": _sha256(path),
            "inputs": {k: _array_sha(v) for k, v in inputs.items()},
            "outputs": {k: _array_sha(np.asarray(v)) for k, v in outputs.items()},
            "weights_sha256": weights_sha256,
            "tensorflow": _tf_version(),
            "command": commands.regenerate_goldens(spec.source, spec.name),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
    return path


def _tf_version():
    from paritygate.lazy import dist_version

    return dist_version("tensorflow-cpu", "tensorflow")


@contextmanager
def _locked_manifest(spec):
    path = golden_dir(spec) / "manifest.json"
    with open(golden_dir(spec) / ".manifest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = read_manifest(spec)
        yield manifest
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
