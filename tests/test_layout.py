"""The package's shape, read from its source with ``ast`` (nothing imported): folders named for what they do, no
import cycle, backends and comparators that compute without the pytest session, and no module or function past
the sizes the style guide sets (STYLE.md: ~400 lines / ~60 lines; here 400 and 60, checked), and a plugin
module that only talks to pytest (under 350 lines)."""

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
PACKAGE = PLUGINS / "paritygate"
ROOT = PLUGINS.parent
MAX_FLAT = 8  # modules directly in paritygate/ besides __init__ and __main__
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60
MAX_PLUGIN_LINES = 349  # issue 32: plugin.py only talks to pytest, under 350 lines
SESSION_FREE = ("backend", "comparator")  # compute with a spec, a runner and arrays: never the session
SESSION_MODULES = {"paritygate.session", "paritygate.plugin", "pytest", "_pytest"}
# take the run's context (paritygate.context), never the recorder (paritygate.session) or the plugin
RECORDER_FREE = ("judge", "backend", "comparator", "inputs", "beam", "latency", "models")
# The floors, lowest first: a module imports only from its own floor or the floors below (issue 32: "no import
# climbs"). A module or package named here holds everything below it unless a longer name is listed too.
FLOORS = (
    ("paritygate", "paritygate.lazy", "paritygate.verdict", "paritygate.result", "paritygate.common"),  # ground
    ("paritygate.comparator", "paritygate.gpu"),  # arrays and devices
    ("paritygate.inputs",),  # input sets, goldens, samples, reproducers
    ("paritygate.backend",),  # loaders and runners: reference, candidates, artifacts, caches, the input spec
    # the candidate runtimes (the registry) and what builds, gates and measures candidates from those loaders and
    # runners: no import climbs inside backend/ either (an artifact module never imports the runners built on it)
    ("paritygate.backend.registry", "paritygate.backend.runtimes", "paritygate.backend.engines",
     "paritygate.backend.precision", "paritygate.backend.kernel_order", "paritygate.backend.ahead"),
    ("paritygate.models",),  # the config and the known failures
    ("paritygate.beam", "paritygate.latency"),  # RunInference and latency checks
    ("paritygate.judge", "paritygate.shadow"),  # the parity checks, the pass before any check, the shadow gate
    ("paritygate.context",),  # the run's options and what checks compute with
    ("paritygate.report",),  # JSON, Markdown, HTML, the terminal summary
    ("paritygate.cli", "paritygate.session"),  # the command line; the recorder
    ("paritygate.plugin", "paritygate.extras", "paritygate.__main__"),  # pytest
)


