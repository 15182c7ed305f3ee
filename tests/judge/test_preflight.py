"""paritygate.judge.preflight: one pass over every model before any check runs. Each bad case gives one line naming
the config file, the model and the key; through the plugin the run stops with exit code 4, no check rows and
no passes (in-process, and under xdist on the controller)."""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")  # before pytester snapshots sys.modules: re-importing onnx's extension aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.backend.runtimes import CANDIDATES, REFERENCES
from paritygate.common.memo import ArtifactKey, ModelKey
from paritygate.context import RunOptions
from paritygate.judge.preflight import validate_models
from paritygate.report.summary import summary_lines
from paritygate.session import ParitySession
from tests.conftest import make_onnx, scale, write_config

pytestmark = [pytest.mark.tf, pytest.mark.onnx]

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance" / "test_parity.py"

HANDLERS = {
    "broken_handlers.py": "import numpy as np\nraise RuntimeError('the handler module is broken')\n",
    "raising_handlers.py": "def make(min_batch_size, max_batch_size):\n    raise ValueError('no model path configured')\n",
}


def model(name, reference, **fields):
    """A model table over the toy SavedModel (x float32 [N, 1] -> y = 5x, z = 2x)."""
    table = {"name": name, "reference": str(reference), "precisions": ["fp32"], "max_batch": 2,
             "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    table.update(fields)
    return table


def validated(folder, *tables):
    options = RunOptions(config_path=write_config(folder, {"models": list(tables)}), runtime="onnxruntime")
    session = ParitySession(options)
    session.validation = validate_models(options.context, options.models, options.config_path)
    return session, session.validation


def one_problem(folder, table):
    _, found = validated(folder, table)
    (line,) = found["problems"]
    return line


@pytest.fixture
def folder(tmp_path, parity_cache):
    for name, text in HANDLERS.items():
        (tmp_path / name).write_text(text)
    make_onnx(tmp_path / "toy.onnx")
    return tmp_path


def test_a_good_model_validates_records_the_mapping_and_leaves_runners_for_the_checks(folder, toy_saved_model):
    make_onnx(folder / "renamed.onnx", scale("out_y", 5.0, "serving_default_x:0"), scale("out_z", 2.0, "serving_default_x:0"),
              inputs=("serving_default_x:0",), outputs=("out_y", "out_z"))
    session, found = validated(folder, model("m", toy_saved_model, onnx="renamed.onnx",
                                             outputs={"y": "out_y", "z": "out_z"}))
    assert found["problems"] == []
    got = found["models"]["m"]
    assert got["io_mapping"] == {"inputs": {"x": {"candidate": "serving_default_x:0", "rule": "signature"}},
                                 "outputs": {"y": {"candidate": "out_y", "rule": "explicit"},
                                             "z": {"candidate": "out_z", "rule": "explicit"}}}
    assert got["checked"] == ["reference", "candidate inputs and outputs"]
    context = session.options.context
    assert REFERENCES.peek(context, ModelKey("m")) is not None
    assert CANDIDATES.peek(context, ArtifactKey("onnxruntime", "m", "fp32")) is not None
    assert "paritygate: m: mapped inputs x -> serving_default_x:0 (signature)" in summary_lines(session)[1]


def test_missing_signature(folder, toy_saved_model):
    line = one_problem(folder, model("m", toy_saved_model, signature="predict"))
    assert line == (f"{folder / 'parity.toml'}: model 'm': key 'signature': {toy_saved_model}: SavedModel has no "
                    "signature 'predict'; it has ['serving_default']")


def test_wrong_rank(folder, toy_saved_model):
    line = one_problem(folder, model("m", toy_saved_model, inputs={
        "x": {"shape": [-1, 1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}))
    assert line.startswith(f"{folder / 'parity.toml'}: model 'm': key 'inputs.x.shape': declares rank 3 [-1, 1, 1], "
                           f"but {toy_saved_model} (signature 'serving_default') has input 'x' of rank 2 [-1, 1]")


def test_wrong_dtype(folder, toy_saved_model):
    line = one_problem(folder, model("m", toy_saved_model, inputs={
        "x": {"shape": [-1, 1], "dtype": "int32", "range": [-1, 1]}}))
    assert line.startswith(f"{folder / 'parity.toml'}: model 'm': key 'inputs.x.dtype': declares int32, but ")
    assert line.endswith("has input 'x' of dtype float32")


def test_corrupt_onnx(folder, toy_saved_model):
    (folder / "corrupt.onnx").write_bytes(b"\x08\x07not a protobuf at all" * 10)
    line = one_problem(folder, model("m", toy_saved_model, onnx="corrupt.onnx"))
    assert line.startswith(f"{folder / 'parity.toml'}: model 'm': key 'onnx': {folder / 'corrupt.onnx'}: not a valid "
                           "ONNX model")


def test_wrong_candidate_input_rank(folder, toy_saved_model):
    make_onnx(folder / "wide.onnx", width=3)
    line = one_problem(folder, model("m", toy_saved_model, onnx="wide.onnx"))
    assert "key 'inputs.x.shape': declares dimension 1 = 1, but " in line and "wide.onnx has input 'x'" in line


def test_ambiguous_output_mapping(folder, toy_saved_model):
    make_onnx(folder / "anon.onnx", scale("o1", 5.0), scale("o2", 2.0), outputs=("o1", "o2"))
    line = one_problem(folder, model("m", toy_saved_model, onnx="anon.onnx"))
    assert line.startswith(f"{folder / 'parity.toml'}: model 'm': key 'outputs': cannot pair outputs: reference outputs "
                           "['y', 'z'], candidate outputs ['o1', 'o2']")
    assert "write: [models.outputs] y = \"<one of ['o1', 'o2']>\", z = \"<one of ['o1', 'o2']>\"" in line


def test_an_explicit_mapping_of_an_output_the_reference_lacks(folder, toy_saved_model):
    line = one_problem(folder, model("m", toy_saved_model, onnx="toy.onnx", outputs={"probs": "y"}))
    assert "key 'outputs': output(s) ['probs'] are mapped to candidate names, but the reference has no such " \
           "output; reference outputs are ['y', 'z']" in line


def test_handler_module_that_does_not_import(folder, toy_saved_model):
    pytest.importorskip("apache_beam")
    line = one_problem(folder, model("m", toy_saved_model, onnx="toy.onnx", beam={"handler": "broken_handlers:make"}))
    assert line == (f"{folder / 'parity.toml'}: model 'm': key 'beam.handler': importing module 'broken_handlers' of "
                    "handler 'broken_handlers:make' raised RuntimeError: the handler module is broken")


def test_handler_factory_that_raises(folder, toy_saved_model):
    pytest.importorskip("apache_beam")
    line = one_problem(folder, model("m", toy_saved_model, onnx="toy.onnx", beam={"handler": "raising_handlers:make"}))
    assert line == (f"{folder / 'parity.toml'}: model 'm': key 'beam.handler': raising_handlers:make(min_batch_size=1, "
                    "max_batch_size=2) raised ValueError: no model path configured")


def test_calibration_lacking_an_input(folder, toy_saved_model):
    np.savez(folder / "calib.npz", image=np.zeros((4, 1), np.float32))
    line = one_problem(folder, model("m", toy_saved_model, onnx="toy.onnx", precisions=["fp32", "int8"],
                                     calibration="calib.npz"))
    assert line.startswith(f"{folder / 'parity.toml'}: model 'm': key 'calibration': {folder / 'calib.npz'}: "
                           "calibration set lacks input(s) ['x']")


def test_classification_task_output_that_is_not_an_output(folder, toy_saved_model):
    line = one_problem(folder, model("m", toy_saved_model, onnx="toy.onnx", task="classification", task_output="probs"))
    assert line == (f"{folder / 'parity.toml'}: model 'm': key 'task_output': 'probs' is not an output of the "
                    "reference; its outputs are ['y', 'z']")


def test_empty_engine_and_an_engine_that_cannot_be_checked_here(folder, toy_saved_model):
    (folder / "empty.plan").write_bytes(b"")
    (folder / "model.plan").write_bytes(b"ftrt not checked without tensorrt")
    _, found = validated(folder, model("m", toy_saved_model, onnx="toy.onnx", engines={"fp32": "empty.plan"}),
                         model("n", toy_saved_model, onnx="toy.onnx", engines={"fp32": "model.plan"}))
    empty = f"{folder / 'parity.toml'}: model 'm': key 'engines.fp32': {folder / 'empty.plan'}: TensorRT engine file is empty"
    assert found["problems"] == [empty]
    pytest.importorskip("paritygate.lazy").available("tensorrt") and pytest.skip("tensorrt is installed here")
    assert any(n.startswith(f"engines.fp32: {folder / 'model.plan'}: TensorRT version not checked:")
               for n in found["models"]["n"]["notes"])


def test_every_model_is_validated_and_every_problem_listed(folder, toy_saved_model):
    _, found = validated(folder, model("a", toy_saved_model, signature="predict"),
                         model("b", toy_saved_model, onnx="toy.onnx"),
                         model("c", toy_saved_model, inputs={"x": {"shape": [-1, 2], "dtype": "float32",
                                                                   "range": [-1.0, 1.0]}}))
    assert [line.split(": key ")[0].rsplit(": ", 1)[1] for line in found["problems"]] == ["model 'a'", "model 'c'"]
    assert found["models"]["b"]["problems"] == []


# -- through the plugin -------------------------------------------------------------------------------------
def _bad_config(folder, saved_model):
    (folder / "corrupt.onnx").write_bytes(b"garbage")
    make_onnx(folder / "anon.onnx", scale("o1", 5.0), scale("o2", 2.0), outputs=("o1", "o2"))
    for name, text in HANDLERS.items():
        (folder / name).write_text(text)
    tables = [model("good", saved_model),
              model("no_signature", saved_model, signature="predict"),
              model("rank", saved_model, inputs={"x": {"shape": [-1, 1, 1], "dtype": "float32", "range": [0.0, 1.0]}}),
              model("dtype", saved_model, inputs={"x": {"shape": [-1, 1], "dtype": "int32", "range": [0, 1]}}),
              model("corrupt", saved_model, onnx="corrupt.onnx"),
              model("ambiguous", saved_model, onnx="anon.onnx")]
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        pass
    else:
        tables += [model("bad_module", saved_model, beam={"handler": "broken_handlers:make"}),
                   model("bad_factory", saved_model, beam={"handler": "raising_handlers:make"})]
    return write_config(folder, {"models": tables}), {t["name"] for t in tables} - {"good"}


def _assert_stopped(result, config, bad):
    output = result.outlines + result.errlines
    errors = [line for line in output if line.startswith("ERROR: ")]
    assert result.ret == pytest.ExitCode.USAGE_ERROR, "\n".join(output)
    assert len(errors) == len(bad), "\n".join(output)
    assert {line.split("model '")[1].split("'")[0] for line in errors} == bad
    assert all(line.startswith(f"ERROR: {config}: model '") for line in errors)
    text = "\n".join(output)
    assert "Traceback" not in text and " passed" not in text and "PASSED" not in text
    assert len(output) < 60, text  # one line per problem, not a traceback per check


def test_plugin_stops_before_any_check_with_one_line_per_problem(pytester, toy_saved_model, parity_cache):
    config, bad = _bad_config(pytester.path, toy_saved_model)
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE), f"--parity-config={config}", "-p", "no:xdist",
                                "-p", "no:cacheprovider", f"--parity-report={report}")
    _assert_stopped(result, config, bad)
    data = json.loads((report / "parity-report.json").read_text())
    assert data["checks"] == [] and len(data["validation"]["problems"]) == len(bad)
    result.stdout.fnmatch_lines([f"paritygate: validation found {len(bad)} problem(s) in {config}; no check ran"])


def test_xdist_controller_validates_and_stops_the_run(pytester, toy_saved_model, parity_cache):
    pytest.importorskip("xdist")
    config, bad = _bad_config(pytester.path, toy_saved_model)
    result = pytester.runpytest(str(CONFORMANCE), f"--parity-config={config}", "-n", "1",
                                           "-p", "no:cacheprovider")
    _assert_stopped(result, config, bad)


def test_tests_outside_the_conformance_suite_are_not_validated(pytester):
    (pytester.path / "ref").mkdir()  # not a SavedModel: validation would stop the run
    config = write_config(pytester.path, {"models": [model("m", "ref")]})
    pytester.makepyfile(test_fake=textwrap.dedent("""
        def test_it(parity_model):
            assert parity_model.name == "m"
    """))
    pytester.runpytest(f"--parity-config={config}", "-p", "no:xdist").assert_outcomes(passed=1)


def test_validation_starts_no_second_kernel_order(folder, toy_saved_model):
    """The second kernel order's TensorFlow child starts only where a check needs it (judge.reference_noise), never
    during validation, even for the models whose fp32 checks a serial run selected (``ahead``). (No reference-output
    cache here: nothing is served from one.)"""
    tables = [model(name, toy_saved_model, onnx="toy.onnx") for name in ("a", "b")]
    from paritygate.backend.kernel_order import KERNEL_ORDERS

    options = RunOptions(config_path=write_config(folder, {"models": tables}), runtime="onnxruntime")
    options.context.reference_cache = False
    try:
        found = validate_models(options.context, options.models, options.config_path, ahead={"a"})
        assert found["problems"] == [] and not options.context.store.tables.get(KERNEL_ORDERS)
    finally:
        options.context.close()


def test_a_candidate_output_of_another_rank_is_named_with_both_shapes(folder):
    """HED's case: tf2onnx emitted a side output at rank 5 ([1, 2, 320, 320, 1]) for the reference's rank 4. The
    validation line names the output and both shapes under key 'outputs', not the input's profile."""
    import subprocess
    import sys

    import onnx
    import tensorflow as tf

    module = tf.Module()
    module.w = tf.Variable(np.random.default_rng(0).normal(0, 0.3, (3, 3, 3, 2)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32, name="x")])
    def serve(x):  # a 3x3 'same' convolution over any H, W
        return {"y": tf.nn.conv2d(x, module.w, 1, "SAME")}

    module.serve = serve
    saved = folder / "fcn"
    tf.saved_model.save(module, str(saved), signatures={"serving_default": serve})
    converted = folder / "fcn.onnx"
    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved), "--output", str(converted),
                    "--opset", "17"], check=True, capture_output=True)
    graph = onnx.load(str(converted))
    out = graph.graph.output[0]
    for node in graph.graph.node:  # the conversion fault: one more leading axis on the output
        node.output[:] = [f"{o}_r4" if o == out.name else o for o in node.output]
    axes = onnx.helper.make_tensor("axes0", onnx.TensorProto.INT64, [1], [0])
    graph.graph.initializer.append(axes)
    graph.graph.node.append(onnx.helper.make_node("Unsqueeze", [f"{out.name}_r4", "axes0"], [out.name]))
    out.type.tensor_type.shape.dim.insert(0, onnx.TensorShapeProto.Dimension(dim_value=1))
    onnx.save(graph, str(folder / "rank5.onnx"))
    line = one_problem(folder, model("m", saved, onnx="rank5.onnx", inputs={"x": {
        "shape": [-1, -1, -1, 3], "dtype": "float32", "range": [-1.0, 1.0],
        "profile": {"min": [1, 4, 4, 3], "opt": [2, 8, 8, 3], "max": [2, 16, 12, 3]}}}))
    assert "key 'outputs': the fp32 candidate's output 'y' has shape [1, 1, 4, 4, 2] (rank 5) where the " \
           "reference's 'y' has [1, 4, 4, 2] (rank 4), at the profile's min [1, 4, 4, 3]" in line, line
    assert "inputs.x.profile" not in line


