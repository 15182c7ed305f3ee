"""Strict numerics' one entry point: an artifact in, what ONNX Runtime runs for it out (docs/numerics.md). A loader
step in Polygraphy's sense: it builds and caches files; the runner opens the file it is given with the options it
is given, and knows nothing of strict numerics.

- ``strict_onnx``: an artifact that holds float16 tensors becomes its strict rewrite (``rewrite.emulate``, with the
  engine model's fused kernels, ``fusion``); any other artifact stays itself (an FP32 or a float32 Q/DQ artifact:
  ONNX Runtime computes it as typed; strict INT8 is a session option, ``backend.onnxrt.options``, ``fake_quant``).
- ``computed``: under ``--parity-numerics=strict`` that file and, for ONNX Runtime's CPU provider, its twin
  (``twin.runnable``: the same values bit for bit, fewer and cheaper kernels) with the session settings it needs.
"""

from dataclasses import dataclass
from pathlib import Path

from paritygate.backend.onnx.strict import rewrite
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")


@dataclass(frozen=True)
class Computed:
    """What ONNX Runtime runs for an artifact. ``artifact``: the file the checks judge and name (the strict
    rewrite, or the artifact itself); ``path``: the file a session opens (``artifact``, or its twin);
    ``level``: the graph optimization level to open it at (None: ONNX Runtime's default); ``library``: the
    custom-op library it needs (``round16.library()``; None: none)."""

    artifact: Path
    path: Path
    level: object = None
    library: Path | None = None


def computed(artifact, numerics="strict", twin=False):
    """What ONNX Runtime runs for the ONNX file ``artifact`` under ``numerics`` (``--parity-numerics``): under
    ``strict``, ``strict_onnx(artifact)``; ``twin``: the session runs on ONNX Runtime's CPU provider alone, so the
    strict rewrite's twin stands in for it (the other providers run the strict rewrite as it is)."""
    path = Path(artifact)
    if numerics != "strict":
        return Computed(path, path)
    strict = strict_onnx(path)
    if not twin or strict == path:
        return Computed(strict, strict)
    from paritygate.backend.onnx.strict import twin as twins

    opened, level, library = twins.runnable(strict)
    return Computed(strict, Path(opened), level, library)


def strict_onnx(path, defer=True):
    """The strict artifact for the ONNX file ``path`` (built once, cached by content hash), or ``path`` itself
    when it holds no float16 tensor (an FP32 or a float32 Q/DQ artifact: ONNX Runtime computes it as typed).
    ``defer=False``: no rounding moved past Relu / Clip (the same values; tests compare the two)."""
    from paritygate.backend.cache import cached_file, hash_path, key_of
    from paritygate.backend.onnx.artifacts import validate
    from paritygate.lazy import dist_version

    path = Path(path)
    source = onnx.load(str(path))
    if not rewrite.float16_tensors(source):
        return path
    key = key_of(src=hash_path(path), onnx=dist_version("onnx"), build=rewrite.BUILD, defer=defer)

    def build(out):
        model, report = rewrite.emulate(source, defer)
        validate.check_graph(model, "paritygate strict FP16 emulation", path=path)
        onnx.save(model, str(out))
        return {**report, "source": str(path)}

    return cached_file("onnx", f"{path.stem}-strict{'' if defer else '-nodefer'}-{key}", ".onnx", build)
