"""paritygate.backend.inputspec.check_input_spec: the config's inputs must match the model's by name, rank, dtype and
fixed dimensions; each error names the model and the input. computed_artifact: the file a numerics mode runs."""

import json
from pathlib import Path

import numpy as np
import pytest

from paritygate.backend.base import RunnerError
from paritygate.backend.inputspec import check_input_spec
from paritygate.backend.runtimes import computed_artifact
from tests.conftest import make_onnx, scale, toy_spec, write_config

SPEC = toy_spec(inputs={"image": ((-1, 8, 8, 3), "float32", (-1, 1)), "ids": ((-1, 16), "int32", (0, 9))})
F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
GOOD = {"image": (F32, (-1, 8, 8, 3)), "ids": (I32, (-1, 16))}


def test_matching_inputs_pass():
    check_input_spec(SPEC, GOOD, "model.onnx")


def test_dynamic_model_dims_accept_any_declared_size():
    check_input_spec(SPEC, {"image": (F32, (-1, -1, -1, 3)), "ids": (I32, (-1, -1))}, "model.onnx")


def test_fixed_model_batch_is_not_checked_here():
    check_input_spec(SPEC, {"image": (F32, (1, 8, 8, 3)), "ids": (I32, (1, 16))}, "engine.plan")


W = "parity.toml: model 'toy': key "


@pytest.mark.parametrize("metadata, pattern", [
    ({"image": GOOD["image"]}, W + r"'inputs': declares inputs \['ids', 'image'\], but model.onnx has inputs \['image'\]"),
    ({**GOOD, "extra": (F32, (-1,))}, W + r"'inputs': .*model.onnx has inputs \['extra', 'ids', 'image'\]"),
    ({"image": GOOD["image"], "input_ids": GOOD["ids"]}, W + r"'inputs': .*has inputs \['image', 'input_ids'\]"),
    ({**GOOD, "image": (F32, (-1, 8, 8))}, W + (r"'inputs.image.shape': declares rank 4 \[-1, 8, 8, 3\], but "
                                               r"model.onnx has input 'image' of rank 3 \[-1, 8, 8\]")),
    ({**GOOD, "ids": (np.dtype(np.int64), (-1, 16))}, W + r"'inputs.ids.dtype': declares int32, but model.onnx has "
                                                          r"input 'ids' of dtype int64"),
    ({**GOOD, "image": (np.dtype(np.float16), (-1, 8, 8, 3))}, W + r"'inputs.image.dtype': .*dtype float16"),
    ({**GOOD, "image": (F32, (-1, 8, 8, 1))}, W + r"'inputs.image.shape': declares dimension 3 = 3, but model.onnx "
                                                  r"has input 'image' with dimension 3 = 1"),
    ({**GOOD, "ids": (I32, (-1, 32))}, W + r"'inputs.ids.shape': declares dimension 1 = 16, .* dimension 1 = 32"),
], ids=["missing", "extra", "renamed", "rank", "dtype", "float16", "channels", "sequence"])
def test_mismatches_name_the_config_key_and_the_model_file(metadata, pattern):
    with pytest.raises(RunnerError, match="^" + pattern):
        check_input_spec(SPEC, metadata, "model.onnx")


# -- error (the suite or a tool failed) vs fail (the candidate is wrong), end to end -------------------------
CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"


def _saved_model(path, body):
    """A real SavedModel: x float32 [N, 1] -> {"y": body(x), "z": 2x}."""
    tf = pytest.importorskip("tensorflow")
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
    def serve(x):
        return {"y": body(tf, x), "z": 2.0 * x}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return path


def _five_x_below_half(tf, x):
    """5x, and TensorFlow fails the call for any x >= 0.5 (inside the config's range [-1, 1])."""
    with tf.control_dependencies([tf.debugging.assert_less(x, 0.5, message="x must be below 0.5")]):
        return 5.0 * x


def _gather_onnx(path):
    """y = table[int((x + 1) * 10)] with a 2-entry table: ONNX Runtime fails for x >= -0.8 (index out of bounds),
    a candidate that crashes on valid inputs; z = 2x."""
    onnx = pytest.importorskip("onnx")
    h, T = onnx.helper, onnx.TensorProto
    nodes = [h.make_node("Constant", [], ["one"], value=h.make_tensor("one", T.FLOAT, [], [1.0])),
             h.make_node("Constant", [], ["ten"], value=h.make_tensor("ten", T.FLOAT, [], [10.0])),
             h.make_node("Constant", [], ["table"], value=h.make_tensor("table", T.FLOAT, [2], [0.0, 1.0])),
             h.make_node("Add", ["x", "one"], ["x1"]), h.make_node("Mul", ["x1", "ten"], ["x10"]),
             h.make_node("Cast", ["x10"], ["idx"], to=T.INT64), h.make_node("Gather", ["table", "idx"], ["y"])]
    return make_onnx(path, nodes, scale("z", 2.0))


