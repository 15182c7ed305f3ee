"""Strict FP16 numerics end to end (--parity-numerics): a real TF model whose FP16 build overflows fails at fp16
with the overflowing node localized and a verified keep-FP32 plan, while its fp32 passes; under ONNX Runtime's own
numerics the same fp16 artifact passes (the reason strict is the default). Conformance tests in a subprocess."""

import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")  # before TF: pytester restores sys.modules, and re-importing onnx after TF aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")
tf = pytest.importorskip("tensorflow")

from tests.conftest import write_config

pytestmark = [pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def save_square_model(path):
    """y = sqrt((300 x)^2 + 1) / 300 (about |x|) for x in [-2, 2]: (300 x)^2 exceeds FP16's 65504 once |x| > 0.853.
    (Not (300 x)^2 / 90000: tf2onnx reassociates that into (300 x / 90000) * 300 x, which never overflows.)"""
    module = tf.Module()
    module.w = tf.Variable([[300.0]], dtype=tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
    def serve(x):
        h = tf.matmul(x, module.w)
        return {"y": tf.sqrt(tf.multiply(h, h, name="square") + 1.0, name="root") / 300.0}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return path


@pytest.fixture(scope="module")
def square_config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("square")
    model = {"name": "square", "reference": str(save_square_model(folder / "square")), "precisions": ["fp32", "fp16"],
             "max_batch": 4, "task": "regression",
             "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-2.0, 2.0]}}}
    return write_config(folder, {"models": [model]})


def _run(pytester, config, *args):
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE / "test_parity.py"), "-k", "matches_reference",
                                           f"--parity-config={config}", f"--parity-report={report}",
                                           "-p", "no:cacheprovider", "-p", "no:xdist", *args)
    checks = {c["precision"]: c for c in json.loads((report / "parity-report.json").read_text())["checks"]}
    return result, checks, report


def test_an_overflowing_fp16_build_fails_with_the_node_localized_and_a_verified_plan(pytester, square_config):
    result, checks, report = _run(pytester, square_config)
    assert checks["fp32"]["status"] == "pass" and checks["fp16"]["status"] == "fail", result.stdout.str()
    d = checks["fp16"]["details"]
    assert d["numerics"] == "strict" and "numerics" not in checks["fp32"]["details"]
    assert d["precision_coverage"]["mac_share"] == 1.0  # a failing row carries its coverage too
    div = d["divergence"]
    assert "error" not in div, div
    assert div["op_type"] == "Mul" and "square" in div["first_node"] and div["max_abs_error"] == "inf", div
    assert div["verified"] is True and div["numerics"] == "strict"
    assert div["coverage"]["mac_share"] == 1.0  # the plan keeps the square Mul, not the MatMul, in FP32
    assert any("square" in n for n in div["keep_fp32"]) and "fp16_keep_fp32 = [" in div["config"]
    result.stdout.fnmatch_lines(["paritygate: fp16/int8 rows computed with strict numerics (strict: *",
                                 "paritygate: square fp16 [[]strict*] matches_reference failed; replay: *"])
    assert "| square | fp16 [strict" in (report / "parity-report.md").read_text()
    assert "fp16 [strict" in (report / "parity-report.html").read_text()


def test_onnxruntime_own_numerics_pass_the_same_overflowing_artifact(pytester, square_config):
    result, checks, _ = _run(pytester, square_config, "--parity-numerics=ort")
    assert checks["fp16"]["status"] == "pass" and checks["fp16"]["details"]["numerics"] == "ort", result.stdout.str()
    result.stdout.fnmatch_lines(["paritygate: fp16/int8 rows computed with ort numerics (ort: *"])


def test_the_printed_plan_applied_as_printed_makes_the_next_run_pass(pytester, square_config):
    """Plans that hold (issue 16): both failing fp16 checks print one verified plan (the report's `config:` line and
    the row's `config`); appended as printed to the [[models]] entry of a team's config, the next run passes both."""
    import tomllib

    model = tomllib.loads(square_config.read_text())["models"][0]
    config = pytester.path / "parity.toml"  # a config as a team writes it: [[models]] with its own tables
    config.write_text(f'[[models]]\nname = "square"\nreference = "{model["reference"]}"\nprecisions = ["fp16"]\n'
                      'max_batch = 4\ntask = "regression"\n[models.inputs.x]\nshape = [-1, 1]\ndtype = "float32"\n'
                      'range = [-2.0, 2.0]\n')

    def run(report):
        pytester.runpytest(str(CONFORMANCE / "test_parity.py"), str(CONFORMANCE / "test_properties.py"),
                                      "-k", "matches_reference or property_parity", f"--parity-config={config}",
                                      f"--parity-report={pytester.path / report}", "-p", "no:cacheprovider",
                                      "-p", "no:xdist")
        checks = json.loads((pytester.path / report / "parity-report.json").read_text())["checks"]
        return {c["check"]: c for c in checks}, (pytester.path / report / "parity-report.md").read_text()

    first, markdown = run("first")
    assert {c: first[c]["status"] for c in first} == {"matches_reference": "fail", "property_parity": "fail"}
    plans = [first[c]["details"]["divergence"] for c in first]
    assert all(p["verified"] for p in plans) and plans[0]["config"] == plans[1]["config"], plans
    printed = plans[0]["config"]
    assert printed.startswith("[models.precision]") and printed.splitlines()[1] in markdown, printed
    with config.open("a") as f:
        f.write(printed + "\n")
    again, _ = run("second")
    assert {c: again[c]["status"] for c in again} == {"matches_reference": "pass", "property_parity": "pass"}, {
        c: again[c]["details"].get("failures") for c in again}
