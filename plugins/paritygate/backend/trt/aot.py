"""TensorRT-RTX's builder in the loop: every candidate ONNX built ahead of time, on a machine with no GPU.

TensorRT for RTX (``pip install 'paritygate[trt-rtx]'``: NVIDIA's ``tensorrt-rtx`` wheels) has TensorRT's ONNX parser
(onnx-tensorrt) and builder, and builds engines with no GPU present ("CPU-only AOT", its docs). So before any
numeric check of a precision, the suite asks the real parser and builder whether the artifact can become an engine
(``backend.runtimes``): a parse or build error is the candidate's ``fail`` (the team's own file) or the suite's
``error`` (a file the suite built), with the parser's message, node and op. A build that succeeds yields the engine's
layer report (each kernel, the ONNX nodes fused into it, its tensors' datatypes), the builder's warnings (findings)
and the engine-side precision coverage (``layers.coverage``).

TensorRT-RTX is not TensorRT 11: every result names the builder and version that produced it, and TensorRT 11's own
parser may accept or reject differently. Its runtime runs on compute capability 8.0, 8.6, 8.9 and 12.x (7.5 when built
for it); nothing here runs an engine.

Builds run in a child process (``python -m paritygate.backend.trt.aot --serve``): Polygraphy binds its TensorRT
loaders to one module per process (``POLYGRAPHY_USE_TENSORRT_RTX`` is read when Polygraphy is imported, and a GPU run
of the same process uses ``tensorrt``), and a builder that crashes or hangs must not take pytest with it. One child
serves every build of the process, one request at a time (``_Builder``): starting Python with TensorRT-RTX and
Polygraphy took longer than building a bundled model (docs/measured.md). A child that crashed or hung is ended, and the
next build starts a new one. Reports are cached by the ONNX bytes' hash, the builder's version and the settings: a
warm run starts no child.
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

from paritygate.backend.trt import layers

MODULE = "tensorrt_rtx"
ENV = "POLYGRAPHY_USE_TENSORRT_RTX"
BUILD = "aot-v3"  # part of the cache key: bump when the request or the report changes (v3: error.cannot_run, error.code)
TIMEOUT_S = 600  # one build; the bundled models build in 0.1-1.1 s each (docs/engine.md)
TARGETS = "8.0, 8.6, 8.9, 12.x (the builder's default portable set)"


def missing_reason():
    """None when TensorRT-RTX's builder and Polygraphy import here; else what to install."""
    from paritygate.lazy import available

    missing = [name for name in (MODULE, "polygraphy") if not available(name)]
    if not missing:
        return None
    return f"{' and '.join(missing)} not installed (pip install 'paritygate[trt-rtx]')"


def version():
    """The installed TensorRT-RTX wheel's version (read without importing it), or None."""
    from paritygate.lazy import dist_version

    return dist_version("tensorrt_rtx") or dist_version("tensorrt-rtx")


def builder_name():
    """'TensorRT-RTX 1.7.1.116'."""
    return f"TensorRT-RTX {version()}"


def _child(*args):
    """Run this module in a child process bound to TensorRT-RTX (``ENV``); raises ``subprocess.TimeoutExpired``."""
    return subprocess.run([sys.executable, "-m", "paritygate.backend.trt.aot", *args], check=False,
                          env={**os.environ, ENV: "1"}, capture_output=True, text=True, timeout=TIMEOUT_S)


