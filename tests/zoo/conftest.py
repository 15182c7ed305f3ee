"""Shared setup for the zoo tests: make the repository root importable (``fixtures.zoo``) and
register the markers they use, so that they also run without the paritygate plugin."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_configure(config):
    config.addinivalue_line("markers", "tf: needs tensorflow")
    config.addinivalue_line("markers", "onnx: needs tf2onnx and onnxruntime")
