"""Golden outputs: native TF outputs for committed input sets, with a sha256 manifest.

Layout beside the config file: ``goldens/<model>.npz`` (arrays ``input:<name>``, ``output:<name>`` and an
optional ``label``) and ``goldens/manifest.json``. Input sets for regeneration come from
``inputs/<model>.npz`` beside the config (arrays by input name, optional ``__labels__``), else are drawn from
the input spec with a fixed seed. ``inputs/<model>_heldout.npz`` (same format, with labels) is a larger
held-out set for the task metrics.

Several shapes (a model with a dynamic input): every array carries its group's shape suffix, as input sets do
(``paritygate.inputs.sets``): ``input:<name>@<dims>``, ``output:<name>@<dims>``, ``label@<dims>``, dims the
first input's non-batch dims joined by ``x`` (``input:image@48x48x3``, ``output:face_prob@48x48x3``). Every group
holds every input and every output, with as many rows; the manifest hashes each array by its key after the
``input:``/``output:`` prefix. ``--update-goldens`` writes the input set's shapes plus seeded samples at each of
the profile's min, opt and max the set lacks (``input_groups``).
"""

import datetime
import fcntl
import hashlib
import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from paritygate.common import commands
from paritygate.files import check_version, present, read_bytes, read_json
from paritygate.inputs.sets import (
    InputSetError,
    check_arrays,
    check_labels,
    read_input_set,
    read_npz,
    shape_groups,
    shape_suffix,
)
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
    return hashlib.sha256(read_bytes(path, "golden .npz", "npz", GoldenError)).hexdigest()


def _array_sha(arr):
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes() + str((arr.dtype, arr.shape)).encode()).hexdigest()


def read_manifest(spec):
    path = golden_dir(spec) / "manifest.json"
    if not present(path):
        return {"schema": MANIFEST_SCHEMA, "models": {}}
    doc = read_json(path, "golden manifest", error=GoldenError)
    if isinstance(doc, dict):
        check_version(path, "golden manifest", doc.get("schema"), (MANIFEST_SCHEMA,), GoldenError)
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, dict) or not all(isinstance(e, dict) for e in models.values()):
        raise GoldenError(f"{path}: corrupt golden manifest: expected a JSON object whose 'models' maps each model "
                          "name to its entry (sha256, inputs, outputs); regenerate with --update-goldens")
    return doc


class Golden:
    """A verified golden set: inputs, outputs and optional labels of one model (``source``: where they come from),
    of its first shape when it holds several: ``groups`` has one Golden per shape, [self] for one."""

    def __init__(self, inputs, outputs, labels=None, source="goldens", groups=None):
        self.inputs, self.outputs, self.labels, self.source = inputs, outputs, labels, source
        self.groups = groups or [self]


def load_golden(spec):
    """Load ``goldens/<model>.npz`` after checking its sha256 and arrays against the manifest."""
    path = golden_path(spec)
    entry = read_manifest(spec)["models"].get(spec.name)
    if entry is None or not present(path):
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
    labels = {k.partition("@")[2]: v for k, v in arrays.items() if k.partition("@")[0] == "label"}
    groups = [_golden_group(spec, path, dims, group, outputs, labels.get(dims))
              for dims, group in shape_groups(spec, path, inputs, "golden inputs").items()]
    stray = sorted(k for k in outputs if k.partition("@")[2] not in {g[0] for g in groups})
    if stray:
        raise GoldenError(f"{path}: output(s) {['output:' + k for k in stray]} have no golden inputs of their shape; "
                          f"expected 'input:<name>@<dims>' arrays for every 'output:<name>@<dims>'")
    names = {k.partition("@")[0] for k in outputs}
    lacking = [f"output:{k}{'@' + dims if dims else ''}" for dims, g in groups for k in sorted(names - set(g.outputs))]
    if lacking or not names:
        raise GoldenError(f"{path}: golden lacks {lacking or 'any output:<name> array'}; expected every output "
                          f"{sorted(names)} at every shape of its inputs")
    first = groups[0][1]
    return Golden(first.inputs, first.outputs, first.labels, groups=[g for _, g in groups])


