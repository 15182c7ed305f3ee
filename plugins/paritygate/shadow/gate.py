"""Gate a rate on its exact binomial (Clopper-Pearson) confidence interval, not on the point estimate: ``pass``
when the upper bound is within the budget, ``fail`` when the lower bound is beyond it, ``inconclusive`` when the
interval straddles it, with the number of examples that would decide at the observed rate; the exact p-value of
"the rate is within the budget", Holm's correction over several such rates, and the fewest examples a rate needs
to pass at all (``shadow.rates`` gates the overall rate, the classes and the slices with these).
The interval is two-sided at CONFIDENCE (each bound one-sided at 1 - (1 - CONFIDENCE) / 2), from scipy's beta
quantiles when scipy is installed, else from this module's own regularized incomplete beta (same numbers to
1e-10: tests/shadow/test_gate.py)."""

import math

# Two-sided 95%: the conventional level of Clopper & Pearson (1934), "The use of confidence or fiducial limits
# illustrated in the case of the binomial", Biometrika 26(4) 404-413; each bound holds at >= 97.5%.
CONFIDENCE = 0.95
CONFIDENCE_SOURCE = "Clopper & Pearson (1934) exact binomial interval, two-sided 95%"


def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta (modified Lentz; Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """I_x(a, b), the regularized incomplete beta function (the beta distribution's CDF)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def beta_ppf(q, a, b):
    """The q-quantile of Beta(a, b): scipy's where installed, else bisection on ``betainc`` (to 1e-15)."""
    try:
        from scipy.stats import beta
    except ImportError:
        lo, hi = 0.0, 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            if betainc(a, b, mid) < q:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-15:
                break
        return (lo + hi) / 2
    return float(beta.ppf(q, a, b))


def clopper_pearson(x, n, confidence=CONFIDENCE):
    """(lower, upper) of the exact two-sided interval for x events in n trials."""
    if n <= 0 or not 0 <= x <= n:
        raise ValueError(f"clopper_pearson needs 0 <= x <= n and n > 0, got x={x}, n={n}")
    tail = (1.0 - confidence) / 2
    lower = 0.0 if x == 0 else beta_ppf(tail, x, n - x + 1)
    upper = 1.0 if x == n else beta_ppf(1.0 - tail, x + 1, n - x)
    return lower, upper


def over_budget_p(x, n, budget):
    """The one-sided exact p-value of "the rate is at most ``budget``" after x events in n trials:
    P(X >= x | n, budget) = I_budget(x, n - x + 1). Below 1 - (1 + CONFIDENCE) / 2 (2.5%) exactly when the
    Clopper-Pearson lower bound lies above the budget."""
    if x <= 0:
        return 1.0
    if budget <= 0:
        return 0.0
    return min(1.0, max(0.0, betainc(x, n - x + 1, budget)))


def holm(p_values, alpha=(1.0 - CONFIDENCE) / 2):
    """Holm's step-down adjusted p-values (Holm 1979, "A simple sequentially rejective multiple test procedure",
    Scandinavian Journal of Statistics 6(2) 65-70): the family-wise error rate of rejecting every hypothesis whose
    adjusted p-value is <= ``alpha`` is at most ``alpha``. Returns the adjusted p-values in the input's order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [1.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def min_count(budget, confidence=CONFIDENCE):
    """The fewest examples at which a rate with no event at all has its upper bound within ``budget``: below it
    no count can pass the gate (None when none can: a budget of 0)."""
    if budget >= 1:
        return 1
    if budget <= 0:
        return None
    return math.ceil(math.log((1.0 - confidence) / 2) / math.log1p(-budget) - 1e-9)


def status(x, n, budget):
    """'pass' (upper <= budget), 'fail' (lower > budget) or 'inconclusive' (the interval holds the budget)."""
    lower, upper = clopper_pearson(x, n)
    if upper <= budget:
        return "pass"
    return "fail" if lower > budget else "inconclusive"


def examples_to_decide(x, n, budget, alpha=None, limit=10**10):
    """The fewest examples N >= n at which the observed rate x/n (kept) would decide -- the upper bound within the
    budget, or the lower bound above it (with ``alpha``: the exact p-value ``over_budget_p`` at most ``alpha``, a
    level a multiple-comparison correction sets) -- or None when it would not within ``limit`` (the rate sits on
    the budget). Doubling, then bisection: the decision is monotone in N here."""
    rate = x / n

    def decided(m):
        events = round(rate * m)
        if alpha is None:
            return status(events, m, budget) != "inconclusive"
        return clopper_pearson(events, m)[1] <= budget or over_budget_p(events, m, budget) <= alpha

    if decided(n):
        return n
    hi = n
    while not decided(hi):
        hi *= 2
        if hi > limit:
            return None
    lo = hi // 2
    while hi - lo > max(1, hi // 1000):  # to 0.1%: the answer is an estimate at the observed rate anyway
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decided(mid) else (mid, hi)
    return hi