def _modules():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PLUGINS).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def imports(name, path):
    """Every paritygate module ``name`` imports, at any depth of its code (lazy imports too). ``from P import x``
    imports P itself (its ``__init__`` runs) and, where ``x`` is a module, P.x as well: a submodule that does
    ``from own_package import ...`` while that package's __init__ imports it is a cycle."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def _graph():
    return {m: {i for i in imports(m, p) if i in MODULES and i != m} for m, p in MODULES.items()}


def cycles(graph):
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_package_has_no_import_cycle():
    graph = _graph()
    found = cycles(graph)
    assert not found, "\n".join(f"{c}: " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)


def test_the_cycle_check_sees_a_submodule_importing_its_own_package():
    graph = {"p": {"p.a"}, "p.a": {"p"}, "q": set(), "q.b": {"q"}}
    assert cycles(graph) == [["p", "p.a"]]
    src = PACKAGE / "report" / "html.py"
    assert "paritygate.report.html_checks" in imports("paritygate.report.html", src)
    assert imports("paritygate.x.y", _write(ROOT, "from paritygate.x import z\n")) >= {"paritygate.x", "paritygate.x.z"}


def _write(tmp, text):
    import tempfile

    folder = Path(tempfile.mkdtemp())
    (folder / "y.py").write_text(text)
    return folder / "y.py"


def floor_of(name, floors=FLOORS):
    """The floor of module ``name``: that of the longest listed name it is or lies under; None if unlisted."""
    best = None
    for level, names in enumerate(floors):
        for listed in names:
            if (name == listed or name.startswith(listed + ".")) and (best is None or len(listed) > len(best[1])):
                best = (level, listed)
    return best and best[0]


def climbs(graph, floors=FLOORS):
    """Every import from a module to one on a higher floor."""
    return sorted(f"{m} (floor {floor_of(m, floors)}) imports {d} (floor {floor_of(d, floors)})"
                  for m, deps in graph.items() for d in deps if floor_of(d, floors) > floor_of(m, floors))


def test_every_module_stands_on_a_floor():
    assert not [m for m in MODULES if floor_of(m) is None]


def test_no_import_climbs_to_a_higher_floor():
    found = climbs(_graph())
    assert not found, "\n".join(found)


def test_the_climb_check_sees_a_lower_floor_importing_a_higher_one():
    floors = (("p", "p.low"), ("p.mid",), ("p.top",))
    graph = {"p.low.a": {"p.mid.b"}, "p.mid.b": {"p.low.a", "p"}, "p.top": {"p.mid.b"}, "p": set()}
    assert climbs(graph, floors) == ["p.low.a (floor 0) imports p.mid.b (floor 1)"]
    assert floor_of("p.mid.b.c", floors) == 1 and floor_of("q", floors) is None


def test_at_most_eight_modules_stand_flat():
    flat = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(flat) <= MAX_FLAT, flat


def test_folders_say_what_is_inside():
    """A newcomer finds the parity judgement, the input generation, the model config and the CLI by folder."""
    for folder, module in {"judge": "parity.py", "inputs": "strategies.py", "models": "config.py",
                           "cli": "main.py", "backend": "runtimes.py", "comparator": "compare.py"}.items():
        assert (PACKAGE / folder / module).is_file(), f"paritygate/{folder}/{module}"


def test_backend_and_comparator_compute_without_the_session():
    offenders = []
    for name, path in MODULES.items():
        if name.split(".")[1:2] and name.split(".")[1] in SESSION_FREE:
            bad = {i for i in imports(name, path) if i.split(".")[0] in ("pytest", "_pytest") or i in SESSION_MODULES}
            offenders += [f"{name} imports {i}" for i in sorted(bad)]
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = node.args
                    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
                    if "session" in names:
                        offenders.append(f"{name}.{node.name} takes a session argument")
    assert not offenders, "\n".join(offenders)


def test_judge_code_never_imports_the_recorder_or_the_plugin():
    """judge/, backend/, comparator/, inputs/ (and beam/, latency/, models/) compute with the RunContext: the
    session only records, and nothing there imports it or the plugin, at any depth (lazy imports too)."""
    offenders = [f"{name} imports {i}" for name, path in MODULES.items()
                 if name.split(".")[1:2] and name.split(".")[1] in RECORDER_FREE
                 for i in sorted(imports(name, path) & {"paritygate.session", "paritygate.plugin"})]
    assert not offenders, "\n".join(offenders)
    assert {"paritygate.session"} <= imports("paritygate.x.y", _write(ROOT, "from paritygate.session import A\n"))


def test_no_module_or_function_past_its_size():
    offenders = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "conformance").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        text = path.read_text()
        rel = path.relative_to(ROOT)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            offenders.append(f"{rel}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    offenders.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    assert not offenders, "\n".join(offenders)


def test_the_plugin_only_talks_to_pytest():
    """plugin.py stays under 350 lines: starting TensorFlow's child processes, the validation logic and the result
    lookup live with their owners (context, session, judge), not in the pytest hooks."""
    lines = len((PACKAGE / "plugin.py").read_text().splitlines())
    assert lines <= MAX_PLUGIN_LINES, f"plugins/paritygate/plugin.py: {lines} lines (under 350, issue 32)"


def test_tests_mirror_the_package():
    """Each test folder is named for a package folder (or for what it tests beyond the package)."""
    outside = {"zoo", "thirdparty", "__pycache__"}  # the bundled models' build; third-party models
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    stray = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name not in packages | outside)
    assert not stray, f"test folders without a package folder: {stray}"