def engine_report(onnx_path, settings):
    """The builder's verdict on the ONNX file ``onnx_path`` built with ``settings`` (``trt.util.build_settings``):
    {"builder", "built", "error" (parser/builder message, node, op), "warnings", "layers", "seconds", "plan"}.
    Cached; raises ``RuntimeError`` when the builder itself could not be run (the suite's error, not the candidate's)."""
    from paritygate.backend.cache import cache_root, hash_path, key_of

    onnx_path = Path(onnx_path)
    key = key_of(onnx=hash_path(onnx_path), builder=builder_name(), build=BUILD, settings=settings)
    folder = cache_root() / "trt-rtx"
    report_file = folder / f"{onnx_path.stem[:60]}-{key}.json"
    if report_file.is_file():
        return json.loads(report_file.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    request = folder / f".{key}-{os.getpid()}.request.json"
    request.write_text(json.dumps({"onnx": str(onnx_path), "settings": settings, "report": str(report_file),
                                   "plan": str(report_file.with_suffix(".plan"))}))
    try:
        with _LOCK:
            _builder().ask(request, onnx_path)
    finally:
        request.unlink(missing_ok=True)
    if not report_file.is_file():
        raise RuntimeError(f"{builder_name()} wrote no report building {onnx_path}")
    return json.loads(report_file.read_text())


_BUILDER = []  # this process's build child, started by the first build that misses the cache
_LOCK = threading.Lock()  # one request at a time on its pipes


def _builder():
    """This process's build child; a new one where it ended (or was started by the process this one forked from)."""
    if not _BUILDER or _BUILDER[0].child.poll() is not None or _BUILDER[0].pid != os.getpid():
        _BUILDER[:] = [_Builder()]
    return _BUILDER[0]


class _Builder:
    """The child process (``--serve``) that builds each request it reads, one path a line on its stdin, and writes
    the same line back on its stdout when the request's report is written."""

    def __init__(self):
        self.pid = os.getpid()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the child's stderr while it lives; end_child closes it
        self.child = subprocess.Popen([sys.executable, "-m", "paritygate.backend.trt.aot", "--serve"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                      env={**os.environ, ENV: "1"})
        from paritygate.backend.tf.process import end_child

        self.end = weakref.finalize(self, end_child, self.child, self.log)  # at the latest when the process ends

    def ask(self, request, onnx_path):
        """Return once the child answered ``request`` (building ``onnx_path``); else end it and raise
        ``RuntimeError`` saying why: it hung or it crashed, with the last lines it wrote."""
        try:
            self.child.stdin.write(f"{request}\n".encode())
            self.child.stdin.flush()
            ready = select.select([self.child.stdout], [], [], TIMEOUT_S)[0]
            answer = self.child.stdout.readline() if ready else None
        except OSError:
            answer = b""
        if answer:
            return
        if answer is None:
            self.end()
            raise RuntimeError(f"{builder_name()} did not finish building {onnx_path} in {TIMEOUT_S} s")
        code = self.child.wait()
        self.log.seek(0)
        tail = self.log.read().decode(errors="replace").strip().splitlines()[-3:]
        self.end()
        raise RuntimeError(f"{builder_name()} crashed building {onnx_path} (exit {code}): {' | '.join(tail)[:600]}")


# -- the child ----------------------------------------------------------------------------------------
def _build(onnx_path, settings, plan):
    """Parse and build with Polygraphy's TensorRT loaders bound to TensorRT-RTX; the report (see engine_report)."""
    import tensorrt_rtx as trt
    from polygraphy.backend import trt as pg_trt
    from polygraphy.backend.tensorrt_rtx import CreateConfigRTX
    from polygraphy.logger import G_LOGGER

    from paritygate.backend.trt import util

    logger = util.trt_logger(record=True)
    for kept in (logger.errors, logger.warnings, logger.verbose, logger.recent):
        kept.clear()  # the messages of this build alone (the child builds one request after another)
    profile = pg_trt.Profile()
    for name, (low, opt, high) in settings["profile"].items():
        profile.add(name, min=tuple(low), opt=tuple(opt), max=tuple(high))
    start = time.perf_counter()
    network = pg_trt.NetworkFromOnnxPath(str(onnx_path), strongly_typed=True)
    config = CreateConfigRTX(profiles=[profile], profiling_verbosity=trt.ProfilingVerbosity.DETAILED)
    report = {"builder": f"TensorRT-RTX {trt.__version__}", "targets": TARGETS, "built": False, "error": None}
    try:
        with G_LOGGER.verbosity(G_LOGGER.CRITICAL):
            data = pg_trt.EngineBytesFromNetwork(network, config=config)()
    except Exception as err:  # noqa: BLE001 - Polygraphy raises PolygraphyException; the bindings their own
        codes = {int(v): k for k, v in trt.ErrorCode.__members__.items()}  # the parser's own names (8: UNSUPPORTED_NODE)
        report["error"] = layers.parse_error(logger.errors, str(err), codes)
    else:
        Path(plan).write_bytes(bytes(data))
        report.update(built=True, plan=str(plan), bytes=Path(plan).stat().st_size)
    report.update(seconds=round(time.perf_counter() - start, 3), warnings=layers.warnings(logger.warnings),
                  layers=layers.parse_layers(logger.verbose))
    return report


def runtime_refusal():
    """None when TensorRT-RTX's runtime accepts this machine's GPU, else its own words: a child process builds a
    one-layer engine and deserializes it (``--parity-runtime=tensorrt-rtx``; its runtime refuses compute capability
    9.0, the H100 and H200, for example)."""
    try:
        done = _child("--probe")
    except subprocess.TimeoutExpired:
        return f"{builder_name()}'s runtime did not answer a one-layer engine in {TIMEOUT_S} s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return f"{builder_name()}'s runtime probe crashed (exit {done.returncode}): {done.stderr.strip()[-400:]}"
    said = json.loads(lines[-1])
    return None if said["ok"] else f"{builder_name()}'s runtime refuses this GPU: {said['message']}"


def _probe():
    import onnx
    import tensorrt_rtx as trt

    from paritygate.backend.trt import util

    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "probe",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    logger = util.trt_logger(record=True)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    trt.OnnxParser(network, logger).parse(model.SerializeToString())
    plan = builder.build_serialized_network(network, builder.create_builder_config())
    try:
        engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
        ok = engine is not None and engine.create_execution_context() is not None
    except Exception as err:  # noqa: BLE001 - the bindings raise their own types; the message is the answer
        logger.errors.append(f"{type(err).__name__}: {err}")
        ok = False
    return {"ok": ok, "message": " ".join(logger.errors)[-600:] or "no engine and no message"}


def _serve():
    """The build child's loop: each line of stdin names a request file; its report is written, then the line is
    echoed on a private copy of stdout (the libraries' own prints go to stderr and cannot corrupt the protocol)."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    for line in sys.stdin.buffer:
        _answer(Path(line.decode().strip()))
        channel.write(line)
        channel.flush()


def _answer(request_file):
    request = json.loads(request_file.read_text())
    report = _build(request["onnx"], request["settings"], request["plan"])
    out = Path(request["report"])
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    os.replace(tmp, out)


def main(argv=None):
    argv = argv or sys.argv
    if argv[1] == "--probe":
        print(json.dumps(_probe()))
    elif argv[1] == "--serve":
        _serve()
    else:
        _answer(Path(argv[1]))


if __name__ == "__main__":
    main()
