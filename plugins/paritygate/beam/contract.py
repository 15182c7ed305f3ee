"""The handler contract of ``[models.beam] handler = "module:callable"``.

The callable is called as ``callable(min_batch_size=..., max_batch_size=...)`` (plus ``model=<ModelSpec>`` and
``reference_outputs=<the reference's output names>`` when it sets ``paritygate_takes_model = True``, as the suite's
own ``paritygate.beam.handlers:onnxruntime`` / ``:tensorrt`` do, to serve the model's own candidate) and returns an *unkeyed* Beam
``ModelHandler`` over numpy: an element is one ndarray without the batch dimension (single-input models) or a
dict input name -> ndarray (multi-input models). A result's ``inference`` is an ndarray (single output), a dict
by output name (the candidate's, or exactly the reference's names), or a list/tuple in the reference's output order (``TfRunner.output_names``: a SavedModel
signature's outputs sorted by name, as TensorFlow flattens them); ``normalise_inference`` turns all three into
a dict. The suite wraps the handler in ``KeyedModelHandler`` / ``MaybeKeyedModelHandler`` itself; functions
added with ``with_preprocess_fn`` / ``with_postprocess_fn`` are part of the handler (an element goes through the
preprocess functions, the model and the postprocess functions, whose result must still be a PredictionResult,
and is held to the reference's outputs for the element the suite sent). A result's example is the element
run_inference received, not a converted copy of it.

Bytes: ``get_num_bytes(batch)`` is exact: the sum of the elements' array ``nbytes``, unless the handler declares
its own formula as ``paritygate_num_bytes = callable(batch) -> int``.

Precision policy: Beam results are held to the *handler's* precision, ``fp32`` (comparator/tolerance.py's
DEFAULTS, or the model's ``[models.tolerances.fp32]``) unless the handler declares another one with the
attribute ``paritygate_precision = "fp16"`` (or ``"int8"``) on the handler the factory returns, or on the
factory itself. A declared precision must be listed in the model's ``precisions``.
"""


import contextlib
import importlib
import pickle
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paritygate.common.digest import digest
from paritygate.common.numerics import PRECISIONS

PRECISION_ATTR = "paritygate_precision"
TAKES_MODEL_ATTR = "paritygate_takes_model"  # True: also given model=<ModelSpec>, reference_outputs=<names>
NUM_BYTES_ATTR = "paritygate_num_bytes"  # optional formula batch -> int that get_num_bytes follows instead of nbytes
LOCAL_RUNNERS = ("FnApiRunner", "BundleBasedDirectRunner")  # pinned: Beam 2.77's default (Prism) downloads a binary
DEFAULT_PRECISION = "fp32"


class HandlerContractError(ValueError):
    """The configured factory or the handler it returns breaks the contract; the message says how."""


def handler_path(spec):
    """The ``module:callable`` of ``[models.beam] handler``, or None when the model has no beam table."""
    return (spec.beam or {}).get("handler")


@contextlib.contextmanager
def handler_import_path(folder):
    """The config's folder first on ``sys.path`` while the handler module the config names is imported (as pytest
    puts a ``conftest.py``'s folder there), then last, for the handler's own later imports and Beam's workers
    (``pipeline.worker_import_path``): a file there named like an installed module (``onnx.py``) never shadows it.
    Loading a config alone puts nothing on the path; only a config that names a handler makes its folder code."""
    folder = str(folder)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)
        if folder not in sys.path:
            sys.path.append(folder)


def load_factory(spec):
    """Import the factory named by ``[models.beam] handler`` (modules beside the config are importable)."""
    path = handler_path(spec)
    module_name, _, attr = path.partition(":")
    where = spec.where("beam.handler")
    try:
        with handler_import_path(Path(spec.source).parent):
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise HandlerContractError(f"{where}: cannot import module '{module_name}' of handler '{path}': {err}"
                                   " (modules beside the config file are importable)") from err
    except Exception as err:  # whatever the module raises at import is the handler's fault
        raise HandlerContractError(f"{where}: importing module '{module_name}' of handler '{path}' raised "
                                   f"{type(err).__name__}: {_first_line(err)}") from err
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise HandlerContractError(f"{where}: '{module_name}' has no callable '{attr}' (handler '{path}')")
    return factory


