"""paritygate.backend.iomap: reference <-> candidate names by explicit, name, signature, decorated and single rules."""

import pytest

from paritygate.backend.iomap import MappingError, map_names, undecorated


def pairs(*args, **kwargs):
    return {r: c for r, (c, _) in map_names(*args, **kwargs).items()}


def test_tf2onnx_decorations_are_undone():
    assert undecorated("serving_default_input_2:0") == "input_2"
    assert undecorated("x:0") == "x" and undecorated("predict_x:0", "predict") == "x"
    assert pairs("input", ["input_2"], ["serving_default_input_2:0"]) == {"input_2": "serving_default_input_2:0"}


def test_the_signature_binds_positional_outputs():
    bound = {"contour": "StatefulPartitionedCall:0", "note": "StatefulPartitionedCall:1",
             "onset": "StatefulPartitionedCall:2"}
    cands = ["StatefulPartitionedCall:2", "StatefulPartitionedCall:1", "StatefulPartitionedCall:0"]
    got = map_names("output", ["contour", "note", "onset"], cands, bound=bound)
    assert {r: c for r, (c, _) in got.items()} == bound
    assert {rule for _, rule in got.values()} == {"signature"}


def test_names_win_so_swapped_outputs_stay_swapped():
    # the candidate computes y and z into each other's names: pairing by name keeps the swap visible
    assert pairs("output", ["y", "z"], ["z", "y"], bound={"y": "z", "z": "y"}) == {"y": "y", "z": "z"}


def test_explicit_mapping_and_a_single_leftover():
    got = map_names("output", ["probs", "logits"], ["out_a", "logits"], explicit={"probs": "out_a"})
    assert got == {"probs": ("out_a", "explicit"), "logits": ("logits", "name")}
    assert map_names("input", ["image"], ["input.1"]) == {"image": ("input.1", "single")}


def test_ambiguity_names_both_lists_and_the_lines_to_write():
    with pytest.raises(MappingError, match=r"reference outputs \['a', 'b'\], candidate outputs \['o1', 'o2'\].*"
                                           r"\[models.outputs\] a = \"<one of \['o1', 'o2'\]>\""):
        map_names("output", ["a", "b"], ["o1", "o2"])


def test_a_wrong_explicit_name_and_an_extra_candidate_tensor_are_errors():
    with pytest.raises(MappingError, match=r"input 'x' is mapped to candidate input 'nope', which does not exist"):
        map_names("input", ["x"], ["x:0"], explicit={"x": "nope"})
    with pytest.raises(MappingError, match=r"candidate output\(s\) \['extra'\] answer to no reference output"):
        map_names("output", ["y"], ["y", "extra"])
