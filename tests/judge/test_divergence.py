"""paritygate.judge.divergence glue, the [models.precision] config keys and the report's rendering of a divergence."""

import pytest

from paritygate.context import RunOptions
from paritygate.judge.divergence import localize_failure
from paritygate.models.config import ConfigError, load_config
from paritygate.report.markdown import _divergence_note
from paritygate.result import CheckResult
from tests.conftest import toy_spec, write_config
from tests.models.test_config import folder, minimal  # noqa: F401 - the config folder fixture

DIVERGENCE = {"first_node": "scale_up", "op_type": "Mul", "max_abs_error": "inf", "keep_fp32": ["scale_up", "ln"],
              "verified": True, "config": '[models.precision]  # ...\nfp16_keep_fp32 = ["scale_up", "ln"]',
              "error_by_depth": [{"node": "scale_up", "op_type": "Mul", "depth": 2, "max_abs": "inf",
                                  "max_rel": "inf"}]}


def test_precision_keys_parse_into_the_model_spec(folder):  # noqa: F811
    table = {**minimal(), "precision": {"fp16_keep_fp32": ["LayerNormalization", "n1"], "int8_exclude": ["m"]}}
    (spec,) = load_config(write_config(folder, {"models": [table]}))
    assert spec.precision == {"fp16_keep_fp32": ["LayerNormalization", "n1"], "int8_exclude": ["m"]}
    assert load_config(write_config(folder, {"models": [minimal()]}))[0].precision == {}


def test_unknown_precision_key_names_the_key(folder):  # noqa: F811
    table = {**minimal(), "precision": {"fp16_keep": ["x"]}}
    with pytest.raises(ConfigError, match=r"model 'm': key 'precision': unknown key\(s\) 'fp16_keep'"):
        load_config(write_config(folder, {"models": [table]}))


def test_localization_is_off_for_fp32_and_with_the_option_off():
    spec = toy_spec()
    assert localize_failure(RunOptions(localize=False).context, spec, "fp16", {}) is None
    assert localize_failure(RunOptions().context, spec, "fp32", {}) is None


def test_plugin_option_turns_localization_off(pytester):
    pytester.makepyfile("def test_x(parity_options):\n    assert parity_options.localize is False\n")
    pytester.runpytest("--parity-localize=off").assert_outcomes(passed=1)
    pytester.makepyfile("def test_x(parity_options):\n    assert parity_options.localize is True\n")
    pytester.runpytest().assert_outcomes(passed=1)


def test_markdown_row_shows_the_first_node_and_the_verified_plan():
    text = _divergence_note(CheckResult("toy", details={"divergence": DIVERGENCE}))
    assert "node adding the most error `scale_up` (Mul), max abs error inf" in text
    assert 'keep in FP32 (verified): `fp16_keep_fp32 = ["scale_up", "ln"]`' in text and text.count("ln") == 1
    unverified = {**DIVERGENCE, "verified": False, "config": None, "keep_fp32": [],
                  "first_node": None, "note": "no divergent node"}
    assert "(NOT verified)" in _divergence_note(CheckResult("toy", details={"divergence": unverified}))
    assert _divergence_note(CheckResult("toy")) == ""


def test_html_draws_the_error_by_depth_plot():
    from paritygate.report.html import render_html

    data = {"environment": {}, "runtime": "onnxruntime",
            "checks": [{"model": "toy", "precision": "fp16", "check": "matches_reference", "status": "fail",
                        "details": {"divergence": DIVERGENCE}}]}
    page = render_html(data)
    assert '<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="error by depth"' in page and "node adding the most error <code>scale_up</code>" in page


def test_an_unverified_plan_names_each_node_once():
    """Issue 37: EfficientNetB0's report repeated ~10 node names 6 times (each greedy trial listed the whole growing
    plan). The plan names each node once, the node adding the most error as "that node", and the note the trials
    by step and only the nodes they kept beyond the plan."""
    from paritygate.judge.divergence import tried_text

    trials = [{"step": "greedy", "nodes": ["n1"]}, {"step": "greedy", "nodes": ["n1", "n2"]},
              {"step": "greedy", "nodes": ["n1", "n2", "n3"]}, {"step": "bisect", "nodes": ["n1", "n2", "n4"]}]
    note = tried_text(trials, ["n1", "n2", "n3"])
    assert note == "tried 4 rebuild(s) (greedy 3, bisect 1), and kept besides the plan's nodes: n4"
    d = {**DIVERGENCE, "first_node": "n1", "keep_fp32": ["n1", "n2", "n3"], "verified": False, "config": None,
         "plan_note": f"no plan within the search budget (4 of 24 rebuilds) passed; {note}"}
    text = _divergence_note(CheckResult("toy", details={"divergence": d}))
    assert "keep in FP32 that node, `n2`, `n3` (NOT verified)" in text
    assert [text.count(n) for n in ("n1", "n2", "n3", "n4")] == [1, 1, 1, 1], text
