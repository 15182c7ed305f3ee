"""What a converter's failure says: the tool's own error read out of its log, and the known converter gaps
(``gaps.json``: data, one entry a gap) named in one line with their fix.

tf2onnx logs INFO lines before, between and after its error; the last lines of its stderr are seldom the error
(a BERT-base conversion's five last lines were all INFO). ``tool_error`` keeps what the tool itself flagged: its
``ERROR`` log lines and the exception line that ended it, in that order.
"""

import json
import re
import signal
from functools import lru_cache
from pathlib import Path

TABLE_PATH = Path(__file__).with_name("gaps.json")

# A Python exception's last line ("ValueError: ...", "onnx.onnx_cpp2py_export.checker.ValidationError: ...")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
# A logged error: Python logging's "ERROR - ..." / "ERROR:name:...", absl's "E1128 ..." lines
_LOGGED = re.compile(r"(?:\bERROR\b\s*[-:]|^E\d{4} )")


@lru_cache(maxsize=1)
def table():
    """The known gaps: [{"id", "converter", "match", "gap", "fix", "source"}]."""
    return json.loads(TABLE_PATH.read_text())["gaps"]


def known_gap(converter, message):
    """The first known gap of ``converter`` whose pattern ``message`` matches, or None."""
    for entry in table():
        if entry["converter"] == converter and re.search(entry["match"], message or ""):
            return entry
    return None


def gap_line(entry):
    """One line: the gap and its fix."""
    return f"known converter gap '{entry['id']}': {entry['gap']}; fix: {entry['fix']}"


def tool_error(stderr, returncode, width=800):
    """The tool's own error in its log ``stderr`` (it exited with ``returncode``): its logged errors, each once,
    then the exception that ended it; the last lines only when it flagged nothing. A negative ``returncode`` (a
    signal) is said first: killed by SIGKILL is most often the out-of-memory killer, not the model."""
    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    logged = list(dict.fromkeys(line for line in lines if _LOGGED.search(line)))
    raised = [line for line in lines if _EXCEPTION.match(line)]
    found = logged[-3:] + raised[-1:] or lines[-5:]
    text = " | ".join(dict.fromkeys(found))
    if returncode is not None and returncode < 0:
        name = _signal_name(-returncode)
        why = " (most often the out-of-memory killer: a model too large for this machine's memory)" \
            if name == "SIGKILL" else ""
        text = f"killed by {name}{why}" + (f"; its last lines: {text}" if text else "")
    return text if len(text) <= width else text[:width] + " …"


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
