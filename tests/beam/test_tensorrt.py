"""TensorRTEngineHandlerNumPy (Beam 2.77) on engines built from the zoo's fp32 ONNX: every check passes or
fails exactly as fixtures/expectations.toml says (static-shape buffers, first input only, aliased outputs,
itemsize byte counts). Needs a GPU with TensorRT: skipped with the plugin's reason elsewhere."""

import pytest

pytestmark = [pytest.mark.beam, pytest.mark.trt, pytest.mark.gpu, pytest.mark.onnx, pytest.mark.tf,
              pytest.mark.slow]


@pytest.mark.parametrize("model", ["linear", "bert"])
def test_tensorrt_handler_fails_only_where_expected(parity_options, model):
    pytest.importorskip("apache_beam")
    if not parity_options.is_bundled:
        pytest.skip("the zoo handlers belong to the bundled config")
    from paritygate.backend.runtimes import reference_runner
    from paritygate.beam import checks, direct
    from paritygate.beam.contract import HandlerUnderTest
    from paritygate.beam.expectations import expectations_for, match

    spec = next(m for m in parity_options.models if m.name == model)
    import zoo_handlers

    subject = HandlerUnderTest.from_spec(spec, reference_runner(parity_options.context, spec),
                                         factory=getattr(zoo_handlers, f"{model}_tensorrt"))
    known = expectations_for()
    for name, check in {**checks.PIPELINE_CHECKS, **direct.DIRECT_CHECKS}.items():
        result, expected = check(subject), match(name, subject, known)
        assert result.passed != bool(expected), (name, result.failures, [e.id for e in expected])