def test_heldout_labels_outside_the_models_classes_are_one_line(folder, toy_saved_model):
    """Issue 33: labels 999 for a model of fewer classes were accepted (accuracy 0.0 on both sides, every check
    passing). The toy's output y is [N, 1]: as the class scores, one class, so only label 0 is a class."""
    (folder / "inputs").mkdir()
    path = folder / "inputs" / "m_heldout.npz"
    np.savez(path, x=np.zeros((3, 1), np.float32), __labels__=np.array([0, 999, 0]))
    line = one_problem(folder, model("m", toy_saved_model, onnx="toy.onnx", task="classification", task_output="y"))
    assert line == (f"{folder / 'parity.toml'}: model 'm': {path}: array '__labels__' holds 999 (1 label(s) >= 1), "
                    "expected class indices 0..0: the reference's output 'y' scores 1 classes")


@pytest.mark.parametrize(("rows", "words"), [(0, ("holds 0 rows; expected at least one row (or no file: the suite then draws "
                                                  "its inputs from the config's ranges)")),
                                              (10_001, ("holds 10001 rows, over the limit of 10000 rows (default "
                                                       "10000); keep a sample of it, or raise the limit with "
                                                       "PARITYGATE_MAX_ROWS=<rows>"))])
def test_an_input_set_of_no_rows_or_over_the_row_limit_is_one_line(folder, toy_saved_model, rows, words):
    (folder / "inputs").mkdir()
    path = folder / "inputs" / "m.npz"
    np.savez(path, x=np.zeros((rows, 1), np.float32))
    line = one_problem(folder, model("m", toy_saved_model, onnx="toy.onnx"))
    assert line == f"{folder / 'parity.toml'}: model 'm': {path}: input set {words}"


