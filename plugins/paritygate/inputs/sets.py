"""The one reader and validator of a model's input sets: every .npz of inputs the suite reads.

Input sets (``inputs/<model>.npz``), held-out sets (``inputs/<model>_heldout.npz``), calibration sets, the inputs
of the goldens and their labels all go through ``read_input_set`` (or ``check_arrays`` for arrays already read),
which checks, in this order:

    opens       the file is an .npz archive numpy reads without pickles (any failure: one line naming it)
    names       one array per input of the spec, by name; nothing else but ``__labels__``
    dtypes      each array has its input's declared dtype
    shapes      each array is [N, *the declared non-batch dims], the same N for every input; a dynamic input's
                dims lie within its profile (``inputs.<name>.profile``, min..max per dim)
    finite      float arrays hold no NaN or Inf
    range       every value lies in the input's declared range (``inputs.<name>.range``)
    labels      ``__labels__``: one per row; for a classification model integers >= 0

Each problem is an ``InputSetError`` (a ``SuiteError``: the suite's own data, never the candidate's ``fail``) whose
one-line message names the file, the array and what was expected.

Several shapes in one file (a model with a dynamic input): each input's array of one shape is keyed
``<input>@<dims>``, dims the non-batch dims joined by ``x`` (``image@48x48x3``, ``image@97x131x3``), its labels
``__labels__@<dims>``; the arrays of one suffix form one group, checked as above. The suffix names the first
input's dims; every input of the group carries the same suffix. ``paritygate.judge.preflight`` runs it on every data
file of every model before any check (exit code 4); the checks read the same files through it again.
"""

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paritygate.files import LIMITS, check_file, limit_bytes, limit_value
from paritygate.verdict import SuiteError

LABELS = "__labels__"
MAX_ROWS = (10_000, "PARITYGATE_MAX_ROWS")  # rows of one set: every check runs each row through the reference and
# the candidate, batch by batch; docs/limits.md has the measured cost per row and how to raise it


class InputSetError(SuiteError):
    """A model's input set cannot be read or does not fit its input spec; the message names the file, the array
    and what was expected."""


@dataclass
class InputSet:
    path: Path
    inputs: dict  # input name -> array, in the spec's order (the first group's, when the file holds several shapes)
    labels: object  # np.ndarray or None
    rows: int
    groups: list = None  # one InputSet per shape (``<input>@<dims>`` keys); [self] for a file of one shape

    def __post_init__(self):
        self.groups = self.groups or [self]


def read_npz(path, what="input set"):
    """All arrays of the .npz at ``path``; any failure to open or read it is one InputSetError naming the file."""
    check_file(path, what, "npz", InputSetError)
    with open(path, "rb") as f:  # ours to close: np.load leaks the file it opened when the archive is corrupt
        return load_npz(f, path, what)


def load_npz(f, path, what="input set"):
    """All arrays of the .npz archive open as ``f`` (seekable, read from its start; ``path`` names it): its header,
    its unpacked size (``_check_unpacked``) and each array's declared size (``_check_declared``) checked before an
    array is read; no pickles."""
    head = f.read(6)
    f.seek(0)
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")):  # zip (numpy.savez), .npy
        seen = "does not start with a zip header" if head else "is empty"
        raise InputSetError(f"{path}: cannot read {what}: not an .npz archive of arrays (the file {seen})")
    try:
        data = np.load(f, allow_pickle=False)
    except Exception as err:
        raise InputSetError(f"{path}: cannot read {what}: not an .npz archive of arrays ({_why(err)})") from err
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InputSetError(f"{path}: cannot read {what}: holds one {type(data).__name__} (an .npy), expected "
                            "an .npz archive of arrays keyed by input name")
    try:
        with data:
            _check_unpacked(path, what, data)
            _check_declared(path, what, data)
            return {k: data[k] for k in data.files}
    except InputSetError:
        raise
    except Exception as err:
        raise InputSetError(f"{path}: cannot read {what}: {_why(err)}") from err


def _check_declared(path, what, data):
    """Each member's .npy header declares no more bytes than the member holds: numpy allocates the declared
    shape before it reads (a 16 TB header over 16 bytes of data is a MemoryError, one of 2 GB a 2 GB allocation)."""
    fmt = np.lib.format
    for info in data.zip.infolist():
        if not info.filename.endswith(".npy"):
            continue
        with data.zip.open(info) as member:
            major, _ = fmt.read_magic(member)
            read_header = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
            shape, _, dtype = read_header(member)
        declared = math.prod(shape) * dtype.itemsize
        if declared > info.file_size:
            raise InputSetError(f"{path}: cannot read {what}: array '{info.filename[:-4]}' declares shape "
                                f"{list(shape)} of {dtype} ({declared} bytes) but holds {info.file_size} bytes")


