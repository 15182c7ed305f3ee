"""The plugin registers the Hypothesis profiles itself (dev / ci / nightly, chosen by HYPOTHESIS_PROFILE): a
project that installs paritygate gets them without this repository's conftest.py."""

import pytest


def test_a_project_without_our_conftest_gets_the_profiles(pytester, monkeypatch):
    pytest.importorskip("hypothesis")
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    pytester.makepyfile(test_profiles="""
        from hypothesis import settings

        def test_profile():
            assert settings().derandomize and settings().max_examples == 25
            assert settings.get_profile("nightly").max_examples == 400
            assert settings.get_profile("dev").max_examples == 10
    """)
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
