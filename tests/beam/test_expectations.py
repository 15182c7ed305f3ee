"""expectations.toml: loading, matching, and the evidence: each upstream defect makes its check really fail,
on CPU, with Beam's own handlers over small models made here."""

import functools
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")

from paritygate.beam import checks, direct, expectations
from paritygate.beam.contract import HandlerUnderTest
from paritygate.beam.expectations import ExpectationError, expectations_for, load_expectations, match
from tests.beam import toy_handlers as toys
from tests.conftest import make_onnx, scale, toy_spec

pytestmark = [pytest.mark.beam, pytest.mark.onnx]

KNOWN = expectations_for()
ALL_CHECKS = {*checks.PIPELINE_CHECKS, *direct.DIRECT_CHECKS, "beam_batch_latency", "beam_multi_process",
              "beam_model_update", "beam_model_copies"}


def _ids(check, subject):
    return {e.id for e in match(check, subject, KNOWN)}


# -- the file itself ---------------------------------------------------------------------------------
def test_every_expectation_names_real_checks_and_upstream_lines():
    import apache_beam

    beam_root = Path(apache_beam.__file__).parent.parent
    assert len({e.id for e in KNOWN}) == len(KNOWN)
    for e in KNOWN:
        assert set(e.checks) <= ALL_CHECKS, e.id
        assert e.defect is None or expectations._resolve(e.defect) is not None or _in_source(e.defect), e.id
        for path, line in re.findall(r"(apache_beam/[\w/]+\.py):(\d+)", e.upstream):
            lines = (beam_root / path).read_text().splitlines()
            assert int(line) <= len(lines), (e.id, path, line)


def _in_source(dotted):
    """A defect in a module that does not import here (Beam's tensorflow_inference needs tensorflow_hub, which a
    tensorflow-cpu install lacks): its class and attribute must still be defined in the module's source file."""
    import importlib.util

    module, _, path = dotted.partition(":")
    found = importlib.util.find_spec(module)
    text = Path(found.origin).read_text() if found and found.origin else ""
    cls, _, attr = path.rpartition(".")
    return bool(text) and f"class {cls}" in text and f"def {attr}(" in text


def test_malformed_expectations_are_refused(tmp_path):
    path = tmp_path / "expectations.toml"
    path.write_text('[[expectations]]\nid = "x"\nchecks = ["beam_pairing"]\nbeam = ">=2"\nreaches = "method:f"\n'
                    'upstream = "a.py:1"\nreason = "r"\n')
    with pytest.raises(ExpectationError, match="'reaches' must be"):
        load_expectations(path)
    path.write_text(path.read_text().replace('"method:f"', '"beam"') + 'when = ["sometimes"]\n')
    with pytest.raises(ExpectationError, match=r"unknown predicate\(s\) \['sometimes'\]"):
        load_expectations(path)
    path.write_text(path.read_text().replace('when = ["sometimes"]', 'colour = "red"'))
    with pytest.raises(ExpectationError, match=r"unknown key\(s\) \['colour'\]"):
        load_expectations(path)


def test_an_expectation_beside_the_config_is_added(tmp_path):
    (tmp_path / "expectations.toml").write_text(
        '[[expectations]]\nid = "mine"\nchecks = ["beam_pairing"]\nbeam = ">=0"\nreaches = "beam"\n'
        'upstream = "x.py:1"\nreason = "r"\n')
    found = expectations_for(tmp_path / "parity.toml")
    assert [e.id for e in found] == [e.id for e in KNOWN] + ["mine"]


def test_an_overriding_subclass_or_another_beam_version_escapes(toy_onnx_path):
    from apache_beam.ml.inference.onnx_inference import OnnxModelHandlerNumpy

    class Fixed(OnnxModelHandlerNumpy):
        def get_num_bytes(self, batch):
            return sum(x.nbytes for x in batch)

    (e,) = [e for e in KNOWN if e.id == "onnx-numpy-num-bytes"]
    spec = toy_spec(inputs={"x": ((-1, 4), "float32", (-1.0, 1.0))})
    assert e.applies("handler_num_bytes", spec, ["y"], OnnxModelHandlerNumpy(str(toy_onnx_path)), "2.77.0")
    assert not e.applies("handler_num_bytes", spec, ["y"], Fixed(str(toy_onnx_path)), "2.77.0")
    assert not e.applies("handler_num_bytes", spec, ["y"], OnnxModelHandlerNumpy(str(toy_onnx_path)), "2.78.0")
    assert not e.applies("handler_num_bytes", toy_spec(), ["y"], OnnxModelHandlerNumpy(str(toy_onnx_path)), "2.77.0")


