"""paritygate.common.numerics: the names the floors share."""

from paritygate.common.numerics import DESCRIPTION, PRECISIONS, describe


def test_each_numerics_mode_is_described_and_an_unknown_one_says_whose_numerics_it_is():
    assert PRECISIONS == ("fp32", "fp16", "int8")
    assert describe("strict") == DESCRIPTION["strict"] and describe("ort").startswith("ort: ")
    assert describe("tensorrt") == "tensorrt: the candidate runtime's own numerics"
