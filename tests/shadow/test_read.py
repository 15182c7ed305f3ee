import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not installed (pip install 'paritygate[beam]')")

from paritygate.shadow import read, synthetic

pytestmark = [pytest.mark.tf]


def test_checked_names_the_feature_and_what_was_expected():
    with pytest.raises(read.BadRecord, match=r"feature 'x' holds 3 values .*takes \[2, 2\] = 4") as err:
        read.checked("x", (2, 2), "<f4", np.zeros(3, np.float32))
    assert err.value.category == "shape"
    with pytest.raises(read.BadRecord, match="holds int64 values; input 'x' takes float32"):
        read.checked("x", (1,), "<f4", np.zeros(1, np.int64))
    with pytest.raises(read.BadRecord, match="1 non-finite") as err:
        read.checked("x", (2,), "<f4", np.array([1.0, np.inf], np.float32))
    assert err.value.category == "nonfinite"
    with pytest.raises(read.BadRecord, match="do not fit int8"):
        read.checked("x", (1,), "|i1", np.array([300]))
    assert read.checked("x", (2, 1), "<f4", [1.0, 2.0]).shape == (2, 1)
    with pytest.raises(read.BadRecord, match=r"1 value\(s\) \(largest magnitude 1e\+39\) overflow float32") as err:
        read.checked("x", (2,), "<f4", np.array([1e39, 1.0]))  # finite in float64, inf once cast: never judged
    assert err.value.category == "overflow"
    with pytest.raises(read.BadRecord, match="holds text") as err:
        read.checked("x", (1,), "<f4", np.array(["1.0"]))
    assert err.value.category == "dtype"


def elements(fmt, path, layout):
    good, dead = [], []
    for index, get in read.ROWS[fmt](str(path)):
        if isinstance(get, read.BadRecord):
            dead.append(get.category)
            continue
        try:
            good.append(read.element(layout, get, f"f#{index}")[:3])
        except read.BadRecord as err:
            dead.append(err.category)
    return good, dead


def test_three_formats_give_the_same_elements_and_tfrecord_bad_records_go_dead(tmp_path, mobilenet_spec):
    from paritygate.models.bundled import fixtures_dir

    source = fixtures_dir() / "inputs" / "mobilenet_heldout.npz"
    layout = read.Layout.of(mobilenet_spec, slice_feature=synthetic.LABEL)
    (tf_path,) = synthetic.write_tfrecords(tmp_path / "tf", mobilenet_spec, source, 20, bad=5)
    found = {fmt: elements(fmt, path, layout) for fmt, path in (
        ("tfrecord", tf_path), ("npz", synthetic.write_npz(tmp_path / "npz", mobilenet_spec, source, 20)),
        ("parquet", synthetic.write_parquet(tmp_path / "pq", mobilenet_spec, source, 20)))}
    assert sorted(found["tfrecord"][1]) == sorted(synthetic.BAD_KINDS)
    assert found["npz"][1] == found["parquet"][1] == []
    for fmt in ("npz", "parquet"):
        assert len(found[fmt][0]) == 20
        for (_, a, sa), (_, b, sb) in zip(found["tfrecord"][0], found[fmt][0]):
            np.testing.assert_array_equal(a["image"], b["image"])
            assert sa == sb
    keys = [k for k, _, _ in found["tfrecord"][0]]
    assert len(set(keys)) == 20 and keys[0] == "f#0"


def test_a_named_key_feature_keys_the_element(mobilenet_spec):
    layout = read.Layout.of(mobilenet_spec, key_feature="id")
    feed = {"image": np.zeros(768, np.float32), "id": np.array([b"req-42"], dtype=object)}
    key, got, _, outside = read.element(layout, feed.get, "f#0")
    assert key == "req-42" and got["image"].shape == (16, 16, 3) and outside == ()
    with pytest.raises(read.BadRecord, match="no key feature 'id'"):
        read.element(layout, {"image": feed["image"]}.get, "f#1")
    with pytest.raises(read.BadRecord, match="the key feature 'id' holds 2 values; expected one") as err:
        read.element(layout, {**feed, "id": np.array([b"a", b"b"], dtype=object)}.get, "f#2")
    assert err.value.category == "key"


def test_values_outside_the_declared_range_are_judged_and_counted(mobilenet_spec):
    layout = read.Layout.of(mobilenet_spec)
    image = np.zeros(768, np.float32)
    image[:3] = [1.5, -2.0, 0.5]  # declared range [-1, 1]
    _, feed, _, outside = read.element(layout, {"image": image}.get, "f#0")
    assert feed["image"].shape == (16, 16, 3) and outside == (("image", 2, -2.0, 1.5),)


def test_no_matching_file_is_a_usage_error(tmp_path):
    with pytest.raises(ValueError, match="no file matches"):
        read.match(str(tmp_path / "*.tfrecord"))


