"""The parity report: ``parity-report.json`` (schema 1), ``parity-report.md``, ``parity-report.html``."""

import json
from pathlib import Path

from paritygate.report.html import render_html
from paritygate.report.markdown import render_markdown

SCHEMA = 1


def report_dict(session):
    """The report of a run: the recorder's (``paritygate.session``) checks, findings and counters, with the run's
    options (``session.options``) and environment."""
    options = session.options
    return report_data(session.checks, session.findings, options.context, config=options.config_path,
                       device_class=options.device_class, time=session.time_spent(),
                       artifact_cache=session.cache_stats(), reference_cache=session.reference_cache_stats(),
                       validation=session.validation, baseline=session.baseline_section)


def report_data(checks, findings, context, config, device_class, time, **sections):
    """The one report dict (schema 1) of any run: its CheckResults (settled, ordered), the findings, the candidate
    runtime and numerics of ``context`` (a ``context.RunContext``), its environment; ``sections`` add keys (a
    baseline that is None is left out). ``pytest`` runs (``report_dict``) and ``paritygate shadow`` both write it."""
    data = {"schema": SCHEMA, "environment": context.versions(), "runtime": context.runtime,
            "numerics": context.numerics, "config": str(config), "device_class": device_class}
    data.update({k: v for k, v in sections.items() if k != "baseline"})
    data["time"] = time
    data["checks"] = [c.to_dict() for c in sorted(checks, key=lambda c: (c.model, c.precision or "", c.check))]
    data["findings"] = sorted(findings, key=lambda f: (f["kind"], f["model"], f["precision"] or "", f["check"]))
    if sections.get("baseline") is not None:
        data["baseline"] = sections["baseline"]
    return data


def write_report(session, folder, data=None):
    """Write all three files; called at session end also when checks failed."""
    return write_data(report_dict(session) if data is None else data, folder)


def write_data(data, folder):
    """Write a report dict as parity-report.json, .md and .html into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "parity-report.json").write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    (folder / "parity-report.md").write_text(render_markdown(data))
    (folder / "parity-report.html").write_text(render_html(data))
    return folder
