"""PARITYGATE_REQUIRE_EXTRAS: in CI a promised extra that does not import fails the run; locally it skips."""

import pytest

# An installed extra that cannot import: a module of its own is missing (pytest.importorskip skips on
# ModuleNotFoundError only; any other ImportError already fails the run). The sample is the beam extra's
# apache_beam: nothing but these tests' importorskip imports it in the inner run (the plugin and the pytest plugins
# it loads import it lazily), so the broken stand-in breaks nothing else there.
BROKEN = 'raise ModuleNotFoundError("No module named \'apache_beam.coders.stream\'")\n'
TEST = """
import pytest

beam = pytest.importorskip("apache_beam")


def test_pipeline():
    assert beam
"""
INSIDE = """
import pytest


def test_needs_a_gpu_extra_and_a_beam_extra():
    pytest.importorskip("tensorrt_not_here_either")
    pytest.importorskip("apache_beam")
"""


@pytest.fixture
def broken_beam(pytester):
    """An ``apache_beam`` that is installed (found first on sys.path) but raises on import."""
    pytester.makepyfile(apache_beam=BROKEN)
    pytester.syspathinsert()
    return pytester


def _run(pytester, monkeypatch, extras, *args):
    if extras is None:
        monkeypatch.delenv("PARITYGATE_REQUIRE_EXTRAS", raising=False)
    else:
        monkeypatch.setenv("PARITYGATE_REQUIRE_EXTRAS", extras)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))  # the broken module shadows the real one in the child
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *args)


def test_without_the_variable_a_broken_extra_skips_with_its_reason(broken_beam, monkeypatch):
    broken_beam.makepyfile(test_beam=TEST)
    result = _run(broken_beam, monkeypatch, None, "test_beam.py")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*could not import 'apache_beam'*coders.stream*"])


def test_a_required_extra_that_does_not_import_fails_the_run(broken_beam, monkeypatch):
    broken_beam.makepyfile(test_beam=TEST)
    result = _run(broken_beam, monkeypatch, "tf,beam", "test_beam.py")
    assert result.ret != 0
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*PARITYGATE_REQUIRE_EXTRAS=tf,beam requires the 'beam' extra, but apache_beam "
                                  "does not import*coders.stream*")])


def test_cpu_names_its_three_extras_and_a_test_fails_inside(broken_beam, monkeypatch):
    """``cpu`` is pyproject's tf,onnx,beam; inside a test the importorskip fails the test; a module no required
    extra promises (here an unknown one) still skips."""
    broken_beam.makepyfile(test_inside=INSIDE.replace('    pytest.importorskip("tensorrt_not_here_either")\n', ""),
                           test_other=INSIDE.replace('    pytest.importorskip("apache_beam")\n', ""))
    result = _run(broken_beam, monkeypatch, "cpu,lint,test", "test_inside.py", "test_other.py")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*requires the 'beam' extra, but apache_beam does not import*"])


def test_an_unknown_extra_is_a_usage_error(pytester, monkeypatch):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = _run(pytester, monkeypatch, "tf,gpus", "test_x.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*PARITYGATE_REQUIRE_EXTRAS=tf,gpus: unknown extra 'gpus'; the extras are*"])


@pytest.mark.parametrize("option", ["--parity-require-gpu", "--require-gpu"])
def test_require_gpu_and_its_alias_set_one_option(pytester, option):
    config = pytester.parseconfig(option)
    assert config.getoption("require_gpu") is True


@pytest.mark.parametrize("option", ["--parity-update-goldens", "--update-goldens"])
def test_update_goldens_and_its_alias_set_one_option(pytester, option):
    config = pytester.parseconfig(option)
    assert config.getoption("update_goldens") is True and config.getoption("require_gpu") is False


def test_a_module_missing_from_another_extra_still_skips(pytester, monkeypatch):
    """A required extra's module that imports but needs another extra's module (polygraphy.backend.trt needs
    tensorrt, the gpu extra's) skips, naming the missing one: only the required extras' own modules fail."""
    pytester.mkpydir("apache_beam").joinpath("needs_gpu.py").write_text("import tensorrt_not_installed_here\n")
    pytester.makepyfile(test_x="import pytest\n\npytest.importorskip('apache_beam.needs_gpu')\n\n\n"
                               "def test_x():\n    pass\n")
    result = _run(pytester, monkeypatch, "beam", "test_x.py")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*No module named 'tensorrt_not_installed_here'*"])


def test_ci_run_requires_the_extras_its_install_line_installs():
    """.ci/run exports PARITYGATE_REQUIRE_EXTRAS from the README's Quickstart line 1 (``-e '.[EXTRAS]'``)."""
    import re
    import subprocess
    from pathlib import Path

    from paritygate.lazy import promised_by

    root = Path(__file__).resolve().parents[1]
    script = (root / ".ci" / "run").read_text()
    extract = next(line for line in script.splitlines() if line.startswith("extras=$("))
    readme = (root / "README.md").read_text()
    line1 = re.search(r"## Quickstart\n.*?```sh\n(.*?)\n", readme, re.DOTALL)[1]
    out = subprocess.run(["bash", "-c", f'lines=("$0"); {extract}; echo "$extras"', line1], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert set(out.split(",")) >= {"cpu"}
    assert {"tensorflow", "onnxruntime", "apache_beam"} <= set(promised_by(out.split(",")))


def test_the_suite_collects_without_beam(tmp_path):
    """The GPU job installs no Beam (docs/gpu.md): every test module that needs apache_beam skips naming the beam
    extra, none stops the collection. Collected in a child whose ``apache_beam`` does not import."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import sys; sys.modules['apache_beam'] = None; import pytest; "
            "sys.exit(pytest.main(['--collect-only', '-q', '-rs', '-p', 'no:cacheprovider', 'tests/beam', 'tests/shadow']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0 and "error" not in done.stdout.lower(), done.stdout[-3000:] + done.stderr[-2000:]
    assert "pip install 'paritygate[beam]'" in done.stdout, done.stdout[-3000:]


def test_the_onnxruntime_version_is_the_one_that_imports(tmp_path, monkeypatch):
    """onnxruntime and onnxruntime-gpu both install the package ``onnxruntime``: the report names the distribution
    beside the module that imports (the first on sys.path), not whichever metadata lists first."""
    import importlib

    from paritygate.lazy import module_dist

    site = tmp_path / "site"  # a stand-in package of two distributions (onnxruntime itself may be imported already)
    (site / "pg_twin_ort").mkdir(parents=True)
    (site / "pg_twin_ort" / "__init__.py").write_text("")
    info = site / "pg_twin_ort_gpu-9.1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pg-twin-ort-gpu\nVersion: 9.1.2\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert module_dist("pg_twin_ort", ("pg-twin-ort-gpu", "pg-twin-ort")) == ("pg-twin-ort-gpu", "9.1.2")
    pytest.importorskip("onnxruntime")  # imported now: the distribution beside the module that imported
    assert module_dist("onnxruntime", ("onnxruntime-gpu", "onnxruntime"))[0] in ("onnxruntime", "onnxruntime-gpu")
    assert module_dist("no_such_module_here", ("no-such-dist",)) is None
