"""Known candidate failures: ``[[known_failures]]`` in the ``expectations.toml`` beside the config, applied
to the matching checks as a *strict* xfail (an unexpected pass is reported as a failure) that expects an
``AssertionError`` (the candidate wrong): any other exception of the check is reported as itself.

    [[known_failures]]
    model = "my_classifier"     # required
    check = "property_parity"   # required: the report's check name (the test function without `test_`)
    precision = "int8"          # optional: every precision when absent
    runtime = "tensorrt"        # optional: every runtime when absent
    reason = "…"                # required: why, with the upstream issue or measurement
"""

from pathlib import Path

import pytest

from paritygate.config import ConfigError, tomllib

FIELDS = {"model", "check", "precision", "runtime", "reason"}
REQUIRED = {"model", "check", "reason"}


def load_known_failures(config_path):
    path = Path(config_path).parent / "expectations.toml"
    if not path.exists():
        return []
    try:
        doc = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: cannot read expectations: {err}") from err
    entries = doc.get("known_failures", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"{path}: key 'known_failures': expected an array of tables ([[known_failures]])")
    for i, entry in enumerate(entries):
        where = f"{path}: known_failures[{i}]"
        unknown, missing = sorted(set(entry) - FIELDS), sorted(REQUIRED - set(entry))
        if unknown or missing:
            raise ConfigError(f"{where}: unknown key(s) {unknown}, missing key(s) {missing}; "
                              f"allowed keys: {sorted(FIELDS)}")
        bad = [k for k, v in entry.items() if not isinstance(v, str)]
        if bad:
            raise ConfigError(f"{where}: key(s) {bad}: expected strings")
        entry["source"] = f"{path.name} known_failures[{i}]"
    return entries


def mark_known_failures(item, model, precision, runtime, entries):
    check = item.originalname.removeprefix("test_")
    for entry in entries:
        if (entry["model"] == model and entry["check"] == check
                and entry.get("precision", precision) == precision and entry.get("runtime", runtime) == runtime):
            # raises=AssertionError: the known failure is the candidate being wrong; a crash of the check (a
            # SuiteError, a converter or runtime exception) is not it, and shows as an error.
            reason = f"known failure ({entry['source']}): {entry['reason']}"
            item.add_marker(pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))
