"""PARITYGATE_REQUIRE_EXTRAS: in CI, a promised extra that does not import fails instead of skipping.

The plugin calls ``require_extras`` in ``pytest_configure`` and ``restore_importorskip`` in
``pytest_unconfigure``; what each extra promises is ``paritygate.lazy.PROMISED``.
"""

import os

import pytest

REQUIRE_EXTRAS_ENV = "PARITYGATE_REQUIRE_EXTRAS"
_IMPORTORSKIP_KEY = pytest.StashKey[object]()


def require_extras(config):
    """``PARITYGATE_REQUIRE_EXTRAS=tf,onnx,beam`` (set by .ci/run from the install line): a module one of
    these extras promises (lazy.PROMISED) that does not import fails where ``pytest.importorskip`` would skip,
    so a CI environment whose extra is broken cannot go green. Unset: missing extras skip with the reason."""
    from paritygate.lazy import promised_by

    names = [n.strip() for n in os.environ.get(REQUIRE_EXTRAS_ENV, "").split(",") if n.strip()]
    if not names:
        return
    try:
        promised = promised_by(names)
    except ValueError as err:
        raise pytest.UsageError(f"{REQUIRE_EXTRAS_ENV}={','.join(names)}: {err}") from None
    original = pytest.importorskip
    config.stash[_IMPORTORSKIP_KEY] = original

    def importorskip(modname, *args, **kwargs):
        try:
            return original(modname, *args, **kwargs)
        except pytest.skip.Exception as skipped:
            extra = promised.get(_missing_root(modname))  # polygraphy.backend.trt without tensorrt: gpu's, not onnx's
            if extra is None:
                raise
            raise pytest.fail.Exception(f"{REQUIRE_EXTRAS_ENV}={','.join(names)} requires the '{extra}' extra, but "
                                        f"{modname} does not import: {skipped.msg}", pytrace=False) from None

    pytest.importorskip = importorskip


def _missing_root(modname):
    """The top-level name of the module that could not be found when importing ``modname`` (``modname``'s own
    when it imports, e.g. too old a version)."""
    import importlib

    try:
        importlib.import_module(modname)
    except ModuleNotFoundError as err:
        return (err.name or modname).split(".")[0]
    except Exception:  # noqa: BLE001 - any other failure is modname's own
        return modname.split(".")[0]
    return modname.split(".")[0]


def restore_importorskip(config):
    """Put back the ``pytest.importorskip`` that ``require_extras`` wrapped (pytester runs nest configs)."""
    original = config.stash.get(_IMPORTORSKIP_KEY, None)
    if original is not None:
        pytest.importorskip = original