# -- evidence: Beam's handlers really fail these checks ----------------------------------------------
def _onnx_factory(path, min_batch_size, max_batch_size):
    from apache_beam.ml.inference.onnx_inference import OnnxModelHandlerNumpy

    return OnnxModelHandlerNumpy(str(path), providers=["CPUExecutionProvider"], min_batch_size=min_batch_size,
                                 max_batch_size=max_batch_size)


@pytest.fixture(scope="module")
def wide_onnx(tmp_path_factory):
    """y = 5x, z = 2x over x float32 [N, 4]."""
    return make_onnx(tmp_path_factory.mktemp("wide") / "wide.onnx", scale("y", 5.0), scale("z", 2.0), width=4)


def _formula(feed):
    """The toy's own definition, y = 5x and z = 2x, as the reference of a model with no SavedModel (wide_onnx)."""
    return {"y": feed["x"] * np.float32(5), "z": feed["x"] * np.float32(2)}


def _unreferenced(spec, factory):
    """A subject for checks about bytes and loading (the pipeline checks also hold short batches to ``_formula``)."""
    return HandlerUnderTest(spec, factory, _formula, ["y", "z"])


def test_onnx_numpy_num_bytes(wide_onnx):
    spec = toy_spec(inputs={"x": ((-1, 4), "float32", (-1.0, 1.0))}, beam={"handler": "m:onnx"})
    subject = _unreferenced(spec, functools.partial(_onnx_factory, wide_onnx))
    result = direct.num_bytes(subject)
    assert "= 16, not the 64 bytes" in result.failures[0]  # 4 elements x itemsize 4, of 4 x 16 bytes
    metric = checks.metric_bytes(subject)
    assert any("batches reported a byte count other than their exact bytes" in f for f in metric.failures)
    assert _ids("handler_num_bytes", subject) == {"onnx-numpy-num-bytes"}
    assert _ids("beam_metric_bytes", subject) == {"onnx-numpy-num-bytes", "onnx-numpy-first-output"}  # y, z: first


@pytest.mark.tf
def test_onnx_numpy_first_output(toy_subject):
    subject = toy_subject(_onnx_factory)
    assert "inference has outputs ['y'], the reference has ['y', 'z']" in checks.pairing(subject).failures[0]
    assert not direct.batch_extremes(subject).passed
    assert _ids("beam_pairing", subject) == _ids("handler_batch_extremes", subject) == {"onnx-numpy-first-output"}
    assert direct.results_stable(subject).passed and not _ids("handler_results_stable", subject)


def all_outputs(session, batch, inference_args=None):
    """An inference_fn returning a dict output name -> batch array (Beam splits it per element: utils.py:48)."""
    import numpy as np

    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {session.get_inputs()[0].name: np.stack(batch)})))


def _onnx_dict_factory(path, min_batch_size, max_batch_size):
    from apache_beam.ml.inference.onnx_inference import OnnxModelHandlerNumpy

    return OnnxModelHandlerNumpy(str(path), providers=["CPUExecutionProvider"], inference_fn=all_outputs,
                                 min_batch_size=min_batch_size, max_batch_size=max_batch_size)


@pytest.mark.tf
def test_onnx_numpy_ignores_model_updates_and_a_dict_output_reaches_every_element(toy_subject):
    from paritygate.beam.updates import model_update

    subject = toy_subject(_onnx_dict_factory)
    assert checks.pairing(subject).passed and direct.batch_extremes(subject).passed  # every element: y and z
    result = model_update(subject)
    failures = result.failures
    assert all("(after the update)" in f for f in failures[:-1]), failures  # before: right
    assert "not the update target's" in failures[0] and not any("model_id" in f for f in failures)  # judged by outputs
    assert result.details["model_id_absent"]["after"] == 9  # Beam's ONNX handler leaves model_id None: recorded
    assert _ids("beam_model_update", subject) == {"no-model-update"}


def test_onnx_load_model_leaks_file(toy_onnx_path):
    subject = _unreferenced(toy_spec(beam={"handler": "m:onnx"}), functools.partial(_onnx_factory, toy_onnx_path))
    (failure,) = direct.load_model(subject).failures
    assert failure.startswith("load_model left a resource open: unclosed file") and str(toy_onnx_path) in failure
    assert _ids("handler_load_model", subject) == {"onnx-load-model-leaks-file"}
    assert direct.load_model(_unreferenced(subject.spec, functools.partial(toys.correct, toy_onnx_path))).passed