def _check_unpacked(path, what, data):
    """The arrays' total size as the archive declares it (a compressed member can unpack to far more than the
    file's size) within the npz limit: ``np.load`` reads a member no further than its declared size."""
    unpacked, limit = sum(i.file_size for i in data.zip.infolist()), limit_bytes("npz")
    if unpacked > limit:
        raise InputSetError(f"{path}: {what} unpacks to {unpacked / 2**20:.1f} MB, over the {limit / 2**20:g} MB "
                            f"limit for npz files; raise it with {LIMITS['npz'][1]}=<MB>")


def _why(err):
    """The failure's type and what numpy refused, never the error's text: numpy and zipfile quote the file's
    bytes in it (headers, member names)."""
    if "allow_pickle" in str(err):
        return f"{type(err).__name__}: it holds object arrays, which are pickles and never loaded (allow_pickle=False)"
    return type(err).__name__


def read_input_set(spec, path, what="input set", labels="optional"):
    """The input set at ``path`` checked against ``spec``; ``labels``: "optional", "required" or "none" (a
    ``__labels__`` array is then refused)."""
    arrays = read_npz(path, what)
    groups = split_shapes(spec, path, arrays, what)
    sets = [_read_group(spec, path, g, what, labels) for g in groups]
    found = sets[0] if len(sets) == 1 else InputSet(Path(path), sets[0].inputs, sets[0].labels,
                                                    sum(s.rows for s in sets), sets)
    _check_rows(path, what, found.rows)
    return found


def _check_rows(path, what, rows):
    """At least one row, at most ``MAX_ROWS`` (or PARITYGATE_MAX_ROWS)."""
    default, env = MAX_ROWS
    try:
        limit = limit_value(env, default)
    except ValueError as err:
        raise InputSetError(f"{path}: {err}") from None
    if rows == 0:
        raise InputSetError(f"{path}: {what} holds 0 rows; expected at least one row (or no file: the suite then "
                            "draws its inputs from the config's ranges)")
    if rows > limit:
        raise InputSetError(f"{path}: {what} holds {rows} rows, over the limit of {limit:g} rows (default "
                            f"{default}); keep a sample of it, or raise the limit with {env}=<rows>")


def split_shapes(spec, path, arrays, what="input set"):
    """The arrays of ``path`` as one dict per shape group (``shape_groups``' values)."""
    return list(shape_groups(spec, path, arrays, what).values())


def shape_groups(spec, path, arrays, what="input set"):
    """The arrays of ``path`` by shape suffix: plain keys form one group (suffix ""), ``<name>@<dims>`` keys one
    group per suffix (see the module docstring); mixing both layouts, or a malformed suffix, is refused."""
    suffixed = {k for k in arrays if "@" in k}
    if not suffixed:
        return {"": arrays}
    plain = sorted(set(arrays) - suffixed)
    if plain:
        raise InputSetError(f"{path}: {what} mixes plain array(s) {plain} with shape-suffixed ones "
                            f"{sorted(suffixed)[:3]}; expected every array keyed '<input>@<dims>' (e.g. "
                            f"'{next(iter(spec.inputs))}@48x48x3') or none")
    groups = {}
    for key in sorted(suffixed):
        name, _, dims = key.partition("@")
        if not all(d.isdigit() for d in dims.split("x")):
            raise InputSetError(f"{path}: array '{key}': shape suffix '{dims}' is not dims joined by 'x'; expected "
                                f"e.g. '{name}@48x48x3'")
        groups.setdefault(dims, {})[name] = arrays[key]
    return groups


def shape_suffix(inputs):
    """The ``<dims>`` suffix of one group of rows: the first input's non-batch dims joined by ``x``."""
    return "x".join(str(d) for d in next(iter(inputs.values())).shape[1:])


def _read_group(spec, path, arrays, what, labels):
    arrays = dict(arrays)
    label = arrays.pop(LABELS, None)
    if label is None and labels == "required":
        raise InputSetError(f"{path}: {what} has no '{LABELS}' array; expected one label per row")
    if label is not None and labels == "none":
        raise InputSetError(f"{path}: {what} holds '{LABELS}', which a {what} does not take; expected arrays "
                            f"{sorted(spec.inputs)}")
    rows = check_arrays(spec, path, arrays, what)
    if label is not None:
        check_labels(spec, path, label, rows, what)
    return InputSet(Path(path), {k: arrays[k] for k in spec.inputs}, label, rows)


