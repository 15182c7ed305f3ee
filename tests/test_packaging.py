"""The wheel: it holds the conformance suite and the bundled models, and once installed (outside this checkout)
``pytest --pyargs paritygate.conformance`` and the ``paritygate`` command run on a user's project and on the
bundled models.

The install is offline: the wheel is built with ``--no-build-isolation`` and installed with ``--no-index
--no-deps`` into a fresh venv that sees this interpreter's already-installed dependencies through a ``.pth``
file (every entry of site-packages but paritygate's own), so nothing of the checkout is importable there.
"""

import fcntl
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from paritygate.models.config import tomllib

ROOT = Path(__file__).resolve().parents[1]
_SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".tox",
                               ".pytest_cache", ".hypothesis", "parity-report", ".ruff_cache")


def SKIP_COPY(folder, names):
    """What the wheel's copy of the checkout leaves out; ``models`` only as the zoo's built SavedModels
    (fixtures/zoo/models), not paritygate/models or tests/models."""
    skipped = _SKIP(folder, names)
    return skipped | ({"models"} & set(names) if Path(folder).name == "zoo" else set())


def test_the_package_list_holds_every_package_under_plugins():
    """pyproject.toml lists packages explicitly (conformance/ and fixtures/ are mapped in): a new subpackage
    missing there would be missing from the wheel."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT / "plugins").parts) for p in (ROOT / "plugins").rglob("__init__.py")}
    found |= {"paritygate.conformance", "paritygate.fixtures"}
    found |= {"paritygate.fixtures." + ".".join(p.parent.relative_to(ROOT / "fixtures").parts)
              for p in (ROOT / "fixtures").rglob("__init__.py") if p.parent != ROOT / "fixtures"}
    assert listed == found


def test_every_data_file_of_the_package_is_in_package_data():
    """A data file the code reads (a JSON table, a C source) that no ``package-data`` pattern names would be missing
    from the wheel, and only an installed run would find out (backend/onnx/artifacts/gaps.json, issue 37)."""
    from fnmatch import fnmatch

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["paritygate"]
    package = ROOT / "plugins" / "paritygate"
    data = [p.relative_to(package).as_posix() for p in package.rglob("*")
            if p.is_file() and p.suffix in (".json", ".c", ".toml", ".txt") and "__pycache__" not in p.parts]
    assert data and not [f for f in data if not any(fnmatch(f, pattern) for pattern in patterns)]


# -- the installed wheel ----------------------------------------------------------------------------
def _run(cmd, cwd, env, timeout=900):
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """(venv python, venv bin folder, env): the wheel built from a copy of this checkout, installed alone; built
    once per test run, also under xdist: the first worker builds it under a lock in the run's shared base
    folder, the others reuse it (pytest-xdist's documented recipe for a session fixture run once)."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("setuptools", reason="building the wheel offline (--no-build-isolation) needs setuptools")
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # one base folder per worker under the run's own
    work = shared / "wheel-installed"
    with open(shared / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (work / "ready").exists():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            _build_and_install(work)
            (work / "ready").write_text("")
    venv = work / "venv"
    return venv / "bin" / "python", venv / "bin", _env()


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTHONHOME")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["HYPOTHESIS_PROFILE"] = "smoke"  # the wheel's suite running is what is asserted: the fewest derandomized draws
    return env


def _build_and_install(work):
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=SKIP_COPY, symlinks=True)
    env = _env()
    rc, out = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", work / "dist", src], work, env)
    assert rc == 0, out
    (wheel,) = (work / "dist").glob("paritygate-*.whl")
    venv = work / "venv"
    rc, out = _run([sys.executable, "-m", "venv", "--without-pip", venv], work, env)
    assert rc == 0, out
    python = venv / "bin" / "python"
    rc, out = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], work, env)
    purelib = Path(out.strip().splitlines()[-1])
    # this interpreter's dependencies, paritygate's own entries left out. The folder's path names "site-packages":
    # tools tell installed code from the user's own by that segment; Hypothesis, seeing any other path, takes every
    # dependency for local code and parses its source for constants (28 s of a 39 s run, measured with cProfile)
    deps = work / "deps" / "site-packages"
    deps.mkdir(parents=True)
    for folder in site.getsitepackages():
        for entry in Path(folder).iterdir():
            if not entry.name.lower().startswith(("paritygate", "__editable__.paritygate")) \
                    and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (purelib / "zz_paritygate_test_deps.pth").write_text(f"import site; site.addsitedir({str(deps)!r})\n")
    rc, out = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index", "--no-deps",
                    wheel], work, env)
    assert rc == 0, out
    rc, out = _run([python, "-c", ("import paritygate.plugin, paritygate.models.bundled as b; "
                    "print(paritygate.plugin.__file__); print(b.fixtures_dir()); print(b.conformance_dir())")], work, env)
    assert rc == 0, out
    assert all(str(purelib) in line for line in out.strip().splitlines()[-3:]), out


