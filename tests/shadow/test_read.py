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


def elements(fmt, path, layout):
    good, dead = [], []
    for index, get in read.ROWS[fmt](str(path)):
        if isinstance(get, read.BadRecord):
            dead.append(get.category)
            continue
        try:
            good.append(read.element(layout, get, f"f#{index}"))
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
    key, got, _ = read.element(layout, feed.get, "f#0")
    assert key == "req-42" and got["image"].shape == (16, 16, 3)
    with pytest.raises(read.BadRecord, match="no key feature 'id'"):
        read.element(layout, {"image": feed["image"]}.get, "f#1")


def test_no_matching_file_is_a_usage_error(tmp_path):
    with pytest.raises(ValueError, match="no file matches"):
        read.match(str(tmp_path / "*.tfrecord"))
