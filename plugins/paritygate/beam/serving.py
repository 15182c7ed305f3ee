"""The suite's own RunInference handlers, shipped in the package: ``[models.beam] handler =
"paritygate.beam.handlers:onnxruntime"`` (or ``:tensorrt``) serves the model's own candidate artifact.

    ArrayHandler   everything but the runtime: elements (one ndarray, or a dict input name -> ndarray) stacked by
                   input name into chunks the model accepts (at most the profile's / static batch, a static batch
                   padded and the padding dropped), each result row copied out by output name into fresh arrays,
                   exact byte counts (``nbytes``), model updates (``update_model_path``; ``PredictionResult.model_id``
                   is the path served), picklable (paths and names only: each worker loads its own model)
    OnnxRuntimeHandler   ArrayHandler over ``paritygate.backend.onnxrt.runner.OnnxrtRunner``
    TensorRTHandler      ArrayHandler over ``paritygate.backend.trt.runner.TrtRunner`` (TensorRT 10/11 tensor-name
                   API: ``set_input_shape`` for the actual chunk within the optimization profile, every input copied,
                   outputs copied into fresh arrays); never executed here: no TensorRT on these machines

The two differ only in ``open`` (which runner loads the file) and ``batch_limits`` (where the batch bounds come
from); tests/beam/test_serving.py runs all of ArrayHandler through a stand-in runtime as well as ONNX Runtime.
Imports apache_beam: import it on first use.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

METRICS_NAMESPACE = "paritygate_serving"


@dataclass(frozen=True)
class Binding:
    """How an element's arrays reach the model: element key (None: a bare ndarray) -> model input name."""

    element: str
    tensor: str


class Loaded:
    """A loaded model: the runner, the path it came from, its input dtypes and batch bounds. Weakly referenceable,
    as Beam's shared model cache needs; read through methods only, so that it also works behind Beam's
    multi-process proxy (``large_model`` / ``model_copies``: apache_beam/utils/multi_process_shared.py)."""

    def __init__(self, runner, path, dtypes, static_batch, max_batch, min_batch=1):
        self._runner, self._path, self._dtypes = runner, path, dtypes
        self._limits = (static_batch, max_batch, min_batch)

    def infer(self, feed):
        return self._runner.infer(feed)

    def describe(self):
        """(path, input dtypes, (static batch or None, most rows per call, fewest rows per call))."""
        return self._path, self._dtypes, self._limits


class NumpyContract(ModelHandler):
    """What every handler of the suite's own answers alike: exact bytes (``nbytes``: Beam's coder hands over
    views, whose sys.getsizeof is only the array header), the metrics namespace, model updates
    (``model_metadata_pcoll``: serve ``model_path`` from the next load) and no inference_args. Subclasses keep the
    served model's path in ``self._model_uri``."""

    metrics_namespace = METRICS_NAMESPACE

    def get_num_bytes(self, batch):
        return sum(int(np.asarray(v).nbytes) for e in batch for v in (e.values() if isinstance(e, Mapping) else [e]))

    def get_metrics_namespace(self):
        return self.metrics_namespace

    def update_model_path(self, model_path=None):
        if model_path:
            self._model_uri = str(model_path)

    def validate_inference_args(self, inference_args):
        if inference_args:
            raise ValueError(f"{type(self).__name__} takes no inference_args, got {sorted(inference_args)}")


