"""The ``paritygate`` command: ``main`` (run, report), ``init`` (a starter config), ``replay`` (a reproducer)."""
