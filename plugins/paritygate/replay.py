"""``python -m paritygate.replay REPRODUCER.npz``: replay a saved failing example."""

import sys

from paritygate.reproducer import main

if __name__ == "__main__":
    sys.exit(main())
