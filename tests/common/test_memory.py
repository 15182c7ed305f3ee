"""paritygate.common.memory: freed C heap pages go back to the system."""

import platform

import numpy as np

from paritygate.common.memory import trim


def _rss_mib():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def test_trim_gives_freed_heap_pages_back():
    """Many small arrays (under malloc's mmap threshold: they come from the heap) freed but for the last one, which
    pins the heap's top: the pages stay resident until ``trim``."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        assert trim() in (True, False)
        return
    chunks = [np.ones(16_000) for _ in range(4000)]  # 128 KB each, 0.5 GB in all
    keep = chunks[-1]
    del chunks
    before = _rss_mib()
    assert trim() is True
    assert _rss_mib() < before - 200, "freed heap pages returned"
    assert keep.sum() == 16_000
