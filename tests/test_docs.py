"""The front door and the documentation site: README.md stays short, the site builds with `mkdocs build --strict`
(a broken link, a missing page or an unknown marker fails), its reference pages are generated from the code
(docs/hooks/generate.py), and every error message the suite can print is on the troubleshooting page."""

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 250  # issue 32: a front page, the rest is on the site


def _generator():
    spec = importlib.util.spec_from_file_location("paritygate_docs_generate", ROOT / "docs" / "hooks" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_a_front_page_with_the_two_line_quickstart():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    text = README.read_text()
    block = text.split("## Quickstart", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = block.strip().splitlines()
    assert len(commands) == 2, commands  # .ci/run runs exactly these two lines
    extras = re.search(r"-e '\.\[([a-z0-9,-]+)\]'", commands[0]).group(1).split(",")
    assert "docs" in extras, "line 1 installs the docs extra: line 2 builds the site (tests/test_docs.py)"


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    nav = re.findall(r":\s*([a-z0-9_-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(nav) == pages


def test_a_kind_of_error_without_its_section_fails_the_build():
    generate = _generator()
    page = SimpleNamespace(file=SimpleNamespace(src_path="troubleshooting.md"))
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert "ConfigError" in {m.source for m in generate.messages()}
    with pytest.raises(ValueError, match="ConfigError"):
        generate.on_page_markdown(text.replace("<!-- paritygate:errors ConfigError -->", ""), page, None, None)


def test_messages_are_read_from_the_source_with_their_computed_parts_marked():
    generate = _generator()
    found = {(m.source, m.text) for m in generate.messages()}
    assert ("FileRefused", "…: cannot read …: file not found") in found
    assert any(s == "validation" and "TensorRT engine file is empty" in t for s, t in found)
    assert any(s == "command" and t.startswith("paritygate report: error:") for s, t in found)


def test_the_generated_tables_are_committed_and_up_to_date():
    """The pages read whole in the repository browser: each generated table is committed between its markers, and
    equals what the code generates now (after a schema, option, check or message change: one command)."""
    generate = _generator()
    for name in generate.PAGES:
        text = (ROOT / "docs" / name).read_text()
        assert "<!-- /paritygate:" in text, f"docs/{name}: no generated table committed; run {generate.COMMAND}"
        assert generate.fill(text, name) == text, f"docs/{name} differs from the code: run {generate.COMMAND}"


def test_the_regeneration_command_fills_a_new_marker_and_finds_drift(tmp_path):
    generate = _generator()
    page = "# Options\n\n<!-- paritygate:options-reference -->\n\nMore text.\n"
    filled = generate.fill(page, "options.md")
    assert "| `--parity-config=PATH` |" in filled and filled.endswith("<!-- /paritygate:options-reference -->\n\nMore text.\n")
    assert generate.fill(filled, "options.md") == filled, "filling is idempotent"
    stale = filled.replace("| `--parity-config=PATH` |", "| `--parity-config=OLD` |")
    assert generate.fill(stale, "options.md") == filled
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "hooks" / "generate.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "up to date" in done.stdout, done.stdout + done.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about MkDocs 2.0, not a problem here
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_builds_strictly(site):
    assert (site / "index.html").is_file() and (site / "report.png").is_file()
    assert not list(site.rglob("*.py")), "the measurement scripts and the hook are excluded from the site"


def test_the_config_reference_lists_every_key_of_the_schema(site):
    import json

    page = (site / "config" / "index.html").read_text()
    model = json.loads((ROOT / "plugins" / "paritygate" / "models" / "config_schema.json").read_text())["$defs"]["model"]
    missing = [k for k in model["properties"] if f"<code>{k}</code>" not in page]
    assert not missing, missing
    assert "<code>inputs.&lt;name&gt;.profile.min</code>" in page


def test_every_error_message_is_on_the_troubleshooting_page(site):
    generate = _generator()
    page = html.unescape((site / "troubleshooting" / "index.html").read_text())
    messages = generate.messages()
    assert len(messages) > 100
    missing = [f"{m.where}: {m.text}" for m in messages if generate._code(m.text) not in page]
    assert not missing, "\n".join(missing)


def test_the_options_reference_lists_every_option_of_the_plugin(site):
    page = (site / "options" / "index.html").read_text()
    options = re.findall(r'addoption\("(--parity-[a-z0-9-]+)"', (ROOT / "plugins" / "paritygate" / "plugin.py").read_text())
    assert len(options) >= 15 and all(f"<code>{o}" in page for o in options), options
    assert str(ROOT) not in page


def test_the_checks_reference_lists_every_conformance_test(site):
    page = (site / "checks" / "index.html").read_text()
    tests = re.findall(r"^def test_([a-z0-9_]+)", "".join(p.read_text() for p in (ROOT / "conformance").glob("test_*.py")
                                                           if p.name != "test_gpu.py"), re.MULTILINE)
    assert tests and all(f"<code>{t}</code>" in page for t in tests)
