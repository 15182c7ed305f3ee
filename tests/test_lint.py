"""ruff (the `lint` extra) passes on the Python sources, so CI's test command enforces it too."""

import subprocess
from pathlib import Path

from tests.conftest import venv_tool

REPO = Path(__file__).resolve().parents[1]


def test_ruff_passes():
    command = [venv_tool("ruff"), "check", "--output-format=concise", "plugins", "tests", "conformance", "fixtures"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
