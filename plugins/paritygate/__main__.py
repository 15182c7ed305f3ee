"""``python -m paritygate``: the ``paritygate`` command."""

import sys

from paritygate.cli import main

sys.exit(main())
