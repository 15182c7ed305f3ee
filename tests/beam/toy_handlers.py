"""Real Beam ModelHandlers over the toy model (y = 5x, z = 2x; x float32 [N, width]) run by ONNX Runtime:
one correct handler and one subclass per deliberate defect. Each factory takes the ONNX path first:
``functools.partial(factory, path)`` is a ``[models.beam] handler`` factory.
"""

import time

import numpy as np
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

SLOW_SECONDS = 0.05  # SlowHandler's extra wall time per batch


class ToyHandler(ModelHandler):
    """Correct: one PredictionResult per element, in order, fresh arrays, honest byte count."""

    def __init__(self, onnx_path, min_batch_size=None, max_batch_size=None):
        super().__init__(min_batch_size=min_batch_size, max_batch_size=max_batch_size)
        self.onnx_path = str(onnx_path)

    def load_model(self):
        import onnxruntime as ort

        return ort.InferenceSession(self.onnx_path, providers=["CPUExecutionProvider"])

    def outputs(self, batch, session):
        y, z = session.run(["y", "z"], {"x": np.stack(batch).astype(np.float32)})
        return y, z

    def run_inference(self, batch, model, inference_args=None):
        y, z = self.outputs(batch, model)
        return [PredictionResult(x, {"y": y[i], "z": z[i]}, self.onnx_path) for i, x in enumerate(batch)]

    def get_num_bytes(self, batch):
        return sum(int(x.nbytes) for x in batch)

    def get_metrics_namespace(self):
        return "paritygate_toy"

    def update_model_path(self, model_path=None):
        if model_path:
            self.onnx_path = str(model_path)


class IgnoresUpdates(ToyHandler):
    """Keeps serving its first model whatever update_model_path says (Beam's default: a no-op), yet reports the
    new path as its model_id."""

    def __init__(self, onnx_path, min_batch_size=None, max_batch_size=None):
        super().__init__(onnx_path, min_batch_size, max_batch_size)
        self.first_path = self.onnx_path

    def load_model(self):
        import onnxruntime as ort

        return ort.InferenceSession(self.first_path, providers=["CPUExecutionProvider"])


class DropsElement(ToyHandler):
    def run_inference(self, batch, model, inference_args=None):
        return super().run_inference(batch, model, inference_args)[:-1]


class MisalignsResults(ToyHandler):
    """Examples in order, inferences rotated by one within the batch."""

    def run_inference(self, batch, model, inference_args=None):
        results = super().run_inference(batch, model, inference_args)
        shifted = results[1:] + results[:1]
        return [PredictionResult(r.example, s.inference) for r, s in zip(results, shifted)]


class AliasesOutput(ToyHandler):
    """Writes every batch into one preallocated buffer and returns views into it."""

    def load_model(self):
        session = super().load_model()
        session.paritygate_buffer = {"y": np.zeros((64, 1), np.float32), "z": np.zeros((64, 1), np.float32)}
        return session

    def run_inference(self, batch, model, inference_args=None):
        y, z = self.outputs(batch, model)
        buf = model.paritygate_buffer
        buf["y"][:len(batch)], buf["z"][:len(batch)] = y, z
        return [PredictionResult(x, {"y": buf["y"][i], "z": buf["z"][i]}) for i, x in enumerate(batch)]


class DuplicatesResult(ToyHandler):
    def run_inference(self, batch, model, inference_args=None):
        results = super().run_inference(batch, model, inference_args)
        return results + results[:1]


class SlowHandler(ToyHandler):
    def run_inference(self, batch, model, inference_args=None):
        time.sleep(SLOW_SECONDS)
        return super().run_inference(batch, model, inference_args)


class MisreportsBytes(ToyHandler):
    def get_num_bytes(self, batch):
        return len(batch)


class FailsOnBatchOfOne(ToyHandler):
    def run_inference(self, batch, model, inference_args=None):
        if len(batch) == 1:
            raise ValueError("a batch of one")
        return super().run_inference(batch, model, inference_args)


class ReturnsLists(ToyHandler):
    """Correct too: a lazy generator of results whose inference is a list in the reference's output order."""

    def run_inference(self, batch, model, inference_args=None):
        y, z = self.outputs(batch, model)
        return (PredictionResult(x, [y[i], z[i]]) for i, x in enumerate(batch))


class OverReportsBytes(ToyHandler):
    """get_num_bytes 1000x the elements' bytes: passed the old lower-bound check."""

    def get_num_bytes(self, batch):
        return 1000 * sum(int(x.nbytes) for x in batch)


