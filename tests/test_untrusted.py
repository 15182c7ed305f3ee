"""Issue 38 (security and robustness, round three), end to end: model files, their names, reports and the folder a
run starts in are untrusted input. Each test runs the suite as a team does (``paritygate run``, or pytest on the
conformance suite) on one of the issue's cases:

- a module beside the config named like one the suite imports (``json.py``, ``numpy.py``) is never executed, in the
  run's own process nor in its xdist workers (``paritygate run`` starts pytest with -P / PYTHONSAFEPATH);
- an ONNX Loop with a trip count of 10**12 is one validation line at the inference time limit, exit 4;
- a run interrupted by Ctrl-C writes a report that says INTERRUPTED, and ``paritygate report`` re-renders it so;
- a real run's output name holding a newline, ``|``, a Markdown link and HTML writes none of them as markup;
- report files planted as symlinks are replaced, their targets never written.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("onnx")  # before pytester snapshots sys.modules: re-importing onnx's extension aborts
pytest.importorskip("onnxruntime")
tf = pytest.importorskip("tensorflow")

from tests.backend.test_deadline import loop_onnx
from tests.conftest import make_onnx, scale, venv_tool, write_config
from tests.report.test_escaping import assert_no_markup_in_html, assert_no_markup_in_markdown

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
X = {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}
SHADOWS = ("json", "numpy", "onnx", "tensorflow", "pytest", "_pytest", "threading", "xdist")


def _model(name, reference, onnx="toy.onnx", **fields):
    return {"name": name, "reference": str(reference), "precisions": ["fp32"], "max_batch": 2, "inputs": X,
            "onnx": onnx, **fields}


def paritygate(*args, cwd, env=None, timeout=600):
    """The ``paritygate`` command as a team runs it (its console script: ``python -m paritygate`` would itself put
    the current folder first on the import path)."""
    return subprocess.run([venv_tool("paritygate"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}, check=False)


def test_modules_beside_the_config_are_never_imported_by_the_run_or_its_workers(tmp_path, toy_saved_model,
                                                                                 parity_cache):
    make_onnx(tmp_path / "toy.onnx")
    config = write_config(tmp_path, {"models": [_model("toy", toy_saved_model)]})
    for name in SHADOWS:
        (tmp_path / f"{name}.py").write_text(f"import pathlib\npathlib.Path({str(tmp_path)!r}, 'RAN-{name}').touch()\n")
    done = paritygate("run", config.name, "-n", "1", "-q", "-k", "determinism", cwd=tmp_path)  # a worker too
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout, done.stdout[-3000:]
    assert not sorted(p.name for p in tmp_path.glob("RAN-*"))


def test_an_onnx_loop_that_never_ends_is_one_validation_line_at_the_time_limit(pytester, toy_saved_model):
    loop_onnx(pytester.path / "loop.onnx", 10**12)
    tf_module = tf.Module()  # the reference: y = 2x over x [N, 3], as the loop's candidate computes before its loop
    tf_module.serve = tf.function(lambda x: {"y": x * 2.0}, input_signature=[tf.TensorSpec([None, 3], tf.float32,
                                                                                             name="x")])
    tf.saved_model.save(tf_module, str(pytester.path / "ref"), signatures={"serving_default": tf_module.serve})
    inputs = {"x": {"shape": [-1, 3], "dtype": "float32", "range": [-1.0, 1.0]}}
    config = write_config(pytester.path, {"models": [_model("loop", pytester.path / "ref", "loop.onnx", inputs=inputs)]})
    start = time.monotonic()
    result = pytester.runpytest_subprocess(str(CONFORMANCE / "test_parity.py"), f"--parity-config={config}", "-p",
                                           "no:xdist", "-p", "no:cacheprovider", "--parity-max-infer-s=2",
                                           "-k", "matches_reference", timeout=600)
    errors = [line for line in result.outlines + result.errlines if line.startswith("ERROR: ")]
    assert result.ret == pytest.ExitCode.USAGE_ERROR, "\n".join(result.outlines + result.errlines)
    assert len(errors) == 1 and "key 'onnx'" in errors[0] and "loop.onnx: one inference call ran longer than 2 s" in \
        errors[0], errors
    assert time.monotonic() - start < 300


def _lines_until(stream, count, words):
    """Read ``stream`` until ``count`` lines hold one of ``words``; returns what was read."""
    seen, found = [], 0
    for line in stream:
        seen.append(line)
        found += any(w in line for w in words)
        if found >= count:
            return seen
    raise AssertionError("".join(seen[-50:]))


def test_a_run_interrupted_by_ctrl_c_writes_a_report_that_says_interrupted(tmp_path, toy_saved_model, parity_cache):
    make_onnx(tmp_path / "toy.onnx")
    config = write_config(tmp_path, {"models": [_model("toy", toy_saved_model)]})
    # the terminal's Ctrl-C: SIGINT to the foreground process group, paritygate and the pytest it started. A
    # foreground job takes it (a handled signal is reset at exec), never the SIG_IGN a background job inherits
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    with subprocess.Popen([venv_tool("paritygate"), "run", config.name, "--report", "out", "-p", "no:xdist", "-v",
                           "-k", "fp32 and not latency"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True,
                          # nightly's 400 draws: the property checks still run when the third result is out
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HYPOTHESIS_PROFILE": "nightly"}) as child:
        try:
            _lines_until(child.stdout, 3, (" PASSED", " FAILED", " SKIPPED", " XFAIL"))
            os.killpg(child.pid, signal.SIGINT)
            rest = child.stdout.read()
            assert child.wait(timeout=300) == 2, rest[-3000:]
        finally:
            signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
    data = json.loads((tmp_path / "out" / "parity-report.json").read_text())
    assert data["status"] == "interrupted" and data["interrupted"]["selected"] > len(data["checks"]) >= 3, data
    markdown = (tmp_path / "out" / "parity-report.md").read_text()
    assert markdown.splitlines()[2].startswith("**Verdict: INTERRUPTED**"), markdown[:500]
    assert "<div class=word>INTERRUPTED</div>" in (tmp_path / "out" / "parity-report.html").read_text()
    assert "paritygate: INTERRUPTED after" in rest, rest[-3000:]
    (tmp_path / "out" / "parity-report.md").unlink()
    again = paritygate("report", "out/parity-report.json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "out" / "parity-report.md").read_text().splitlines()[2].startswith("**Verdict: INTERRUPTED**")


HOSTILE = "y\n# heading\n[x](javascript:alert(1))<img src=x onerror=alert(1)>|a|b"


def test_a_real_runs_hostile_output_name_renders_as_text_and_planted_links_are_replaced(pytester, tmp_path):
    module = tf.Module()  # y = 5x under a name holding a newline, a link, HTML and table pipes
    module.serve = tf.function(lambda x: {HOSTILE: x * 5.0}, input_signature=[tf.TensorSpec([None, 1], tf.float32,
                                                                                              name="x")])
    tf.saved_model.save(module, str(pytester.path / "ref"), signatures={"serving_default": module.serve})
    make_onnx(pytester.path / "toy.onnx", scale(HOSTILE, 6.0), outputs=(HOSTILE,))  # 20% off: it fails
    config = write_config(pytester.path, {"models": [_model("m", pytester.path / "ref")]})
    report, victim = pytester.path / "report", tmp_path / "victim.txt"
    report.mkdir()
    victim.write_text("keep")
    for name in ("parity-report.json", "parity-report.md", "parity-report.html"):
        (report / name).symlink_to(victim)
    result = pytester.runpytest_subprocess(str(CONFORMANCE / "test_parity.py"), f"--parity-config={config}", "-p",
                                           "no:xdist", "-p", "no:cacheprovider", f"--parity-report={report}", "-k",
                                           "matches_reference", timeout=600)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, "\n".join(result.outlines[-40:])
    assert victim.read_text() == "keep"
    assert not any((report / n).is_symlink() for n in ("parity-report.json", "parity-report.md", "parity-report.html"))
    data = json.loads((report / "parity-report.json").read_text())
    assert [o["output"] for o in data["checks"][0]["details"]["outputs"]] == [HOSTILE]
    assert_no_markup_in_markdown((report / "parity-report.md").read_text(), data)
    assert_no_markup_in_html((report / "parity-report.html").read_text())