# -- shadow data is untrusted input (issue 38, item 8) ---------------------------------------------------------
def rows_of(fmt, path, layout):
    """(good elements, dead categories) as ReadFile emits them for one file."""
    good, dead = [], []
    for out in read.ReadFile(layout, fmt).process(str(path)):
        if hasattr(out, "tag"):
            if out.tag == read.DEAD:
                dead.append(out.value[0])
        else:
            good.append(out)
    return good, dead


def tf_records(path, payloads):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as w:
        for p in payloads:
            w.write(p)
    return path


def test_a_corrupt_record_is_a_dead_letter_and_the_records_after_it_are_read(tmp_path, mobilenet_spec):
    from paritygate.models.bundled import fixtures_dir

    layout = read.Layout.of(mobilenet_spec)
    (path,) = synthetic.write_tfrecords(tmp_path, mobilenet_spec, fixtures_dir() / "inputs" / "mobilenet_heldout.npz", 40)
    data = bytearray(path.read_bytes())
    step = len(data) // 40  # records of one size: each is `step` bytes
    data[3 * step + 100] ^= 0xFF  # record 3's data
    data[10 * step + 2] ^= 0xFF  # record 10's length field: the framing is lost there
    path.write_bytes(bytes(data))
    good, dead = rows_of("tfrecord", path, layout)
    assert dead == ["corrupt", "corrupt"] and len(good) == 38  # the 37 after the first one read, not dropped
    assert [k for k, _, _ in good][3] == "traffic-00000.tfrecord#4"


def test_a_record_claiming_a_terabyte_is_refused_before_tensorflow_reads_it(tmp_path, mobilenet_spec):
    """A length field whose CRC checks but runs past the file: TensorFlow's reader would allocate it (and crash)."""
    import struct

    from paritygate.shadow.tfrecord import masked_crc

    length = struct.pack("<Q", 2**40)
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(length + struct.pack("<I", masked_crc(length)) + b"\0" * 64)
    good, dead = rows_of("tfrecord", path, read.Layout.of(mobilenet_spec))
    assert (good, dead) == ([], ["corrupt"])


def test_gzip_records_after_a_corrupt_one_are_read_too(tmp_path, mobilenet_spec):
    import gzip

    from paritygate.models.bundled import fixtures_dir

    (path,) = synthetic.write_tfrecords(tmp_path, mobilenet_spec, fixtures_dir() / "inputs" / "mobilenet_heldout.npz", 10)
    data = bytearray(path.read_bytes())
    data[len(data) // 10 * 2 + 50] ^= 0xFF
    gz = tmp_path / "traffic.tfrecord.gz"
    gz.write_bytes(gzip.compress(bytes(data)))
    good, dead = rows_of("tfrecord", gz, read.Layout.of(mobilenet_spec))
    assert dead == ["corrupt"] and len(good) == 9


def test_paths_that_are_not_regular_files_are_refused_without_reading(tmp_path, mobilenet_spec):
    import os

    fifo = tmp_path / "traffic.tfrecord"
    os.mkfifo(fifo)  # opening it would block until a writer comes: never opened
    layout = read.Layout.of(mobilenet_spec)
    assert rows_of("tfrecord", fifo, layout) == ([], ["refused"])
    assert rows_of("npz", "/dev/zero", layout) == ([], ["refused"])


def test_npz_shards_are_read_with_the_input_set_rules(tmp_path, mobilenet_spec, monkeypatch):
    import io
    import zipfile

    layout = read.Layout.of(mobilenet_spec)
    header = io.BytesIO()  # a .npy header declaring 16 TB over 16 bytes of data
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2**42,)})
    with zipfile.ZipFile(tmp_path / "big.npz", "w") as z:
        z.writestr("image.npy", header.getvalue() + b"\0" * 16)
    assert rows_of("npz", tmp_path / "big.npz", layout) == ([], ["unreadable"])
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as z, z.open("image.npy", "w") as f:
        np.lib.format.write_array(f, np.zeros((400, 16, 16, 3), np.float32))
    monkeypatch.setenv("PARITYGATE_MAX_NPZ_MB", "0.5")  # unpacks to 1.2 MB: over the limit before a byte is unpacked
    good, dead = rows_of("npz", tmp_path / "bomb.npz", layout)
    assert (good, dead) == ([], ["unreadable"])


def test_parquet_columns_that_hold_no_numbers_are_dead_letters(tmp_path, mobilenet_spec):
    import pyarrow as pa
    import pyarrow.parquet as pq

    layout = read.Layout.of(mobilenet_spec)
    for column in (pa.array(["a", "b"]), pa.array([b"\x00", b"\x01"]), pa.array([{"v": 1.0}, {"v": 2.0}])):
        pq.write_table(pa.table({"image": column}), tmp_path / "t.parquet")
        assert rows_of("parquet", tmp_path / "t.parquet", layout) == ([], ["dtype", "dtype"])
    pq.write_table(pa.table({"image": pa.array([], pa.list_(pa.float32()))}), tmp_path / "empty.parquet")
    assert rows_of("parquet", tmp_path / "empty.parquet", layout) == ([], [])
