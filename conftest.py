"""Repository-level conftest: the plugin itself comes in through the ``pytest11`` entry point.

Hypothesis profiles (dev / ci / nightly) are registered here once and chosen by HYPOTHESIS_PROFILE.
"""

try:
    from paritygate.strategies import register_profiles
except ImportError:  # pragma: no cover - the plugin is not installed: `pip install -e .`
    raise SystemExit("paritygate is not installed: run `pip install -e '.[cpu]'` from the repository root")

try:
    register_profiles()
except ImportError:
    pass  # hypothesis not installed: property tests skip through pytest.importorskip