def make_handler(spec, factory, min_batch_size, max_batch_size, reference_outputs=None, **extra):
    """``factory(min_batch_size=..., max_batch_size=..., **extra)``, checked to be a Beam ModelHandler (``extra``:
    Beam's ModelHandler arguments a check asks for, e.g. ``model_copies``, only from factories that take them).
    A factory that takes the model also gets ``reference_outputs``: the reference's output names (None when not
    known yet, as in the validation pass)."""
    from apache_beam.ml.inference.base import KeyedModelHandler, MaybeKeyedModelHandler, ModelHandler

    where = spec.where("beam.handler")
    model = {"model": spec, "reference_outputs": reference_outputs} if getattr(factory, TAKES_MODEL_ATTR, False) else {}
    try:
        handler = factory(min_batch_size=min_batch_size, max_batch_size=max_batch_size, **model, **extra)
    except ImportError as err:
        hint = (" (Beam 2.77's tensorflow_inference imports tensorflow_hub, which needs tf_keras under Keras 3; "
                "paritygate.beam.tf_handler.TFNumpyHandler needs neither)"
                if err.name in ("tensorflow_hub", "tf_keras") else "")
        raise HandlerContractError(f"{where}: {handler_path(spec)} needs a module that is not installed: "
                                   f"{err}{hint}") from err
    except Exception as err:  # the factory's own failure, named as such
        args = "".join(f", {k}={v!r}" for k, v in extra.items())
        raise HandlerContractError(f"{where}: {handler_path(spec)}(min_batch_size={min_batch_size}, max_batch_size="
                                   f"{max_batch_size}{args}) raised {type(err).__name__}: {_first_line(err)}") from err
    if not isinstance(handler, ModelHandler):
        raise HandlerContractError(f"{where}: {handler_path(spec)}(min_batch_size=..., max_batch_size=...) returned "
                                   f"{type(handler).__name__}, not an apache_beam ModelHandler")
    if isinstance(handler, (KeyedModelHandler, MaybeKeyedModelHandler)):
        raise HandlerContractError(f"{where}: {handler_path(spec)} returned a {type(handler).__name__}; return the "
                                   "unkeyed handler: the suite wraps it in Keyed/MaybeKeyedModelHandler itself")
    return handler


def _first_line(err):
    lines = str(err).strip().splitlines()
    return lines[0][:300] if lines else "(no message)"


def declared_precision(spec, handler, factory):
    """The handler's precision: its ``paritygate_precision``, else the factory's, else fp32."""
    precision = getattr(handler, PRECISION_ATTR, None) or getattr(factory, PRECISION_ATTR, None) or DEFAULT_PRECISION
    if precision not in PRECISIONS:
        raise HandlerContractError(f"{spec.where('beam.handler')}: {PRECISION_ATTR} = {precision!r}; expected one "
                                   f"of {PRECISIONS}")
    if precision not in spec.precisions:
        raise HandlerContractError(f"{spec.where('beam.handler')}: the handler declares {PRECISION_ATTR} = "
                                   f"{precision!r}, which the model's precisions {list(spec.precisions)} do not list")
    return precision


# -- elements ----------------------------------------------------------------------------------------
def as_feed(spec, example):
    """An element as input name -> ndarray (a single-input model's element is the bare ndarray)."""
    if isinstance(example, Mapping):
        return {k: np.asarray(v) for k, v in example.items()}
    (name,) = spec.inputs
    return {name: np.asarray(example)}


def element_of(spec, feed):
    """The element the handler receives for a one-element feed (input name -> array without batch axis)."""
    if len(spec.inputs) == 1:
        return next(iter(feed.values()))
    return dict(feed)


