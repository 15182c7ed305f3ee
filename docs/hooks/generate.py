"""The reference tables of the docs, generated from the code and committed into the pages, so that they read whole
in the repository browser as on the site, and cannot drift from the code unnoticed.

A page holds each generated table between two markers (the first run after adding a lone opening marker fills it):

    <!-- paritygate:config-reference -->     the config keys, from plugins/paritygate/models/config_schema.json,
                                             described by the comments of config.md's commented example
    <!-- paritygate:checks-reference -->     every check: the conformance tests (conformance/test_*.py)
    <!-- paritygate:options-reference -->    every ``--parity-`` option, from the plugin's ``pytest_addoption``
    <!-- paritygate:errors CLASS -->         every message of CLASS the suite can print as an ``ERROR:`` or
                                             ``error:`` line, read from the source (troubleshooting.md)
    ...the generated Markdown...
    <!-- /paritygate:config-reference -->    (the closing marker repeats the opening one's words)

Regenerate every table in place after changing the schema, an option, a conformance test or an error message:

    python docs/hooks/generate.py            (--check: only say which pages differ, exit 1 if any)

tests/test_docs.py fails when a committed table differs from what this generates. MkDocs also runs this file as a
hook (mkdocs.yml): the site is built from freshly generated tables. A class of ``ERROR_SOURCES`` found in the code
without its marker on the troubleshooting page fails the build (``mkdocs build --strict`` runs in
tests/test_docs.py), so a new kind of error cannot go undocumented.
"""

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "plugins" / "paritygate"
SCHEMA = PACKAGE / "models" / "config_schema.json"
MARKER = re.compile(r"<!-- paritygate:([a-z-]+)(?: ([A-Za-z.]+))? -->")

# Exceptions whose message reaches an ``ERROR:`` line (config, validation before any check, baseline: exit 4) or
# an ``error:`` line of the ``paritygate`` command; each has a section with its fix on troubleshooting.md.
ERROR_SOURCES = ("ConfigError", "ExpectationError", "InputSetError", "GoldenError", "HandlerContractError",
                 "MappingError", "BindingsError", "TaskSpecError", "RunnerError", "BaselineError", "InitError",
                 "MergeError", "ReplayError", "FileRefused", "validation", "command", "options")


PAGES = ("config.md", "checks.md", "options.md", "troubleshooting.md")  # the pages holding generated tables
COMMAND = "python docs/hooks/generate.py"
_BLOCK = re.compile(r"<!-- paritygate:(?P<kind>[a-z-]+)(?: (?P<arg>[A-Za-z.]+))? -->\n"
                    r"(?:(?P<body>.*?)<!-- /paritygate:(?P=kind)(?: (?P=arg))? -->)?", re.DOTALL)


def on_page_markdown(markdown, page, config, files):  # MkDocs calls it with these names
    return fill(markdown, page.file.src_path)


def fill(markdown, name):
    """``markdown`` (the page ``name``) with every generated table between its markers regenerated."""
    def block(match):
        kind, arg = match["kind"], match["arg"]
        head = f"<!-- paritygate:{kind}{f' {arg}' if arg else ''} -->"
        first = match["body"] is None  # a lone opening marker: its line break stays after the closing one
        return f"{head}\n\n{generated(kind, arg, markdown, name).strip()}\n\n<!-- /{head[5:-4]} -->" + "\n" * first

    if name == "troubleshooting.md":
        missing = [s for s in sorted({m.source for m in messages()}) if f"<!-- paritygate:errors {s} -->" not in markdown]
        if missing:
            raise ValueError(f"docs/troubleshooting.md: no section for the error messages of {missing}: add a "
                             f"'<!-- paritygate:errors NAME -->' marker under a heading that says how to fix them, "
                             f"then run {COMMAND}")
    return _BLOCK.sub(block, markdown)


def generated(kind, arg, markdown, name):
    if kind == "config-reference":
        return config_reference(markdown)
    if kind == "checks-reference":
        return checks_reference()
    if kind == "options-reference":
        return options_reference()
    if kind == "errors":
        return error_list(arg)
    raise ValueError(f"docs/{name}: unknown paritygate marker {kind!r}")


def main(argv=None):
    """Regenerate the tables of ``PAGES`` in place; ``--check``: write nothing, list the pages that differ."""
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = []
    for name in PAGES:
        path = ROOT / "docs" / name
        text = path.read_text()
        new = fill(text, name)
        if new != text:
            stale.append(name)
            if not check:
                path.write_text(new)
    verb = "differ from the code" if check else "regenerated"
    print(f"docs/{', docs/'.join(stale)}: {verb}" if stale else "the generated tables are up to date")
    return 1 if check and stale else 0


