"""The verdict vocabulary. Each check ends in exactly one status, and the word means the same in the pytest
outcome, the JSON, the Markdown, the HTML and the terminal:

    pass          the candidate met the stated budget, on inputs that could have shown otherwise
    fail          the candidate is wrong (numbers and a reproducer in the details)
    error         the suite or a tool it drives failed (a converter, a runtime loading an artifact the suite
                  built, the reference itself): never the candidate's fault
    inconclusive  the inputs could not tell (a constant reference, argmax ties, no detections); fails the run
                  unless the model sets ``allow_uninformative = true``, which the report records
    skip          not applicable, with the reason
    xfail         a recorded known failure, strict
    regenerated   ``--update-goldens`` rewrote the goldens: nothing was judged

A conformance test raises ``SuiteError`` or ``Inconclusive`` for the two statuses pytest has no word for;
the plugin turns them into pytest's error category and an ``inconclusive`` category (``pytest_report_teststatus``).
"""

STATUSES = ("pass", "fail", "error", "inconclusive", "skip", "xfail", "regenerated")
FAILING = ("fail", "error", "inconclusive")  # statuses that fail the run (inconclusive unless allowed)
REPORT_ATTR = "paritygate_status"  # set on a TestReport whose status pytest's outcome cannot express
UPSTREAM_DEFECT_ATTR = "paritygate_upstream_defect"  # user property: the xfail stands for an upstream (Beam) defect
MARKED = ("regenerated",)  # statuses a passing test declares itself (``mark``): pytest's outcome stays passed


def mark(node, status):
    """Declare the word a *passing* test ends in when "pass" would claim a judgement that was not made:
    ``mark(request.node, "regenerated")`` after ``--update-goldens`` rewrote the goldens. The plugin turns it
    into the check's status (JSON, Markdown, terminal); a failure or error still wins."""
    if status not in MARKED:
        raise ValueError(f"status must be one of {MARKED}, got {status!r}")
    node.user_properties.append((REPORT_ATTR, status))


class SuiteError(Exception):
    """The suite or a tool it drives failed; the message names the tool, the file or node and the cause."""


class Inconclusive(Exception):
    """The check's inputs could not have shown a failure; the message says why and which inputs would help."""

    def __init__(self, message, allowed=False):
        super().__init__(message)
        self.allowed = allowed  # the model sets allow_uninformative = true: recorded, does not fail the run


def inconclusive(message, allowed=False):
    """The one way a check's result says it is inconclusive: an ``Inconclusive`` carrying ``message`` (None when
    there is none), which the conformance test raises (``if result.inconclusive: raise result.inconclusive``)."""
    return Inconclusive(message, allowed=allowed) if message else None
