"""Known upstream non-conformance, from ``fixtures/expectations.toml`` (and an ``expectations.toml`` beside
the ``--parity-config`` file, when there is one), applied to a check as a *strict* xfail.

An expectation names the checks it makes fail, the Beam versions it holds for (a PEP 440 specifier set
against the installed apache-beam), the upstream file and line, and how a handler reaches the defect:

    reaches = "beam"                 every handler: the defect is in Beam's RunInference / wrappers / batching
    reaches = "method:get_num_bytes" the handler's class resolves that method to ``defect`` (not overridden)
    reaches = "attr:_model_inference_fn"   the handler instance's attribute is ``defect`` (the default fn)

``when`` narrows it to models where the defect shows (``PREDICATES``). Strict: a check it names that passes
is reported as a failure, so an expectation that no longer holds (Beam fixed it, or a handler overrides the
method) cannot hide anything.

Whose pipeline decides the verdict (``split``): on the bundled zoo every matching expectation is a strict xfail
(they document Beam's defects there). For a handler named in a team's own config, a defect in the handler's code
(``reaches = "method:..."`` / ``"attr:..."``: another handler avoids it) is a ``fail`` whose message names the
defect (file:line, issue): a dropped output is exactly what the gate reports. It becomes an xfail only through
the team's own expectations.toml: an ``[[expectations]]`` entry there, or a ``[[known_failures]]`` entry (with
``upstream_defect = "<id>"``) for that model and check. A defect of Beam's RunInference itself (``reaches =
"beam"``: no handler avoids it) stays a strict xfail, named in the report.
"""

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from paritygate.common.memo import Memo
from paritygate.files import present
from paritygate.models.bundled import check_names
from paritygate.models.known import BUNDLED_EXPECTATIONS, ExpectationError, read_expectations

__all__ = ["BUNDLED_EXPECTATIONS", "Expectation", "ExpectationError", "expectations_for", "load_expectations", "match"]

PREDICATES = {
    "multi_output": lambda spec, outputs: len(outputs) > 1,
    "multi_input": lambda spec, outputs: len(spec.inputs) > 1,
    "batches_of_several": lambda spec, outputs: spec.max_batch > 1,
    # itemsize counts one value per element: wrong once an element holds more than one value
    "element_has_several_values": lambda spec, outputs: any(int(np.prod(t.shape[1:])) > 1
                                                            for t in spec.inputs.values()),
}


@dataclass(frozen=True)
class Expectation:
    id: str
    checks: tuple
    beam: str
    reaches: str
    upstream: str
    reason: str
    defect: str = None
    when: tuple = field(default_factory=tuple)
    source: str = ""
    issue: str = None  # the upstream issue or pull request, where one is known
    own: bool = False  # from the team's expectations.toml (beside its config), not the bundled one

    @property
    def in_handler(self):
        """The defect is in the handler's code (its class or default inference fn), not in Beam's RunInference
        itself: another handler avoids it."""
        return self.reaches != "beam"

    def describe(self):
        issue = f", {self.issue}" if self.issue else ", no upstream issue recorded"
        return f"{self.reason} [upstream: apache-beam {self.beam} {self.upstream}{issue}; {self.source} '{self.id}']"

    def as_dict(self):
        return {"id": self.id, "reason": self.reason, "upstream": self.upstream, "beam": self.beam,
                "reaches": self.reaches, "when": list(self.when), "source": self.source, "issue": self.issue,
                "own": self.own}

    def holds_for_beam(self, version):
        from packaging.specifiers import SpecifierSet

        return version is not None and SpecifierSet(self.beam).contains(version, prereleases=True)

    def reached_by(self, handler):
        if self.reaches == "beam":
            return True
        kind, _, name = self.reaches.partition(":")
        target = _resolve(self.defect)
        if target is None:
            return False
        if kind == "method":
            return getattr(type(handler), name, None) is target
        return getattr(handler, name, None) is target

    def applies(self, check, spec, output_names, handler, beam_version):
        return (check in self.checks and self.holds_for_beam(beam_version) and self.reached_by(handler)
                and all(PREDICATES[w](spec, output_names) for w in self.when))


def _resolve(dotted):
    """``package.module:Class.attr`` -> the object, or None when it cannot be imported (not installed)."""
    module, _, path = dotted.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in path.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj


def load_expectations(path, own=False):
    """The ``[[expectations]]`` of ``path`` (read and key-checked by ``known.read_expectations``, the one reader of
    expectations.toml); ``own``: the file is the team's, beside its config."""
    out = []
    for i, entry in enumerate(read_expectations(path)["expectations"]):
        where = f"{path}: expectations[{i}] ('{entry['id']}')"
        if entry["reaches"] != "beam" and (not entry["reaches"].startswith(("method:", "attr:"))
                                           or "defect" not in entry):
            raise ExpectationError(f"{where}: key 'reaches' must be 'beam', 'method:NAME' or 'attr:NAME' "
                                   "(the latter two with 'defect' = 'module:Qualified.name')")
        suite = check_names()
        unknown = sorted(set(entry["checks"]) - suite) if suite else []
        if unknown:
            raise ExpectationError(f"{where}: key 'checks': {unknown} are no checks of the suite; expected names "
                                   "from the report's check column (beam_*, handler_*)")
        bad = sorted(set(entry.get("when", ())) - set(PREDICATES))
        if bad:
            raise ExpectationError(f"{where}: key 'when': unknown predicate(s) {bad}; known: {sorted(PREDICATES)}")
        out.append(Expectation(entry["id"], tuple(entry["checks"]), entry["beam"], entry["reaches"],
                               entry["upstream"], entry["reason"], entry.get("defect"), tuple(entry.get("when", ())),
                               Path(path).name, entry.get("issue"), own))
    return out


def expectations_for(config_path=None):
    """The bundled expectations plus those beside the config file (if it has an expectations.toml)."""
    paths = [BUNDLED_EXPECTATIONS]
    if config_path is not None:
        beside = Path(config_path).resolve().parent / "expectations.toml"
        if present(beside) and beside != BUNDLED_EXPECTATIONS.resolve():
            paths.append(beside)
    return [e for i, p in enumerate(paths) if present(p) for e in load_expectations(p, own=i > 0)]


class ConfigKey(NamedTuple):
    config_path: object  # the --parity-config file (None: the bundled config, no expectations.toml of a team's)


RUN_EXPECTATIONS = Memo("beam_expectations", key=ConfigKey)  # expectations_for(config_path)


def run_expectations(ctx, config_path=None):
    """``expectations_for(config_path)``, read once per run (``RUN_EXPECTATIONS``)."""
    return RUN_EXPECTATIONS.get(ctx, ConfigKey(config_path), lambda: expectations_for(config_path))


def beam_version():
    from paritygate.lazy import dist_version

    return dist_version("apache-beam")


def split(expected, bundled):
    """(xfail, named) of the expectations ``match`` found for a check: those that make it a strict xfail, and those
    that only name the upstream defect in its failure (the module docstring says which are which)."""
    named = [] if bundled else [e for e in expected if e.in_handler and not e.own]
    return [e for e in expected if e not in named], named


def match(check, subject, expectations):
    """The expectations that make ``check`` fail for ``subject``'s handler (empty: the check must pass)."""
    handler = subject.make(1, subject.spec.max_batch)
    version = beam_version()
    return [e for e in expectations if e.applies(check, subject.spec, subject.output_names, handler, version)]
