"""Seeded numpy samples from a model's input spec: the value patterns the strategies draw, and a reproducible
input set (``sample_inputs``) for goldens and validation. Imports no Hypothesis."""

import numpy as np

FLOAT_PATTERNS = ("uniform", "bounds", "zeros", "tiny", "large", "mixed_sign", "constant")
INT_PATTERNS = ("uniform", "bounds", "constant", "padded")


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


def sample_inputs(spec, count, rng, dims=None):
    """``count`` uniformly drawn samples per input (a seeded, reproducible input set); ``dims``: input name ->
    non-batch dims (default each input's ``dims``: the profile's opt for a dynamic input)."""
    dims = dims or {}
    return {name: _fill("uniform", t, t.with_batch(count, dims.get(name)), rng) for name, t in spec.inputs.items()}
