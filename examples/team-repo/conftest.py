"""The team's pytest settings for the parity gate. pytest reads this file because the gate runs from this
folder (`paritygate run parity.toml`), so it applies to the suite's checks as to tests of your own."""

import os

import pytest

# Hypothesis profiles are registered by paritygate: `ci` (derandomized) in CI, `dev` (random) on a laptop.
os.environ.setdefault("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")


def pytest_collection_modifyitems(items):
    """Every check of the gate carries the `parity` marker, so `-m "not parity"` runs your own tests alone."""
    for item in items:
        item.add_marker(pytest.mark.parity)
