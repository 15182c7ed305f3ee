"""What ``paritygate init`` learns by running the reference itself: the least size each dynamic dimension takes,
and whether an output is a classifier's softmax. Every proposal is still marked ``# CONFIRM``.

- **Least sizes.** A crop or an unpadded ('valid') convolution shortens a dimension, and below some size the
  reference fails or returns an output with no element (SpliceAI 1.3.1 crops 5,000 bases each side: below 10,001
  bases its output is empty). The validation pass refuses such a profile (``judge.preflight``), so init proposes
  one that starts at the least size the reference takes: one run at init's usual minimum; only where that fails,
  a doubling search up to ``LIMIT`` and a bisection (each run one row of zeros, which every proposed range holds).
  Every dynamic dimension (of every input) takes the same size in a run: a sequence length shared by token ids
  and their mask stays shared.
- **A softmax.** An output of shape ``[batch, classes]`` (classes >= 2) whose rows hold values in [0, 1] that sum
  to 1 on a seeded sample is a classifier's probabilities: ``task = "classification"``.
"""

import numpy as np

LIMIT = 1 << 16  # the largest size the search tries (65,536): a dimension needing more is left to the person
SUM_ATOL = 1e-3  # a float32 softmax over 1,000 classes sums to 1 within about 1e-5; rows summing within this are one


def least_size(runner, inputs, start):
    """The least size every dynamic non-batch dimension of ``inputs`` (name -> (dtype, shape), -1 dynamic) takes at
    once, given that ``start`` is init's usual minimum: ``start`` when the reference runs there with every output
    holding elements, else the least size found above it (None: nothing up to ``LIMIT`` ran; init then keeps its
    default, and validation names the profile). ``why`` says what failed below it."""
    if not any(d == -1 for _dtype, shape in inputs.values() for d in shape[1:]):
        return None, None
    why = _fails(runner, inputs, start)
    if why is None:
        return start, None
    low, high = start, start * 2
    while high <= LIMIT and _fails(runner, inputs, high) is not None:
        low, high = high, high * 2
    if high > LIMIT:
        return None, why
    while high - low > 1:  # low fails, high runs
        mid = (low + high) // 2
        low, high = (low, mid) if _fails(runner, inputs, mid) is None else (mid, high)
    return high, why


def _fails(runner, inputs, size):
    """Why the reference cannot take ``size`` in each dynamic dimension (one row of zeros), or None."""
    feed = {name: np.zeros([1] + [size if d == -1 else int(d) for d in shape[1:]], dtype=dtype)
            for name, (dtype, shape) in inputs.items()}
    try:
        outputs = runner.infer(feed)
    except Exception as err:  # noqa: BLE001 - TensorFlow raises many types; a size it refuses is the answer
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        return f"at {size} it fails ({first.strip()[:160]})"
    empty = {k: list(np.shape(v)) for k, v in outputs.items() if np.size(v) == 0}
    return f"at {size} its output {empty} is empty" if empty else None


def softmax_outputs(runner, inputs, dims, ranges):
    """The outputs that are a ``[batch, classes]`` softmax on a seeded sample of 2 rows (``dims``: name -> the
    non-batch dims to feed; ``ranges``: name -> (low, high) the sample stays inside): {name: classes}."""
    rng = np.random.default_rng(0)
    feed = {}
    for name, (dtype, _shape) in inputs.items():
        low, high = ranges[name]
        shape = [2, *dims[name]]
        value = rng.integers(int(low), int(high), shape, endpoint=True) if np.dtype(dtype).kind in "iub" \
            else rng.uniform(low, high, shape)
        feed[name] = value.astype(dtype)
    try:
        outputs = runner.infer(feed)
    except Exception:  # noqa: BLE001 - a proposal: a model that cannot run here proposes nothing
        return {}
    found = {}
    for name, value in outputs.items():
        value = np.asarray(value, dtype=np.float64)
        if value.ndim == 2 and value.shape[1] >= 2 and np.all(np.isfinite(value)) and value.min() >= 0 \
                and value.max() <= 1 and np.allclose(value.sum(axis=1), 1.0, rtol=0, atol=SUM_ATOL):
            found[name] = int(value.shape[1])
    return found
