"""Conformance tests: every test takes ``parity_model`` or ``parity_case`` and becomes one report check."""

import pytest


def pytest_collection_modifyitems(config, items):
    """A model without a ``[models.beam]`` table gets one row, ``beam_handler`` (a skip that says so), instead of
    a skip per RunInference check; a model with one runs the checks and has no such row."""
    selected, deselected = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        spec = params.get("parity_model")
        needs_handler = "beam_subject" in getattr(item, "fixturenames", ())
        placeholder = getattr(item, "originalname", None) == "test_beam_handler"
        drop = spec is not None and ((needs_handler and not spec.beam) or (placeholder and spec.beam))
        (deselected if drop else selected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


@pytest.fixture(autouse=True)
def _one_fail_per_faulty_file(request):
    """A candidate file found wrong before it runs (``CandidateFault``: a team's fp16 file that rounds an index, a
    file TensorRT's builder rejects) is one ``fail``, in the first check that met it; the later checks of that
    model x precision skip, naming it."""
    if "parity_case" not in request.fixturenames:
        yield
        return
    ctx, (spec, precision) = request.getfixturevalue("parity_context"), request.getfixturevalue("parity_case")
    from paritygate.backend.base import CandidateFault
    from paritygate.backend.engines import FAILED_CANDIDATES
    from paritygate.common.memo import ArtifactKey

    key = ArtifactKey(ctx.runtime, spec.name, precision)
    fault = FAILED_CANDIDATES.peek(ctx, key)
    if isinstance(fault, CandidateFault) and getattr(fault, "failed_check", None):
        pytest.skip(f"the {precision} candidate is wrong: {fault.failed_check} failed with it "
                    f"({str(fault).split(': ', 3)[-1][:160]}...)")
    yield
    fault = FAILED_CANDIDATES.peek(ctx, key)
    if isinstance(fault, CandidateFault) and not getattr(fault, "failed_check", None):
        fault.failed_check = request.node.originalname.removeprefix("test_")
