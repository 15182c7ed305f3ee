"""A team's recorded traffic as keyed elements: TFRecord files of ``tf.train.Example``, ``.npz`` shards, Parquet.
The data is untrusted input: read with the size, type and finiteness rules of the checks' own input reader
(``paritygate.files`` for what a path is and how large, ``inputs.sets`` for .npz archives, finite values and the
declared range), never a second set of rules.

Features (npz arrays, Parquet columns) are named as the model's inputs (``[models.inputs.<name>]``); each value is
reshaped to the input's dims (a dynamic input: its profile's opt dims) and cast to the input's dtype where no value
changes. Every record gets a stable key: ``<file name>#<record index>``, or the value of the key feature when one is
named. A record that cannot be judged goes to the ``dead`` output as (category, key, reason): never silently
dropped, never judged (CATEGORIES lists the reasons). A record holding values outside the input's declared range is
judged as recorded and also goes to the ``outside`` output, counted for the report. Imports apache_beam: import it
on first use.
"""

import contextlib
import gzip
import math
import os
import tempfile
from dataclasses import dataclass
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from paritygate.common.escape import one_line
from paritygate.files import FileRefused, check_file, limit_bytes
from paritygate.inputs.sets import InputSetError, load_npz, nonfinite_mask, outside_range, read_npz
from paritygate.lazy import lazy_import
from paritygate.shadow import tfrecord

tf = lazy_import("tensorflow")

FORMATS = ("tfrecord", "npz", "parquet")
DEAD, OUTSIDE, COUNT = "dead", "outside", "count"
CATEGORIES = {  # dead-letter category -> what it means; the report counts every one of them
    "missing": "a feature an input (or the key feature) needs is absent",
    "dtype": "a feature holds text, bytes, nested records, or numbers its input's dtype cannot hold exactly",
    "shape": "a feature holds the wrong number of values",
    "nonfinite": "a float feature holds NaN or Inf",
    "overflow": "a finite value that becomes Inf in the input's dtype (float64 1e39 read as float32)",
    "key": "the key or slice feature holds other than one text or number value",
    "unreadable": "bytes that are not a tf.train.Example; a file that cannot be parsed as its format",
    "corrupt": "a TFRecord record that fails its CRC (the records after it are read)",
    "refused": "a path that is not a regular file, or a file over its size limit",
}


class BadRecord(ValueError):
    """A record that cannot be judged: ``category`` (one of CATEGORIES) and why."""

    def __init__(self, category, message):
        super().__init__(message)
        self.category = category


class InputLayout(NamedTuple):
    name: str
    dims: tuple
    dtype: str
    range: tuple  # the declared (low, high): inputs.sets.outside_range reads it


@dataclass(frozen=True)
class Layout:
    """What a record must hold (picklable): one InputLayout per model input; the key and slice features."""

    inputs: tuple
    key_feature: str = None
    slice_feature: str = None

    @classmethod
    def of(cls, spec, key_feature=None, slice_feature=None):
        return cls(tuple(InputLayout(n, tuple(t.dims), np.dtype(t.dtype).str, tuple(t.range))
                         for n, t in spec.inputs.items()), key_feature, slice_feature)


def _kind(array):
    return {"U": "text", "S": "bytes", "O": "objects (text, bytes or nested records)"}.get(
        array.dtype.kind, f"{array.dtype} values")


def checked(name, dims, dtype, values):
    """``values`` as the input ``name`` takes it: reshaped to ``dims``, cast where no value changes; BadRecord."""
    dtype, array = np.dtype(dtype), np.asarray(values)
    if array.dtype.kind not in "biuf" or (dtype.kind == "f") != (array.dtype.kind == "f"):
        raise BadRecord("dtype", f"feature '{name}' holds {_kind(array)}; input '{name}' takes {dtype}")
    if array.size != math.prod(dims):
        raise BadRecord("shape", f"feature '{name}' holds {array.size} values (shape {list(array.shape)}); input "
                        f"'{name}' takes {list(dims)} = {math.prod(dims)}")
    bad = nonfinite_mask(array)
    if bad is not None and bad.any():
        raise BadRecord("nonfinite", f"feature '{name}' holds {int(bad.sum())} non-finite value(s)")
    with np.errstate(over="ignore", invalid="ignore"):
        cast = array.astype(dtype).reshape(dims)
    if dtype.kind == "f":
        over = nonfinite_mask(cast)
        if over.any():
            raise BadRecord("overflow", f"feature '{name}': {int(over.sum())} value(s) (largest magnitude "
                            f"{float(np.abs(array).max()):.4g}) overflow {dtype} (largest {float(np.finfo(dtype).max):.4g}): "
                            "not judged")
    elif not np.array_equal(cast, array.reshape(dims)):
        raise BadRecord("dtype", f"feature '{name}': values do not fit {dtype}")
    return cast


