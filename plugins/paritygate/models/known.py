"""``expectations.toml``: the one reader of what a run expects to fail, with one schema for both tables.

    [[known_failures]]              a failure the team ships with (the expectations.toml beside the config)
    model = "my_classifier"         # required
    check = "property_parity"       # required: the report's check name (the test function without `test_`)
    precision = "int8"              # optional: every precision when absent
    runtime = "tensorrt"            # optional: every runtime when absent
    numerics = "strict"             # optional: the numerics label (onnxruntime: strict or ort; any other runtime:
                                    # its own name), every label when absent
    upstream_defect = "onnx-numpy-first-output"   # optional: the [[expectations]] id of the upstream defect
    reproducer = "reproducers/x.npz"  # optional: the failing input (a saved reproducer of this model and check,
                                    # path relative to expectations.toml), tried first by the property check
    reason = "…"                    # required: why, with the upstream issue or measurement

    [[expectations]]                a known upstream (Beam) defect: paritygate/beam/expectations.py applies it
    id, checks, beam, reaches, upstream, reason   # required; defect, when, issue, evidence optional

A known failure is applied to the matching checks as a *strict* xfail (an unexpected pass is reported as a
failure) that expects an ``AssertionError`` (the candidate wrong): any other exception of the check is reported
as itself. A property check's failure is found by what Hypothesis draws, and the derandomized draws change with
the suite's and the project's code (Hypothesis mixes constants of local modules into them): an entry that names
its ``reproducer`` is tried on that input every run, so it stays found. Both tables are read and checked here,
once: unknown or missing keys and values of the wrong type are refused with the file, the table, the entry and
the key.
"""

from pathlib import Path

import pytest

from paritygate.files import present, read_text
from paritygate.models.config import BUNDLED_CONFIG, ConfigError, parse_toml
from paritygate.verdict import UPSTREAM_DEFECT_ATTR

BUNDLED_EXPECTATIONS = BUNDLED_CONFIG.parent / "expectations.toml"
# table -> (required keys, optional keys, keys whose value is a list of strings; every other value is a string)
SCHEMA = {
    "known_failures": ({"model", "check", "reason"}, {"precision", "runtime", "numerics", "upstream_defect",
                                                     "reproducer"}, set()),
    "expectations": ({"id", "checks", "beam", "reaches", "upstream", "reason"},
                     {"defect", "when", "issue", "evidence"}, {"checks", "when"}),
}
FIELDS = SCHEMA["known_failures"][0] | SCHEMA["known_failures"][1]


class ExpectationError(ConfigError):
    """expectations.toml is malformed; the message names the file, the entry and the key."""


