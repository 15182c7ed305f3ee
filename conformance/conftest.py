"""Conformance tests: every test takes ``parity_model`` or ``parity_case`` and becomes one report check."""


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