@pytest.mark.tf
def test_tf_numpy_num_bytes(tmp_path):
    pytest.importorskip("tensorflow_hub", reason="Beam 2.77's tensorflow_inference imports tensorflow_hub")
    keras = pytest.importorskip("keras")
    from apache_beam.ml.inference.tensorflow_inference import TFModelHandlerNumpy

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(1, name="y")])
    model.save(tmp_path / "wide.keras")

    def factory(min_batch_size, max_batch_size):
        return TFModelHandlerNumpy(str(tmp_path / "wide.keras"), min_batch_size=min_batch_size,
                                   max_batch_size=max_batch_size)

    spec = toy_spec(inputs={"x": ((-1, 64), "float32", (-1.0, 1.0))}, beam={"handler": "m:tf"})
    subject = HandlerUnderTest(spec, factory, None, ["y"])
    result = direct.num_bytes(subject)
    owning, views = result.failures  # sys.getsizeof: data + the array header for owning arrays, the header alone
    assert "arrays owning their data) = " in owning and "as Beam's coder delivers them) = " in views
    assert not checks.metric_bytes(subject).passed
    assert _ids("handler_num_bytes", subject) == _ids("beam_metric_bytes", subject) == {"tf-numpy-num-bytes"}


def test_tensorrt_num_bytes():
    from apache_beam.ml.inference.tensorrt_inference import TensorRTEngineHandlerNumPy

    def factory(min_batch_size, max_batch_size):  # get_num_bytes needs no engine, no GPU
        return TensorRTEngineHandlerNumPy(min_batch_size=min_batch_size, max_batch_size=max_batch_size,
                                          engine_path="unused.plan")

    spec = toy_spec(inputs={"x": ((-1, 4), "float32", (-1.0, 1.0))}, beam={"handler": "m:trt"})
    subject = HandlerUnderTest(spec, factory, None, ["y"])
    assert "= 16, not the 64 bytes" in direct.num_bytes(subject).failures[0]
    assert _ids("handler_num_bytes", subject) == {"trt-num-bytes"}
    assert "trt-aliased-outputs" in _ids("handler_results_stable", subject)


def test_every_handler_meets_the_beam_level_defects(toy_onnx_path):
    subject = _unreferenced(toy_spec(beam={"handler": "m:f"}), functools.partial(toys.correct, toy_onnx_path))
    assert "BatchElements.__init__() got an unexpected keyword argument 'max_batch_weight'" in \
        checks.batch_weight(subject).failures[0]
    assert _ids("beam_batch_weight", subject) == {"beam-max-batch-weight"}
    assert _ids("beam_maybe_keyed_mixed", subject) == {"beam-maybe-keyed-mixed"}
    assert not _ids("beam_maybe_keyed_mixed", _unreferenced(toy_spec(max_batch=1, beam={"handler": "m:f"}),
                                                            subject.factory))


def test_split_fails_a_teams_handler_defect_and_keeps_beam_level_and_its_own_as_xfail(tmp_path):
    first, weight = (next(e for e in KNOWN if e.id == i) for i in ("onnx-numpy-first-output", "beam-max-batch-weight"))
    assert expectations.split([first, weight], bundled=True) == ([first, weight], [])
    assert expectations.split([first, weight], bundled=False) == ([weight], [first])  # Beam's own: no handler avoids it
    (tmp_path / "expectations.toml").write_text(
        '[[expectations]]\nid = "ours"\nchecks = ["beam_pairing"]\nbeam = ">=0"\nreaches = "method:get_num_bytes"\n'
        'defect = "m:f"\nupstream = "x.py:1"\nreason = "r"\nissue = "apache/beam#1"\n')
    (ours,) = [e for e in expectations_for(tmp_path / "parity.toml") if e.own]
    assert expectations.split([ours], bundled=False) == ([ours], []) and "apache/beam#1" in ours.describe()


def test_one_reader_for_both_tables(tmp_path):
    from paritygate.models.known import load_known_failures, read_expectations

    path = tmp_path / "expectations.toml"
    path.write_text('[[known_failures]]\nmodel = "m"\ncheck = "beam_pairing"\nreason = "r"\n'
                    'upstream_defect = "onnx-numpy-first-output"\n')
    assert [e["model"] for e in load_known_failures(tmp_path / "parity.toml")] == ["m"]
    path.write_text(path.read_text().replace("onnx-numpy-first-output", "no-such-defect"))
    with pytest.raises(ExpectationError, match="'upstream_defect': 'no-such-defect' is no known upstream defect"):
        load_known_failures(tmp_path / "parity.toml")
    path.write_text('[[expectations]]\nid = "x"\nchecks = "beam_pairing"\nbeam = ">=0"\nreaches = "beam"\n'
                    'upstream = "a.py:1"\nreason = "r"\n')
    with pytest.raises(ExpectationError, match=r"expectations\[0\] \('x'\): key 'checks': expected a list of strings"):
        read_expectations(path)
    path.write_text('[[known_failure]]\nmodel = "m"\n')
    with pytest.raises(ExpectationError, match=r"unknown table\(s\) \['known_failure'\]"):
        read_expectations(path)
