"""Seeded numpy samples from a model's input spec: the value patterns the strategies draw, and a reproducible
input set (``sample_inputs``) for goldens and validation. Imports no Hypothesis."""

import numpy as np

FLOAT_PATTERNS = ("uniform", "bounds", "zeros", "tiny", "large", "mixed_sign", "constant", "edge")
INT_PATTERNS = ("uniform", "bounds", "constant", "padded")

# The boundary band: values strictly inside a bound, within this share of the range's width of it (the "edge"
# pattern draws every element there, half of them the next value inside). Source: issue 41, "a band of the
# outermost 0.1% of the range": conversions break at the bounds (clipping, saturation, range reduction), and an
# fp32 candidate wrong only for 0.999 < x < 1.0 in [-1, 1] passed every draw of the other patterns.
BOUNDARY_BAND = 1e-3
BOUNDARY_TEXT = ("an element strictly inside a bound and within 0.1% of the range's width of it (an integer input: "
                 "at least the next integer)")


def _fill(pattern, tensor, shape, rng):
    return valid_rows(tensor, _filled(pattern, tensor, shape, rng))


def valid_value(dtype, bounds, excluded):
    """A value within ``bounds`` (inclusive) that is not in ``excluded``: the high bound, else the low one, else one
    in between (the first integer for an integer dtype); None when the range holds no other value."""
    low, high = bounds
    picks = [high, low] + (list(range(int(low) + 1, min(int(high), int(low) + 66))) if np.dtype(dtype).kind in "iub"
                           else [(low + high) / 2])
    return next((v for v in picks if v not in excluded), None)


def valid_rows(tensor, x):
    """``x`` (batch first) with no row made only of ``tensor.not_all`` values (the config says such a row is not a
    valid input: an attention mask of all 0): each such row's first element is set to ``valid_value``."""
    if not getattr(tensor, "not_all", ()) or not np.size(x):
        return x
    flat = x.reshape(len(x), -1)
    bad = np.all(np.isin(flat, np.asarray(tensor.not_all, dtype=x.dtype)), axis=1)
    if bad.any():
        flat = flat.copy()
        flat[bad, 0] = valid_value(tensor.dtype, tensor.range, tensor.not_all)
        x = flat.reshape(x.shape)
    return x


def _filled(pattern, tensor, shape, rng):
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
    elif pattern == "edge":
        x = _edge(tensor, shape, rng)
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


def inside_values(tensor):
    """(the next value of the tensor's dtype above its low bound, the next below its high bound): for a float
    input ``np.nextafter`` inwards from the bounds rounded inwards, for an integer one low + 1 and high - 1. A
    range holding no value strictly inside (a [0, 1] mask, a bool, one value) gives (high, high): the bound a
    valid feed most often holds (an all-attending mask), never the all-low one a config may declare invalid."""
    low, high = tensor.range
    if tensor.dtype.kind in "iub":
        return (int(low) + 1, int(high) - 1) if int(high) - int(low) >= 2 else (int(high), int(high))
    lo, hi = _inward_bounds(tensor)
    ftype = tensor.dtype.type
    up, down = np.nextafter(ftype(lo), ftype(np.inf)), np.nextafter(ftype(hi), ftype(-np.inf))
    return (float(up), float(down)) if float(up) <= float(down) else (lo, hi)


def boundary_band(tensor):
    """The width of the boundary band of a float input: ``BOUNDARY_BAND`` of its range (in float64)."""
    low, high = tensor.range
    return BOUNDARY_BAND * float(high) - BOUNDARY_BAND * float(low)  # no overflow on a range near float64's max


def in_boundary_band(tensor, x):
    """Elements of ``x`` strictly inside a bound of ``tensor`` and within its boundary band (a bool array); for an
    integer input the band holds at least the next integer inside (token id 1 of [0, 30521]; a [0, 1] mask has
    none)."""
    x = np.asarray(x)
    if not x.size:
        return np.zeros(x.shape, bool)
    low, high = tensor.range
    band, wide = boundary_band(tensor), x.astype(np.float64)
    if tensor.dtype.kind in "iub":
        band = max(1.0, np.floor(band))
    return (wide > low) & (wide < high) & ((wide <= low + band) | (wide >= high - band))


def near_bound(spec, feed):
    """Whether some input of ``feed`` holds an element in its boundary band (``in_boundary_band``)."""
    return any(in_boundary_band(t, feed[name]).any() for name, t in spec.inputs.items() if name in feed)


def _edge(tensor, shape, rng):
    """Every element in the boundary band, at either bound (a fair coin each); half of them exactly the next
    value inside the bound, the others uniform over the band (one rounded out of the band by the dtype, float16's
    0.5 steps near 1000, takes the next value inside instead)."""
    (up, down), band = inside_values(tensor), boundary_band(tensor)
    low, high = tensor.range
    at_low, exact = rng.random(shape) < 0.5, rng.random(shape) < 0.5
    nearest = np.where(at_low, up, down).astype(tensor.dtype)
    offset = rng.uniform(0.0, band, shape)
    x = np.clip(np.where(at_low, low + offset, high - offset), up, down).astype(tensor.dtype)
    return np.where(exact | ~in_boundary_band(tensor, x), nearest, x)


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


def sample_inputs(spec, count, rng, dims=None):
    """``count`` uniformly drawn samples per input (a seeded, reproducible input set); ``dims``: input name ->
    non-batch dims (default each input's ``dims``: the profile's opt for a dynamic input)."""
    dims = dims or {}
    return {name: _fill("uniform", t, t.with_batch(count, dims.get(name)), rng) for name, t in spec.inputs.items()}
