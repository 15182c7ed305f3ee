"""paritygate.inputs.sets: the one reader of input sets. Every bad file is one InputSetError (a SuiteError, never the
candidate's fail) naming the file, the array and what was expected; every reader of input sets (goldens, the
property pool, calibration) gives the same answer for the same file."""

import zipfile

import numpy as np
import pytest

from paritygate.backend.onnx.artifacts.loader import load_calibration
from paritygate.inputs import goldens
from paritygate.inputs.sets import InputSetError, check_arrays, read_input_set
from paritygate.inputs.strategies import model_input_pool
from paritygate.verdict import SuiteError
from tests.conftest import toy_spec


def spec_at(tmp_path, **fields):
    return toy_spec(source=tmp_path / "parity.toml", reference=tmp_path / "ref",
                    inputs={"x": ((-1, 2), "float32", (-1.0, 1.0)), "ids": ((-1, 3), "int32", (0, 9))}, **fields)


def good(rows=3):
    return {"x": np.zeros((rows, 2), np.float32), "ids": np.ones((rows, 3), np.int32)}


def saved(tmp_path, name="set.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_a_good_set_reads_in_the_configs_order_with_its_labels(tmp_path):
    found = read_input_set(spec_at(tmp_path), saved(tmp_path, ids=good()["ids"], x=good()["x"], __labels__=[0, 1, 2]))
    assert list(found.inputs) == ["x", "ids"] and found.rows == 3 and found.labels.tolist() == [0, 1, 2]


def _truncated(path):
    np.savez(path, **good(50))
    path.write_bytes(path.read_bytes()[:300])


def _npy(path):
    with open(path, "wb") as f:
        np.save(f, np.zeros(3))


@pytest.mark.parametrize("make, why", [
    (lambda p: p.write_bytes(np.random.default_rng(0).bytes(2000)), "not an .npz archive of arrays"),
    (lambda p: p.write_bytes(b""), "not an .npz archive of arrays"),
    (_truncated, "cannot read input set: "),
    (_npy, "holds one ndarray (an .npy), expected an .npz archive"),
    (lambda p: np.savez(p, x=np.array([None, 1], dtype=object)), "ValueError: it holds object arrays, which are pickles"),
    (lambda p: zipfile.ZipFile(p, "w").writestr("x.npy", b"\x93NUMPY garbage"), "cannot read input set: "),
], ids=["random-bytes", "empty", "truncated", "npy", "pickled", "bad-member"])
def test_a_file_that_does_not_open_is_one_line_naming_it(tmp_path, make, why):
    path = tmp_path / "set.npz"
    make(path)
    with pytest.raises(InputSetError) as err:
        read_input_set(spec_at(tmp_path), path)
    text = str(err.value)
    assert text.startswith(f"{path}: cannot read input set") and why in text and "\n" not in text
    assert isinstance(err.value, SuiteError)


@pytest.mark.parametrize("arrays, expected", [
    ({"x": np.zeros((3, 2), np.float32)}, "input set lacks input(s) ['ids']; expected arrays ['ids', 'x']"),
    ({**good(), "extra": np.zeros(3)}, "input set holds array(s) ['extra'] the config does not declare"),
    ({**good(), "x": np.zeros((3, 2))}, "array 'x' is float64[3, 2], expected float32 ['N', 2] (inputs.x of "),
    ({**good(), "x": np.zeros((3, 5), np.float32)}, "array 'x' is float32[3, 5], expected float32 ['N', 2]"),
    ({**good(), "ids": np.ones((4, 3), np.int32)}, "arrays hold different numbers of rows {'x': 3, 'ids': 4}"),
    ({**good(), "x": np.array([[0, np.nan]] * 3, np.float32)},
     ("array 'x' holds 3 non-finite value(s) (first nan at index [0, 1]); expected finite values in the declared "
     "range [-1.0, 1.0] (inputs.x.range of ")),
    ({**good(), "ids": np.full((3, 3), 10, np.int32)},
     ("array 'ids' holds values in [10, 10] (9 outside), expected values in the declared range [0, 9] "
     "(inputs.ids.range of ")),
], ids=["missing", "extra", "dtype", "shape", "rows", "nan", "range"])
def test_arrays_that_do_not_fit_the_spec_name_the_array_and_what_was_expected(tmp_path, arrays, expected):
    path = saved(tmp_path, **arrays)
    with pytest.raises(InputSetError) as err:
        read_input_set(spec_at(tmp_path), path)
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value)


