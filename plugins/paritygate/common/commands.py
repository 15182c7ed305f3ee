"""The commands the suite prints for a person (rerun a check, replay a reproducer, regenerate goldens), written
to run as printed from the folder that holds the user's config, with the wheel installed: the ``paritygate``
command, never a path into this checkout (``conformance/...``) or a module run with some python
(``python -m paritygate.cli.replay`` needs the venv's python on PATH). Paths under the config's folder are written
relative to it, others absolute.
"""

import shlex
from pathlib import Path


def where(path, config):
    """``path`` as the folder holding ``config`` reaches it: relative below that folder, else absolute."""
    path, base = Path(path).resolve(), Path(config).resolve().parent
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def _config_arg(config):
    return shlex.quote(where(config, config))


def rerun(config, nodeid):
    """``paritygate run parity.toml -k 'test_matches_reference[pnet_odd-int8]'`` for a check's pytest node id."""
    test = nodeid.rsplit("::", 1)[-1]
    return f"paritygate run {_config_arg(config)} -k {shlex.quote(test)}"


def replay(config, npz):
    return f"paritygate replay {shlex.quote(where(npz, config))}"


def regenerate_goldens(config, model=None):
    """The goldens of ``model`` (or all) rewritten from today's TensorFlow reference."""
    select = f" -k {shlex.quote(f'test_goldens_reproduce[{model}]')}" if model else " -k test_goldens_reproduce"
    return f"paritygate run {_config_arg(config)}{select} --update-goldens"