def payload_bytes(example):
    """Bytes of an element's data: ``nbytes`` of its array(s)."""
    if isinstance(example, np.ndarray):
        return int(example.nbytes)
    if isinstance(example, Mapping):
        return sum(payload_bytes(v) for v in example.values())
    return len(pickle.dumps(example))


def describe(example):
    """A short description of an element's form: ``float32[16, 16, 3] ndarray``, ``dict{a: int32[16]}``, ``list``."""
    if isinstance(example, np.ndarray):
        return f"{example.dtype}{list(example.shape)} ndarray"
    if isinstance(example, Mapping):
        return "dict{" + ", ".join(f"{k}: {describe(v)}" for k, v in example.items()) + "}"
    return type(example).__name__


def same_values(a, b):
    """Whether ``b`` holds ``a``'s values in another form (dtype, container): a converted copy of it."""
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and set(a) == set(b) and all(same_values(a[k], b[k]) for k in a)
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind in "fc"))
    except (TypeError, ValueError):
        return False


def declared(handler, attr):
    """``attr`` of the handler or of a handler it wraps (Beam's pre/post-processing wrappers keep it in ``_base``,
    the Keyed wrappers in ``_unkeyed``, the suite's in ``_inner``), else None."""
    for _ in range(16):  # wrappers nest a few deep at most
        value = getattr(handler, attr, None)
        if value is not None or handler is None:
            return value
        handler = next((getattr(handler, k) for k in ("_inner", "_base", "_unkeyed") if hasattr(handler, k)), None)
    return None


def unwrapped(handler):
    """The handler under Beam's pre/post-processing wrappers (``_base``), Keyed wrappers (``_unkeyed``) and the
    suite's own (``_inner``): the team's class, whose methods say what it offers."""
    for _ in range(16):  # wrappers nest a few deep at most
        inner = next((getattr(handler, k) for k in ("_inner", "_base", "_unkeyed") if hasattr(handler, k)), None)
        if inner is None:
            return handler
        handler = inner
    return handler


def overrides(handler, method):
    """Whether the handler's own class (``unwrapped``) overrides Beam's ``ModelHandler.<method>``."""
    from apache_beam.ml.inference.base import ModelHandler

    return getattr(type(unwrapped(handler)), method, None) is not getattr(ModelHandler, method)


def expected_num_bytes(handler, batch):
    """(bytes, rule) ``get_num_bytes(batch)`` must return exactly: the formula the handler declares in
    ``paritygate_num_bytes`` (a callable batch -> int, for handlers that count something else on purpose), else
    the sum of the elements' array ``nbytes`` (``payload_bytes``)."""
    formula = declared(handler, NUM_BYTES_ATTR)
    if formula is not None:
        return int(formula(batch)), f"{NUM_BYTES_ATTR} declared by the handler"
    return sum(payload_bytes(e) for e in batch), "the sum of the elements' nbytes"


def apply_fns(fns, value):
    """``value`` through each function in turn (a handler's preprocess or postprocess functions)."""
    for fn in fns:
        value = fn(value)
    return value


def handler_fns(handler):
    """The handler's (preprocess, postprocess) functions (``with_preprocess_fn`` / ``with_postprocess_fn``)."""
    return list(handler.get_preprocess_fns()), list(handler.get_postprocess_fns())


def beam_decoded(element):
    """``element`` as Beam hands it over behind a fusion break or from beam.Create: through its default coder
    (FastPrimitivesCoder, pickling arrays), arrays come back as views on the decoded bytes."""
    from apache_beam.coders import registry

    coder = registry.get_coder(object)
    return coder.decode(coder.encode(element))