def element(layout, get, default_key):
    """(key, {input: array}, slice value, outside) from ``get(feature name) -> values or None``; ``outside`` lists
    (input, values outside its declared range, min, max) for each input that has any. BadRecord, key attached."""
    key = default_key
    if layout.key_feature:
        key = _scalar(get(layout.key_feature), "key", layout.key_feature, default_key)
    feed, outside = {}, []
    for spec in layout.inputs:
        values = get(spec.name)
        if values is None:
            raise BadRecord("missing", f"{key}: no feature '{spec.name}'")
        try:
            feed[spec.name] = checked(spec.name, spec.dims, spec.dtype, values)
        except BadRecord as err:
            raise BadRecord(err.category, f"{key}: {err}") from None
        count, (lo, hi) = outside_range(spec, feed[spec.name])
        if count:
            outside.append((spec.name, count, float(lo), float(hi)))
    value = get(layout.slice_feature) if layout.slice_feature else None
    value = None if value is None else _scalar(value, "slice", layout.slice_feature, key)
    return str(key), feed, value, tuple(outside)


def _scalar(value, role, name, where):
    """The one text or number a key or slice feature holds."""
    if value is None:
        raise BadRecord("missing", f"{where}: no {role} feature '{name}'")
    value = np.asarray(value, dtype=object if isinstance(value, (str, bytes)) else None).ravel()
    if value.size != 1:
        raise BadRecord("key", f"{where}: the {role} feature '{name}' holds {value.size} values; expected one")
    item = value[0].item() if isinstance(value[0], np.generic) else value[0]
    if isinstance(item, bytes):
        item = item.decode("utf-8", "replace")
    if not isinstance(item, (str, int, float)):
        raise BadRecord("key", f"{where}: the {role} feature '{name}' holds {type(item).__name__}; expected text or "
                        "a number")
    return item


def example_values(example):
    """A ``tf.train.Example``'s feature getter: name -> ndarray (float32, int64 or bytes) or None."""
    features = example.features.feature

    def get(name):
        if name not in features:
            return None
        feature = features[name]
        kind = feature.WhichOneof("kind")
        if kind is None:
            return np.zeros(0, np.float32)
        if kind == "bytes_list":
            return np.array(list(feature.bytes_list.value), dtype=object)
        return np.array(getattr(feature, kind).value, dtype=np.float32 if kind == "float_list" else np.int64)

    return get


def _local(path):
    return FileSystems.get_scheme(path) in (None, "file")


def _plain_path(path):
    return path.removeprefix("file://")


@contextlib.contextmanager
def _local_tfrecord(path):
    """A local uncompressed copy of a GZIP (``.gz``) or non-local TFRecord file, at most the data limit; the path
    itself for a local uncompressed one."""
    gz, local = str(path).endswith(".gz"), _local(path)
    if local and not gz:
        yield _plain_path(path)
        return
    limit = limit_bytes("data")
    fd, copy = tempfile.mkstemp(prefix="paritygate-shadow-", suffix=".tfrecord")
    try:
        with os.fdopen(fd, "wb") as out, contextlib.ExitStack() as stack:
            raw = stack.enter_context(open(_plain_path(path), "rb") if local else  # noqa: SIM115 - the stack closes it
                                      FileSystems.open(path, compression_type="uncompressed"))
            source = stack.enter_context(gzip.GzipFile(fileobj=raw)) if gz else raw
            written = 0
            while chunk := source.read(1 << 20):
                written += len(chunk)
                if written > limit:
                    raise BadRecord("refused", f"{path}: decompresses to more than the {limit / 2**20:g} MB limit "
                                    "for data files; raise it with PARITYGATE_MAX_DATA_MB=<MB>")
                out.write(chunk)
        yield copy
    finally:
        os.unlink(copy)


def tfrecord_rows(path):
    """(index, getter | BadRecord) per record of a TFRecord file (``shadow.tfrecord``: a corrupt record is a
    BadRecord and the records after it are read)."""
    with _local_tfrecord(path) as local:
        for index, (_, raw) in enumerate(tfrecord.local_records(local, os.path.getsize(local), limit_bytes("data"))):
            if isinstance(raw, tfrecord.Corrupt):
                yield index, BadRecord("corrupt", f"{path}#{index}: {raw}")
                continue
            try:
                example = tf.train.Example.FromString(raw)
            except Exception as err:  # noqa: BLE001 - protobuf's DecodeError: one bad record, not the file
                yield index, BadRecord("unreadable", f"{path}#{index}: not a tf.train.Example: {type(err).__name__}")
            else:
                yield index, example_values(example)


