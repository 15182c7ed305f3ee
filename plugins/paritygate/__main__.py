"""``python -m paritygate``: the ``paritygate`` command."""

import sys

from paritygate.cli.main import main

sys.exit(main())
