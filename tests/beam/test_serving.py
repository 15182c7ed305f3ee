"""paritygate.beam.serving: the suite's own handlers. ``handlers:onnxruntime`` passes every RunInference check on
the toy model (two outputs) where Beam's own ONNX handler fails; a static batch is padded; the code it shares with
the TensorRT handler runs here through ONNX Runtime with a TensorRT-like profile."""


import typing

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")

from paritygate.beam import checks, direct, serving
from paritygate.beam.contract import HandlerUnderTest
from paritygate.beam.expectations import expectations_for, match
from tests.conftest import make_onnx, toy_spec

pytestmark = [pytest.mark.beam, pytest.mark.onnx]


def _subject(toy_reference, reference, onnx_path, factory=serving.onnxruntime, max_batch=4):
    spec = toy_spec(reference=reference, onnx=onnx_path, max_batch=max_batch,
                    beam={"handler": "paritygate.beam.handlers:onnxruntime"})
    return HandlerUnderTest.from_spec(spec, toy_reference, factory=factory)


@pytest.mark.tf
def test_own_onnxruntime_handler_passes_every_check_where_beams_fails(toy_reference, toy_saved_model, toy_onnx_path):
    from paritygate.beam.copies import model_copies
    from paritygate.beam.multiprocess import multi_process
    from paritygate.beam.updates import model_update

    subject = _subject(toy_reference, toy_saved_model, toy_onnx_path)
    known = expectations_for()
    every = {**checks.PIPELINE_CHECKS, **direct.DIRECT_CHECKS, "beam_model_update": model_update,
             "beam_multi_process": multi_process, "beam_model_copies": model_copies}
    for name, check in every.items():
        result, expected = check(subject), match(name, subject, known)
        assert all(not e.in_handler for e in expected), (name, [e.id for e in expected])  # reaches no handler defect
        assert result.passed != bool(expected), (name, result.failures, [e.id for e in expected])


def _static(path, batch):
    """The toy model with its batch dimension fixed at ``batch`` (y = 5x, z = 2x)."""
    import onnx

    model = onnx.load(str(make_onnx(path)))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_value = batch
    onnx.save(model, str(path))
    return path


@pytest.mark.tf
def test_static_batch_is_padded_and_the_padding_dropped(tmp_path, toy_reference, toy_saved_model):
    """Every pipeline check, each with short final batches, on a model that takes exactly 4 rows."""
    from paritygate.beam.copies import model_copies
    from paritygate.beam.multiprocess import multi_process
    from paritygate.beam.updates import model_update

    subject = _subject(toy_reference, toy_saved_model, _static(tmp_path / "static.onnx", 4))
    assert direct.batch_extremes(subject).passed  # batches of 1 and 4 on a model that takes exactly 4
    known = expectations_for()
    every = {**checks.PIPELINE_CHECKS, "beam_multi_process": multi_process, "beam_model_copies": model_copies}
    for name, check in every.items():
        result = check(subject)
        assert result.passed != bool(match(name, subject, known)), (name, result.failures)
        runs = result.details.get("runs", [result.details])
        if name not in ("beam_batch_weight", "beam_maybe_keyed_mixed"):  # Beam 2.77 fails both for every handler
            assert result.details.get("cases_with_short_batches") or all(r["short_batches"] for r in runs), name
    update = model_update(subject)
    assert update.passed, update.failures
    assert all(min(sizes) < 4 for sizes in update.details["batch_sizes"].values()), update.details["batch_sizes"]


class ProfileOfTwoToThree(serving.OnnxRuntimeHandler):
    """The TensorRT handler's batch rules (profile min 2, max 3) on ONNX Runtime: chunks of at most 3 rows, a
    chunk of 1 padded to 2."""

    calls: typing.ClassVar[list] = []

    def batch_limits(self, runner):
        return None, 3, 2

    def open(self, path):
        runner = super().open(path)
        infer = runner.infer
        runner.infer = lambda feed: ProfileOfTwoToThree.calls.append(len(feed["x"])) or infer(feed)
        return runner


def test_chunks_stay_within_the_profile_and_results_are_copies(toy_onnx_path):
    handler = ProfileOfTwoToThree(toy_onnx_path, [serving.Binding(None, "x")], max_batch=8)
    model = handler.load_model()
    batch = [np.float32([i]) for i in range(4)]
    ProfileOfTwoToThree.calls.clear()
    results = handler.run_inference(batch, model)
    assert ProfileOfTwoToThree.calls == [3, 2]  # 3 rows, then 1 row padded to the profile's 2
    assert [r.inference["y"].tolist() for r in results] == [[0.0], [5.0], [10.0], [15.0]]
    assert all(r.inference["z"].base is None for r in results)  # owns its data: no view into a batch output
    assert handler.get_num_bytes(batch) == 16 and results[0].model_id == str(toy_onnx_path)


