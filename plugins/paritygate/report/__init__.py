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
    data = {"schema": SCHEMA, "environment": options.context.versions(), "runtime": options.runtime,
            "numerics": options.numerics_label, "engine_build": "on" if options.engine_build else "off",
            "config": str(options.config_path), "device_class": options.device_class,
            "artifact_cache": session.cache_stats(),
            "reference_cache": session.reference_cache_stats(), "time": session.time_spent(), "validation": session.validation,
            "checks": [c.to_dict() for c in sorted(session.checks, key=lambda c: (c.model, c.precision or "", c.check))],
            "findings": sorted(session.findings, key=lambda f: (f["kind"], f["model"], f["precision"] or "",
                                                                f["check"]))}
    if session.baseline_section is not None:
        data["baseline"] = session.baseline_section
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
