"""Shared fixtures of the suite's own tests: a tiny TF SavedModel, ONNX graphs built with onnx.helper, and
ModelSpecs / config files made in code.

    parity_cache               session-scoped fresh folder; $PARITYGATE_CACHE points at it during the tests using it
    toy_saved_model            session-scoped SavedModel: x float32 [N, 1] in [-1, 1] -> y = 5x, z = 2x
    make_onnx(path, *nodes)    an ONNX model over x float32 [N, 1]; nodes default to y = 5x, z = 2x
    scale(out, k, src="x")     the nodes of out = k * src, for y = 5x variants: make_onnx(p, scale("y", 5.01))
    toy_spec(reference, ...)   a ModelSpec for the toy model without a config file
    write_config(folder, ...)  a parity.toml (inline tables) from nested dicts
"""

import contextlib
import functools
import hashlib
import inspect
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paritygate.models.config import ModelSpec, TensorSpec

OPSET = 17


@pytest.fixture(scope="session")
def parity_cache(tmp_path_factory):
    """The artifact cache of this test session (a fresh folder): converted ONNX is built once per session.
    ``$PARITYGATE_CACHE`` points at it while a test that uses it runs (``_parity_cache_env``); every other test
    uses the default cache, as the README's commands do (it once stayed set for the rest of the worker's session,
    so that whichever tests ran after the first user rebuilt the bundled zoo in a fresh folder: issue 19)."""
    return tmp_path_factory.mktemp("parity-cache")


@pytest.fixture(autouse=True)
def _parity_cache_env(request, monkeypatch):
    if "parity_cache" in request.fixturenames:
        monkeypatch.setenv("PARITYGATE_CACHE", str(request.getfixturevalue("parity_cache")))


@pytest.fixture(autouse=True)
def _smoke_profile_for_inner_runs(request, monkeypatch):
    """A test that runs the suite in a pytester run asserts what that run reports (statuses, report fields,
    reproducers), not the numerics of many draws: its inner run draws under the derandomized ``smoke`` profile
    (issue 19: the suite's own time). A test needing another profile sets HYPOTHESIS_PROFILE itself. Hypothesis'
    loaded profile is put back after the test (an in-process run loads the one it is given). Its inner runs use
    the artifact and reference cache the README's commands use ($PARITYGATE_CACHE, else ~/.cache/paritygate), as
    a team's CI would: pytester points HOME at a fresh folder, and every inner run had rebuilt the bundled zoo and
    recomputed every reference there (the warnings-as-errors test's first run: 4 built, 524 computed, 16.9 s). A
    test that needs a cold cache sets its own (``parity_cache``, or PARITYGATE_CACHE in the test)."""
    if "pytester" not in request.fixturenames:
        yield
        return
    _preload()
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "smoke")
    if "parity_cache" not in request.fixturenames:  # pytester points HOME at a fresh folder: keep the real cache
        from paritygate.backend.cache import cache_root

        monkeypatch.setenv("PARITYGATE_CACHE", str(cache_root()))
    try:
        from hypothesis import settings
    except ImportError:  # the core install: no draws to make
        yield
        return
    before = settings.get_current_profile_name()
    yield
    settings.load_profile(before)


# The modules a Beam pipeline run imports on first use (Beam 2.77: the conformance RunInference checks over the
# bundled models, FnApiRunner and BundleBasedDirectRunner, one and two SDK workers; sys.modules before and after).
# Imported by _preload, an in-process run that runs pipelines drops none of them when pytester restores
# sys.modules (dropped and imported again, they left two copies of one class in the worker).
BEAM_ON_FIRST_USE = (
    "apache_beam.io.fileio", "apache_beam.io.watch", "apache_beam.io.watermark_estimators",
    "apache_beam.ml.inference.onnx_inference", "apache_beam.ml.inference.tensorrt_inference",
    "apache_beam.ml.inference.utils", "apache_beam.runners.direct.consumer_tracking_pipeline_visitor",
    "apache_beam.runners.direct.direct_metrics", "apache_beam.runners.direct.direct_userstate",
    "apache_beam.runners.direct.evaluation_context", "apache_beam.runners.direct.executor",
    "apache_beam.runners.direct.sdf_direct_runner", "apache_beam.runners.direct.test_stream_impl",
    "apache_beam.runners.direct.transform_evaluator", "apache_beam.runners.direct.util",
    "apache_beam.runners.direct.watermark_manager", "apache_beam.runners.job", "apache_beam.runners.job.utils",
    "apache_beam.runners.portability.abstract_job_service", "apache_beam.runners.portability.fn_api_runner",
    "apache_beam.runners.portability.fn_api_runner.execution",
    "apache_beam.runners.portability.fn_api_runner.fn_runner",
    "apache_beam.runners.portability.fn_api_runner.translations",
    "apache_beam.runners.portability.fn_api_runner.watermark_manager",
    "apache_beam.runners.portability.fn_api_runner.worker_handlers", "apache_beam.runners.portability.job_server",
    "apache_beam.runners.portability.local_job_service", "apache_beam.runners.portability.portable_metrics",
    "apache_beam.runners.portability.portable_runner", "apache_beam.runners.worker.bundle_processor",
    "apache_beam.runners.worker.channel_factory", "apache_beam.runners.worker.data_plane",
    "apache_beam.runners.worker.data_sampler", "apache_beam.runners.worker.log_handler",
    "apache_beam.runners.worker.opcounters", "apache_beam.runners.worker.operation_specs",
    "apache_beam.runners.worker.operations", "apache_beam.runners.worker.sdk_worker",
    "apache_beam.runners.worker.sdk_worker_main", "apache_beam.runners.worker.sideinputs",
    "apache_beam.runners.worker.statecache", "apache_beam.runners.worker.worker_id_interceptor",
    "apache_beam.runners.worker.worker_pool_main", "apache_beam.runners.worker.worker_status", "apache_beam.testing",
    "apache_beam.testing.test_stream", "apache_beam.transforms.periodicsequence",
    "apache_beam.typehints.intrinsic_one_ops", "apache_beam.typehints.opcodes", "apache_beam.typehints.typecheck",
    "apache_beam.utils.byte_limited_queue", "apache_beam.utils.profiler", "apache_beam.utils.sentinel",
    "apache_beam.utils.thread_pool_executor", "grpc._interceptor", "grpc._server", "grpc._utilities",
)