def _whole(path, kind):
    """The bytes of a non-local file, at most ``kind``'s limit."""
    limit = limit_bytes(kind)
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise BadRecord("refused", f"{path}: over the {limit / 2**20:g} MB limit for {kind} files")
    return data


def npz_rows(path):
    """(index, getter) per row of an ``.npz`` shard (arrays by feature name, rows along axis 0), read as the
    checks read an input set (``inputs.sets.read_npz``: size, header, unpacked size, no pickles)."""
    import io

    try:
        arrays = read_npz(_plain_path(path), "shadow data") if _local(path) else \
            load_npz(io.BytesIO(_whole(path, "npz")), path, "shadow data")
    except InputSetError as err:
        raise BadRecord("unreadable", str(err)) from None
    rows = {len(v) for v in arrays.values() if v.ndim}
    if len(rows) != 1:
        raise BadRecord("unreadable", f"{path}: arrays {sorted((k, v.shape) for k, v in arrays.items())} do not "
                        "share one row count along axis 0")
    for i in range(rows.pop()):
        yield i, lambda name, i=i: arrays[name][i] if name in arrays else None


def parquet_rows(path):
    """(index, getter) per row of a Parquet file (a column per feature: a list of numbers, or a scalar)."""
    import io

    import pyarrow.parquet as pq

    table = pq.read_table(_plain_path(path) if _local(path) else io.BytesIO(_whole(path, "data")))
    columns = {name: table.column(name) for name in table.column_names}
    for i in range(table.num_rows):
        def get(name, i=i):
            if name not in columns:
                return None
            value = columns[name][i].as_py()
            if value is None:
                return np.zeros(0, np.float32)
            return np.array(value, dtype=object if isinstance(value, (str, bytes, dict)) else None)

        yield i, get


ROWS = {"tfrecord": tfrecord_rows, "npz": npz_rows, "parquet": parquet_rows}
SIZE_KIND = {"tfrecord": None, "npz": "npz", "parquet": "data"}  # files.LIMITS kind (None: streamed)


def check_path(path, fmt):
    """Refuse (BadRecord "refused") a local path that is not a regular file within its size limit: a FIFO or a
    device is never opened (``paritygate.files``)."""
    if _local(path):
        try:
            check_file(_plain_path(path), f"{fmt} shadow data", SIZE_KIND[fmt])
        except FileRefused as err:
            raise BadRecord("refused", str(err)) from None


class ReadFile(beam.DoFn):
    """A file path -> ``emit(key, feed, slice)`` per good record; (category, key, reason) on ``dead``; (key,
    outside) on ``outside`` for a record with values outside its input's declared range (judged as well); the
    number of good records of the file on ``count``."""

    def __init__(self, layout, fmt):
        if fmt not in FORMATS:
            raise ValueError(f"--format {fmt!r}: expected one of {FORMATS}")
        self.layout, self.fmt = layout, fmt

    def emit(self, key, feed, value):
        return key, feed, value

    def process(self, path):
        name, good = path.rsplit("/", 1)[-1], 0
        try:
            check_path(path, self.fmt)
            for index, get in ROWS[self.fmt](path):
                if isinstance(get, BadRecord):
                    yield beam.pvalue.TaggedOutput(DEAD, (get.category, f"{name}#{index}", str(get)))
                    continue
                try:
                    key, feed, value, outside = element(self.layout, get, f"{name}#{index}")
                except BadRecord as err:
                    yield beam.pvalue.TaggedOutput(DEAD, (err.category, f"{name}#{index}", str(err)))
                    continue
                if outside:
                    yield beam.pvalue.TaggedOutput(OUTSIDE, (key, outside))
                good += 1
                yield self.emit(key, feed, value)
        except BadRecord as err:
            yield beam.pvalue.TaggedOutput(DEAD, (err.category, name, str(err)))
        except ImportError:
            raise  # the environment's fault, not the record's
        except Exception as err:  # noqa: BLE001 - a file that cannot be read at all is a dead letter, named
            why = f"{path}: {type(err).__name__}: {one_line(err)[:300]}"
            yield beam.pvalue.TaggedOutput(DEAD, ("unreadable", name, why))
        yield beam.pvalue.TaggedOutput(COUNT, good)


def match(pattern):
    """The files matching ``pattern`` (a glob, local or any Beam filesystem), sorted; ValueError when none."""
    found = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    if not found:
        raise ValueError(f"--data {pattern}: no file matches")
    return found
