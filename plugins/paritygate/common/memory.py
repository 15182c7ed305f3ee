"""Giving memory back: after a candidate's ONNX Runtime session, a TensorFlow model or a conversion's graph is
released, the C heap keeps the freed pages (glibc's malloc returns them to the system only from the top of the
heap), so the process's resident memory stays at its high-water mark and the next session's pages come on top.
``trim`` hands the free pages back (``malloc_trim(0)``, glibc only; elsewhere it does nothing).

Measured on MobileNetV2 (alpha 0.35): an ONNX Runtime session of its fp32 / strict fp16 / int8 artifact, run at
batch 1..4 and closed, left the process at 0.085-0.137 GiB where it started at 0.042 GiB, growing with each session
of the fp16 artifact; with ``trim`` after each close it went back to 0.079-0.081 GiB every time (docs/measured.md,
"Real-size models").
"""

import ctypes
import ctypes.util


def trim():
    """Return the C heap's free pages to the system; True when glibc's ``malloc_trim`` ran."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return False
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    libc.malloc_trim(0)
    return True