# -- config reference ---------------------------------------------------------------------------------------
def schema_rows(node, path, defs, required=False):
    """(key path, what it takes, required) for every key of the schema below ``node``."""
    node = defs[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
    rows = []
    if "properties" in node or "additionalProperties" in node or "patternProperties" in node:
        if path:
            rows.append((path, "table", required))
        needed = set(node.get("required", ()))
        for key, sub in node.get("properties", {}).items():
            rows += schema_rows(sub, f"{path}.{key}" if path else key, defs, key in needed)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            rows += schema_rows(extra, f"{path}.<name>", defs)
        for pattern, sub in node.get("patternProperties", {}).items():
            rows.append((f"{path}.<key>", f"{takes(sub, defs)}; key matching `{pattern}`", False))
        return rows
    return [(path, takes(node, defs), required)]


def takes(node, defs):
    node = defs[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
    if "enum" in node:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    if "oneOf" in node:
        return " or ".join(takes(n, defs) for n in node["oneOf"])
    kind = node.get("type", "any")
    if kind == "array":
        item = takes(node.get("items", {}), defs)
        size = f", {node['minItems']}..{node.get('maxItems', '')}" if "minItems" in node else ""
        return f"array of {item}{size}"
    if kind == "object":
        return "table"
    bounds = [f"{word} {node[k]}" for k, word in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"))
              if k in node]
    if "pattern" in node:
        bounds.append(f"matching `{node['pattern']}`")
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def example_comments(markdown):
    """(table, key) -> the comment beside ``key = ...`` in the page's commented TOML example (continuation
    comment lines joined), the table named as its first level below ``models`` (``inputs``, ``beam``, ...)."""
    block = markdown.split("```toml", 1)[1].split("```", 1)[0] if "```toml" in markdown else ""
    found, table, last = {}, "", None
    for line in block.splitlines():
        header = re.match(r"\s*\[\[?models\.?([a-z_]*)[^\]]*\]\]?\s*(#\s*(.*))?$", line)
        key = re.match(r"\s*([a-z0-9_]+)\s*=.*?#\s*(.*)$", line)
        if header:
            table, last = header.group(1), (header.group(1), "")
            found.setdefault(last, header.group(3) or "")
        elif key:
            last = (table, key.group(1))
            found.setdefault(last, key.group(2))
        elif line.strip().startswith("#") and last and re.match(r"\s{8,}#", line):
            found[last] = f"{found[last]} {line.strip().lstrip('#').strip()}".strip()
    return found


def config_reference(markdown):
    schema = json.loads(SCHEMA.read_text())
    comments = example_comments(markdown)
    lines = ["| key (under `[[models]]`) | takes | required | what it is (from the example below) |",
             "| --- | --- | --- | --- |"]
    for path, kind, required in schema_rows(schema["$defs"]["model"], "", schema["$defs"]):
        parts = path.split(".")
        table, key = (parts[0], parts[-1]) if len(parts) > 1 else ("", parts[0])
        if len(parts) == 1:
            note = comments.get(("", key)) or comments.get((key, ""), "")
        else:
            note = comments.get((table, key), "") if len(parts) == 2 else ""
        cells = [f"`{path}`", kind, "yes" if required else "", note]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + f"\n\nGenerated from `{SCHEMA.relative_to(ROOT)}` by `{COMMAND}`.\n"


def _cell(text):
    """A table cell: a ``|`` outside code spans escaped (inside one it is not a cell separator)."""
    parts = text.split("`")
    return "`".join(p if i % 2 else re.sub(r"(?<!\\)\|", r"\\|", p) for i, p in enumerate(parts))


# -- options reference ----------------------------------------------------------------------------------------
def options_reference():
    """The plugin's options as pytest's parser holds them: names, metavar, help (which states the default)."""
    from _pytest.config.argparsing import Parser

    from paritygate import plugin

    parser = Parser(_ispytest=True)
    plugin.pytest_addoption(parser)
    lines = ["| option | what it does |", "| --- | --- |"]
    for option in parser.getgroup("paritygate").options:
        attrs = option.attrs()
        metavar = f"={attrs['metavar']}" if attrs.get("metavar") and attrs.get("action") != "store_true" else ""
        names = ", ".join(f"`{n}{metavar}`" for n in option.names())
        text = " ".join(attrs.get("help", "").replace("%%", "%").replace(f"{ROOT}/", "").split())
        lines.append(f"| {_cell(names)} | {_cell(text)} |")
    return "\n".join(lines) + f"\n\nGenerated from `paritygate.plugin.pytest_addoption` by `{COMMAND}`.\n"


# -- checks reference ----------------------------------------------------------------------------------------
def checks_reference():
    described = docstring_entries()
    lines = ["| check | test | markers | what it asserts |", "| --- | --- | --- | --- |"]
    for path in sorted((ROOT / "conformance").glob("test_*.py")):
        if path.name == "test_gpu.py":
            continue  # the GPU fixtures' own tests, not checks of a model
        tree = ast.parse(path.read_text())
        module_marks = _marks(n.value for n in tree.body if isinstance(n, ast.Assign)
                              and any(getattr(t, "id", "") == "pytestmark" for t in n.targets))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                check = node.name[5:]
                doc = (ast.get_docstring(node) or "").split("\n\n")[0] or described.get(check, "")
                doc = " ".join(doc.split()).replace("|", "\\|")
                marks = ", ".join(sorted(module_marks | _marks(node.decorator_list)))
                lines.append(f"| `{check}` | `{path.relative_to(ROOT)}::{node.name}` | {marks} | {doc} |")
    return "\n".join(lines) + (f"\n\nGenerated by `{COMMAND}` from `conformance/test_*.py`: each test's docstring, "
                               "or the entry for its check in the docstring of the module that computes it.\n")


def _marks(nodes):
    return {m for n in nodes for m in re.findall(r"pytest\.mark\.([a-z_]+)\b(?!\()", ast.unparse(n))}


def docstring_entries():
    """check name -> its entry in a module docstring's table of checks (an indented ``name   what it does`` line
    and its continuation lines; ``exactly_once`` in paritygate/beam/checks.py is the check ``beam_exactly_once``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        body = ast.parse(path.read_text()).body
        doc = body[0].value.value if body and isinstance(body[0], ast.Expr) and \
            isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str) else ""
        name = None
        for line in doc.splitlines():
            entry = re.match(r"^ {4}([a-z_0-9]+) +(\S.*)$", line)
            if entry:
                name = entry.group(1)
                for key in (name, f"beam_{name}"):
                    found.setdefault(key, entry.group(2))
            elif name and re.match(r"^ {8,}\S", line):
                for key in (name, f"beam_{name}"):
                    found[key] += " " + line.strip()
            else:
                name = None
    return found


# -- error messages -------------------------------------------------------------------------------------------
class Message:
    def __init__(self, source, text, where):
        self.source, self.text, self.where = source, text, where


def template(node):
    """A message expression as text, each computed part written ``…``; None when it holds no text of its own."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
        return text if len(text.replace("…", "").strip(" :;,.()'")) >= 6 else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template(node.left), template(node.right)
        return (left or "…") + (right or "…") if left or right else None
    return None


def _source_of(call, path):
    """Which ERROR_SOURCES entry a call's message belongs to, and the message expression; (None, None) if none."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if name.endswith("Error") and name in ERROR_SOURCES and call.args:
        return name, call.args[0]
    if name == "error" and path.name == "files.py" and call.args:  # files.py raises the caller's own class
        return "FileRefused", call.args[0]
    if name == "problem" and len(call.args) == 2:
        return "validation", call.args[1]
    if name == "print" and call.args and "error:" in (template(call.args[0]) or ""):
        return "command", call.args[0]
    if name in ("ValueError", "UsageError") and path.name in ("context.py", "extras.py") and call.args:
        return "options", call.args[0]
    return None, None


def messages():
    """Every message of ``ERROR_SOURCES`` in the package, each with where it is: its file and the function that
    raises it (not a line number, which every edit above it would move)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node, scope in _calls(ast.parse(path.read_text())):
            source, arg = _source_of(node, path)
            text = template(arg) if arg is not None else None
            if text:
                found.append(Message(source, text, f"{path.relative_to(ROOT)}" + (f", {scope}" if scope else "")))
    return found


def _calls(tree, scope=""):
    """(call, the dotted name of the function or class holding it) for every call under ``tree``, in order."""
    for child in ast.iter_child_nodes(tree):
        named = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if isinstance(child, ast.Call):
            yield child, scope
        yield from _calls(child, (f"{scope}.{child.name}" if scope else child.name) if named else scope)


def error_list(source):
    rows = [m for m in messages() if m.source == source]
    if not rows:
        raise ValueError(f"docs/troubleshooting.md: no message of {source!r} is left in the code: remove its section")
    return "\n".join(f"- `{_code(m.text)}` <small>({m.where})</small>" for m in rows) + "\n"


def _code(text):
    return " ".join(text.replace("`", "'").split())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "plugins"))  # the options table imports the plugin (installed, or this checkout)
    sys.exit(main())
