import math

import pytest

from paritygate.shadow import gate


def binomial_cdf(x, n, p):
    """P(X <= x), X ~ Binomial(n, p), summed exactly in log space (independent of gate's incomplete beta)."""
    if x < 0:
        return 0.0
    logs = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
            + (n - k) * math.log1p(-p) for k in range(x + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(v - top) for v in logs))


@pytest.mark.parametrize("xn", [(1, 200), (0, 200), (500, 100000), (7, 10), (3, 5000)])
def test_clopper_pearson_bounds_meet_their_definition(xn):
    """Clopper & Pearson (1934): P(X >= x | lower) = P(X <= x | upper) = 2.5% at 95%."""
    x, n = xn
    lower, upper = gate.clopper_pearson(x, n)
    if x:
        assert 1 - binomial_cdf(x - 1, n, lower) == pytest.approx(0.025, rel=1e-6)
    else:
        assert lower == 0.0
    assert binomial_cdf(x, n, upper) == pytest.approx(0.025, rel=1e-6)


def test_betainc_is_the_binomial_tail():
    # P(X >= 3) for X ~ Binomial(20, 0.1) equals I_0.1(3, 18)
    tail = 1 - sum(math.comb(20, k) * 0.1 ** k * 0.9 ** (20 - k) for k in range(3))
    assert gate.betainc(3, 18, 0.1) == pytest.approx(tail, rel=1e-12)


def test_status_gates_on_the_interval_not_the_point_estimate():
    assert gate.status(0, 100000, 0.001) == "pass"
    assert gate.status(500, 100000, 0.001) == "fail"
    assert gate.status(1, 200, 0.001) == "inconclusive"  # point estimate 0.005 > budget, yet not a fail
    assert gate.status(0, 200, 0.001) == "inconclusive"  # point estimate 0 < budget, yet not a pass


def test_examples_to_decide_is_where_the_observed_rate_decides():
    need = gate.examples_to_decide(1, 200, 0.001)
    assert need > 200 and gate.status(round(0.005 * need), need, 0.001) == "fail"
    assert gate.status(round(0.005 * need * 0.9), int(need * 0.9), 0.001) == "inconclusive"
    # a stricter level for a fail (a corrected one) needs more examples
    assert gate.examples_to_decide(1, 200, 0.001, alpha=0.025 / 20) > need


def test_a_rate_on_the_budget_never_decides():
    assert gate.examples_to_decide(1, 1000, 0.001, limit=10**6) is None


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="0 <= x <= n"):
        gate.clopper_pearson(3, 2)


def test_the_p_value_decides_where_the_lower_bound_does():
    """P(X >= x | n, budget) < 2.5% exactly when the Clopper-Pearson lower bound lies above the budget."""
    for x, n in ((23, 985), (21, 985), (9, 985), (12, 985), (0, 100)):
        assert (gate.over_budget_p(x, n, 0.01) < 0.025) == (gate.clopper_pearson(x, n)[0] > 0.01)
    assert gate.over_budget_p(3, 20, 0.1) == pytest.approx(1 - binomial_cdf(2, 20, 0.1), rel=1e-12)


def test_holm_adjusts_step_down_and_keeps_the_order():
    # Holm (1979): sorted p 0.0002, 0.01, 0.3, 0.5 -> 4 x 0.0002, 3 x 0.01, max(0.03, 2 x 0.3), max(0.6, 0.5)
    assert gate.holm([0.0002, 0.5, 0.01, 0.3]) == pytest.approx([0.0008, 0.6, 0.03, 0.6])
    assert gate.holm([]) == []


def test_min_count_is_where_no_event_can_pass():
    for budget in (0.01, 0.001, 0.05):
        n = gate.min_count(budget)
        assert gate.status(0, n, budget) == "pass" and gate.status(0, n - 1, budget) == "inconclusive"
    assert (gate.min_count(0.01), gate.min_count(0.001), gate.min_count(0.0)) == (368, 3688, None)
