"""paritygate.judge.conditioning: an input where the reference itself moves by more than the check's budget under one
step of its own resolution decides only what the reference can tell there, and a finding names it with its factor;
a wrong candidate still fails, on a well-conditioned output and beyond the excuse on an ill-conditioned one.

The reference is a real TF SavedModel with two outputs: ``ill`` = sin(1e6 x), whose float32 product alone rounds by
up to 0.031 (one step of x, 1.2e-7, moves it by about 0.12: measured, factor ~1e4 over the fp32 policy), and
``well`` = sin(x). The candidates are ONNX graphs made here, run by ONNX Runtime through the conformance tests.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from paritygate.cli.replay import replay
from paritygate.judge.reference_noise import resolution_step
from tests.conftest import OPSET, toy_spec, write_config

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
WIDTH, GAIN = 64, 1e6


def test_the_step_is_one_ulp_at_the_ranges_scale_inward_at_its_bounds():
    spec = toy_spec(inputs={"x": ((-1, 4), "float32", (-2.0, 1.0)), "ids": ((-1, 4), "int32", (0, 9))})
    feed = {"x": np.array([[-2.0, 0.0, 0.5, 1.0]], np.float32), "ids": np.array([[0, 1, 2, 9]], np.int32)}
    moved = resolution_step(spec, feed)
    step = np.abs(moved["x"].astype(np.float64) - feed["x"])
    assert np.allclose(step, np.finfo(np.float32).eps * 2.0, rtol=0.01), step  # eps x max(|-2|, |1|)
    assert moved["x"][0, 0] > -2.0 and moved["x"][0, 3] < 1.0  # inward at the bounds
    assert np.array_equal(moved["ids"], feed["ids"])  # one step of an id changes what it means
    assert np.array_equal(resolution_step(spec, feed)["x"], moved["x"])  # seeded: the same step every run
    assert resolution_step(spec, {"ids": feed["ids"]}) is None


def save_reference(path):
    tf = pytest.importorskip("tensorflow")
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None, WIDTH], tf.float32, name="x")])
    def serve(x):
        return {"ill": tf.sin(x * GAIN), "well": tf.sin(x)}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return path


def candidate(path, well_gain=1.0, ill_offset=0.0):
    """``ill`` = sin(1e6 x) computed in float64 (exact product: a faithful, more accurate implementation) plus
    ``ill_offset``; ``well`` = ``well_gain`` x sin(x)."""
    onnx = pytest.importorskip("onnx")
    h, T = onnx.helper, onnx.TensorProto

    def const(name, value, dtype):
        return h.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(value, dtype)))

    nodes = [h.make_node("Cast", ["x"], ["x64"], to=T.DOUBLE), const("gain", GAIN, np.float64),
             h.make_node("Mul", ["x64", "gain"], ["ax"]), h.make_node("Sin", ["ax"], ["s64"]),
             h.make_node("Cast", ["s64"], ["s"], to=T.FLOAT), const("offset", ill_offset, np.float32),
             h.make_node("Add", ["s", "offset"], ["ill"]),
             h.make_node("Sin", ["x"], ["sx"]), const("k", well_gain, np.float32), h.make_node("Mul", ["sx", "k"], ["well"])]
    graph = h.make_graph(nodes, Path(path).stem, [h.make_tensor_value_info("x", T.FLOAT, ["N", WIDTH])],
                         [h.make_tensor_value_info(o, T.FLOAT, ["N", WIDTH]) for o in ("ill", "well")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.slow
def test_an_ill_conditioned_output_is_excused_with_its_factor_and_a_defect_still_fails(pytester):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("hypothesis")
    reference = save_reference(pytester.path / "sine")
    candidate(pytester.path / "faithful.onnx")
    candidate(pytester.path / "scaled.onnx", well_gain=1.001)  # 0.1% off on the well-conditioned output
    candidate(pytester.path / "offset.onnx", ill_offset=0.5)  # beyond twice the reference's own move (~0.12)
    base = {"reference": str(reference), "precisions": ["fp32"], "max_batch": 2, "task": "regression",
            "inputs": {"x": {"shape": [-1, WIDTH], "dtype": "float32", "range": [-1.0, 1.0]}}}
    cfg = write_config(pytester.path, {"models": [{"name": n, "onnx": f"{n}.onnx", **base}
                                                  for n in ("faithful", "scaled", "offset")]})
    report = pytester.path / "report"
    pytester.runpytest(str(CONFORMANCE / "test_parity.py"), str(CONFORMANCE / "test_properties.py"),
                       f"--parity-config={cfg}", f"--parity-report={report}", "-p", "no:cacheprovider",
                       "-p", "no:xdist", "-k", "matches_reference or property_parity")
    data = json.loads((report / "parity-report.json").read_text())
    status = {(c["model"], c["check"]): c["status"] for c in data["checks"]}
    found = {(f["model"], f["check"]): f["details"] for f in data["findings"] if f["kind"] == "ill_conditioned"}
    for check in ("matches_reference", "property_parity"):
        assert status[("faithful", check)] == "pass", (check, status)
        ill = found[("faithful", check)]
        assert ill["output"] == "ill" and ill["factor"] > 100 and ill["reference_move"] > 0.05, ill
        assert ill["step"]["x"] == pytest.approx(np.finfo(np.float32).eps, rel=0.01), ill["step"]
        with np.load(ill["reproducer"]["npz"], allow_pickle=False) as saved:
            assert saved["input:x"].shape[1:] == (WIDTH,)
        assert "ill-conditioned" in ill["summary"] and "one step of its resolution" in ill["summary"]
        again = replay(ill["reproducer"]["npz"])  # `paritygate replay` of the finding: the reference, measured again
        assert (again.check, again.status) == ("ill_conditioned", "fail") and "output 'ill'" in again.details["lines"][0]
        assert status[("scaled", check)] == "fail", (check, status)  # the well-conditioned output is not excused
        assert status[("offset", check)] == "fail", (check, status)  # nor an error beyond the reference's own move
    failing = {c["check"]: c for c in data["checks"] if c["model"] == "scaled"}
    assert "output 'well'" in failing["matches_reference"]["details"]["message"]
    assert "output 'ill'" in {c["check"]: c for c in data["checks"] if c["model"] == "offset"}[
        "property_parity"]["details"]["message"]
