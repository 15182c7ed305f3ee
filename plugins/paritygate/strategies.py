"""Input generation from a model's input spec: Hypothesis strategies and seeded numpy samples.

Hypothesis draws the *structure* of a feed (batch size, a value pattern per input, a seed, and a few
"hot" elements set to values Hypothesis favours: bounds, zero, integers, tiny magnitudes), and numpy
materialises the arrays. Shrinking therefore works on batch size, pattern and hot values, and large image
inputs cost no more to generate than small ones.
"""

import os

import numpy as np

FLOAT_PATTERNS = ("uniform", "bounds", "zeros", "tiny", "large", "mixed_sign", "constant")
INT_PATTERNS = ("uniform", "bounds", "constant", "padded")


def register_profiles():
    """Profiles dev / ci / nightly, chosen by HYPOTHESIS_PROFILE (default dev)."""
    from hypothesis import HealthCheck, settings

    slow = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
    # Parent: Hypothesis' own defaults, not the loaded profile: with CI set in the environment Hypothesis
    # loads its built-in "ci" profile, and our dev profile must not inherit derandomize from it.
    base = settings.get_profile("default")
    settings.register_profile("dev", base, max_examples=10, deadline=None, suppress_health_check=slow)
    settings.register_profile("ci", base, max_examples=25, derandomize=True, deadline=None, print_blob=True,
                              suppress_health_check=slow)
    settings.register_profile("nightly", base, max_examples=400, deadline=None, print_blob=True,
                              suppress_health_check=slow)
    settings.load_profile(os.getenv("HYPOTHESIS_PROFILE", "dev"))


def _fill(pattern, tensor, shape, rng):
    low, high = tensor.range
    kind = tensor.dtype.kind
    if kind in "iub":
        return _fill_int(pattern, int(low), int(high), shape, rng).astype(tensor.dtype)
    span = max(abs(low), abs(high))
    if pattern == "uniform":
        x = rng.uniform(low, high, shape)
    elif pattern == "bounds":
        x = np.where(rng.random(shape) < 0.5, low, high)
    elif pattern == "zeros":
        x = np.zeros(shape)
    elif pattern == "tiny":
        x = rng.choice([-1.0, 1.0], shape) * 10.0 ** rng.uniform(-12, -4, shape)
    elif pattern == "large":
        x = rng.choice([low, high], shape) * rng.uniform(0.9, 1.0, shape)
    elif pattern == "mixed_sign":
        x = rng.choice([-1.0, 1.0], shape) * span * 10.0 ** rng.uniform(-6, 0, shape)
    else:  # constant
        x = np.full(shape, rng.uniform(low, high))
    return np.clip(x, *_inward_bounds(tensor)).astype(tensor.dtype)


def _inward_bounds(tensor):
    """The float range rounded inwards to values of the tensor's dtype: whatever is clipped to them and cast
    stays within the inclusive range (round-to-nearest alone may step out: float32(0.7) < 0.7)."""
    low, high = tensor.range
    ftype = tensor.dtype.type
    lo, hi = ftype(low), ftype(high)
    # compare as Python floats: NumPy 2 would compare in the dtype, where float32(0.7) == 0.7
    lo = lo if float(lo) >= low else np.nextafter(lo, ftype(np.inf))
    hi = hi if float(hi) <= high else np.nextafter(hi, ftype(-np.inf))
    return float(lo), float(hi)


def _fill_int(pattern, low, high, shape, rng):
    if pattern == "uniform":
        return rng.integers(low, high, shape, endpoint=True)
    if pattern == "bounds":
        return np.where(rng.random(shape) < 0.5, low, high)
    if pattern == "constant":
        return np.full(shape, rng.integers(low, high, endpoint=True))
    # padded: along the last axis, a valid prefix of random values then the low value (padding)
    x = rng.integers(low, high, shape, endpoint=True)
    if high - low == 1:
        x = np.full(shape, high)
    lengths = rng.integers(1, shape[-1], shape[:-1], endpoint=True)
    positions = np.arange(shape[-1])
    return np.where(positions < lengths[..., None], x, low)


def sample_inputs(spec, count, rng):
    """``count`` uniformly drawn samples per input (a seeded, reproducible input set)."""
    return {name: _fill("uniform", t, t.with_batch(count), rng) for name, t in spec.inputs.items()}


def corner_feeds(spec):
    """Feeds Hypothesis always tries first: every input at its low bound, its high bound, and zero (clipped
    into range), at the largest batch. Defects at the edges of the valid range are then found every run."""
    batch = spec.max_batch
    corners = []
    for value in ("low", "high", "zero"):
        feed = {}
        for name, t in spec.inputs.items():
            low, high = t.range
            v = {"low": low, "high": high, "zero": min(max(0, low), high)}[value]
            feed[name] = np.full(t.with_batch(batch), v, dtype=t.dtype)
        corners.append(feed)
    return corners


def with_corner_examples(prop, spec, argname="feed"):
    """Decorate a Hypothesis test with ``corner_feeds(spec)`` as explicit examples."""
    from hypothesis import example

    for feed in corner_feeds(spec):
        prop = example(**{argname: feed})(prop)
    return prop


def feeds(spec, batch_sizes=None):
    """A Hypothesis strategy of feeds (input name -> array) for ``spec``, batch in 1..max_batch."""
    from hypothesis import strategies as st

    sizes = st.sampled_from(sorted(batch_sizes)) if batch_sizes else st.integers(1, spec.max_batch)

    @st.composite
    def strategy(draw):
        batch = draw(sizes)
        return {name: draw(_tensors(t, batch)) for name, t in spec.inputs.items()}

    return strategy()


def _tensors(tensor, batch):
    from hypothesis import strategies as st

    shape = tensor.with_batch(batch)
    patterns = INT_PATTERNS if tensor.dtype.kind in "iub" else FLOAT_PATTERNS

    @st.composite
    def strategy(draw):
        pattern = draw(st.sampled_from(patterns))
        seed = draw(st.integers(0, 2**32 - 1))
        x = _fill(pattern, tensor, shape, np.random.default_rng(seed))
        for _ in range(draw(st.integers(0, 3))):
            index = tuple(draw(st.integers(0, d - 1)) for d in shape)
            x[index] = draw(_values(tensor))
        return x

    return strategy()


def _values(tensor):
    from hypothesis import strategies as st

    low, high = tensor.range
    if tensor.dtype.kind in "iub":
        return st.integers(int(low), int(high))
    width = 16 if tensor.dtype == np.float16 else (32 if tensor.dtype == np.float32 else 64)
    low, high = _inward_bounds(tensor)  # Hypothesis needs bounds representable at this width
    return st.floats(low, high, allow_nan=False, allow_infinity=False, width=width)