@pytest.mark.parametrize("labels, task, expected", [
    (np.array([0, 1]), "generic", "array '__labels__' is int64[2], expected one label per row: [3]"),
    (np.zeros((3, 1), np.int64), "generic", "array '__labels__' is int64[3, 1], expected one label per row: [3]"),
    (np.array([0.0, 1.0, 1.0]), "classification", "array '__labels__' is float64, expected integer class indices"),
    (np.array([0, -1, 1]), "classification", "array '__labels__' holds -1, expected class indices >= 0"),
], ids=["count", "rank", "type", "negative"])
def test_labels_are_one_per_row_and_class_indices_for_a_classifier(tmp_path, labels, task, expected):
    path = saved(tmp_path, **good(), __labels__=labels)
    with pytest.raises(InputSetError) as err:
        read_input_set(spec_at(tmp_path, task=task), path)
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value)


def test_labels_can_be_required_or_refused(tmp_path):
    with pytest.raises(InputSetError, match=r"held-out set has no '__labels__' array; expected one label per row"):
        read_input_set(spec_at(tmp_path), saved(tmp_path, **good()), "held-out set", labels="required")
    with pytest.raises(InputSetError, match=r"calibration set holds '__labels__', which a calibration set does not"):
        read_input_set(spec_at(tmp_path), saved(tmp_path, **good(), __labels__=[0, 1, 2]), "calibration set",
                       labels="none")


def test_check_arrays_counts_rows(tmp_path):
    assert check_arrays(spec_at(tmp_path), "mem", good(5)) == 5


def test_every_reader_gives_the_same_answer_for_the_same_file(tmp_path):
    """The goldens' input set, the property pool and the calibration reader agree: a file one accepts, the others
    accept; a file one rejects, the others reject with the same line."""
    (tmp_path / "inputs").mkdir()
    path = saved(tmp_path / "inputs", "toy.npz", **{**good(), "x": np.full((3, 2), 2.0, np.float32)})
    spec = spec_at(tmp_path, calibration=path)
    messages = set()
    for read in (goldens.input_set, model_input_pool, load_calibration):
        with pytest.raises(InputSetError) as err:
            read(spec)
        messages.add(str(err.value).split(": cannot read ")[0].replace("calibration set", "input set"))
    assert len(messages) == 1, messages
    np.savez(path, **good())
    assert goldens.input_set(spec)[0]["x"].shape == (3, 2)
    assert len(model_input_pool(spec)) == 6  # its rows as the input set and as the calibration set
    assert load_calibration(spec)["ids"].shape == (3, 3)


def test_a_row_the_config_declares_not_valid_is_refused_naming_it(tmp_path):
    """``inputs.ids.not_all = [0]``: an input set holding a row of only 0 is the team's data disagreeing with its
    own config: one line naming the file, the array, the row and the key."""
    import dataclasses

    spec = spec_at(tmp_path)
    spec.inputs["ids"] = dataclasses.replace(spec.inputs["ids"], not_all=(0,))
    arrays = good()
    arrays["ids"][1] = 0
    with pytest.raises(InputSetError, match=r"set\.npz: array 'ids' row 1 \(1 row\(s\)\) holds only \[0\], which "
                                            r"inputs\.ids\.not_all of .*parity\.toml declares not a valid input"):
        read_input_set(spec, saved(tmp_path, **arrays))
