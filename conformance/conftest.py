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
    file TensorRT's builder rejects) is one ``fail``, in the first check that met it; an artifact the suite could
    not make (a conversion that failed: ``ArtifactError``, a suite-built file the builder rejects) is one ``error``
    the same way. The later checks of that model x precision skip, naming it, and so do an fp16 or int8
    candidate's checks when the fp32 conversion it is built from failed (``backend.engines.artifact_failure``)."""
    if "parity_case" not in request.fixturenames:
        yield
        return
    ctx, (spec, precision) = request.getfixturevalue("parity_context"), request.getfixturevalue("parity_case")
    from paritygate.backend.engines import artifact_failure

    fault = artifact_failure(ctx, spec, precision)
    if getattr(fault, "failed_check", None):
        pytest.skip(_said_once(fault, precision))
    yield
    fault = artifact_failure(ctx, spec, precision)
    if _said_once(fault, precision) is not None and not getattr(fault, "failed_check", None):
        fault.failed_check, fault.failed_precision = request.node.originalname.removeprefix("test_"), precision


def _said_once(fault, precision):
    """The skip reason of a later check of a candidate ``fault`` made unusable (None: a fault said every time)."""
    from paritygate.backend.base import CandidateFault
    from paritygate.verdict import SuiteError

    short = str(fault).split(": ", 3)[-1][:160]
    if isinstance(fault, CandidateFault):
        return f"the {precision} candidate is wrong: {getattr(fault, 'failed_check', None)} failed with it ({short}...)"
    if isinstance(fault, SuiteError):
        short = f"known converter gap '{fault.gap}'" if getattr(fault, "gap", None) else f"{str(fault)[:160]}..."
        return (f"the suite could not make the {precision} candidate: {getattr(fault, 'failed_check', None)} "
                f"[{getattr(fault, 'failed_precision', precision)}] erred with it ({short})")
    return None
