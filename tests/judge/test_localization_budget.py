"""paritygate.judge.localization_budget: localization takes at most its share of the run (issue 37, item 4), stated
in the report, configurable by --parity-localize=SHARE, counted from the run's start."""

import pytest

from paritygate.context import RunOptions
from paritygate.judge.divergence import localize_failure
from paritygate.judge.localization_budget import DEFAULT_SHARE, MIN_SECONDS, SOURCE, Clock, clock, parse_localize
from tests.conftest import toy_spec


def test_the_allowance_keeps_localization_within_its_share_of_the_run():
    c = Clock(started=0.0, share=0.2)
    assert c.allowance(now=400.0) == pytest.approx(100.0)  # 100 s of 500: 20%
    c.spend(100.0)
    assert c.allowance(now=500.0) == pytest.approx(0.0)  # 400 s of other work, 100 s localizing: spent
    assert c.allowance(now=900.0) == pytest.approx(100.0)  # 400 s more of other work: 100 s more
    short = Clock(started=0.0, share=0.2)  # a run of seconds: MIN_SECONDS in all, whatever its share
    assert MIN_SECONDS == 30.0 and short.allowance(now=5.0) == pytest.approx(30.0)
    short.spend(20.0)
    assert short.allowance(now=25.0) == pytest.approx(10.0)
    assert Clock(0.0, 1.0).allowance(now=1.0) == float("inf")
    record = c.describe(25.0, 25.0, True)
    assert record["share"] == 0.2 and record["stopped"] and record["run_localization_s"] == 100.0
    assert record["source"] == SOURCE and "issue 37" in SOURCE and DEFAULT_SHARE == 0.2


@pytest.mark.parametrize("text", ["0", "-0.1", "1.5", "twenty", ""])
def test_a_share_outside_zero_to_one_is_refused_naming_the_option(text):
    with pytest.raises(ValueError, match=r"--parity-localize=.*expected on, off or .* in \(0, 1\]"):
        parse_localize(text)
    assert parse_localize("1") == (True, 1.0) and parse_localize("0.05") == (True, 0.05)
    assert parse_localize("on") == (True, 0.2) and parse_localize("off")[0] is False and parse_localize(False)[0] is False


def test_a_spent_budget_starts_no_localization_and_says_so():
    ctx = RunOptions(localize="0.2").context
    budget = clock(ctx)
    budget.spend(3600.0)  # an hour localizing already, in a run that began just now
    found = localize_failure(ctx, toy_spec(precisions=("fp16",)), "fp16", {})
    assert found["first_node"] is None and found["budget"]["stopped"] and found["budget"]["share"] == 0.2
    assert found["note"].startswith("not localized: localization took 3600 s of this run already, its budget of "
                                    "20% of the run or 30 s (--parity-localize=SHARE)")


def test_the_plugin_option_reaches_the_run_context_and_a_bad_one_stops_the_run(pytester):
    pytester.makepyfile("def test_x(parity_options):\n    assert parity_options.context.localize_budget == 0.5\n")
    pytester.runpytest("--parity-localize=0.5").assert_outcomes(passed=1)
    result = pytester.runpytest("--parity-localize=3")
    assert result.ret == 4 and "--parity-localize=3: expected" in result.stderr.str()