def _user_project(tmp_path, toy_saved_model, bin_dir, env):
    """An empty folder outside the checkout holding only a SavedModel, an ONNX file and a config."""
    from tests.conftest import make_onnx

    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(toy_saved_model, project / "saved_model")
    make_onnx(project / "model.onnx")
    rc, out = _run([bin_dir / "paritygate", "init", "saved_model", "--onnx", "model.onnx"], project, env)
    assert rc == 0, out
    assert sorted(p.name for p in project.iterdir()) == ["model.onnx", "parity.toml", "saved_model"]
    return project


@pytest.mark.slow
@pytest.mark.onnx
def test_installed_suite_runs_a_user_project_and_the_bundled_models(installed, tmp_path, toy_saved_model):
    python, bin_dir, env = installed
    project = _user_project(tmp_path, toy_saved_model, bin_dir, env)
    rc, out = _run([python, "-m", "pytest", "--pyargs", "paritygate.conformance", "--parity-config=parity.toml",
                    "-p", "no:xdist", "-p", "no:cacheprovider", "-m", "not latency", "-q", "-rfE",
                    "--parity-report=report"], project, env)
    assert rc == 0, out[-6000:]
    assert " passed" in out and "paritygate: runtime onnxruntime" in out, out[-3000:]
    assert (project / "report" / "parity-report.json").is_file()

    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out = _run([python, "-m", "pytest", "--pyargs", "paritygate.conformance", "-p", "no:xdist", "-p",
                    "no:cacheprovider", "-q", "-k", "linear and (goldens_reproduce or matches_reference)"], empty, env)
    assert rc == 0, out[-6000:]
    assert "4 passed" in out, out[-3000:]  # goldens_reproduce + matches_reference x fp32/fp16/int8


@pytest.mark.slow
@pytest.mark.onnx
def test_installed_command_and_a_users_conftest_compose(installed, tmp_path, toy_saved_model):
    """`paritygate run` with pytest arguments; the user's conftest.py and marker apply to the suite's tests;
    `-m gpu` selects the GPU tests (which skip here, each with its reason)."""
    python, bin_dir, env = installed
    project = _user_project(tmp_path, toy_saved_model, bin_dir, env)
    (project / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\nmarkers =\n    team: our marker\n")
    (project / "conftest.py").write_text(
        "import pytest\n\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        item.add_marker(pytest.mark.team)\n\n"
        "@pytest.fixture(autouse=True)\n"
        "def team_fixture(request):\n"
        "    with open('seen.txt', 'a') as f:\n"
        "        f.write(request.node.nodeid + '\\n')\n")
    rc, out = _run([bin_dir / "paritygate", "run", "parity.toml", "-p", "no:xdist", "-q", "-m", "team and not latency",
                    "-k", "accepts_every_batch_size or matches_reference"], project, env)
    assert rc == 0, out[-6000:]
    seen = (project / "seen.txt").read_text().splitlines()
    assert len(seen) == 2 and all("[project-fp32]" in s for s in seen), seen  # the toy project is fp32 only

    rc, out = _run([python, "-m", "pytest", "--pyargs", "paritygate.conformance", "--parity-config=parity.toml",
                    "-p", "no:xdist", "-q", "-rs", "-m", "gpu"], project, env)
    assert rc == 0, out[-6000:]
    assert " skipped" in out and "passed" not in out and "cuda" in out.lower(), out[-3000:]

    rc, out = _run([bin_dir / "paritygate", "--version"], project, env)
    assert rc == 0 and out.strip() == "paritygate 0.1.0", out
    rc, out = _run([bin_dir / "paritygate", "run", "missing.toml"], project, env)
    assert rc == 4 and "missing.toml" in out, out