@functools.cache
def _preload():
    """Import the frameworks and every paritygate module before a test's pytester takes its snapshot of
    sys.modules (this fixture runs first: autouse), once per process. An in-process run (``pytester.runpytest``)
    then pays no import of its own, and pytester's restore drops nothing: a framework dropped and imported again
    aborts the process (onnx's extension), and paritygate modules would be re-imported by every run; Beam's runner
    modules, imported on first use, are listed in ``BEAM_ON_FIRST_USE``."""
    import importlib
    import pkgutil

    import paritygate

    for name in ("onnx", "onnxruntime", "tensorflow", "tf2onnx", "onnxconverter_common", "apache_beam",
                 "apache_beam.ml.inference.base", "hypothesis", *BEAM_ON_FIRST_USE):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for info in pkgutil.walk_packages(paritygate.__path__, "paritygate."):
        if not info.name.startswith(("paritygate.conformance", "paritygate.fixtures", "paritygate.__main__")):
            with contextlib.suppress(ImportError):
                importlib.import_module(info.name)


# -- TensorFlow ---------------------------------------------------------------------------------------
def save_toy_model(path, y_scale=5.0, z_scale=2.0, signature="serving_default"):
    """Save y = y_scale * x and z = z_scale * x (as MatMuls, so INT8 has something to quantize)."""
    tf = pytest.importorskip("tensorflow")
    module = tf.Module()
    module.w = tf.Variable([[y_scale]], dtype=tf.float32)
    module.v = tf.Variable([[z_scale]], dtype=tf.float32)

    # TF 2.21: decorate a plain function, then attach it to the module (a decorated method fails to save).
    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
    def serve(x):
        return {"y": tf.matmul(x, module.w), "z": tf.matmul(x, module.v)}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={signature: serve})
    return Path(path)


@pytest.fixture(scope="session")
def toy_saved_model(tmp_path_factory):
    """SavedModel dir: signature serving_default, x float32 [N, 1] in [-1, 1] -> y = 5x, z = 2x. The same bytes
    in every xdist worker and every run: saved once under the artifact cache (``tests/toy-<key>``, keyed by
    ``save_toy_model``'s source and TensorFlow's version), then copied. A SavedModel saved again differs in its
    bytes, and the suite caches the toy's conversions and reference outputs by them."""
    from paritygate.backend.cache import cached_dir

    tf = pytest.importorskip("tensorflow")
    key = hashlib.sha256((inspect.getsource(save_toy_model) + tf.__version__).encode()).hexdigest()[:16]
    kept = cached_dir("tests", f"toy-{key}", lambda tmp: save_toy_model(tmp / "saved_model"))  # atomic, race-safe
    return Path(shutil.copytree(kept / "saved_model", tmp_path_factory.mktemp("toy") / "saved_model"))


def embedding_classifier(rows=5000):
    """A Keras 3 classifier over float32 token ids [N, 6] (SentiToolKit 0.1.8's input): Embedding(rows, 4), mean,
    Dense(3) softmax."""
    keras = pytest.importorskip("keras")
    ids = keras.Input((6,), dtype="float32", name="ids")
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(rows, 4, name="embedding")(ids))
    return keras.Model(ids, keras.layers.Dense(3, activation="softmax", name="probs")(x))


