"""Strict numerics: an fp16 / int8 artifact computed as a strongly typed engine computes it (docs/numerics.md).

``loader`` is the one entry point (``computed``: an artifact -> the file ONNX Runtime runs and its session settings).
Behind it: ``rewrite`` (every float16 tensor rounded to FP16 where it is produced), ``fusion`` (the engine model's
fused kernels, whose interior is not rounded), and the CPU twin that gives the same values faster: ``twin`` (built
from ``nchwc``, roundings moved into ONNX Runtime's blocked layout, and ``round16``, one kernel per Cast pair,
``round16.c``)."""
