"""Conformance tests: every test takes ``parity_model`` or ``parity_case`` and becomes one report check."""
