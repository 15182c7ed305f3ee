"""fixtures/zoo_handlers.py: the bundled models' factories return Beam's ONNX handler or the suite's own TF
handler (paritygate.beam.tf_handler: Beam's imports tensorflow_hub), and the other handler for each
single-input model (TF on .keras, ONNX) is conformant but for its known upstream defects."""

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")

from paritygate.beam import checks, direct
from paritygate.beam.expectations import expectations_for, match

pytestmark = [pytest.mark.beam, pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]


@pytest.fixture(scope="module")
def zoo(parity_options):
    if not parity_options.is_bundled:
        pytest.skip("the zoo handlers belong to the bundled config")
    specs = {m.name: m for m in parity_options.models}
    from paritygate.beam.contract import handler_import_path

    with handler_import_path(parity_options.config_path.parent):  # as the config's named handlers are imported
        import zoo_handlers  # beside fixtures/parity.toml

    return specs, zoo_handlers


def _subject(parity_options, spec, factory):
    from paritygate.backend.runtimes import reference_runner
    from paritygate.beam.contract import HandlerUnderTest

    return HandlerUnderTest.from_spec(spec, reference_runner(parity_options.context, spec), factory=factory)


def test_the_configured_factories_return_beams_onnx_or_the_suites_tf_handler(zoo):
    from apache_beam.ml.inference.onnx_inference import OnnxModelHandlerNumpy

    from paritygate.beam.tf_handler import TFNumpyHandler

    specs, handlers = zoo
    made = {name: getattr(handlers, name)(min_batch_size=2, max_batch_size=3) for name in specs}
    assert type(made["linear"]) is OnnxModelHandlerNumpy and type(made["ssd"]) is OnnxModelHandlerNumpy
    assert type(made["mobilenet"]) is TFNumpyHandler and type(made["bert"]) is TFNumpyHandler
    assert all(h.batch_elements_kwargs() == {"min_batch_size": 2, "max_batch_size": 3} for h in made.values())
    assert {m.beam["handler"] for m in specs.values()} == {f"zoo_handlers:{n}" for n in specs}


@pytest.mark.parametrize("model,factory", [("linear", "linear_keras"), ("mobilenet", "mobilenet_onnx"),
                                           ("ssd", "ssd_keras")])
def test_the_other_beam_handler_fails_only_where_expected(parity_options, zoo, model, factory):
    specs, handlers = zoo
    subject = _subject(parity_options, specs[model], getattr(handlers, factory))
    known = expectations_for()
    for name, check in {**checks.PIPELINE_CHECKS, **direct.DIRECT_CHECKS}.items():
        result, expected = check(subject), match(name, subject, known)
        assert result.passed != bool(expected), (name, result.failures, [e.id for e in expected])


@pytest.mark.parametrize("model", ["linear", "mobilenet", "bert", "ssd"])
def test_the_suites_own_onnxruntime_handler_passes_every_check(parity_options, zoo, model):
    """paritygate.beam.handlers:onnxruntime on the model's own candidate ONNX: only Beam's own defects (reached by
    every handler: max_batch_weight, mixed MaybeKeyed batches) remain, as strict xfails. The multi-process runner
    (two SDK worker processes a pipeline, 2-5 s; beam_model_copies runs two such pipelines) runs on one model, bert
    (two inputs, the dict path): pickling the handler, loading its session in a worker and counting its loads do not
    depend on the model, and the conformance suite runs beam_multi_process and beam_model_copies on every bundled
    model with its configured handler."""
    from paritygate.beam.copies import model_copies
    from paritygate.beam.handlers import onnxruntime
    from paritygate.beam.multiprocess import multi_process
    from paritygate.beam.updates import model_update

    specs, _ = zoo
    subject = _subject(parity_options, specs[model], onnxruntime)
    known = expectations_for()
    every = {**checks.PIPELINE_CHECKS, **direct.DIRECT_CHECKS, "beam_model_update": model_update,
             **({"beam_multi_process": multi_process, "beam_model_copies": model_copies} if model == "bert" else {})}
    for name, check in every.items():
        result, expected = check(subject), match(name, subject, known)
        assert all(not e.in_handler for e in expected), (name, [e.id for e in expected])
        assert result.passed != bool(expected), (name, result.failures, [e.id for e in expected])