class ArrayHandler(NumpyContract):
    """RunInference over numpy for a model file served by a runner with ``infer(feed) -> {name: array}``.

    Args:
        path: the model file (ONNX, or a TensorRT plan).
        bindings: one ``Binding`` per model input; a single binding with ``element=None`` takes bare ndarrays.
        max_batch: the most rows the model takes in one call (the config's ``max_batch``); a static batch in the
            file, or a TensorRT profile's maximum, lowers it.
        outputs: model output name -> the name a result carries for it (the reference's: ``output_names_for``);
            an output not named keeps the model's name.
        **kwargs: Beam's ModelHandler arguments (``min_batch_size``, ``max_batch_size``, ``model_copies``,
            ``large_model``, ...).
    """

    def __init__(self, path, bindings, max_batch, outputs=None, **kwargs):
        super().__init__(**kwargs)
        self._model_uri, self._bindings, self._max_batch = str(path), tuple(bindings), int(max_batch)
        self._outputs = dict(outputs or {})

    # -- what a runtime provides ---------------------------------------------------------------------
    def open(self, path):
        """The runner for ``path``, activated."""
        raise NotImplementedError

    def batch_limits(self, runner):
        """(static batch or None, most rows per call or None, fewest rows per call) the loaded model accepts."""
        raise NotImplementedError

    # -- Beam's ModelHandler -------------------------------------------------------------------------
    def load_model(self):
        runner = self.open(self._model_uri)
        meta = runner.input_metadata()
        missing = sorted({b.tensor for b in self._bindings} - set(meta))
        if missing:
            raise ValueError(f"{self._model_uri}: the model has no input(s) {missing}; its inputs are {sorted(meta)}")
        static, most, fewest = self.batch_limits(runner)
        limit = min(x for x in (static, most, self._max_batch) if x)
        return Loaded(runner, self._model_uri, {b.tensor: np.dtype(meta[b.tensor][0]) for b in self._bindings},
                      static, limit, fewest or 1)

    def run_inference(self, batch, model, inference_args=None):
        if inference_args:
            raise ValueError(f"{type(self).__name__} takes no inference_args, got {sorted(inference_args)}")
        path, dtypes, (static, most, fewest) = model.describe()
        feed = self.stack(batch, dtypes)
        rows = []
        for start in range(0, len(batch), most):
            chunk = {k: v[start:start + most] for k, v in feed.items()}
            rows += split_rows(model.infer(padded(chunk, static or fewest)), len(next(iter(chunk.values()))),
                               self._outputs)
        return [PredictionResult(element, row, path) for element, row in zip(batch, rows)]

    def stack(self, batch, dtypes):
        """input name -> the batch's arrays stacked (cast only where no value can change: ``np.can_cast`` safe)."""
        feed = {}
        for b in self._bindings:
            values = [_field(e, b) for e in batch]
            array = np.stack(values)
            want = dtypes[b.tensor]
            if array.dtype != want:
                if not np.can_cast(array.dtype, want, "safe"):
                    raise TypeError(f"input '{b.tensor}': elements are {array.dtype}, the model takes {want} "
                                    "(no safe cast)")
                array = array.astype(want)
            feed[b.tensor] = array
        return feed



def _field(element, binding):
    if binding.element is None:
        if isinstance(element, Mapping):
            raise TypeError(f"the model takes one input '{binding.tensor}': an element is one ndarray, got a dict")
        return np.asarray(element)
    if not isinstance(element, Mapping) or binding.element not in element:
        got = sorted(element) if isinstance(element, Mapping) else type(element).__name__
        raise TypeError(f"an element must be a dict with key '{binding.element}' (input '{binding.tensor}'), got {got}")
    return np.asarray(element[binding.element])


def padded(chunk, rows_needed):
    """The chunk padded (repeating its last row) to the static batch, or to the profile's fewest rows."""
    rows = len(next(iter(chunk.values())))
    want = max(rows, rows_needed or 1)
    if want == rows:
        return chunk
    return {k: np.concatenate([v, np.repeat(v[-1:], want - rows, axis=0)]) for k, v in chunk.items()}


def split_rows(outputs, rows, names=None):
    """The first ``rows`` rows of every output, one dict per row (keys renamed by ``names``), each array a copy
    owning its data."""
    names = names or {}
    return [{names.get(name, name): np.array(np.asarray(value)[i]) for name, value in outputs.items()}
            for i in range(rows)]


class OnnxRuntimeHandler(ArrayHandler):
    """ArrayHandler over ONNX Runtime (CUDA execution provider first where it is available)."""

    def open(self, path):
        import onnxruntime as ort

        from paritygate.backend.onnxrt.runner import OnnxrtRunner

        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
        return OnnxrtRunner(path, providers=providers).activate()

    def batch_limits(self, runner):
        dims = {shape[0] for _, shape in runner.input_metadata().values() if shape}
        static = next((d for d in dims if d > 0), None)
        return static, None, 1


