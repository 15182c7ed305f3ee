"""The terminal summary of a run (``pytest_terminal_summary``): the validation pass, the verdict counts, the
artifact and reference caches, where the time went, the numerics of fp16/int8 rows, replay commands, findings,
the comparison with the baseline and where the report was written. Read from the recorder
(``paritygate.session.ParitySession``) and its run's options."""

from paritygate.backend.registry import describe_numerics
from paritygate.common.timeline import summary_line as time_line
from paritygate.report.baseline import summary_lines as baseline_lines
from paritygate.report.text import counts, precision_label


def summary_lines(session):
    from paritygate.judge.preflight import summary_lines as validation_lines

    lines = validation_lines(session.validation)
    checks = session.checks
    if not checks and not session.findings:
        return lines
    # the four verdicts always, so that "0 error" is said; skip/xfail/regenerated when they occurred
    text = ", ".join(f"{n} {s}" for s, n in counts(checks).items() if n or s in ("pass", "fail", "error", "inconclusive"))
    stats = session.cache_stats()
    lines += [f"paritygate: runtime {session.options.runtime}, {len(checks)} checks: {text}",
              f"paritygate: artifact cache: {stats['builds']} built, {stats['hits']} reused"]
    ref = session.reference_cache_stats()
    lines.append(reference_cache_line(ref, ref["enabled"]))
    spent = session.time_spent()
    lines.append(time_line(spent, spent["wall"], spent["processes"]))
    reduced = sorted({c.numerics for c in checks if c.numerics})
    if reduced:
        lines.append(f"paritygate: fp16/int8 rows computed with {' and '.join(reduced)} numerics "
                     f"({'; '.join(describe_numerics(n) for n in reduced)})")
    lines += [f"paritygate: {c.model} {precision_label(c)} {c.check} failed; replay: {c.reproducer['command']}"
              for c in checks if c.reproducer]
    for f in session.findings:
        lines.append(f"paritygate: finding {f['kind']}: {f['model']} {f['precision'] or ''} {f['check']}: "
                     f"{f['details'].get('summary', '')}".replace("  ", " "))
    lines += baseline_lines(session.baseline_section)
    if session.interrupted is not None:
        lines.append(f"paritygate: INTERRUPTED after {len(checks)} of {session.interrupted['selected']} selected "
                     "checks: no verdict (the report says so); rerun for one")
    if session.options.report_dir is not None:
        replaced = f" (replacing the report written there at {session.replaces})" if session.replaces else ""
        lines.append(f"paritygate: report written to {session.options.report_dir}{replaced}")
    return lines


def reference_cache_line(stats, enabled=True):
    """``paritygate: reference cache: N computed, M reused``, and the runs that are always live (goldens, latency)."""
    live = f"; {stats.get('live', 0)} live TensorFlow runs (goldens_reproduce, latency)" if stats.get("live") else ""
    state = "" if enabled else " off:"
    return f"paritygate: reference cache:{state} {stats.get('computed', 0)} computed, {stats.get('reused', 0)} reused{live}"