@pytest.mark.slow
def test_reference_and_tool_failures_are_errors_and_a_crashing_candidate_fails(pytester, toy_saved_model, parity_cache):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("hypothesis")
    folder = pytester.path
    # tf2onnx converts Zeta/Igamma into nodes no ONNX runtime knows (measured: it exits 0 and logs "Unsupported ops")
    zeta = _saved_model(folder / "zeta", lambda tf, x: tf.math.zeta(x + 3.0, x + 2.0))
    asserts = _saved_model(folder / "asserts", _five_x_below_half)
    make_onnx(folder / "toy.onnx")
    _gather_onnx(folder / "crash.onnx")
    x = {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}
    base = {"precisions": ["fp32"], "max_batch": 2, "inputs": x, "task": "regression"}
    config = write_config(folder, {"models": [
        {"name": "tool_fails", "reference": str(zeta), **base},
        {"name": "reference_fails", "reference": str(asserts), "onnx": "toy.onnx", **base},
        {"name": "candidate_crashes", "reference": str(toy_saved_model), "onnx": "crash.onnx", **base}]})
    result = pytester.runpytest(str(CONFORMANCE / "test_parity.py"), str(CONFORMANCE / "test_properties.py"),
                                "-k", "matches_reference or accepts_every or property_parity",
                                f"--parity-config={config}", f"--parity-report={folder / 'report'}",
                                "-p", "no:xdist", "-p", "no:cacheprovider")
    checks = json.loads((folder / "report" / "parity-report.json").read_text())["checks"]
    status = {(c["model"], c["check"]): c["status"] for c in checks}
    assert status == {
        ("tool_fails", "matches_reference"): "error", ("tool_fails", "accepts_every_batch_size"): "skip",
        ("tool_fails", "property_parity"): "skip",
        ("reference_fails", "matches_reference"): "error", ("reference_fails", "accepts_every_batch_size"): "error",
        ("reference_fails", "property_parity"): "error",
        ("candidate_crashes", "matches_reference"): "fail", ("candidate_crashes", "accepts_every_batch_size"): "fail",
        ("candidate_crashes", "property_parity"): "fail"}, status
    outcomes = result.parseoutcomes()
    # a conversion that failed is one error a run: the model's later checks skip naming it (conformance/conftest.py)
    assert (outcomes.get("errors"), outcomes.get("failed"), outcomes.get("skipped")) == (4, 3, 2), outcomes
    result.stdout.fnmatch_lines(["paritygate: runtime onnxruntime, 9 checks: 0 pass, 3 fail, 4 error, 0 inconclusive*"])
    messages = {(c["model"], c["check"]): c["details"].get("message") or c["details"]["reason"] for c in checks}
    assert "the TensorFlow reference failed" in messages[("reference_fails", "matches_reference")]
    assert "the TensorFlow reference failed" in messages[("reference_fails", "property_parity")]
    assert "Zeta" in messages[("tool_fails", "matches_reference")]  # the converter's node, named
    for later in ("accepts_every_batch_size", "property_parity"):
        assert "Zeta" in messages[("tool_fails", later)], messages[("tool_fails", later)]
    assert "reproducer" not in json.dumps([c["details"] for c in checks if c["status"] == "error"])


def test_the_artifact_runs_as_is_under_ort_numerics_and_an_unknown_mode_is_refused_naming_the_modes(tmp_path):
    path = tmp_path / "model.onnx"
    assert computed_artifact(path, "ort") == path
    with pytest.raises(ValueError, match=r"numerics 'fast': expected one of strict, ort \(--parity-numerics\)"):
        computed_artifact(path, "fast")


@pytest.mark.tf
def test_a_large_saved_model_is_run_in_a_process_of_its_own_with_the_same_outputs(toy_saved_model, monkeypatch):
    """From APART_BYTES on, the reference is a TfProcessRunner: the same outputs, input metadata and
    weights' hash as the TfRunner of this process, and a process that ends when the run releases it."""
    from paritygate.backend import runtimes
    from paritygate.backend.tf.process import TfProcessRunner
    from paritygate.backend.tf.runner import TfRunner

    spec = toy_spec(reference=toy_saved_model)
    here = runtimes.tensorflow_runner(spec)
    monkeypatch.setattr("paritygate.common.apart.APART_BYTES", 0)
    apart = runtimes.tensorflow_runner(spec)
    assert (type(here), type(apart)) == (TfRunner, TfProcessRunner) and apart._child is None  # started on first use
    x = {"x": np.linspace(-1, 1, 7, dtype=np.float32).reshape(7, 1)}
    for runner in (here, apart):
        runner.activate()
    assert apart.input_metadata() == here.input_metadata() and apart.weights_sha256() == here.weights_sha256()
    a, b = here.infer(x), apart.infer(x)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    child = apart._child
    runtimes.release(apart)
    assert child.poll() is not None


@pytest.mark.tf
def test_latency_times_a_large_references_tensorflow_in_this_process(toy_saved_model, monkeypatch):
    """Where the checks' reference runs apart, latency's (``live_reference(here=True)``) is a TfRunner of this process
    (timing the pipe to the other one would slow the reference down); goldens keep the one run apart."""
    from paritygate.backend import runtimes
    from paritygate.backend.tf.process import TfProcessRunner
    from paritygate.backend.tf.runner import TfRunner
    from paritygate.context import RunContext

    monkeypatch.setattr("paritygate.common.apart.APART_BYTES", 0)
    ctx, spec = RunContext(), toy_spec(reference=toy_saved_model)
    try:
        timed, live = runtimes.live_reference(ctx, spec, here=True), runtimes.live_reference(ctx, spec)
        assert (type(timed.runner), type(live.runner)) == (TfRunner, TfProcessRunner)
        x = {"x": np.linspace(-1, 1, 5, dtype=np.float32).reshape(5, 1)}
        a, b = timed.infer(x), live.infer(x)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    finally:
        ctx.store.close()
