"""Reproducers: a check's failing inputs saved as an ``.npz`` (allow_pickle=False) plus Polygraphy's inputs JSON
(``polygraphy run --load-inputs``), which ``paritygate replay`` (paritygate.cli.replay) judges again; and the
input values behind a failing output's worst element, described from the arrays the check ran, so that the result
(and the report) shows what was fed where the candidate went furthest wrong."""

import io
import json
from pathlib import Path

import numpy as np

from paritygate.common.digest import digest as content_digest
from paritygate.files import write_file

META = "__meta__"
SCHEMA = 1  # the meta's "schema"; a reproducer written before the field is version 1
FIELDS = ("config", "model", "precision", "check", "runtime")  # required in the meta, each a string
MAX_VALUES = 16  # an input row up to this many values is shown whole; a longer one by its summary and head


class ReplayError(Exception):
    """The reproducer, its config or a runtime could not be loaded; the message names the file."""


def save_reproducer(folder, spec, precision, check, runtime, inputs, failures, fp16_keep_fp32=None, numerics=None):
    """Write ``<model>-<precision>-<check>-<hash>.npz`` (+ Polygraphy inputs JSON) under ``folder``; returns the
    paths and the one-line replay command. The meta records the candidate ``runtime`` and the run's ``numerics``
    (--parity-numerics), which replay honours."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    digest = content_digest(inputs)[:12]
    stem = folder / f"{spec.name}-{precision}-{check}-{digest}"
    meta = {"schema": SCHEMA, "config": str(spec.source), "model": spec.name, "precision": precision, "check": check,
            "runtime": runtime, "numerics": numerics, "fp16_keep_fp32": list(fp16_keep_fp32) if fp16_keep_fp32 is not None else None,
            "failures": failures[:20]}
    npz = stem.with_suffix(".npz")
    buffer = io.BytesIO()
    np.savez(buffer, **{f"input:{k}": v for k, v in inputs.items()}, **{META: np.array(json.dumps(meta))})
    write_file(npz, buffer.getvalue(), "a reproducer")  # in the report folder: never through a planted symlink
    from paritygate.common import commands

    out = {"npz": str(npz), "command": commands.replay(spec.source, npz)}
    try:
        from polygraphy.json import to_json

        polygraphy_json = stem.with_suffix(".polygraphy-inputs.json")
        write_file(polygraphy_json, to_json([dict(inputs)]), "a reproducer")  # `polygraphy run --load-inputs`
        out["polygraphy_inputs"] = str(polygraphy_json)
    except ImportError:
        out["polygraphy_inputs"] = None  # polygraphy not installed (pip install polygraphy)
    return out


def load_reproducer(path):
    """(meta, inputs) of a saved reproducer; ReplayError naming the file when it is not one."""
    from paritygate.files import check_version
    from paritygate.inputs.sets import InputSetError, read_npz

    expected = f"a paritygate reproducer (.npz with {META} and input:<name> arrays)"
    try:
        data = read_npz(path, "reproducer")
    except InputSetError as err:
        why = str(err).removeprefix(f"{path}: ")
        raise ReplayError(f"{path}: not a paritygate reproducer ({why}); expected {expected}") from None
    try:
        meta = json.loads(str(data[META]))
    except (KeyError, ValueError, RecursionError):
        raise ReplayError(f"{path}: not a paritygate reproducer (no readable {META} JSON array); expected "
                          f"{expected}") from None
    if not isinstance(meta, dict):
        raise ReplayError(f"{path}: not a paritygate reproducer ({META} is no JSON object); expected {expected}")
    check_version(path, "reproducer", meta.get("schema", 1), (SCHEMA,), ReplayError)
    inputs = {k.split(":", 1)[1]: v for k, v in data.items() if k.startswith("input:")}
    missing = sorted(set(FIELDS) - set(meta))
    if missing or not inputs:
        raise ReplayError(f"{path}: reproducer lacks {missing or 'input arrays'}")
    wrong = [k for k in FIELDS if not isinstance(meta[k], str)]
    if wrong:
        raise ReplayError(f"{path}: reproducer's {META} key(s) {wrong}: expected strings")
    return meta, inputs


def describe_inputs(inputs, sources=None):
    """The ``inputs`` entry of a result: each input's dtype and shape, the rows' sources, and the digest of the
    arrays (``common.digest``: the reproducer's file name carries its first 12 hex digits)."""
    out = {"names": {k: {"dtype": np.asarray(v).dtype.name, "shape": list(np.shape(v))} for k, v in inputs.items()},
           "digest": content_digest(inputs)}
    if sources is not None:
        out["sources"] = list(sources)
    return out


def worst_inputs(inputs, batch_element):
    """{input name: {"shape", "dtype", "values" | "head", "min", "max", "nan", "inf"}} for one batch element of
    ``inputs`` (raises IndexError when there is no such element)."""
    return {name: _describe(np.asarray(a)[batch_element] if np.ndim(a) else np.asarray(a))
            for name, a in inputs.items()}


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


def attach_worst_inputs(outputs, inputs):
    """Add ``worst["inputs"]`` (the values of ``inputs`` at the worst element's batch element) to each output record
    of ``outputs``; an element ``inputs`` does not hold leaves ``worst["inputs_error"]`` saying why (never a
    silent gap). Returns ``outputs``."""
    for o in outputs or []:
        w = o.get("worst")
        if not w or "batch_element" not in w or "inputs" in w:
            continue
        try:
            w["inputs"] = worst_inputs(inputs, w["batch_element"])
        except IndexError as err:
            w["inputs_error"] = f"the inputs hold no batch element {w['batch_element']}: {err}"
    return outputs