def test_dict_elements_safe_casts_and_clear_errors(toy_onnx_path):
    handler = serving.OnnxRuntimeHandler(toy_onnx_path, [serving.Binding("x", "x")], max_batch=4)
    model = handler.load_model()
    (result,) = handler.run_inference([{"x": np.float16([2.0])}], model)  # float16 -> float32 is safe
    assert result.inference["y"].tolist() == [10.0]
    with pytest.raises(TypeError, match="input 'x': elements are float64, the model takes float32"):
        handler.run_inference([{"x": np.float64([2.0])}], model)
    with pytest.raises(TypeError, match="an element must be a dict with key 'x'"):
        handler.run_inference([np.float32([2.0])], model)
    wrong = serving.OnnxRuntimeHandler(toy_onnx_path, [serving.Binding(None, "image")], max_batch=4)
    with pytest.raises(ValueError, match=r"has no input\(s\) \['image'\]; its inputs are \['x'\]"):
        wrong.load_model()


def test_picklable_and_honours_update_model_path(tmp_path, toy_onnx_path):
    from apache_beam.internal import pickler

    from tests.conftest import scale

    handler = serving.OnnxRuntimeHandler(toy_onnx_path, [serving.Binding(None, "x")], max_batch=4,
                                         min_batch_size=1, max_batch_size=4, model_copies=2)
    clone = pickler.loads(pickler.dumps(handler))
    assert clone.model_copies() == 2 and clone.share_model_across_processes()
    other = make_onnx(tmp_path / "other.onnx", scale("y", 7.0), scale("z", 2.0))
    clone.update_model_path(str(other))
    (result,) = clone.run_inference([np.float32([1.0])], clone.load_model())
    assert result.inference["y"].tolist() == [7.0] and result.model_id == str(other)


def test_tensorrt_batch_limits_come_from_the_profile_or_the_static_shape():
    from paritygate.backend.trt.util import TensorInfo

    handler = serving.TensorRTHandler("unused.plan", [serving.Binding(None, "x")], max_batch=8)
    dynamic = type("Runner", (), {"io": [TensorInfo("x", True, (-1, 1), np.dtype("float32"),
                                                    ((1, 1), (4, 1), (6, 1)))]})()
    assert handler.batch_limits(dynamic) == (None, 6, 1)
    static = type("Runner", (), {"io": [TensorInfo("x", True, (4, 1), np.dtype("float32"), None)]})()
    assert handler.batch_limits(static) == (4, 4, 4)


@pytest.mark.trt
@pytest.mark.gpu
def test_tensorrt_handler_passes_every_check(toy_reference, toy_saved_model, toy_onnx_path):
    """Unexecuted here (no TensorRT): the TensorRT handler on the toy model, every check as the ORT handler."""
    subject = _subject(toy_reference, toy_saved_model, toy_onnx_path, factory=serving.tensorrt)
    known = expectations_for()
    for name, check in {**checks.PIPELINE_CHECKS, **direct.DIRECT_CHECKS}.items():
        assert check(subject).passed != bool(match(name, subject, known)), name




@pytest.mark.tf
def test_results_carry_the_references_output_names(tmp_path, toy_reference, toy_saved_model):
    """ONNX outputs out_y / out_z paired with the reference's y / z through [models.outputs] (iomap): results come
    back as y / z, and the pipeline checks pair them with the reference."""
    from tests.conftest import scale

    path = make_onnx(tmp_path / "renamed.onnx", scale("out_y", 5.0), scale("out_z", 2.0), outputs=("out_y", "out_z"))
    spec = toy_spec(reference=toy_saved_model, onnx=path, outputs={"y": "out_y", "z": "out_z"},
                    beam={"handler": "paritygate.beam.handlers:onnxruntime"})
    subject = HandlerUnderTest.from_spec(spec, toy_reference, factory=serving.onnxruntime)
    handler = subject.make(1, 4)
    (result,) = handler.run_inference([np.float32([1.0])], handler.load_model())
    assert sorted(result.inference) == ["y", "z"] and result.inference["y"].tolist() == [5.0]
    assert serving.onnxruntime(1, 4, spec).run_inference([np.float32([1.0])], handler.load_model())[0].inference.keys() \
        == {"out_y", "out_z"}  # without the reference's names (the validation pass): the model's own
    assert checks.pairing(subject).passed and direct.batch_extremes(subject).passed
    wrong = toy_spec(reference=toy_saved_model, onnx=path, outputs={"y": "nope"})
    with pytest.raises(ValueError, match=r"key 'outputs'.*'y' is mapped to candidate output 'nope'"):
        serving.onnxruntime(1, 4, wrong, reference_outputs=["y", "z"])
