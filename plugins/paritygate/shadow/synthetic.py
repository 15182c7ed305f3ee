"""Recorded-like traffic from an input set (``fixtures/inputs/<model>.npz``): the set's rows drawn with
replacement and perturbed by uniform noise of NOISE x the input's declared range, clipped into that range (inputs
the model could be sent, near the data it was built for). Written as TFRecord ``tf.train.Example``s, ``.npz``
shards or Parquet, with the row's label (``__labels__``) as the feature ``label`` for slicing, and ``bad`` records
spread among them (one of each BAD_KINDS in turn) to exercise the dead-letter output. For tests, the benchmark
(docs/bench_shadow.py) and a first try of ``paritygate shadow`` on the bundled models."""

from pathlib import Path

import numpy as np

from paritygate.lazy import lazy_import

tf = lazy_import("tensorflow")

NOISE = 0.05
LABEL = "label"
BAD_KINDS = ("missing", "shape", "nonfinite", "dtype", "unreadable")
CHUNK = 4096


def rows(spec, input_set, n, seed=0):
    """Chunks of (feed: input name -> [m, *dims] array, labels [m]) totalling ``n`` rows."""
    rng = np.random.default_rng(seed)
    with np.load(input_set, allow_pickle=False) as data:
        base = {k: data[k] for k in data.files}
    size = len(next(iter(base.values())))
    labels = base.get("__labels__", np.full(size, -1))
    for start in range(0, n, CHUNK):
        idx = rng.integers(0, size, min(CHUNK, n - start))
        feed = {}
        for name, t in spec.inputs.items():
            lo, hi = t.range
            x = base[name][idx].astype(np.float64)
            if np.dtype(t.dtype).kind == "f":
                x = x + rng.uniform(-1.0, 1.0, x.shape) * NOISE * (hi - lo)
            feed[name] = np.clip(x, lo, hi).astype(t.dtype)
        yield feed, labels[idx]


def _bad_example(kind, name, values):
    if kind == "missing":
        return tf.train.Example().SerializeToString()
    if kind == "unreadable":
        return b"\x08not a tf.train.Example\xff"
    flat = values.ravel().astype(np.float32)
    if kind == "shape":
        flat = flat[:-1]
    elif kind == "nonfinite":
        flat = flat.copy()
        flat[0] = np.nan
    feature = (tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * flat.size)) if kind == "dtype"
               else tf.train.Feature(float_list=tf.train.FloatList(value=flat)))
    return tf.train.Example(features=tf.train.Features(feature={name: feature})).SerializeToString()


def example_bytes(feed, i, label):
    features = {}
    for name, array in feed.items():
        flat = array[i].ravel()
        features[name] = (tf.train.Feature(float_list=tf.train.FloatList(value=flat)) if flat.dtype.kind == "f"
                          else tf.train.Feature(int64_list=tf.train.Int64List(value=flat)))
    features[LABEL] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_tfrecords(folder, spec, input_set, n, shards=1, seed=0, bad=0):
    """``n`` good records (+ ``bad`` bad ones, spread evenly) in ``shards`` files ``traffic-SSSSS.tfrecord``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"traffic-{s:05d}.tfrecord" for s in range(shards)]
    writers = [tf.io.TFRecordWriter(str(p)) for p in paths]
    every = max(n // bad, 1) if bad else None
    written = bad_written = 0
    try:
        for feed, labels in rows(spec, input_set, n, seed):
            for i, label in enumerate(labels):
                writer = writers[written % shards]
                if every and bad_written < bad and written % every == every // 2:
                    name = next(iter(feed))
                    writer.write(_bad_example(BAD_KINDS[bad_written % len(BAD_KINDS)], name, feed[name][i]))
                    bad_written += 1
                writer.write(example_bytes(feed, i, label))
                written += 1
    finally:
        for w in writers:
            w.close()
    return paths


def write_npz(folder, spec, input_set, n, seed=0):
    """``n`` rows in one ``traffic.npz`` (arrays by input name, plus ``label``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chunks = list(rows(spec, input_set, n, seed))
    arrays = {k: np.concatenate([c[0][k] for c in chunks]) for k in spec.inputs}
    np.savez(folder / "traffic.npz", **arrays, **{LABEL: np.concatenate([c[1] for c in chunks])})
    return folder / "traffic.npz"


def write_parquet(folder, spec, input_set, n, seed=0):
    """``n`` rows in one ``traffic.parquet`` (a list<float> column per input, flattened, plus ``label``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chunks = list(rows(spec, input_set, n, seed))
    columns = {k: [row.ravel().tolist() for c in chunks for row in c[0][k]] for k in spec.inputs}
    columns[LABEL] = [int(x) for c in chunks for x in c[1]]
    pq.write_table(pa.table(columns), folder / "traffic.parquet")
    return folder / "traffic.parquet"