def check_arrays(spec, path, arrays, what="input set", recorded_outside=()):
    """Rows in ``arrays`` (input name -> array, from ``path``) after checking names, dtypes, shapes, finite values
    and ranges against ``spec``; ``recorded_outside``: inputs whose range is not checked (a reproducer of shadow
    traffic recorded outside it)."""
    missing, extra = sorted(set(spec.inputs) - set(arrays)), sorted(set(arrays) - set(spec.inputs))
    if missing or extra:
        have = f"lacks input(s) {missing}" if missing else f"holds array(s) {extra} the config does not declare"
        raise InputSetError(f"{path}: {what} {have}; expected arrays {sorted(spec.inputs)} "
                            f"(inputs of model '{spec.name}' in {spec.source})")
    rows = {}
    for name, t in spec.inputs.items():
        x = arrays[name]
        if x.dtype != t.dtype or x.ndim != len(t.shape) or not t.accepts_dims(tuple(x.shape[1:])):
            within = (f" within the profile min {list(t.profile[0])} .. max {list(t.profile[2])}" if t.profile
                      else "")
            raise InputSetError(f"{path}: array '{name}' is {x.dtype}{list(x.shape)}, expected {t.dtype} "
                                f"{['N', *t.shape[1:]]}{within} (inputs.{name} of {spec.source})")
        _check_values(spec, path, name, t, x, check_range=name not in recorded_outside)
        rows[name] = len(x)
    if len(set(rows.values())) > 1:
        raise InputSetError(f"{path}: arrays hold different numbers of rows {rows}; expected one row per example "
                            "in every array")
    return next(iter(rows.values()), 0)


def nonfinite_mask(x):
    """Where ``x`` holds NaN or Inf (None for an array that cannot: integers): the finiteness rule of every input
    the suite reads (input sets here, recorded traffic in ``paritygate.shadow.read``)."""
    return ~np.isfinite(x) if x.dtype.kind in "fc" else None


def outside_range(tensor, x):
    """How many values of ``x`` lie outside ``tensor``'s declared range (inclusive), and the range of ``x``."""
    low, high = tensor.range
    lo, hi = x.min(), x.max()
    if lo >= low and hi <= high:
        return 0, (lo, hi)
    return int(np.count_nonzero((x < low) | (x > high))), (lo, hi)


def _check_values(spec, path, name, tensor, x, check_range=True):
    if not x.size:
        return
    bad = nonfinite_mask(x)
    if bad is not None and bad.any():
        first = [int(i) for i in np.argwhere(bad)[0]]
        raise InputSetError(f"{path}: array '{name}' holds {int(bad.sum())} non-finite value(s) (first "
                            f"{x[tuple(first)]} at index {first}); expected finite values in the declared "
                            f"range {list(tensor.range)} (inputs.{name}.range of {spec.source})")
    outside, (lo, hi) = outside_range(tensor, x)
    if outside and check_range:
        low, high = tensor.range
        raise InputSetError(f"{path}: array '{name}' holds values in [{lo}, {hi}] ({outside} outside), expected "
                            f"values in the declared range [{low}, {high}] (inputs.{name}.range of {spec.source})")
    bad = np.flatnonzero(np.all(np.isin(x.reshape(len(x), -1), np.asarray(tensor.not_all)), axis=1)) \
        if tensor.not_all else ()
    if len(bad):
        raise InputSetError(f"{path}: array '{name}' row {int(bad[0])} ({len(bad)} row(s)) holds only "
                            f"{list(tensor.not_all)}, which inputs.{name}.not_all of {spec.source} declares not a "
                            "valid input; remove those rows, or the declaration")


def check_labels(spec, path, labels, rows, what="input set"):
    """``labels``: one per row; a classification model's are integer class indices (>= 0)."""
    where = f"{path}: array '{LABELS}'"
    if labels.ndim != 1 or len(labels) != rows:
        raise InputSetError(f"{where} is {labels.dtype}{list(labels.shape)}, expected one label per row: "
                            f"[{rows}] (the {what}'s inputs hold {rows} rows)")
    if spec.task == "classification":
        if labels.dtype.kind not in "iu":
            raise InputSetError(f"{where} is {labels.dtype}, expected integer class indices (task = "
                                f"'classification' of model '{spec.name}')")
        if labels.size and labels.min() < 0:
            raise InputSetError(f"{where} holds {labels.min()}, expected class indices >= 0")


def check_class_labels(path, input_set, classes, output):
    """Every ``__labels__`` of ``input_set`` a class index of a model whose ``output`` scores ``classes`` classes."""
    for group in input_set.groups:
        if group.labels is not None and group.labels.size and group.labels.max() >= classes:
            bad = int(np.count_nonzero(group.labels >= classes))
            raise InputSetError(f"{path}: array '{LABELS}' holds {group.labels.max()} ({bad} label(s) >= {classes}), "
                                f"expected class indices 0..{classes - 1}: the reference's output '{output}' scores "
                                f"{classes} classes")
