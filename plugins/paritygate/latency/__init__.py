"""Direct latency measurement per runtime (trtexec style) and budgets per device class.

``harness``: the timing loop, percentiles, self-overhead. ``budgets``: ``[models.latency.<class>]`` keys and
their evaluation. ``machine``: the machine info recorded with every check. ``checks``: one check per model x
precision (candidate and TF reference), as ``conformance/test_latency.py`` runs it.
"""

from paritygate.latency.budgets import Budgets, PercentileBudget, SpeedupBudget, budgets_for
from paritygate.latency.checks import latency_check, latency_row, measure_runner, numbers, overhead_failures
from paritygate.latency.harness import (
    OVERHEAD_LIMIT,
    PERCENTILE_METHOD,
    PROFILE_ENV,
    PROFILES,
    LatencyError,
    Profile,
    Timing,
    load_profile,
    loop_overhead_ns,
    measure,
    percentile,
    summarize,
)
from paritygate.latency.machine import machine_info

__all__ = [
    "OVERHEAD_LIMIT",
    "PERCENTILE_METHOD",
    "PROFILES",
    "PROFILE_ENV",
    "Budgets",
    "LatencyError",
    "PercentileBudget",
    "Profile",
    "SpeedupBudget",
    "Timing",
    "budgets_for",
    "latency_check",
    "latency_row",
    "load_profile",
    "loop_overhead_ns",
    "machine_info",
    "measure",
    "measure_runner",
    "numbers",
    "overhead_failures",
    "percentile",
    "summarize",
]
