"""The parity report: ``parity-report.json`` (schema 1), ``parity-report.md``, ``parity-report.html``."""

import json
from pathlib import Path

from paritygate.files import write_file
from paritygate.report.html import render_html
from paritygate.report.markdown import render_markdown

SCHEMA = 1


def report_dict(session):
    """The report of a run: the recorder's (``paritygate.session``) checks, findings and counters, with the run's
    options (``session.options``) and environment."""
    options = session.options
    data = {"schema": SCHEMA, "environment": options.context.versions(), "runtime": options.runtime,
            "numerics": options.numerics_label,
            "config": str(options.config_path), "device_class": options.device_class,
            "artifact_cache": session.cache_stats(),
            "reference_cache": session.reference_cache_stats(), "time": session.time_spent(), "validation": session.validation,
            "checks": [c.to_dict() for c in sorted(session.checks, key=lambda c: (c.model, c.precision or "", c.check))],
            "findings": sorted(session.findings, key=lambda f: (f["kind"], f["model"], f["precision"] or "",
                                                                f["check"]))}
    if session.baseline_section is not None:
        data["baseline"] = session.baseline_section
    if session.interrupted is not None:
        data["status"] = "interrupted"
        data["interrupted"] = {"selected": session.interrupted["selected"], "recorded": len(data["checks"]),
                               "reason": "interrupted (Ctrl-C) before every selected test ran: no verdict"}
    else:
        data["status"] = "stopped" if (session.validation or {}).get("problems") else "complete"
    return data


def write_report(session, folder, data=None):
    """Write all three files; called at session end also when checks failed."""
    return write_data(report_dict(session) if data is None else data, folder)


FILES = ("parity-report.json", "parity-report.md", "parity-report.html")


def write_data(data, folder, names=FILES):
    """The one writer of report files: ``data`` (a report dict) as ``names`` (of ``FILES``) in ``folder``, each
    rendered first, then written through a temporary file and ``os.replace`` (``paritygate.files.write_file``): a
    symlink planted at a report's name is replaced, its target never written. OSError names the file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    render = {"parity-report.json": lambda: json.dumps(data, indent=1, allow_nan=False) + "\n",
              "parity-report.md": lambda: render_markdown(data), "parity-report.html": lambda: render_html(data)}
    texts = {name: render[name]() for name in names}  # all rendered before any is written
    for name, text in texts.items():
        write_file(folder / name, text, "the report")
    return folder
