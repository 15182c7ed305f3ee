"""The HTML report in a real browser (headless Chromium, Debian's `chromium` package): at 1400 px wide the verdict
banner, the model x precision matrix and the first failure's cause are on the first screen, nothing overflows
sideways, and a screenshot is saved beside the report (copied to $PARITYGATE_BROWSER_ARTIFACTS when set, which
CI uploads). Skips with the reason where no Chromium is installed."""

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from paritygate.context import RunOptions
from paritygate.judge.parity import compare
from paritygate.report import write_report
from paritygate.report.browser import HEIGHT, WIDTH, BrowserError, find_chromium, layout, screenshot
from paritygate.session import ParitySession
from tests.conftest import record_of, toy_spec

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="no headless Chromium installed (Debian/Ubuntu: "
                                    "apt-get install chromium; or set PARITYGATE_CHROMIUM)")
X = np.linspace(-1, 1, 64, dtype=np.float32).reshape(16, 4)


def failing_session(config):
    """A run of four models x three precisions with a NaN failure (long cause), an error, passes and skips."""
    s = ParitySession(RunOptions(config_path=config, runtime="onnxruntime"))
    spec = toy_spec(precisions=("fp32", "fp16", "int8"))
    ok = compare(spec, "fp32", {"y": 5 * X}, {"y": 5 * X + 1e-7}, compare_task=False).to_dict()["details"]
    for model in ("bert", "linear", "mobilenet", "ssd"):
        for precision in ("fp32", "fp16", "int8"):
            for check in ("matches_reference", "property_parity", "determinism"):
                s.record(record_of(model, precision, check, "pass", ok))
            s.record(record_of(model, precision, "task_on_heldout", "skip", {"reason": f"model '{model}' has no held-out set"}))
        s.record(record_of(model, None, "goldens_reproduce", "pass", ok))
    cand = 5 * X
    cand.ravel()[:31] = np.nan
    bad = compare(spec, "int8", {"y": 5 * X}, {"y": cand}, compare_task=False)
    cause = "\n".join(bad.failures) + "\n" + "the cause goes on; " * 60 + "END OF CAUSE"
    s.checks = [c for c in s.checks if (c.model, c.precision, c.check) != ("mobilenet", "int8",
                                                                                    "matches_reference")]
    s.record(record_of("mobilenet", "int8", "matches_reference", "fail", {**bad.to_dict()["details"], "message": cause}))
    s.record(record_of("ssd", "fp16", "accepts_every_batch_size", "error",
             {"message": "SuiteError: onnxruntime could not load the artifact the suite built: INVALID_GRAPH " * 4}))
    return s


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@needs_chromium
def test_verdict_matrix_and_first_cause_are_on_the_first_screen(tmp_path):
    report = write_report(failing_session(tmp_path / "parity.toml"), tmp_path / "report") / "parity-report.html"
    seen = layout(report)
    width, height = seen["viewport"]
    assert width == WIDTH and 0 < height <= HEIGHT
    boxes = seen["boxes"]
    assert set(boxes) == {"verdict", "matrix", "first_cause", "first_plot"}
    for name in ("verdict", "matrix"):
        left, top, right, bottom = boxes[name]
        assert 0 <= left and right <= width and 0 <= top and bottom <= height, f"{name} at {boxes[name]}, viewport {seen}"
    assert boxes["verdict"][3] <= boxes["matrix"][1] <= boxes["first_cause"][1] < height  # in that order, cause begins
    left, top, right, bottom = boxes["first_plot"]  # the failing card's plot (inline SVG) is drawn, inside the page
    assert 0 <= left < right <= width and bottom - top > 100, f"first plot at {boxes['first_plot']}"
    assert seen["scroll_width"] <= width, "something (a plot, a table) overflows the window sideways"
    png = screenshot(report)
    assert png == report.with_suffix(".png") and png_size(png) == (WIDTH, HEIGHT)
    keep = os.environ.get("PARITYGATE_BROWSER_ARTIFACTS")
    if keep:  # CI uploads this folder: the rendered report and its first screen
        Path(keep).mkdir(parents=True, exist_ok=True)
        for f in (report, png):
            shutil.copy(f, Path(keep) / f.name)


@needs_chromium
def test_the_command_line_writes_the_screenshot_beside_the_report(tmp_path):
    from paritygate.report.browser import main

    report = write_report(ParitySession(RunOptions(config_path=tmp_path / "p.toml", runtime="onnxruntime")), tmp_path)
    assert main([str(report / "parity-report.html")]) == 0
    assert png_size(report / "parity-report.png") == (WIDTH, HEIGHT)


def test_a_missing_browser_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CHROMIUM", str(tmp_path / "no-such-chromium"))
    assert find_chromium() is None
    with pytest.raises(BrowserError, match=r"no headless Chromium found .* apt-get install chromium"):
        screenshot(tmp_path / "r.html")