def _doubled_bytes(batch):
    return 2 * sum(int(x.nbytes) for x in batch)


class DeclaresItsBytes(ToyHandler):
    """Counts twice the arrays' bytes on purpose, and says so: paritygate_num_bytes is its formula."""

    paritygate_num_bytes = staticmethod(_doubled_bytes)

    def get_num_bytes(self, batch):
        return _doubled_bytes(batch)


class ConvertsExample(ToyHandler):
    """Returns each element converted (float64) as its PredictionResult's example: a contract breach."""

    def run_inference(self, batch, model, inference_args=None):
        return [PredictionResult(r.example.astype(np.float64), r.inference)
                for r in super().run_inference(batch, model, inference_args)]


def doubled(x):
    """Preprocess: the model sees 2x (a picklable module-level function, as Beam ships it to workers)."""
    return x * np.float32(2)


def halved(result):
    """Postprocess: halve every output again, so the whole handler computes the reference's y = 5x, z = 2x."""
    return PredictionResult(result.example, {k: v / np.float32(2) for k, v in result.inference.items()},
                            result.model_id)


def with_fns(onnx_path, min_batch_size, max_batch_size):
    """Correct through its pre- and post-processing functions (neither alone gives the reference's outputs)."""
    return ToyHandler(onnx_path, min_batch_size, max_batch_size).with_preprocess_fn(doubled).with_postprocess_fn(halved)


def length_of(element):
    """batch_length_fn: buckets elements (keyed or not) by |x|, so each bucket batches apart."""
    example = element[1] if isinstance(element, tuple) else element
    return int(abs(float(np.ravel(example)[0])) * 40)


class BucketedBatches(ToyHandler):
    """Correct, with Beam's time- and length-bucketed batching (max_batch_duration_secs + batch_length_fn): each
    length bucket flushes its own short remainder."""

    def __init__(self, onnx_path, min_batch_size=None, max_batch_size=None):
        ModelHandler.__init__(self, min_batch_size=min_batch_size, max_batch_size=max_batch_size,
                              max_batch_duration_secs=60, batch_length_fn=length_of,
                              batch_bucket_boundaries=[10, 20, 30])
        self.onnx_path = str(onnx_path)


def correct(onnx_path, min_batch_size, max_batch_size):
    return ToyHandler(onnx_path, min_batch_size, max_batch_size)


def ignores_max_batch_size(onnx_path, min_batch_size, max_batch_size):
    return ToyHandler(onnx_path, min_batch_size=min_batch_size)


def factory_of(cls):
    def factory(onnx_path, min_batch_size, max_batch_size):
        return cls(onnx_path, min_batch_size, max_batch_size)

    factory.__name__ = factory.__qualname__ = cls.__name__
    return factory


class LoadsPerBatch(ToyHandler):
    """Loads a fresh session for every batch (self.load_model() in run_inference): the model Beam loaded is unused."""

    def run_inference(self, batch, model, inference_args=None):
        return super().run_inference(batch, self.load_model(), inference_args)


def shares_copies(onnx_path, min_batch_size, max_batch_size, model_copies=None):
    """Correct: passes Beam's model_copies on to ModelHandler.__init__ (shared across processes when given)."""
    handler = ToyHandler(onnx_path, min_batch_size, max_batch_size)
    ModelHandler.__init__(handler, min_batch_size=min_batch_size, max_batch_size=max_batch_size,
                          model_copies=model_copies)
    return handler


def drops_copies(onnx_path, min_batch_size, max_batch_size, **kwargs):
    """Takes Beam's ModelHandler arguments (model_copies, large_model) and drops them: one model per process."""
    return ToyHandler(onnx_path, min_batch_size, max_batch_size)


class PadsShortBatchesAtTheFront(ToyHandler):
    """Pads a short batch to max_batch_size with zero rows in front, then reads the first rows back: full batches
    are right, every result of a short batch is the zero row's."""

    def run_inference(self, batch, model, inference_args=None):
        want = self.batch_elements_kwargs()["max_batch_size"]
        padded = [np.zeros_like(batch[0])] * (want - len(batch)) + list(batch)
        y, z = self.outputs(padded, model)
        return [PredictionResult(x, {"y": y[i], "z": z[i]}, self.onnx_path) for i, x in enumerate(batch)]