def save_embedding_model(path, rows=5000):
    """``embedding_classifier`` exported as a SavedModel; returns the path."""
    embedding_classifier(rows).export(str(path), verbose=False)
    return Path(path)


@pytest.fixture(scope="session")
def embedding_model(tmp_path_factory):
    """(SavedModel, its tf2onnx ONNX): float32 token ids feeding a 5000-row Embedding, converted as a team would."""
    pytest.importorskip("tf2onnx")
    folder = tmp_path_factory.mktemp("embedding")
    saved = save_embedding_model(folder / "saved_model")
    onnx_path = folder / "model.onnx"
    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved), "--output", str(onnx_path),
                    "--opset", str(OPSET)], check=True, capture_output=True)
    return saved, onnx_path


# -- ONNX -----------------------------------------------------------------------------------------------
def scale(out, k, src="x"):
    """Nodes computing ``out = k * src`` in float32 (a Constant and a Mul)."""
    onnx = pytest.importorskip("onnx")
    h = onnx.helper
    value = h.make_tensor(f"{out}_k", onnx.TensorProto.FLOAT, [], [float(k)])
    return [h.make_node("Constant", [], [f"{out}_k"], name=f"{out}_k", value=value),
            h.make_node("Mul", [src, f"{out}_k"], [out], name=f"{out}_mul")]


def make_onnx(path, *nodes, outputs=("y", "z"), inputs=("x",), width=1, initializers=(), ir_version=8):
    """Save an ONNX model with float32 inputs [N, width] and float32 outputs [N, width]; returns the path.

    ``nodes`` are NodeProtos or lists of them; none means y = 5x, z = 2x (the toy SavedModel's graph)."""
    onnx = pytest.importorskip("onnx")
    h = onnx.helper
    flat = []
    for n in nodes or (scale("y", 5.0), scale("z", 2.0)):
        flat.extend(n if isinstance(n, (list, tuple)) else [n])

    def info(name):
        return h.make_tensor_value_info(name, onnx.TensorProto.FLOAT, ["N", width])

    graph = h.make_graph(flat, Path(path).stem, [info(i) for i in inputs], [info(o) for o in outputs],
                         list(initializers))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


@pytest.fixture
def toy_onnx(tmp_path):
    """y = 5x, z = 2x as ONNX (x float32 [N, 1])."""
    return make_onnx(tmp_path / "toy.onnx")


# -- specs and configs -----------------------------------------------------------------------------------
def toy_spec(reference="reference", source="parity.toml", **fields):
    """A ModelSpec for the toy model (x float32 [-1, 1] in [-1, 1]); ``fields`` override any field,
    ``inputs`` may map name -> (shape, dtype, range)."""
    inputs = fields.pop("inputs", {"x": ((-1, 1), "float32", (-1.0, 1.0))})
    base = {"name": "toy", "source": Path(source), "reference": Path(reference), "precisions": ("fp32",),
            "max_batch": 4,
            "inputs": {n: TensorSpec(n, tuple(s), np.dtype(d), tuple(r)) for n, (s, d, r) in inputs.items()}}
    base.update(fields)
    return ModelSpec(**base)


def toml_value(value):
    """A TOML literal for str / bool / int / float / list / dict (dicts become one-line inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if np.isfinite(value) else ("nan" if np.isnan(value) else ("inf" if value > 0 else "-inf"))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML literal for {type(value).__name__}")


def write_config(folder, doc, name="parity.toml"):
    """Write ``doc`` (top-level keys -> values) as a TOML file in ``folder``; returns its path."""
    path = Path(folder) / name
    path.write_text("".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in doc.items()))
    return path


# -- tools of the lint extra ------------------------------------------------------------------------------
def venv_tool(name):
    """Path of a console script, or skip: the venv's own scripts first (the Quickstart runs `.venv/bin/pytest`
    without the venv's bin folder on PATH), then PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install 'paritygate[lint]')")
    return found


# -- CUDA -----------------------------------------------------------------------------------------------
class CudaResult(int):
    """Stands in for a cuda.bindings CUresult in fake drivers: an int with a name."""

    def __new__(cls, value, name):
        err = super().__new__(cls, value)
        err.name = name
        return err


def record_of(model, precision, check, status, details=None):
    """A check's ``CheckResult`` as its report record ``{model, precision, check, status, details}`` reads back."""
    from paritygate.result import CheckResult

    return CheckResult.from_dict({"model": model, "precision": precision, "check": check, "status": status,
                                  "details": details or {}})


def pytest_collection_modifyitems(items):
    """The `slow` tests (whole-model runs, up to ~30 s each) first: under `--dist worksteal` a worker that runs
    out of tests takes the other's queued ones, so no long run starts last, beside an idle worker."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
