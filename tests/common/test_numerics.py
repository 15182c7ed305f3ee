"""paritygate.common.numerics: the names the floors share."""

from paritygate.common.numerics import DEFAULT_NUMERICS, DESCRIPTION, NUMERICS, PRECISIONS, describe


def test_each_numerics_mode_is_described_and_an_unknown_one_says_whose_numerics_it_is():
    assert PRECISIONS == ("fp32", "fp16", "int8")
    assert describe("strict") == DESCRIPTION["strict"] and describe("ort").startswith("ort: ")
    assert describe("tensorrt") == "tensorrt: the candidate runtime's own numerics"


def test_the_default_numerics_is_one_of_the_modes_and_every_mode_is_described():
    assert DEFAULT_NUMERICS in NUMERICS and set(NUMERICS) == set(DESCRIPTION)