class TensorRTHandler(ArrayHandler):
    """ArrayHandler over a TensorRT 10/11 plan (``TrtRunner``: tensor-name API). Unexecuted here (no TensorRT)."""

    def open(self, path):
        from paritygate.backend.trt.loader import EngineFromPath
        from paritygate.backend.trt.runner import TrtRunner

        return TrtRunner(EngineFromPath(path)).activate()

    def batch_limits(self, runner):
        inputs = {t.name: t for t in runner.io if t.is_input}
        bound = [inputs[b.tensor] for b in self._bindings]
        static = next((int(t.shape[0]) for t in bound if t.shape[0] > 0), None)
        if static:
            return static, static, static
        profiles = [t.profile for t in bound if t.profile]  # profile 0: (min, opt, max) shapes (engine_io)
        return None, min(int(p[2][0]) for p in profiles), max(int(p[0][0]) for p in profiles)


# -- factories: ``[models.beam] handler = "paritygate.beam.handlers:onnxruntime"`` ------------------------
def _graph_names(onnx_path):
    """(input names without initializers, output names) of an ONNX file."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}
    return [i.name for i in graph.input if i.name not in weights], [o.name for o in graph.output]


def bindings_for(spec, onnx_path):
    """One Binding per model input: the config's input name (the element's key) -> the ONNX input it answers to
    (``iomap.input_map``: explicit, name, signature, decorated, single)."""
    from paritygate.backend.iomap import input_map

    pairs = input_map(spec, _graph_names(onnx_path)[0])
    single = len(spec.inputs) == 1
    return [Binding(None if single else name, pairs[name]) for name in spec.inputs]


def output_names_for(spec, onnx_path, reference_outputs):
    """ONNX output name -> the reference's name for it, resolved as every other check pairs outputs
    (``iomap.map_names``: ``[models.outputs]``, name, signature, decorated, single): results then carry the
    reference's output names (tf2onnx's ``StatefulPartitionedCall:1`` comes back as ``note``). Empty without
    ``reference_outputs`` (results keep the ONNX names)."""
    if not reference_outputs:
        return {}
    from paritygate.backend.iomap import MappingError, bindings_of, map_names

    try:
        pairs = map_names("output", list(reference_outputs), _graph_names(onnx_path)[1], spec.outputs,
                          bindings_of(spec)[1], spec.signature)
    except MappingError as err:
        raise MappingError(f"{spec.where('outputs')}: {onnx_path}: {err}") from None
    return {cand: ref for ref, (cand, _) in pairs.items()}


def onnxruntime(min_batch_size, max_batch_size, model, reference_outputs=None, **kwargs):
    """OnnxRuntimeHandler over the model's own fp32 candidate ONNX (the config's ``onnx``, else the suite's
    conversion), results by the reference's output names when given. ``kwargs``: Beam's ModelHandler arguments
    (``model_copies``, ``large_model``, ...)."""
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact

    path = onnx_artifact(model, "fp32")
    return OnnxRuntimeHandler(path, bindings_for(model, path), model.max_batch,
                              output_names_for(model, path, reference_outputs), min_batch_size=min_batch_size,
                              max_batch_size=max_batch_size, **kwargs)


def tensorrt(min_batch_size, max_batch_size, model, reference_outputs=None, **kwargs):
    """TensorRTHandler over an fp32 engine the suite builds from the candidate ONNX (profile 1..max_batch)."""
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.trt.loader import EngineFromOnnx

    onnx_path = onnx_artifact(model, "fp32")
    plan = EngineFromOnnx(onnx_path, model, "fp32")()
    return TensorRTHandler(plan, bindings_for(model, onnx_path), model.max_batch,
                           output_names_for(model, onnx_path, reference_outputs), min_batch_size=min_batch_size,
                           max_batch_size=max_batch_size, **kwargs)


onnxruntime.paritygate_takes_model = tensorrt.paritygate_takes_model = True
