"""The plugin orders the run: the parity verdicts first, latency last (issue 30: a team's first run spent 12
minutes in `latency` for a model without a budget before any parity check had run)."""


def test_latency_checks_run_after_every_other_check(pytester):
    pytester.makepyfile(test_order="""
        import pytest

        @pytest.mark.latency
        def test_a_latency():
            pass

        def test_b_parity():
            pass

        @pytest.mark.latency
        def test_c_latency():
            pass

        def test_d_parity():
            pass
    """)
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider")
    ids = [line.split("::")[-1] for line in result.outlines if "::" in line]
    assert ids == ["test_b_parity", "test_d_parity", "test_a_latency", "test_c_latency"], result.outlines