def read_expectations(path):
    """table name -> its entries (dicts, each with ``source``: file and entry), validated against SCHEMA."""
    path = Path(path)
    text = read_text(path, "expectations", "config", ExpectationError)
    try:
        doc = parse_toml(text)
    except ValueError as err:
        raise ExpectationError(f"{path}: cannot read expectations: not valid TOML: {err}") from err
    unknown_tables = sorted(set(doc) - set(SCHEMA))
    if unknown_tables:
        raise ExpectationError(f"{path}: unknown table(s) {unknown_tables}; expected [[known_failures]] or "
                               "[[expectations]]")
    for table in SCHEMA:
        entries = doc.get(table, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ExpectationError(f"{path}: key '{table}': expected an array of tables ([[{table}]])")
    return {table: [_checked(path, table, i, entry) for i, entry in enumerate(doc.get(table, []))]
            for table in SCHEMA}


def _checked(path, table, i, entry):
    required, optional, lists = SCHEMA[table]
    where = f"{path}: {table}[{i}]" + (f" ('{entry['id']}')" if isinstance(entry.get("id"), str) else "")
    unknown, missing = sorted(set(entry) - required - optional), sorted(required - set(entry))
    if unknown or missing:
        raise ExpectationError(f"{where}: unknown key(s) {unknown}, missing key(s) {missing}; "
                               f"allowed keys: {sorted(required | optional)}")
    for key, value in entry.items():
        ok = (isinstance(value, list) and all(isinstance(v, str) for v in value)) if key in lists else \
            isinstance(value, str)
        if not ok:
            raise ExpectationError(f"{where}: key '{key}': expected {'a list of strings' if key in lists else 'a string'}"
                                   f", got {value!r}")
    return {**entry, "source": f"{path.name} {table}[{i}]", "path": str(path)}


def load_known_failures(config_path, models=None):
    """The ``[[known_failures]]`` of the expectations.toml beside the config (none without one). An
    ``upstream_defect`` must name an ``[[expectations]]`` id of that file or of the bundled one; each entry's
    ``check`` must be one of the suite's checks and, given the config's ``models`` (names), its ``model`` one
    of them: an entry that could never match is an error, not silently ignored."""
    path = Path(config_path).resolve().parent / "expectations.toml"
    if not present(path):
        return []
    tables = read_expectations(path)
    entries = tables["known_failures"]
    _check_names(path, entries, models)
    for e in entries:
        if "reproducer" in e:
            e["reproducer"] = _reproducer(path, e)
    named = [e for e in entries if "upstream_defect" in e]
    if named:
        ids = {e["id"] for e in tables["expectations"]}
        if BUNDLED_EXPECTATIONS.exists() and path.resolve() != BUNDLED_EXPECTATIONS.resolve():
            ids |= {e["id"] for e in read_expectations(BUNDLED_EXPECTATIONS)["expectations"]}
        for e in named:
            if e["upstream_defect"] not in ids:
                raise ExpectationError(f"{path}: {e['source'].split(' ', 1)[1]}: key 'upstream_defect': "
                                       f"{e['upstream_defect']!r} is no known upstream defect; known: {sorted(ids)}")
    return entries


def _check_names(path, entries, models):
    from paritygate.models.bundled import check_names

    known = check_names()
    for e in entries:
        where = f"{path}: {e['source'].split(' ', 1)[1]}"
        if known and e["check"] not in known:
            raise ExpectationError(f"{where}: key 'check': {e['check']!r} is no check of the suite; expected one of "
                                   f"{', '.join(sorted(known))}")
        if models is not None and e["model"] not in models:
            raise ExpectationError(f"{where}: key 'model': {e['model']!r} is no model of the config beside it; "
                                   f"expected one of {', '.join(models)}")


def _reproducer(path, entry):
    """The entry's reproducer resolved beside ``path``, after checking it is one of this model and check."""
    from paritygate.inputs.reproducer import ReplayError, load_reproducer

    where = f"{path}: {entry['source'].split(' ', 1)[1]}: key 'reproducer'"
    file = (path.parent / entry["reproducer"]).resolve()
    try:
        meta, _ = load_reproducer(file)
    except ReplayError as err:
        raise ExpectationError(f"{where}: {err}") from err
    if (meta["model"], meta["check"]) != (entry["model"], entry["check"]):
        raise ExpectationError(f"{where}: {file} reproduces model {meta['model']!r} check {meta['check']!r}, "
                               f"expected model {entry['model']!r} check {entry['check']!r}")
    return str(file)


def known_failure_feeds(spec, precision=None, check=None):
    """The inputs of the ``[[known_failures]]`` reproducers of ``spec``'s model (of ``precision`` and ``check``;
    None: any) in the expectations.toml beside its config, each checked against the spec (an InputSetError
    names the file)."""
    from paritygate.inputs.reproducer import load_reproducer
    from paritygate.inputs.sets import check_arrays

    found = []
    for entry in load_known_failures(spec.source):
        if not ("reproducer" in entry and entry["model"] == spec.name and check in (None, entry["check"])
                and (precision is None or entry.get("precision", precision) == precision)):
            continue
        _, inputs = load_reproducer(entry["reproducer"])
        check_arrays(spec, entry["reproducer"], inputs, "known failure's reproducer")
        found.append(inputs)
    return found


def mark_known_failures(item, model, precision, runtime, entries, numerics=None):
    """Mark ``item`` a strict xfail where an entry matches it; ``numerics``: the run's numerics label
    (``backend.registry.numerics_label``)."""
    check = item.originalname.removeprefix("test_")
    for entry in entries:
        if (entry["model"] == model and entry["check"] == check
                and entry.get("precision", precision) == precision and entry.get("runtime", runtime) == runtime
                and entry.get("numerics", numerics) == numerics):
            # raises=AssertionError: the known failure is the candidate being wrong; a crash of the check (a
            # SuiteError, a converter or runtime exception) is not it, and shows as an error.
            defect = f" [upstream defect '{entry['upstream_defect']}']" if "upstream_defect" in entry else ""
            reason = f"known failure ({entry['source']}){defect}: {entry['reason']}"
            item.add_marker(pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))
            if "upstream_defect" in entry:  # the report says on the xfail that the defect is Beam's
                item.user_properties.append((UPSTREAM_DEFECT_ATTR, entry["upstream_defect"]))
