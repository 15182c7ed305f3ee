"""Where the bundled suite lives: the conformance tests and the zoo fixtures, installed or in a checkout.

In a wheel they are the packages ``paritygate.conformance`` and ``paritygate.fixtures`` (pyproject.toml's
``package-dir`` maps the repository's top-level ``conformance/`` and ``fixtures/`` onto them, and the zoo's
weights, goldens, input sets and expectations ship as package data). In a checkout run with
``PYTHONPATH=plugins`` (or the static editable install) they are the repository's own folders.
"""

import functools
import importlib
import importlib.util
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[3]  # plugins/paritygate/models/bundled.py -> the repository root
CONFORMANCE_PACKAGE = "paritygate.conformance"
FIXTURES_PACKAGE = "paritygate.fixtures"


def _installed(package):
    """The folder of ``package`` when it is importable (a wheel, or setuptools' editable finder), else None."""
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations or spec.origin in (None, "namespace"):
        return None
    return Path(spec.origin).resolve().parent


def _own(folder, marker):
    """The checkout's own ``folder`` when this paritygate runs from a checkout that has it: it wins over an
    installed copy (a shared venv's editable install of another checkout must not answer for this one)."""
    path = CHECKOUT / folder
    return path if (path / marker).is_file() else None


def fixtures_dir():
    """The folder holding the bundled ``parity.toml``, ``expectations.toml``, goldens, inputs and the zoo."""
    return _own("fixtures", "parity.toml") or _installed(FIXTURES_PACKAGE) or CHECKOUT / "fixtures"


def conformance_dir():
    """The folder of the conformance tests (what ``pytest --pyargs paritygate.conformance`` collects)."""
    return _own("conformance", "test_parity.py") or _installed(CONFORMANCE_PACKAGE) or CHECKOUT / "conformance"


def in_conformance(path):
    """Whether ``path`` is one of the bundled conformance tests (installed, or in the checkout): the suite whose
    checks over models are validated first."""
    path = Path(path).resolve()
    return any(path.is_relative_to(d) for d in {conformance_dir(), CHECKOUT / "conformance"})


@functools.lru_cache(maxsize=1)
def check_names():
    """The conformance suite's check names (its test functions without ``test_``), read from its source, not
    imported; empty when the suite is not there."""
    import re

    found = set()
    for path in sorted(conformance_dir().glob("test_*.py")):
        found.update(re.findall(r"^def test_(\w+)", path.read_text(encoding="utf-8"), re.MULTILINE))
    return frozenset(found)


def zoo_module(name):
    """The zoo's module ``name`` (``build``, ``models``, ...): ``paritygate.fixtures.zoo.<name>`` when
    installed, else ``fixtures.zoo.<name>`` from the checkout (whose root is put on sys.path)."""
    if _own("fixtures", "parity.toml") is None and _installed(FIXTURES_PACKAGE) is not None:
        return importlib.import_module(f"{FIXTURES_PACKAGE}.zoo.{name}")
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    return importlib.import_module(f"fixtures.zoo.{name}")


def zoo_custom_objects():
    """The Keras custom objects of the zoo's ``.keras`` files (``TFNumpyHandler(custom_objects=...)`` names
    this function, which every Beam worker can import)."""
    return zoo_module("models").custom_objects()
