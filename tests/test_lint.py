"""ruff (the `lint` extra) passes on the Python sources, so CI's test command enforces it too."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_passes():
    beside = Path(sys.executable).parent / "ruff"  # the venv's own scripts: the Quickstart does not activate it
    ruff = str(beside) if beside.is_file() else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install 'paritygate[lint]')")
    proc = subprocess.run([ruff, "check", "--output-format=concise", "plugins", "tests", "conformance", "fixtures"],
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