# -- results -----------------------------------------------------------------------------------------
def normalise_inference(spec, output_names, inference):
    """A result's ``inference`` as candidate output name -> ndarray (a copy).

    ndarray: the single output; dict: by name; list/tuple: in the reference's output order. Raises
    HandlerContractError for anything else or for a list of the wrong length."""
    cand_names = [spec.outputs.get(n, n) for n in output_names]
    if isinstance(inference, Mapping):
        keys = {str(k) for k in inference}
        # keyed by exactly the reference's output names (and not the candidate's): renamed to the candidate's,
        # which the comparator pairs through [models.outputs] (the suite's own handlers answer by reference name)
        rename = dict(zip(output_names, cand_names)) if keys == set(output_names) != set(cand_names) else {}
        return {rename.get(str(k), str(k)): np.array(v) for k, v in inference.items()}
    if isinstance(inference, (list, tuple)):
        if len(inference) != len(cand_names):
            raise HandlerContractError(f"inference is a {type(inference).__name__} of {len(inference)} item(s); "
                                       f"the reference has {len(cand_names)} output(s) {output_names}")
        return {n: np.array(v) for n, v in zip(cand_names, inference)}
    if isinstance(inference, np.ndarray) or hasattr(inference, "__array__"):
        return {cand_names[0]: np.array(inference)}
    raise HandlerContractError(f"inference is a {type(inference).__name__}; expected an ndarray, a dict by output "
                               "name or a list/tuple in output order")


@dataclass
class HandlerUnderTest:
    """A model's configured handler factory with its reference: what every RunInference check takes."""

    spec: object
    factory: object
    reference: object  # callable: batched feed (input name -> array) -> output name -> array
    output_names: list
    runner: str = None  # None: the local runners; else e.g. "DataflowRunner"
    options: tuple = ()
    precision: str = DEFAULT_PRECISION
    cache: dict = field(default_factory=dict, repr=False)  # pipeline runs by case, references by digest

    @classmethod
    def from_spec(cls, spec, reference_runner, factory=None, runner=None, options=()):
        factory = factory or load_factory(spec)
        subject = cls(spec, factory, reference_runner.infer, list(reference_runner.output_names), runner,
                      tuple(options))
        subject.precision = declared_precision(spec, subject.make(1, spec.max_batch), factory)
        return subject

    @property
    def name(self):
        return handler_path(self.spec) or getattr(self.factory, "__qualname__", repr(self.factory))

    def make(self, min_batch_size, max_batch_size, **extra):
        return make_handler(self.spec, self.factory, min_batch_size, max_batch_size, self.output_names, **extra)

    def references(self, examples):
        """The native reference's outputs for each element, memoised by digest. The distinct examples are run in
        the order given, ``max_batch`` at a time, and a batch holding any example not yet computed runs whole: so
        the batches depend only on ``examples``, never on what an earlier call computed, and the reference cache
        serves a rerun (or another xdist worker) the same batches. Callers pass a run's inputs in their input
        order (``run_references``), not Beam's output order or a batch split, which vary between runs."""
        memo = self.cache.setdefault("references", {})
        items = list({digest(ex): ex for ex in examples}.items())
        for start in range(0, len(items), self.spec.max_batch):
            chunk = items[start:start + self.spec.max_batch]
            if all(d in memo for d, _ in chunk):
                continue
            feeds = [as_feed(self.spec, ex) for _, ex in chunk]
            batch = {k: np.stack([f[k] for f in feeds]) for k in self.spec.inputs}
            out = self.reference(batch)
            for i, (d, _) in enumerate(chunk):
                memo[d] = {k: np.asarray(v)[i] for k, v in out.items()}
        return [memo[digest(ex)] for ex in examples]

    def run_references(self, run):
        """{digest: the reference's outputs} for every input of the pipeline run ``run`` but its poison element (no
        numeric model runs it: the dead-letter check holds its result), computed in input order."""
        inputs = [(d, ex) for i, (_, _, d, ex) in enumerate(run.inputs) if i != run.case.poison]
        return dict(zip((d for d, _ in inputs), self.references([ex for _, ex in inputs])))
