"""paritygate.report.plots: the report's plots as inline SVG. Each parses as XML, says what it shows (role, aria-label,
<title>), carries its labels and legend, and keeps every coordinate finite and inside its viewBox, on degenerate data
too: empty series, one point, all-equal values, zeros on a log axis, the strict-JSON strings "nan" / "inf"."""

import math
import re
import xml.etree.ElementTree as ET

import pytest

from paritygate.report.plots import _log_ticks, has_plots, plots
from paritygate.result import CheckResult

SVG = "{http://www.w3.org/2000/svg}"
GEOMETRY = ("x", "y", "width", "height")
EDGES = [0.0] + [10.0 ** k for k in range(-9, 3)]  # the shape of judge.parity.HIST_BINS: 0, then decades


def parse(svg):
    """The <svg> element, after checking that every coordinate in it is a finite number inside its viewBox."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    assert root.find(f"{SVG}title").text == root.get("aria-label")
    x0, y0, width, height = map(float, root.get("viewBox").split())
    assert (x0, y0) == (0, 0) and width > 0 and height > 0
    for el in root.iter():
        for key in ("x", "y", "width", "height", "d", "transform"):
            value = el.get(key)
            if value is None:
                continue
            assert "nan" not in value and "inf" not in value, f"<{el.tag} {key}={value!r}>"
            numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", value)]
            assert numbers and all(math.isfinite(n) for n in numbers), f"<{el.tag} {key}={value!r}>"
            if key in GEOMETRY:
                assert -1 <= numbers[0] <= (width if key in ("x", "width") else height) + 1, f"{key}={value}"
        for key, limit in (("M", width), ("H", width), ("V", height)):  # absolute path coordinates stay inside
            for n in re.findall(rf"{key}(-?[\d.]+)", el.get("d") or ""):
                assert -1 <= float(n) <= limit + 1, f"{key}{n} outside the viewBox in {el.get('d')[:80]}"
    return root


def texts(root):
    return [t.text for t in root.iter(f"{SVG}text")]


def output(name="y", counts=None, reference=(0.5, 1.0, 2.0), error=(1e-6, 2e-6, 4e-6), **tolerance):
    counts = [3] + [0] * (len(EDGES) - 2) if counts is None else counts
    return {"output": name, "tolerance": tolerance or {"atol": 1e-5, "rtol": 1e-5},
            "error_histogram": {"edges": EDGES[:len(counts) + 1] if counts else [], "counts": counts},
            "error_vs_magnitude": {"reference_abs": list(reference), "abs_error": list(error)}}


def test_an_error_plot_has_the_histogram_the_tolerance_line_and_the_scatter():
    (svg,) = plots(CheckResult("toy", outputs=[output(counts=[5, 0, 2] + [1] * (len(EDGES) - 4))]))
    root = parse(svg)
    assert root.get("aria-label") == "y error plots"
    labels = texts(root)
    assert "y: |error| of the finite elements" in labels and "error vs |reference|" in labels
    assert {"|error| (exact matches in the leftmost bin)", "|reference|", "|error|", "atol"} <= set(labels)
    assert {"1e-10", "1e-8", "1e2"} <= set(labels)  # decades on the log axis, labelled like 1e-3
    dashed = [p for p in root.iter(f"{SVG}path") if p.get("stroke-dasharray")]
    assert len(dashed) == 2  # the tolerance line and its legend mark
    dots = [p for p in root.iter(f"{SVG}path") if p.get("stroke-linecap") == "round"]
    assert len(dots) == 1 and dots[0].get("d").count("M") == 3


def test_a_check_with_its_own_bound_draws_the_bound():
    root = parse(plots(CheckResult("toy", outputs=[output(bound=0.0, source="determinism")]))[0])
    assert "bound" in texts(root) and "atol" not in texts(root)  # a bound of 0 lands at the axis floor


@pytest.mark.parametrize("case", [
    {"counts": []},  # no histogram bins at all
    {"counts": [0] * (len(EDGES) - 1)},  # every bin empty
    {"reference": (), "error": ()},  # no scatter points
    {"reference": (1.0,), "error": (0.0,)},  # one point
    {"reference": (2.0, 2.0, 2.0), "error": (3e-7, 3e-7, 3e-7)},  # all equal
    {"atol": "inf", "rtol": 0.0},  # a tolerance that is not finite: no line
    {"reference": (1e308, -1e308, 5e-324), "error": (1e308, 0.0, 5e-324)},  # the ends of float64
])
def test_degenerate_error_data_draws_finite_coordinates(case):
    tolerance = {k: case.pop(k) for k in ("atol", "rtol") if k in case}
    parse(plots(CheckResult("toy", outputs=[output(**case, **tolerance)]))[0])


def test_non_finite_points_are_left_out_and_counted():
    o = output(reference=("nan", 1.0, "inf", 2.0), error=(1e-3, "nan", 1e-3, "-inf"))
    root = parse(plots(CheckResult("toy", outputs=[o]))[0])
    assert "error vs |reference| (4 non-finite left out)" in texts(root)
    assert not [p for p in root.iter(f"{SVG}path") if p.get("stroke-linecap") == "round"]  # no point left to draw


def test_names_are_escaped_and_long_ones_cut_with_the_full_text_kept():
    name = 'out<put> & "quoted" \x01' + "x" * 80
    (svg,) = plots(CheckResult("toy", outputs=[output(name=name)]))
    assert "<put>" not in svg and "&lt;put&gt; &amp; &quot;quoted&quot;" in svg
    root = parse(svg)
    assert root.get("aria-label") == name.replace("\x01", "\ufffd") + " error plots"
    (cut,) = [t.find(f"{SVG}title") for t in root.iter(f"{SVG}text") if t.find(f"{SVG}title") is not None]
    assert cut.tail.endswith("\u2026") and cut.text == name.replace("\x01", "\ufffd") + ": |error| of the finite elements"


@pytest.mark.parametrize("samples", [[2.0], [3.0, 3.0, 3.0], [0.0, 1.0, 4.0], ["nan", 1.0], ["inf"], [1e-300, 1e300]])
def test_latency_cdf_on_degenerate_samples(samples):
    rows = [{"runtime": "onnxruntime", "batch": 1, "samples_ms": samples}, {"batch": 4, "samples_ms": [1.0, 1.5]}]
    root = parse(plots(CheckResult("toy", latency=rows))[0])
    assert root.get("aria-label") == "latency CDF"
    assert {"onnxruntime batch 1", "batch 4", "ms (log)", "CDF"} <= set(texts(root))


def test_latency_cdf_has_a_step_line_per_row():
    rows = [{"runtime": "onnxruntime", "batch": b, "samples_ms": [1.0 + b, 2.0 + b, 2.5 + b]} for b in (1, 2, 8)]
    root = parse(plots(CheckResult("toy", latency=rows))[0])
    steps = [p for p in root.iter(f"{SVG}path") if p.get("fill") == "none" and "V" in p.get("d")]
    assert len(steps) == 3 and all(p.get("d").count("H") == 3 for p in steps)


@pytest.mark.parametrize("rows", [
    [{"node": "a", "op_type": "Mul", "depth": 2, "max_abs": "inf", "max_rel": "nan"}],
    [{"node": "a", "op_type": "Mul", "depth": 0, "max_abs": 0.0, "max_rel": 0.0},
     {"node": "b", "op_type": "Add", "depth": 0, "max_abs": 0.0, "max_rel": 0.0}],
    [{"node": "a", "op_type": "Mul", "depth": "nan", "max_abs": 1.0, "max_rel": 1.0}],  # no drawable row
])
def test_error_by_depth_on_degenerate_rows(rows):
    check = CheckResult("toy", details={"divergence": {"first_node": "a", "error_by_depth": rows}})
    root = parse(plots(check)[0])
    assert root.get("aria-label") == "error by depth"
    assert {"error by depth", "max abs", "max rel", "error vs FP32 ONNX"} <= set(texts(root))


def test_error_by_depth_marks_the_first_divergent_node_and_draws_non_finite_at_the_top():
    rows = [{"node": f"n{d}", "op_type": "Conv", "depth": d, "max_abs": 10.0 ** (d - 6), "max_rel": 1e-3}
            for d in range(5)] + [{"node": "scale_up", "op_type": "Mul", "depth": 5, "max_abs": "inf", "max_rel": 1.0}]
    check = CheckResult("toy", details={"divergence": {"first_node": "scale_up", "error_by_depth": rows}})
    root = parse(plots(check)[0])
    assert "first divergent: scale_up (Mul)" in texts(root) and "1e30" in texts(root)
    (dots,) = [p for p in root.iter(f"{SVG}path") if p.get("stroke-linecap") == "round" and p.get("d").count("M") > 1]
    top = float(re.findall(r"M[\d.]+ ([\d.]+)", dots.get("d"))[-1])
    assert top == min(float(y) for y in re.findall(r"M[\d.]+ ([\d.]+)", dots.get("d")))  # inf: the highest point


@pytest.mark.parametrize(("values", "ticks"), [
    ([1e-10, 100.0], [1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1.0, 100.0]),  # 13 decades: every 2nd labelled
    ([0.002, 0.9], [1e-3, 1e-2, 1e-1, 1.0]),
    ([1.0, 2.6], [1.0, 2.0, 5.0]),  # under two decades: 1-2-5
    ([1.5, 1.5], [1.0, 2.0]),  # one value: the ticks around it
    ([], [1.0, 2.0, 5.0, 10.0]),  # nothing to show: one decade
])
def test_log_ticks(values, ticks):
    found, low, high = _log_ticks(values)
    assert found == pytest.approx(ticks) and low <= min(values, default=1.0) and high >= max(values, default=10.0)


def test_no_plot_data_no_plots():
    check = CheckResult("toy", outputs=[{"output": "y"}], latency=[{"batch": 1}], details={"divergence": {}})
    assert not has_plots(check) and plots(check) == []
