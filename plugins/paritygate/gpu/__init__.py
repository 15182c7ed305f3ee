"""The CUDA device probe, the GPU fixtures and what they measure with (CUDA events, free memory)."""
