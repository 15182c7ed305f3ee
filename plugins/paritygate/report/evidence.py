"""The input values behind a failing output's worst element, read back from the check's reproducer, so the
report shows what was fed where the candidate went furthest wrong."""

import numpy as np

MAX_VALUES = 16  # an input row up to this many values is shown whole; a longer one by its summary and head


def worst_inputs(npz_path, batch_element):
    """{input name: {"shape", "dtype", "values" | "head", "min", "max", "nan", "inf"}} for one batch element
    of a reproducer's inputs; raises OSError / KeyError / IndexError when the file does not hold it."""
    from paritygate.cli.replay import load_reproducer

    _, inputs = load_reproducer(npz_path)
    out = {}
    for name, array in inputs.items():
        row = np.asarray(array)[batch_element] if np.ndim(array) else np.asarray(array)
        out[name] = _describe(row)
    return out


def _describe(row):
    flat = row.ravel()
    d = {"shape": list(row.shape), "dtype": row.dtype.name}
    if flat.size <= MAX_VALUES:
        d["values"] = flat.tolist()
        return d
    d["head"] = flat[:8].tolist()
    if np.issubdtype(row.dtype, np.number):
        finite = flat[np.isfinite(flat)] if np.issubdtype(row.dtype, np.floating) else flat
        d.update(min=finite.min().item() if finite.size else None, max=finite.max().item() if finite.size else None)
        if np.issubdtype(row.dtype, np.floating):
            d.update(nan=int(np.isnan(flat).sum()), inf=int(np.isinf(flat).sum()))
    return d


def attach_worst_inputs(details):
    """Add ``worst["inputs"]`` to each failing output of ``details`` that has a reproducer; a reproducer that
    cannot be read leaves ``worst["inputs_error"]`` saying why (never a silent gap)."""
    repro = details.get("reproducer") or {}
    npz = repro.get("npz")
    if not npz:
        return details
    for o in details.get("outputs") or []:
        w = o.get("worst") if isinstance(o, dict) else None
        if not w or "batch_element" not in w or "inputs" in w:
            continue
        from paritygate.cli.replay import ReplayError

        try:
            w["inputs"] = worst_inputs(npz, w["batch_element"])
        except (ReplayError, OSError, KeyError, IndexError, ValueError) as err:
            w["inputs_error"] = f"could not read the inputs of batch element {w['batch_element']} from {npz}: {err}"
    return details
