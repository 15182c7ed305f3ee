"""What ONNX Runtime's CPU provider runs for a strict artifact: its twin, the same values with fewer and cheaper
kernels (docs/numerics.md, "Cost").

The twin is the strict artifact as ONNX Runtime optimizes it (``ORT_ENABLE_ALL``), saved, and then:

- its roundings and residual Adds moved into the blocked NCHWc layout of its convolutions (``nchwc.move``);
- each Cast pair of the strict rewrite made one ``Round16`` kernel (``round16.fuse``), where ``round16.library()``
  could be built here.

ONNX Runtime runs the twin with its optimizations off: the optimized graph is what it would have run. Its values are
the strict artifact's, bit for bit, NaN where NaN (tests/backend/onnx/strict/test_twin.py, at every session setting the
suite uses, on overflows too; tests/backend/onnx/strict/test_cost.py on the goldens).

The saved graph holds this CPU's layout and kernels, so it is cached under this CPU's feature flags and ONNX
Runtime's version, never shared with another kind of machine. A build that fails leaves the strict artifact to run
as it is, with one line on stderr.
"""

import json
import sys
from pathlib import Path

from paritygate.backend.onnx.strict import nchwc, round16
from paritygate.backend.onnxrt.options import session_options
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")
ort = lazy_import("onnxruntime")

BUILD = "strict-twin-v4"  # part of the cache key: bump when the twin changes


def runnable(path):
    """(file, optimization level, custom-op library) for ONNX Runtime's CPU provider to run the strict artifact
    ``path``: its twin, with optimizations off (``ORT_DISABLE_ALL``) and ``round16.library()`` where the twin uses
    it; (``path``, None, None) where nothing changed."""
    from paritygate.backend.cache import cached_file, cpu_flags, hash_path, key_of, report_path

    path = Path(path)
    library = round16.library()
    if library is None and not any(n.op_type == "Conv" for n in onnx.load(str(path), load_external_data=False).graph.node):
        return path, None, None  # nothing to fuse, nothing to move
    key = key_of(src=hash_path(path), ort=ort.__version__, cpu=cpu_flags(), build=BUILD,
                 round16=library and library.name)
    try:
        target = cached_file("onnx", f"{path.stem}-twin-{key}", ".onnx",
                             lambda out: _build(path, onnx.load(str(path)), out, library))
        report = json.loads(report_path(target).read_text())
    except Exception as err:  # noqa: BLE001 - a speed-up only: the strict artifact gives the same values
        print(f"paritygate: {path}: its twin could not be built ({type(err).__name__}: {str(err)[:300]}); "
              "ONNX Runtime runs the strict artifact as it is", file=sys.stderr)
        return path, None, None
    if not (report["moved"] or report["fused"]):
        return path, None, None
    return target, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, library if report["fused"] else None


def _build(path, source, out, library):
    """``source``: the strict artifact, loaded; ``library``: ``round16.library()`` or None."""
    shapes, types = _inferred(source)  # before Round16: ONNX's shape inference cannot see past it
    fused = round16.fuse(source, types) if library else 0
    options = session_options(level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL, library=library)
    options.optimized_model_filepath = str(out)
    # the file itself where nothing was fused (a model over protobuf's 2 GiB keeps its external data)
    ort.InferenceSession(source.SerializeToString() if fused else str(path), options, providers=["CPUExecutionProvider"])
    model = onnx.load(str(out))
    report = nchwc.move(model, shapes)
    onnx.save(model, str(out))
    return {**report, "fused": fused, "build": BUILD, "source": str(path), "onnxruntime": ort.__version__}


def _inferred(model):
    """({tensor: shape}, {tensor: element type}) of ``model``'s top-level graph, as ONNX's inference sees them."""
    graph = onnx.shape_inference.infer_shapes(model).graph
    values = [*graph.value_info, *graph.input, *graph.output]
    return ({v.name: tuple(d.dim_param or d.dim_value or None for d in v.type.tensor_type.shape.dim)
             for v in values if v.type.tensor_type.HasField("shape")},
            {**{v.name: v.type.tensor_type.elem_type for v in values}, **{t.name: t.data_type for t in graph.initializer}})
