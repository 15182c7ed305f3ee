"""Repository-level conftest: the plugin itself comes in through the ``pytest11`` entry point (which also
registers the Hypothesis profiles dev / ci / nightly, chosen by HYPOTHESIS_PROFILE)."""

try:
    import paritygate.plugin  # noqa: F401
except ImportError:  # pragma: no cover - the plugin is not installed: `pip install -e .`
    raise SystemExit("paritygate is not installed: run `pip install -e '.[cpu]'` from the repository root")