def test_a_profile_size_the_reference_returns_nothing_for_is_the_configs_not_the_converters(folder):
    """SpliceAI's case (issue 37): a Cropping1D of 20 each side returns an empty output below 41 steps. At the
    profile's min of 16 the run stops with one line naming ``inputs.seq.profile`` and the empty output, before
    anything is converted (tf2onnx's smoke run at that size was blamed on the converter)."""
    import keras

    seq = keras.Input((None, 4), name="seq")
    cropped = keras.layers.Cropping1D((20, 20))(keras.layers.Conv1D(3, 3, padding="same")(seq))
    keras.Model(seq, keras.layers.Conv1D(2, 1, name="out")(cropped)).save(folder / "cropped.keras")
    line = one_problem(folder, model("cropped", folder / "cropped.keras", inputs={"seq": {
        "shape": [-1, -1, 4], "dtype": "float32", "range": [-1.0, 1.0],
        "profile": {"min": [1, 16, 4], "opt": [2, 64, 4], "max": [2, 80, 4]}}}))
    assert "key 'inputs.seq.profile': the reference returns an empty output at the profile's min [1, 16, 4]" in line
    assert "raise the profile's min" in line, line
    from paritygate.backend.cache import cache_root

    assert not list((cache_root() / "onnx").glob("cropped-fp32-*.onnx")), "nothing converted"