def _golden_group(spec, path, dims, inputs, outputs, labels):
    """(dims, Golden) of the arrays of one shape suffix (``dims`` "" for a file of one shape), checked."""
    at = f"@{dims}" if dims else ""
    if set(inputs) != set(spec.inputs):
        raise GoldenError(f"{path}: golden inputs {sorted(k + at for k in inputs)} differ from the config's "
                          f"{sorted(k + at for k in spec.inputs)}")
    rows = check_arrays(spec, path, inputs, "golden inputs")
    mine = {k.partition("@")[0]: v for k, v in outputs.items() if k.partition("@")[2] == dims}
    short = {f"output:{k}{at}": len(v) for k, v in mine.items() if np.ndim(v) == 0 or len(v) != rows}
    if short:
        raise GoldenError(f"{path}: golden output rows {short}; expected {rows} rows per output, as its inputs")
    if labels is not None:
        check_labels(spec, path, labels, rows, "golden")
    return dims, Golden(inputs, mine, labels)


def reference_drift(spec, weights_sha256):
    """The reference weights' current hash vs the one the goldens were made from (None when unchanged)."""
    recorded = read_manifest(spec)["models"].get(spec.name, {}).get("weights_sha256")
    return None if recorded == weights_sha256 else (recorded, weights_sha256)


def heldout_set_path(spec):
    return Path(spec.source).parent / "inputs" / f"{spec.name}_heldout.npz"


def input_set(spec, count=16, seed=0):
    """The committed input set for regeneration (its first shape), else ``count`` samples drawn from the spec
    (fixed seed)."""
    return input_groups(spec, count, seed)[0]


def input_groups(spec, count=16, seed=0):
    """[(inputs, labels)] per shape, what goldens are made from: the committed input set's groups, plus ``count``
    seeded samples at each of a dynamic input's profile min, opt and max that the set lacks (a model of fixed
    shapes without an input set: ``count`` samples of its one shape)."""
    from paritygate.inputs.sampling import sample_inputs

    path = input_set_path(spec)
    groups = [(g.inputs, g.labels) for g in read_input_set(spec, path).groups] if present(path) else []
    have = {tuple(v.shape[1:] for v in inputs.values()) for inputs, _ in groups}
    dynamic = any(t.profile for t in spec.inputs.values())
    for corner in range(3) if dynamic else ([] if groups else [0]):
        dims = {k: t.profile_dims()[corner] if t.profile else t.dims for k, t in spec.inputs.items()}
        if tuple(tuple(d) for d in dims.values()) not in have:
            groups.append((sample_inputs(spec, count, np.random.default_rng(seed + corner), dims), None))
    return groups


def group_arrays(groups):
    """(inputs, outputs, labels) to write for ``groups`` [(inputs, outputs, labels)]: the one group as it is, or
    every array keyed with its group's shape suffix (module doc; labels then a dict dims -> array)."""
    if len(groups) == 1:
        return groups[0]
    inputs, outputs, labels = {}, {}, {}
    for group_inputs, group_outputs, group_labels in groups:
        dims = shape_suffix(group_inputs)
        inputs.update({f"{k}@{dims}": v for k, v in group_inputs.items()})
        outputs.update({f"{k}@{dims}": v for k, v in group_outputs.items()})
        if group_labels is not None:
            labels[dims] = group_labels
    return inputs, outputs, labels


def write_golden(spec, inputs, outputs, weights_sha256, labels=None):
    """Write ``goldens/<model>.npz`` and its manifest entry (under a lock: xdist workers share the file)."""
    path = golden_path(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"input:{k}": v for k, v in inputs.items()}
    arrays.update({f"output:{k}": np.asarray(v) for k, v in outputs.items()})
    if isinstance(labels, dict):  # several shapes (group_arrays)
        arrays.update({f"label@{dims}": v for dims, v in labels.items()})
    elif labels is not None:
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
