"""One-pass FP16 rounding for strict artifacts on ONNX Runtime's CPU provider (docs/numerics.md, "Cost").

A strict artifact rounds a tensor to FP16 with a Cast pair, float -> float16 -> float. ONNX Runtime runs the pair as
two kernels, the first on one thread (what that costs is measured in docs/numerics.md, "What the cost is made of"). ``Round16``
(``round16.c``, an ONNX Runtime custom-op library) gives the pair's values, bit for bit, in one kernel on the
intra-op threads; ``fuse`` puts one in place of each pair.

``library()`` compiles it on first use with the system's C compiler (``$CC``, else ``cc``), into the artifact
cache under this CPU's feature flags, and runs it on a probe against the Cast pair before anything uses it. Without
a compiler, or when the probe differs, it returns None with one line on stderr, and a strict artifact keeps its
Cast pairs: the same values, slower.
"""

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from paritygate.backend.onnx.graph import scopes
from paritygate.backend.onnx.graph.dtypes import FLOAT, FLOAT16
from paritygate.backend.onnx.graph.names import fresh_name, tensor_names
from paritygate.lazy import lazy_import

np = lazy_import("numpy")
onnx = lazy_import("onnx")
ort = lazy_import("onnxruntime")

DOMAIN, OP = "paritygate", "Round16"
SOURCE = Path(__file__).with_name("round16.c")


@functools.cache
def library():
    """The compiled ``Round16`` library (a path), or None where it cannot be built or fails its probe."""
    from paritygate.backend.cache import cached_file, cpu_flags, hash_path, key_of

    cc = os.environ.get("CC") or "cc"
    try:
        if not shutil.which(cc):
            raise OSError(f"no C compiler: {cc!r} is not on PATH (set $CC)")
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
        key = key_of(src=hash_path(SOURCE), cc=version, cpu=cpu_flags())
        built = cached_file("native", f"round16-{key}", ".so", lambda out: _compile(cc, out))
        if mismatches := _probe(built):
            raise ValueError(f"it differs from ONNX Runtime's Cast pair on {mismatches} probe values")
    except Exception as err:  # noqa: BLE001 - a speed-up only: the Cast pairs give the same values
        print(f"paritygate: {SOURCE.name}: not used ({type(err).__name__}: {str(err)[:300]}); strict artifacts "
              "keep their Cast pairs (the same values, slower)", file=sys.stderr)
        return None
    return built


def _compile(cc, out, source=SOURCE):
    cmd = [cc, "-O2", "-march=native", "-std=gnu11", "-shared", "-fPIC", "-o", str(out), str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise OSError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return {"command": cmd}


def probe_values():
    """float32 values whose FP16 rounding a wrong kernel would get wrong: every sign, exponent and leading mantissa
    bits (the upper 16 bits of the pattern) with low bits that sit on, just under and just over a tie of FP16's
    normal and subnormal ranges, and inf, NaN, 65504 and 65520 (the first value that rounds to inf)."""
    upper = np.arange(1 << 16, dtype=np.uint32) << 16
    low = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    bits = (upper[:, None] | low[None, :]).ravel()
    edges = np.array([np.inf, -np.inf, np.nan, 65504, 65519.996, 65520, 2.0**-24, 2.0**-25, 1 + 2.0**-11], np.float32)
    return np.concatenate([bits.view(np.float32), edges])


def cast_pair_model(nodes=None):
    """A one-input model y = round16(x) over float32 vectors: the Cast pair, or ``nodes``."""
    helper, T = onnx.helper, onnx.TensorProto
    nodes = nodes or [helper.make_node("Cast", ["x"], ["h"], to=T.FLOAT16), helper.make_node("Cast", ["h"], ["y"], to=T.FLOAT)]
    graph = helper.make_graph(nodes, "round16", [helper.make_tensor_value_info("x", T.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    model.ir_version = 9
    return model.SerializeToString()


def sessions(lib):
    """ONNX Runtime sessions of the Cast pair and of ``Round16`` from ``lib``."""
    from paritygate.backend.onnxrt.options import session_options

    fused = cast_pair_model([onnx.helper.make_node(OP, ["x"], ["y"], domain=DOMAIN)])
    return (ort.InferenceSession(cast_pair_model(), session_options(), providers=["CPUExecutionProvider"]),
            ort.InferenceSession(fused, session_options(library=lib), providers=["CPUExecutionProvider"]))


def mismatches(pair, fused, x):
    """How many of ``x`` the two sessions round differently (NaN and NaN agree)."""
    a, b = pair.run(None, {"x": x})[0], fused.run(None, {"x": x})[0]
    return int((~((a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b)))).sum())


def _probe(lib):
    return mismatches(*sessions(lib), probe_values())


def fuse(model, types):
    """Put one ``Round16`` in place of each Cast(float16) -> Cast(float) pair of ``model``'s top-level graph that
    reads a float32 tensor (``types``: element types by tensor name, ``onnx.TensorProto`` codes) and whose float16
    tensor nothing else reads. In place; the caller registers ``library()``. Returns how many."""
    graph = model.graph
    readers, outputs = scopes.readers(graph), {o.name for o in graph.output}
    pairs = {}  # the second Cast's id -> the first Cast
    for n in graph.node:
        reads = readers.get(n.output[0], []) if n.op_type == "Cast" and _to(n) == FLOAT16 else []
        if (types.get(n.input[0]) == FLOAT and n.output[0] not in outputs and len(reads) == 1
                and reads[0][0] is not None and reads[0][0].op_type == "Cast" and _to(reads[0][0]) == FLOAT):
            pairs[id(reads[0][0])] = n
    if not pairs:
        return 0
    firsts, taken = {id(n) for n in pairs.values()}, tensor_names(model)
    nodes = [onnx.helper.make_node(OP, [pairs[id(n)].input[0]], [n.output[0]], domain=DOMAIN,
                                   name=fresh_name(f"{n.name or n.output[0]}__{OP}", taken))
             if id(n) in pairs else n for n in graph.node if id(n) not in firsts]
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    return len(pairs)


def _to(node):
    return next((a.i for a in node.attribute if a.name == "to"), None)
