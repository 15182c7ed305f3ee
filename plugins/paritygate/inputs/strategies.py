"""Input generation from a model's input spec: Hypothesis strategies and seeded numpy samples.

Hypothesis draws the *structure* of a feed (batch size, a value pattern per input, a seed, and a few
"hot" elements set to values Hypothesis favours: bounds, zero, integers, tiny magnitudes, or the next float
inside a bound), and numpy materialises the arrays. Shrinking therefore works on batch size, pattern and hot
values, and large image inputs cost no more to generate than small ones.

Boundaries, where conversions break (clipping, saturation, range reduction), are always tried: the explicit
boundary batch (every element at the next float inside a bound, ``corner_feeds``) runs in every profile, and the
"edge" pattern (``paritygate.inputs.sampling``) puts every element of a float input in the outermost 0.1% of its
range; each check's report says how many of its examples held such values (``inputs.near_bound``).

Spec noise and corners alone rarely look like the model's data (the bundled ssd detects nothing in any of
them), so each batch row may instead be a row of the model's own input sets (``InputPool``: golden inputs,
held-out set, calibration set), as is or perturbed within the spec's range. Every feed is a ``Feed``: a dict
that also records where each row came from.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paritygate.common.memo import Memo, ModelKey
from paritygate.inputs.sampling import (
    FLOAT_PATTERNS,
    INT_PATTERNS,
    _fill,
    _inward_bounds,
    inside_values,
    sample_inputs,
    valid_rows,
)
from paritygate.inputs.sets import check_arrays, read_input_set

INPUT_POOLS = Memo("input_pools", key=ModelKey, close=lambda pool: None)  # forgotten once the model is done  # the model's InputPool (input_pool)


def register_profiles():
    """Profiles dev / smoke / ci / nightly, chosen by HYPOTHESIS_PROFILE (default dev)."""
    from hypothesis import HealthCheck, settings

    slow = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
    # Parent: Hypothesis' own defaults, not the loaded profile: with CI set in the environment Hypothesis
    # loads its built-in "ci" profile, and our dev profile must not inherit derandomize from it.
    base = settings.get_profile("default")
    settings.register_profile("dev", base, max_examples=10, deadline=None, suppress_health_check=slow)
    settings.register_profile("ci", base, max_examples=25, derandomize=True, deadline=None, print_blob=True,
                              suppress_health_check=slow)
    # smoke: ci's derandomized draws, fewer of them (each property's explicit corner and input-set rows still run):
    # a quick gate on a model whose every example is expensive, and the suite's own tests that run a whole model
    # only to assert what its run reports (tests/thirdparty, the wheel, warnings-as-errors)
    settings.register_profile("smoke", base, max_examples=8, derandomize=True, deadline=None, print_blob=True,
                              suppress_health_check=slow)
    settings.register_profile("nightly", base, max_examples=400, deadline=None, print_blob=True,
                              suppress_health_check=slow)
    settings.load_profile(os.getenv("HYPOTHESIS_PROFILE", "dev"))


class Feed(dict):
    """A feed (input name -> array, batch first) that records the source of each batch row in ``sources``:
    "noise", "corner:<low|high|zero|inside_high|inside_low>", or an input set ("golden", "heldout",
    "calibration"), with "~perturbed" appended for a perturbed row."""

    def __init__(self, arrays, sources):
        super().__init__(arrays)
        self.sources = list(sources)

    def __repr__(self):
        """Shapes and sources, not values: Hypothesis writes out every explicit example's arguments as it runs
        them (0.28 s of ONet's 4.4 s warm rerun went to NumPy printing arrays), and a failure's values are in its
        reproducer file, which the failure names."""
        from collections import Counter

        arrays = ", ".join(f"{k}={np.asarray(v).dtype}{list(np.shape(v))}" for k, v in self.items())
        rows = ", ".join(f"{n} {source}" for source, n in Counter(self.sources).items())
        return f"Feed({arrays}; rows: {rows})"

    def _repr_pretty_(self, printer, cycle):  # Hypothesis's printer: as repr, not as a dict of arrays
        printer.text(repr(self))


@dataclass
class InputPool:
    """Rows of a model's own input sets, stacked: ``arrays`` by input name, ``sources`` per row. Rows of one
    shape stack; a dynamic model's rows of another shape go to a pool of their own in ``others`` (by dims), so
    that ``parts()`` lists one pool per shape and ``len`` counts every row."""

    arrays: dict = field(default_factory=dict)
    sources: list = field(default_factory=list)
    files: dict = field(default_factory=dict)  # source -> the file its rows came from
    others: dict = field(default_factory=dict)  # dims key -> InputPool of rows of another shape

    def __len__(self):
        return len(self.sources) + sum(len(p) for p in self.others.values())

    def parts(self):
        """One pool per shape, each of stacked rows (this pool first, when it holds rows)."""
        return ([self] if self.sources else []) + list(self.others.values())

    def dims(self):
        """Input name -> the non-batch dims of this pool's rows."""
        return {k: tuple(v.shape[1:]) for k, v in self.arrays.items()}

    def add(self, spec, source, path, arrays):
        rows = check_arrays(spec, path, arrays)
        if not rows:
            return
        dims = {k: tuple(arrays[k].shape[1:]) for k in spec.inputs}
        if self.sources and dims != self.dims():
            self.files[source] = str(path)
            return self.others.setdefault(tuple(dims.items()), InputPool()).add(spec, source, path, arrays)
        for name in spec.inputs:
            have = self.arrays.get(name)
            self.arrays[name] = arrays[name] if have is None else np.concatenate([have, arrays[name]])
        self.sources += [source] * rows
        self.files[source] = str(path)


def model_input_pool(spec):
    """The model's own input sets as one InputPool: golden inputs (else ``inputs/<model>.npz``), the held-out
    set ``inputs/<model>_heldout.npz`` and the calibration set, each where it exists, each read and checked by
    ``paritygate.inputs.sets`` (an ``InputSetError`` names the file)."""
    from paritygate.inputs import goldens

    pool = InputPool()
    if goldens.golden_path(spec).exists():
        pool.add(spec, "golden", goldens.golden_path(spec), goldens.load_golden(spec).inputs)
    elif goldens.input_set_path(spec).exists():
        path = goldens.input_set_path(spec)
        _add_groups(spec, pool, "input_set", read_input_set(spec, path))
    if goldens.heldout_set_path(spec).exists():
        _add_groups(spec, pool, "heldout", read_input_set(spec, goldens.heldout_set_path(spec), "held-out set"))
    if spec.calibration is not None and Path(spec.calibration).exists():
        _add_groups(spec, pool, "calibration", read_input_set(spec, spec.calibration, "calibration set"))
    return pool


def _add_groups(spec, pool, source, found):
    for group in found.groups:  # one per shape
        pool.add(spec, source, found.path, group.inputs)


# A perturbed row moves by Gaussian noise of 1% of the input's range width (0.02 on an image in [-1, 1]), or,
# for integer inputs, has each element redrawn within the range with probability 5% (about one token in 16 of
# a bert sequence). Small enough to stay near the data (measured: every ssd scene keeps its detections), large
# enough to leave the exact recorded points; then clipped into the range.
PERTURB_SCALE = 0.01
PERTURB_REDRAW = 0.05


def input_pool(ctx, spec):
    """``model_input_pool(spec)``, read once per run (``INPUT_POOLS``)."""
    return INPUT_POOLS.get(ctx, ModelKey(spec.name), lambda: model_input_pool(spec))


def perturb(tensor, x, rng):
    """``x`` (one row of ``tensor``) perturbed within the tensor's range."""
    low, high = tensor.range
    if tensor.dtype.kind in "iub":
        redraw = rng.random(x.shape) < PERTURB_REDRAW
        y = np.where(redraw, rng.integers(int(low), int(high), x.shape, endpoint=True), x).astype(tensor.dtype)
    else:
        y = np.clip(x.astype(np.float64) + rng.normal(0.0, PERTURB_SCALE * (high - low), x.shape),
                    *_inward_bounds(tensor)).astype(tensor.dtype)
    return valid_rows(tensor, y[None])[0]


def pool_feeds(spec, pool, batch=None):
    """One feed per source of ``pool``: ``batch`` (default max_batch) of its rows, evenly spaced, unperturbed."""
    batch = batch or spec.max_batch
    feeds_ = []
    for part in pool.parts():  # one shape each
        for source in dict.fromkeys(part.sources):
            rows = np.flatnonzero(np.array(part.sources) == source)
            pick = rows[np.linspace(0, len(rows) - 1, min(batch, len(rows))).astype(int)]
            feeds_.append(Feed({k: v[pick] for k, v in part.arrays.items()}, [source] * len(pick)))
    return feeds_


def profile_corners(spec):
    """Input name -> non-batch dims, one dict per corner of the inputs' profiles: min, opt, max (one dict, the
    declared dims, when no input is dynamic). Inputs take their corners together: min with min."""
    if not any(t.profile for t in spec.inputs.values()):
        return [{name: t.dims for name, t in spec.inputs.items()}]
    return [{name: t.profile_dims()[i] if t.profile else t.dims for name, t in spec.inputs.items()}
            for i in range(3)]


def batch_feeds(spec, inputs, batch):
    """Feeds of ``batch`` rows at each corner of the profile (min, opt, max dims): ``inputs`` (rows of the
    model's data) repeated to ``batch`` where they have the corner's dims, else seeded uniform samples."""
    out = []
    for dims in profile_corners(spec):
        if all(tuple(inputs[k].shape[1:]) == tuple(d) for k, d in dims.items()):
            feed = {k: np.resize(v, (batch, *v.shape[1:])) for k, v in inputs.items()}
        else:
            feed = sample_inputs(spec, batch, np.random.default_rng(batch), dims)
        out.append(feed)
    return out


def corner_feeds(spec):
    """Feeds Hypothesis always tries first, at the largest batch, at each corner of a dynamic input's profile
    (min, opt, max): every input at its low bound, its high bound, and zero (clipped into range); then the
    boundary batch, every element just inside a bound (``inside_values``: the next float inside), its rows
    alternately inside the high and the low bound (a batch of 1: one feed each). Defects at the edges of the valid
    range and of the profile are then found every run. An input whose config says a row of that value alone is not
    valid (``not_all``: an attention mask of all 0) gets a valid row nearest to it (``sampling.valid_rows``: its first
    element changed)."""
    batch = spec.max_batch
    corners = []
    for dims in profile_corners(spec):
        for value in ("low", "high", "zero"):
            feed = {}
            for name, t in spec.inputs.items():
                low, high = t.range
                v = {"low": low, "high": high, "zero": min(max(0, low), high)}[value]
                feed[name] = valid_rows(t, np.full(t.with_batch(batch, dims[name]), v, dtype=t.dtype))
            corners.append(Feed(feed, [f"corner:{value}"] * batch))
        corners += _inside_feeds(spec, dims, batch)
    return corners


def _inside_feeds(spec, dims, batch):
    """The boundary batch: row i just inside the high bound for even i, the low bound for odd i."""
    sides = ["inside_high", "inside_low"]
    rows = [sides[i % 2] for i in range(batch)]
    groups = [rows] if batch > 1 else [["inside_high"], ["inside_low"]]
    feeds_ = []
    for group in groups:
        feed = {}
        for name, t in spec.inputs.items():
            up, down = inside_values(t)
            shape = t.with_batch(len(group), dims[name])
            values = np.array([down if side == "inside_high" else up for side in group], dtype=t.dtype)
            feed[name] = valid_rows(t, np.broadcast_to(values.reshape(-1, *[1] * (len(shape) - 1)), shape).copy())
        feeds_.append(Feed(feed, [f"corner:{side}" for side in group]))
    return feeds_


def with_corner_examples(prop, spec, argname="feed", pool=None, known=()):
    """Decorate a Hypothesis test with ``known`` (the inputs of recorded known failures: each a ``Feed`` from
    "known_failure"), ``corner_feeds(spec)`` and, when ``pool`` is given, one unperturbed batch of each of the
    model's input sets as explicit examples (so that these are tried on every run, whatever Hypothesis draws)."""
    from hypothesis import example

    recorded = [Feed(x, ["known_failure"] * len(next(iter(x.values())))) for x in known]
    explicit = recorded + corner_feeds(spec) + (pool_feeds(spec, pool) if pool is not None else [])
    for feed in reversed(explicit):  # decorators apply inside out: the first runs first
        prop = example(**{argname: feed})(prop)
    prop.paritygate_explicit = len(explicit)
    return prop


def explicit_count(prop):
    """How many explicit examples ``with_corner_examples`` gave ``prop`` (0 for another function)."""
    return getattr(prop, "paritygate_explicit", 0)


def feeds(spec, batch_sizes=None, pool=None):
    """A Hypothesis strategy of ``Feed``s for ``spec``, batch in 1..max_batch (or ``batch_sizes``).

    Without ``pool`` every row is spec noise (one value pattern per input). With an ``InputPool`` each row is,
    half the time, a row of the model's own input sets instead, perturbed or not (shrinking goes towards noise
    and towards unperturbed rows). One composite strategy: the parts below are plain functions of ``draw``
    (a composite made per draw costs Hypothesis a source lookup each time: 1.2 s of a 5 s ONet rerun)."""
    from hypothesis import strategies as st

    sizes = st.sampled_from(sorted(batch_sizes)) if batch_sizes else st.integers(1, spec.max_batch)
    dynamic = any(t.dynamic for t in spec.inputs.values())

    @st.composite
    def strategy(draw):
        batch = draw(sizes)
        part = pool.parts()[0] if pool is not None and len(pool) and not dynamic else None
        dims = {}
        if dynamic:  # one shape per batch: a shape of the model's own rows, or one drawn across the profile
            parts = pool.parts() if pool is not None else []
            part = draw(st.one_of(st.none(), st.sampled_from(parts))) if parts else None
            dims = part.dims() if part is not None else {n: draw(_dims(t)) for n, t in spec.inputs.items()}
        arrays = {name: _draw_tensor(draw, t, t.with_batch(batch, dims.get(name))) for name, t in spec.inputs.items()}
        sources = ["noise"] * batch
        if part is not None:
            for i in range(batch):
                sources[i] = _draw_pool_row(draw, spec, part, arrays, i) or sources[i]
        return Feed(arrays, sources)

    return strategy()


def _dims(tensor):
    """Non-batch dims within the tensor's profile: its min, opt or max, or any dims in between."""
    from hypothesis import strategies as st

    if not tensor.profile:
        return st.just(tensor.dims)
    low, high = tensor.profile[0][1:], tensor.profile[2][1:]
    between = st.tuples(*(st.integers(a, b) for a, b in zip(low, high)))
    return st.one_of(st.sampled_from(tensor.profile_dims()), between)


def _draw_pool_row(draw, spec, pool, arrays, i):
    """Draw whether row ``i`` of ``arrays`` becomes a pool row (written in place); returns its source or None."""
    from hypothesis import strategies as st

    row = draw(st.one_of(st.none(), st.integers(0, len(pool.sources) - 1)))
    if row is None:
        return None
    seed = draw(st.one_of(st.none(), st.integers(0, 2**32 - 1)))
    rng = None if seed is None else np.random.default_rng(seed)
    for name, t in spec.inputs.items():
        x = pool.arrays[name][row]
        arrays[name][i] = x if rng is None else perturb(t, x, rng)
    return pool.sources[row] + ("" if rng is None else "~perturbed")


def _draw_tensor(draw, tensor, shape):
    """An array of ``shape``: a value pattern filled from a drawn seed, then up to 3 hot elements."""
    from hypothesis import strategies as st

    pattern = draw(st.sampled_from(INT_PATTERNS if tensor.dtype.kind in "iub" else FLOAT_PATTERNS))
    seed = draw(st.integers(0, 2**32 - 1))
    x = _fill(pattern, tensor, shape, np.random.default_rng(seed))
    for _ in range(draw(st.integers(0, 3))):
        index = tuple(draw(st.integers(0, d - 1)) for d in shape)
        x[index] = draw(_values(tensor))
    return valid_rows(tensor, x)


def _values(tensor):
    from hypothesis import strategies as st

    low, high = tensor.range
    if tensor.dtype.kind in "iub":
        return st.integers(int(low), int(high))
    width = 16 if tensor.dtype == np.float16 else (32 if tensor.dtype == np.float32 else 64)
    low, high = _inward_bounds(tensor)  # Hypothesis needs bounds representable at this width
    anywhere = st.floats(low, high, allow_nan=False, allow_infinity=False, width=width)
    return st.one_of(anywhere, st.sampled_from(inside_values(tensor)))  # or one element just inside a bound
