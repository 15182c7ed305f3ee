"""Localization's time budget: at most a share of the run, stated and configurable (issue 37, item 4).

Localization explains a failure the check has already judged; it must not be what a run spends its time on.
Measured (issue 37): EfficientNetB0's fp16 failures (argmax ties counted as flips) sent the plan search for 474 s, 75%
of a 635 s run, printing nothing. So localization may take at most ``share`` of the run: 20% by default
(``DEFAULT_SHARE``, ``--parity-localize=on``); ``--parity-localize=SHARE`` sets it (1 lifts the limit),
``--parity-localize=off`` turns localization off.

How. With L the time localization has taken so far and O the time the run has spent on everything else, L may grow
while L <= share x (O + L), so a localization about to start may take ``share / (1 - share) x O - L``; or, where that
is more, up to ``MIN_SECONDS`` in all: a run of a few seconds (a small model, a warm cache) still gets its plan. It
is counted per process (an xdist worker keeps its own clock, from its own start). A localization whose allowance is already
spent does not start; one that starts stops its plan search before the rebuild that would begin past its allowance
(``repair.search``'s deadline). Its first ranking (every node's output compared) is ended at the allowance too where
the model runs apart (``common.apart``, from ``APART_BYTES``: BERT-base-size's took 85 s of a 74.5-s allowance before);
a smaller model's runs whole, in seconds. Either way its ``divergence.budget`` says so.
"""

import time

from paritygate.common.memo import Memo, Once

DEFAULT_SHARE = 0.2
# The least localization may take in a run, whatever its share: what the searches of the suite's own models take,
# measured on this 2-core machine (docs/artifacts.md): 4.7-6.6 s for a 99-node fp16 graph, 10.1-18.0 s for fer's int8.
MIN_SECONDS = 30.0
SOURCE = ("issue 37 item 4: localization explains a failure already judged, so it takes at most this share of the "
          "run (--parity-localize=SHARE; measured before: 474 s, 75% of EfficientNetB0's run)")
CLOCKS = Memo("localization_clock", key=Once)  # the run's Clock (clock)


def parse_localize(value):
    """``--parity-localize``'s value (on, off, a share in (0, 1]; a bool from a script) as (on, share); a
    ValueError says what was expected."""
    if isinstance(value, bool) or value in ("on", "off"):
        return value in (True, "on"), DEFAULT_SHARE
    try:
        share = float(value)
    except (TypeError, ValueError):
        share = None
    if share is None or not 0.0 < share <= 1.0:
        raise ValueError(f"--parity-localize={value}: expected on, off or the share of the run localization may take, "
                         "a number in (0, 1] (e.g. 0.2 for 20%, the default; 1: no limit)")
    return True, share


class Clock:
    """The time localization took in this run, against the run's own time since ``started`` (time.monotonic)."""

    def __init__(self, started, share):
        self.started, self.share, self.spent = started, share, 0.0

    def allowance(self, now=None):
        """Seconds a localization starting ``now`` may take (inf: no limit)."""
        if self.share >= 1.0:
            return float("inf")
        other = (time.monotonic() if now is None else now) - self.started - self.spent
        return max(self.share / (1.0 - self.share) * max(other, 0.0), MIN_SECONDS) - self.spent

    def spend(self, seconds):
        self.spent += seconds

    def describe(self, allowed, took, stopped):
        """The ``divergence.budget`` record: the share, this localization's allowance and time, whether the
        budget stopped it, and the run's localization time so far."""
        return {"share": self.share, "min_s": MIN_SECONDS,
                "allowed_s": None if allowed == float("inf") else round(max(allowed, 0.0), 3),
                "took_s": round(took, 3), "stopped": stopped, "run_localization_s": round(self.spent, 3),
                "source": SOURCE}


def clock(ctx):
    """The run's localization clock (from the run context's start, with its ``--parity-localize`` share)."""
    return CLOCKS.get(ctx, Once(), lambda: Clock(getattr(ctx, "started", time.monotonic()),
                                                 getattr(ctx, "localize_budget", DEFAULT_SHARE)))