# beam_multi_process's two defects (tests/beam/test_multiprocess.py says why they are here)
class LoadsInInit(ToyHandler):
    """Loads its ONNX Runtime session in __init__ and keeps it: the session cannot be pickled."""

    def __init__(self, onnx_path, min_batch_size=None, max_batch_size=None):
        super().__init__(onnx_path, min_batch_size, max_batch_size)
        self.session = ToyHandler.load_model(self)

    def load_model(self):
        return self.session


_LOADED = {}  # filled by the factory in the launching process only


class LoadedByFactory(ToyHandler):
    """load_model hands back the session the factory loaded into a module global: empty in a worker."""

    def load_model(self):
        return _LOADED["session"]


def loaded_by_factory(onnx_path, min_batch_size=None, max_batch_size=None):
    handler = LoadedByFactory(onnx_path, min_batch_size=min_batch_size, max_batch_size=max_batch_size)
    _LOADED["session"] = ToyHandler.load_model(handler)
    return handler


# A team's ONNX Runtime handler as issue 30 met it: its own __init__ without Beam's model_copies, a factory that
# passes **kwargs on, results without model_id, and Beam's no-op update_model_path (it takes no updates).
class OrtHandler(ToyHandler):
    update_model_path = ModelHandler.update_model_path  # not overridden: Beam's no-op, as a team leaves it

    def run_inference(self, batch, model, inference_args=None):
        return [PredictionResult(r.example, r.inference) for r in super().run_inference(batch, model, inference_args)]


class UpdatableOrtHandler(OrtHandler):
    """The same handler honouring model updates, its results still without model_id."""

    def update_model_path(self, model_path=None):
        if model_path:
            self.onnx_path = str(model_path)


def make_ort(onnx_path, **kwargs):
    return OrtHandler(onnx_path, **kwargs)


def make_updatable_ort(onnx_path, **kwargs):
    return UpdatableOrtHandler(onnx_path, **kwargs)


# beam_multi_process / beam_model_copies's race (issue 41): model copies sharing one staging buffer
class SharesStagingBuffer(ToyHandler):
    """Each model copy maps the same file-backed staging buffer (one per ONNX file, as a team's pinned host buffer
    shared by its copies), copies the batch in, waits ``device_seconds`` (the simulated device time), then runs the
    model on what the buffer holds: right one batch at a time, wrong when two batches are inside at once."""

    def __init__(self, onnx_path, min_batch_size=None, max_batch_size=None, device_seconds=0.0, **kwargs):
        super().__init__(onnx_path, min_batch_size, max_batch_size)
        ModelHandler.__init__(self, min_batch_size=min_batch_size, max_batch_size=max_batch_size, **kwargs)
        self.device_seconds, self.staging_path = device_seconds, f"{self.onnx_path}.staging"
        np.memmap(self.staging_path, np.float32, "w+", shape=(64, 1)).flush()

    def run_inference(self, batch, model, inference_args=None):
        staging = np.memmap(self.staging_path, np.float32, "r+", shape=(64, 1))
        staging[:len(batch)] = np.stack(batch)
        time.sleep(self.device_seconds)
        y, z = model.run(["y", "z"], {"x": np.array(staging[:len(batch)])})
        return [PredictionResult(x, {"y": y[i], "z": z[i]}, self.onnx_path) for i, x in enumerate(batch)]


def shares_staging(onnx_path, min_batch_size, max_batch_size, device_seconds=0.0, model_copies=None):
    """A factory of SharesStagingBuffer that takes Beam's model_copies (``functools.partial`` sets the device time)."""
    extra = {"model_copies": model_copies} if model_copies else {}
    return SharesStagingBuffer(onnx_path, min_batch_size, max_batch_size, device_seconds, **extra)


def own_staging(onnx_path, min_batch_size, max_batch_size, device_seconds=0.0, model_copies=None):
    """The correct control: the same device time, a fresh buffer per batch."""
    extra = {"model_copies": model_copies} if model_copies else {}
    handler = SlowCorrect(onnx_path, min_batch_size, max_batch_size)
    ModelHandler.__init__(handler, min_batch_size=min_batch_size, max_batch_size=max_batch_size, **extra)
    handler.device_seconds = device_seconds
    return handler


class SlowCorrect(ToyHandler):
    def run_inference(self, batch, model, inference_args=None):
        staging = np.stack(batch).astype(np.float32)
        time.sleep(getattr(self, "device_seconds", 0.0))
        y, z = model.run(["y", "z"], {"x": staging})
        return [PredictionResult(x, {"y": y[i], "z": z[i]}, self.onnx_path) for i, x in enumerate(batch)]
