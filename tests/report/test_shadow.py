"""The report's "Shadow traffic" section (paritygate.report.shadow) and its plots: real shadow check records
(made by paritygate.shadow.results from ShadowStats), with class and slice values and keys drawn from markup
payloads, render no markup from data in Markdown, HTML or the terminal, and every table row keeps its columns."""

import numpy as np
import pytest
from hypothesis import given

from paritygate.report import render_html, render_markdown
from paritygate.report.shadow import terminal_lines
from paritygate.shadow.results import FLIP_BUDGET, FLIP_SOURCE, elementwise_result, top1_result
from paritygate.shadow.stats import ShadowStats
from tests.report.test_escaping import (
    SOME,
    STRINGS,
    _tokens,
    assert_no_markup_in_html,
    assert_no_markup_in_markdown,
)
from tests.shadow.test_combiners import record

pytest.importorskip("markdown_it")


def shadow_report(slices, key):
    stats = ShadowStats(k=3)
    for i in range(400):
        stats.add({**record(f"{key}{i}", flipped=i % 50 == 0, passed=i % 50 != 0, error=i * 1e-6,
                            slice_value=slices[i % len(slices)]), "top1": (i % 4, (i % 4) + (i % 50 == 0))})
    worst = [{"key": r["key"], "slice": r["slice"], "max_abs_error": r["score"], "top1": r["top1"],
              "passed": r["passed"], "failures": [], "missed": None} for r in stats.worst_first()]
    tol = {"probs": {"atol": 1e-2, "rtol": 1e-2, "source": "test"}}
    checks = [top1_result(key or "m", "fp16", stats, FLIP_BUDGET, FLIP_SOURCE, 50, worst),
              elementwise_result(key or "m", "fp16", stats.outputs, tol, stats.examples, worst)]
    return {"schema": 1, "checks": [c.to_dict() for c in checks], "findings": [],
            "shadow": {"read": 400, "runner": key, "workers": 1, "pipeline_seconds": 1.0}}


@SOME
@given(slices=__import__("hypothesis").strategies.lists(STRINGS, min_size=1, max_size=3), key=STRINGS)
def test_shadow_sections_render_no_markup_from_data(slices, key):
    data = shadow_report(slices, key)
    text = render_markdown(data)
    assert_no_markup_in_markdown(text, data)
    tokens = _tokens(text)
    section = next(i for i, t in enumerate(tokens) if t.type == "inline" and t.content == "Shadow traffic")
    width = None
    for t in tokens[section:]:  # every row of the shadow tables has its header's number of cells
        if t.type == "tr_open":
            width, cells = None, 0
        elif t.type in ("th_open", "td_open"):
            cells += 1
        elif t.type == "tr_close":
            width = width or cells
            assert cells in (7, 9, 6), cells
    assert_no_markup_in_html(render_html(data))
    assert not any("\x1b" in line or "\n" in line for line in terminal_lines(data))


def test_the_rate_table_leads_with_the_rates_that_decided():
    data = shadow_report(["a", "b"], "k")
    text = render_markdown(data)
    assert "| overall | 400 | 8 | 0.02 |" in text and "Holm-adjusted p" in text
    html = render_html(data)
    assert "top-1 flip rate per class and slice with 95% intervals" in html
    assert "per-example |error| quantiles" in html
    assert np.isfinite(data["checks"][0]["details"]["shadow"]["upper"])
