"""A team's recorded traffic as keyed elements: TFRecord files of ``tf.train.Example``, ``.npz`` shards, Parquet.

Features (npz arrays, Parquet columns) are named as the model's inputs (``[models.inputs.<name>]``); each value is
reshaped to the input's dims (a dynamic input: its profile's opt dims) and must hold the input's dtype kind.
Every record gets a stable key: ``<file name>#<record index>``, or the value of the key feature when one is named.
A record that cannot be judged (missing feature, wrong dtype, wrong size, non-finite value, an unreadable file or
record) goes to the ``dead`` output as (key, reason) with the reason's category first: it is never silently
dropped and never judged. Imports apache_beam: import it on first use.
"""

import io
import math
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from paritygate.lazy import lazy_import

tf = lazy_import("tensorflow")

FORMATS = ("tfrecord", "npz", "parquet")
DEAD = "dead"


class BadRecord(ValueError):
    """A record that cannot be judged: ``category`` (missing, dtype, shape, nonfinite, unreadable) and why."""

    def __init__(self, category, message):
        super().__init__(message)
        self.category = category


@dataclass(frozen=True)
class Layout:
    """What a record must hold (picklable): input name -> (dims, dtype string); the key and slice features."""

    inputs: tuple  # ((name, dims, dtype), ...)
    key_feature: str = None
    slice_feature: str = None

    @classmethod
    def of(cls, spec, key_feature=None, slice_feature=None):
        return cls(tuple((n, tuple(t.dims), np.dtype(t.dtype).str) for n, t in spec.inputs.items()),
                   key_feature, slice_feature)


def checked(name, dims, dtype, values):
    """``values`` as the input ``name`` takes it: reshaped to ``dims``, cast where no value changes; BadRecord."""
    dtype, array = np.dtype(dtype), np.asarray(values)
    if array.dtype.kind not in "biuf" or (dtype.kind == "f") != (array.dtype.kind == "f"):
        raise BadRecord("dtype", f"feature '{name}' holds {array.dtype} values; input '{name}' takes {dtype}")
    if array.size != math.prod(dims):
        raise BadRecord("shape", f"feature '{name}' holds {array.size} values (shape {list(array.shape)}); input "
                        f"'{name}' takes {list(dims)} = {math.prod(dims)}")
    if dtype.kind == "f" and not np.isfinite(array).all():
        raise BadRecord("nonfinite", f"feature '{name}' holds {int((~np.isfinite(array)).sum())} non-finite value(s)")
    cast = array.astype(dtype).reshape(dims)
    if dtype.kind != "f" and not np.array_equal(cast, array.reshape(dims)):
        raise BadRecord("dtype", f"feature '{name}': values do not fit {dtype}")
    return cast


def element(layout, get, default_key):
    """(key, {input: array}, slice value) from ``get(feature name) -> values or None``; BadRecord (key attached)."""
    key = default_key
    if layout.key_feature:
        value = get(layout.key_feature)
        if value is None:
            raise BadRecord("missing", f"{default_key}: no key feature '{layout.key_feature}'")
        key = _scalar(value)
    feed = {}
    for name, dims, dtype in layout.inputs:
        values = get(name)
        if values is None:
            raise BadRecord("missing", f"{key}: no feature '{name}'")
        try:
            feed[name] = checked(name, dims, dtype, values)
        except BadRecord as err:
            raise BadRecord(err.category, f"{key}: {err}") from None
    value = get(layout.slice_feature) if layout.slice_feature else None
    return str(key), feed, None if value is None else _scalar(value)


def _scalar(value):
    value = np.asarray(value).ravel()
    item = value[0] if value.size else ""
    item = item.item() if isinstance(item, np.generic) else item
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else item


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


def tfrecord_rows(path):
    """(index, getter) per record of a TFRecord file (read by tf.data: local paths and TensorFlow's filesystems,
    gzip by the ``.gz`` suffix); a record that does not frame ends the file with BadRecord, one that does not
    parse is yielded as a BadRecord."""
    compression = "GZIP" if str(path).endswith(".gz") else ""
    records = iter(tf.data.TFRecordDataset([str(path)], compression_type=compression).as_numpy_iterator())
    index = 0
    while True:
        try:
            raw = next(records)
        except StopIteration:
            return
        except tf.errors.OpError as err:  # DataLossError: a corrupt frame ends what can be read of the file
            raise BadRecord("unreadable", f"{path}#{index}: {err.message} (the rest of the file cannot be "
                            "framed)") from err
        try:
            example = tf.train.Example.FromString(raw)
        except Exception as err:  # noqa: BLE001 - protobuf's DecodeError: one bad record, not the file
            yield index, BadRecord("unreadable", f"{path}#{index}: not a tf.train.Example: {err}")
        else:
            yield index, example_values(example)
        index += 1


def npz_rows(path):
    """(index, getter) per row of an ``.npz`` shard (arrays by feature name, rows along axis 0)."""
    with FileSystems.open(path) as handle:
        data = np.load(io.BytesIO(handle.read()), allow_pickle=False)
    arrays = {k: data[k] for k in data.files}
    rows = {len(v) for v in arrays.values() if v.ndim}
    if len(rows) != 1:
        raise BadRecord("unreadable", f"{path}: arrays {sorted((k, v.shape) for k, v in arrays.items())} do not "
                        "share one row count along axis 0")
    for i in range(rows.pop()):
        yield i, lambda name, i=i: arrays[name][i] if name in arrays else None


def parquet_rows(path):
    """(index, getter) per row of a Parquet file (a column per feature: a list of numbers, or a scalar)."""
    import pyarrow.parquet as pq

    with FileSystems.open(path) as handle:
        table = pq.read_table(io.BytesIO(handle.read()))
    columns = {name: table.column(name) for name in table.column_names}
    for i in range(table.num_rows):
        def get(name, i=i):
            if name not in columns:
                return None
            value = columns[name][i].as_py()
            return np.array(value if value is not None else [], dtype=object if isinstance(value, str) else None)

        yield i, get


ROWS = {"tfrecord": tfrecord_rows, "npz": npz_rows, "parquet": parquet_rows}


class ReadFile(beam.DoFn):
    """A file path -> (key, feed, slice) elements, and (category, key, reason) on the ``dead`` output."""

    def __init__(self, layout, fmt):
        if fmt not in FORMATS:
            raise ValueError(f"--format {fmt!r}: expected one of {FORMATS}")
        self.layout, self.fmt = layout, fmt

    def process(self, path):
        name = path.rsplit("/", 1)[-1]
        try:
            for index, get in ROWS[self.fmt](path):
                if isinstance(get, BadRecord):
                    yield beam.pvalue.TaggedOutput(DEAD, (get.category, f"{name}#{index}", str(get)))
                    continue
                try:
                    yield element(self.layout, get, f"{name}#{index}")
                except BadRecord as err:
                    yield beam.pvalue.TaggedOutput(DEAD, (err.category, f"{name}#{index}", str(err)))
        except BadRecord as err:
            yield beam.pvalue.TaggedOutput(DEAD, (err.category, name, str(err)))
        except ImportError:
            raise  # the environment's fault, not the record's
        except Exception as err:  # noqa: BLE001 - a file that cannot be read at all is a dead letter, named
            yield beam.pvalue.TaggedOutput(DEAD, ("unreadable", name, f"{path}: {type(err).__name__}: {err}"))


def match(pattern):
    """The files matching ``pattern`` (a glob, local or any Beam filesystem), sorted; ValueError when none."""
    found = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    if not found:
        raise ValueError(f"--data {pattern}: no file matches")
    return found
