"""paritygate.inputs.strategies: every generated feed respects dtype, shape (batch 1..max_batch) and the inclusive
range, for every pattern; bounds not representable in float32 work; 'padded' makes prefix masks; profiles."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st

from paritygate.inputs import sampling, strategies
from paritygate.inputs.strategies import FLOAT_PATTERNS, INT_PATTERNS, feeds, sample_inputs
from tests.conftest import toy_spec

MIXED = toy_spec(max_batch=5, inputs={
    "image": ((-1, 4, 4, 3), "float32", (-1.0, 1.0)),
    "odd": ((-1, 3), "float32", (0.1, 0.7)),  # neither bound is a float32
    "high": ((-1, 2), "float32", (0.7, 0.9)),  # float32(0.7) < 0.7: rounding must go inwards
    "half": ((-1, 2), "float16", (-0.1, 1000.3)),
    "wide": ((-1, 2), "float64", (-1e300, 1e300)),
    "ids": ((-1, 8), "int32", (0, 29_999)),
    "mask": ((-1, 8), "int32", (0, 1)),
    "byte": ((-1, 3), "uint8", (0, 255)),
    "small": ((-1, 3), "int8", (-128, 127)),
    "big": ((-1, 2), "int64", (-2**63, 2**63 - 1)),
    "flag": ((-1, 2), "bool", (0, 1)),
    "narrow": ((-1, 2), "int32", (7, 7)),
})


def assert_respects(spec, feed, batch_sizes=None):
    assert list(feed) == list(spec.inputs)
    batches = {v.shape[0] for v in feed.values()}
    assert len(batches) == 1, f"inputs of one feed differ in batch size: {batches}"
    batch = batches.pop()
    assert batch in (batch_sizes or range(1, spec.max_batch + 1))
    for name, tensor in spec.inputs.items():
        x = feed[name]
        assert x.dtype == tensor.dtype, name
        assert x.shape == tensor.with_batch(batch), name
        low, high = tensor.range
        if tensor.dtype.kind in "iub":  # exact, in Python integers
            assert int(x.min()) >= low and int(x.max()) <= high, (name, x.min(), x.max())
        else:  # in float64, so that a bound rounded outwards to the dtype is caught
            assert np.isfinite(x).all(), name
            wide = x.astype(np.float64)
            assert wide.min() >= low and wide.max() <= high, (name, wide.min(), wide.max())


@given(feeds(MIXED))
def test_feeds_respect_dtype_shape_and_range(feed):
    assert_respects(MIXED, feed)


@given(feeds(MIXED, batch_sizes=[2, 4]))
def test_feeds_with_given_batch_sizes(feed):
    assert_respects(MIXED, feed, [2, 4])


@settings(max_examples=60)
@given(st.sampled_from(FLOAT_PATTERNS), st.sampled_from(["odd", "high", "half", "wide", "image"]),
       st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_every_float_pattern_respects_the_range(pattern, name, seed, batch):
    tensor = MIXED.inputs[name]
    x = strategies._fill(pattern, tensor, tensor.with_batch(batch), np.random.default_rng(seed))
    assert_respects(toy_spec(max_batch=5, inputs={name: (tensor.shape, tensor.dtype, tensor.range)}), {name: x})


@settings(max_examples=60)
@given(st.sampled_from(INT_PATTERNS), st.sampled_from(["ids", "mask", "byte", "small", "big", "flag", "narrow"]),
       st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_every_int_pattern_respects_the_range(pattern, name, seed, batch):
    tensor = MIXED.inputs[name]
    x = strategies._fill(pattern, tensor, tensor.with_batch(batch), np.random.default_rng(seed))
    assert_respects(toy_spec(max_batch=5, inputs={name: (tensor.shape, tensor.dtype, tensor.range)}), {name: x})


@given(st.sampled_from(["odd", "high", "half"]).flatmap(lambda n: st.tuples(st.just(n),
                                                                          strategies._values(MIXED.inputs[n]))))
def test_hot_values_for_bounds_not_representable_in_the_dtype(name_value):
    name, v = name_value
    tensor = MIXED.inputs[name]
    low, high = tensor.range
    assert low <= v <= high and float(tensor.dtype.type(v)) == v


@pytest.mark.parametrize("name, inward", [("odd", (0.10000000149011612, 0.699999988079071)),
                                          ("high", (0.7000000476837158, 0.8999999761581421)),
                                          ("half", (-0.0999755859375, 1000.0))])
def test_bounds_are_rounded_inwards_to_the_dtype(name, inward):
    assert strategies._inward_bounds(MIXED.inputs[name]) == inward


@settings(max_examples=40)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_padded_int_pattern_makes_prefix_masks(seed, batch):
    tensor = MIXED.inputs["mask"]
    mask = strategies._fill("padded", tensor, tensor.with_batch(batch), np.random.default_rng(seed))
    for row in mask:
        length = int(row.sum())
        assert length >= 1  # never all padding
        assert (row[:length] == 1).all() and (row[length:] == 0).all(), row


@settings(max_examples=40)
@given(st.integers(0, 2**32 - 1))
def test_padded_ids_are_padded_with_the_low_value_after_a_prefix(seed):
    tensor = MIXED.inputs["ids"]
    ids = strategies._fill("padded", tensor, tensor.with_batch(3), np.random.default_rng(seed))
    positions = np.arange(ids.shape[1])
    for row in ids:
        nonpad = positions[row != 0]
        if nonpad.size:  # everything after the last non-padding token is padding
            assert (row[nonpad.max() + 1:] == 0).all()


def test_sample_inputs_are_seeded_and_respect_the_spec():
    a = sample_inputs(MIXED, 7, np.random.default_rng(3))
    b = sample_inputs(MIXED, 7, np.random.default_rng(3))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert_respects(toy_spec(max_batch=7, inputs={n: (t.shape, t.dtype, t.range) for n, t in MIXED.inputs.items()}),
                    a)


PROFILES = (
    "import json\n"
    "from hypothesis import settings\n"
    "from paritygate.inputs.strategies import register_profiles\n"
    "register_profiles()\n"
    "def show(s): return [s.max_examples, s.derandomize, s.deadline]\n"
    "print(json.dumps({'current': show(settings()), **{n: show(settings.get_profile(n)) for n in ('dev', 'ci', "
    "'nightly')}}))\n")


@pytest.mark.parametrize("chosen", [None, "ci", "nightly"])
def test_profiles_exist_and_hypothesis_profile_selects(tmp_path, chosen):
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    if chosen:
        env["HYPOTHESIS_PROFILE"] = chosen
    proc = subprocess.run([sys.executable, "-c", PROFILES], capture_output=True, text=True, env=env, cwd=tmp_path,
                          check=True)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (got["dev"], got["ci"], got["nightly"]) == ([10, False, None], [25, True, None], [400, False, None])
    assert got["current"] == got[chosen or "dev"]  # dev is the default


# -- in-distribution inputs: the model's own input sets, as is and perturbed ------------------------------
def _pool():
    spec = toy_spec(max_batch=4, inputs={"x": ((-1, 2), "float32", (-1.0, 1.0)), "ids": ((-1, 3), "int32", (0, 9))})
    pool = strategies.InputPool()
    pool.add(spec, "golden", "g.npz", {"x": np.full((3, 2), 0.5, np.float32), "ids": np.full((3, 3), 4, np.int32)})
    pool.add(spec, "calibration", "c.npz", {"x": np.full((2, 2), 1.0, np.float32), "ids": np.full((2, 3), 9, np.int32)})
    return spec, pool


@settings(max_examples=40)
@given(st.data())
def test_feeds_draw_rows_from_the_input_sets_and_record_their_sources(data):
    spec, pool = _pool()
    feed = data.draw(feeds(spec, pool=pool))
    assert_respects(spec, feed)
    assert len(feed.sources) == feed["x"].shape[0]
    for i, source in enumerate(feed.sources):
        assert source in ("noise", "golden", "golden~perturbed", "calibration", "calibration~perturbed")
        if source == "golden":
            assert (feed["x"][i] == 0.5).all() and (feed["ids"][i] == 4).all()


def test_each_input_set_is_an_explicit_example():
    spec, pool = _pool()
    explicit = strategies.pool_feeds(spec, pool)
    assert [f.sources for f in explicit] == [["golden"] * 3, ["calibration"] * 2]
    assert [f.sources[0] for f in strategies.corner_feeds(spec)] == ["corner:low", "corner:high", "corner:zero",
                                                                     "corner:inside_high"]


@settings(max_examples=30)
@given(st.integers(0, 2**32 - 1))
def test_perturbation_stays_within_the_range(seed):
    spec, _ = _pool()
    rng = np.random.default_rng(seed)
    x = strategies.perturb(spec.inputs["x"], np.array([1.0, -1.0], np.float32), rng)
    ids = strategies.perturb(spec.inputs["ids"], np.array([0, 9, 5], np.int32), rng)
    assert x.dtype == np.float32 and -1.0 <= x.min() and x.max() <= 1.0
    assert ids.dtype == np.int32 and 0 <= ids.min() and ids.max() <= 9


# A BERT attention mask: a row of only 0 masks every token (softmax over nothing: NaN at fp16), not a valid input
MASKED = toy_spec(max_batch=3, inputs={"mask": ((-1, 6), "int32", (0, 1)), "x": ((-1, 2), "float32", (-1.0, 1.0))})
MASKED.inputs["mask"] = dataclasses.replace(MASKED.inputs["mask"], not_all=(0,))


def _rows_all_zero(x):
    return int(np.all(x.reshape(len(x), -1) == 0, axis=1).sum())


def test_corners_keep_a_row_the_config_declares_invalid_out():
    """The low and zero corners set the mask to 0: its rows get their first element at 1 (a mask over [CLS]); the
    boundary batch (just inside each bound) keeps its rows valid too."""
    corners = strategies.corner_feeds(MASKED)
    assert len(corners) == 4 and corners[3].sources[0].startswith("corner:inside")
    for feed in corners:
        assert _rows_all_zero(feed["mask"]) == 0, feed.sources
    low = corners[0]
    assert low["mask"][:, 0].tolist() == [1, 1, 1] and not low["mask"][:, 1:].any() and (low["x"] == -1.0).all()


@settings(max_examples=60, derandomize=True, deadline=None)
@given(feeds(MASKED))
def test_no_drawn_row_is_one_the_config_declares_invalid(feed):
    assert_respects(MASKED, feed)
    assert _rows_all_zero(feed["mask"]) == 0


def test_samples_and_perturbations_keep_rows_valid():
    rng = np.random.default_rng(0)
    tensor = MASKED.inputs["mask"]
    for seed in range(20):
        assert _rows_all_zero(sample_inputs(MASKED, 8, np.random.default_rng(seed))["mask"]) == 0
        assert _rows_all_zero(strategies.perturb(tensor, np.zeros(6, np.int32), rng)[None]) == 0


# -- just inside the bounds (issue 41) --------------------------------------------------------------------------
def test_the_boundary_batch_puts_every_element_just_inside_a_bound():
    """Rows alternate: the next float below the high bound, above the low bound; integers step one inside, a
    range with no value inside (a mask, a bool) holds its high bound, never an all-low mask."""
    boundary = [f for f in strategies.corner_feeds(MIXED) if f.sources[0].startswith("corner:inside")]
    assert len(boundary) == 1 and boundary[0].sources == ["corner:inside_high", "corner:inside_low"] * 2 + [
        "corner:inside_high"]
    feed = boundary[0]
    assert_respects(MIXED, feed, [5])
    one = np.float32(1.0)
    assert (feed["image"][0] == np.nextafter(one, np.float32(0))).all()
    assert (feed["image"][1] == np.nextafter(-one, np.float32(0))).all()
    assert (feed["high"][0] == np.nextafter(np.float32(0.9), np.float32(0))).all(), "from the bound rounded inwards"
    assert (feed["half"][0] == np.float16(999.5)).all(), "below 1000.3 rounded inwards to float16: 1000.0"
    assert (feed["ids"][0] == 29_998).all() and (feed["ids"][1] == 1).all()
    assert (feed["mask"] == 1).all() and feed["flag"].all() and (feed["narrow"] == 7).all()
    ids_only = toy_spec(inputs={"ids": ((-1, 8), "int32", (0, 29_999)), "mask": ((-1, 8), "int32", (0, 1))})
    (ints,) = [f for f in strategies.corner_feeds(ids_only) if f.sources[0].startswith("corner:inside")]
    assert sampling.near_bound(ids_only, ints), "an integer input's next value inside counts as near a bound"
    assert not sampling.in_boundary_band(ids_only.inputs["mask"], ints["mask"]).any()


def test_a_batch_of_one_gets_a_boundary_feed_per_bound():
    spec = toy_spec(max_batch=1)
    boundary = [f.sources for f in strategies.corner_feeds(spec) if f.sources[0].startswith("corner:inside")]
    assert boundary == [["corner:inside_high"], ["corner:inside_low"]]


@settings(max_examples=60)
@given(st.sampled_from(["odd", "high", "half", "wide", "image"]), st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_the_edge_pattern_stays_in_the_boundary_band(name, seed, batch):
    tensor = MIXED.inputs[name]
    x = strategies._fill("edge", tensor, tensor.with_batch(batch), np.random.default_rng(seed))
    assert_respects(toy_spec(max_batch=5, inputs={name: (tensor.shape, tensor.dtype, tensor.range)}), {name: x})
    assert sampling.in_boundary_band(tensor, x).all(), (name, x)


def test_the_share_of_drawn_examples_near_a_bound():
    """The share docs/checks.md states: of the drawn inputs of a one-input float model, about 40% hold an element
    just inside a bound (measured: 160 of these 400 derandomized examples; random runs of 25: 20%..76%, mean 42%,
    over 40 runs); asserted: at least a quarter of 400."""
    spec, seen = toy_spec(max_batch=4), []

    @settings(max_examples=400, derandomize=True, database=None, deadline=None)
    @given(feeds(spec))
    def draw(feed):
        seen.append(sampling.near_bound(spec, feed))

    draw()
    assert sum(seen) >= len(seen) / 4, f"{sum(seen)} of {len(seen)} drawn examples near a bound"
