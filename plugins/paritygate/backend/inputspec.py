"""The config's input spec against a runner: the one place a model's inputs are checked by name, rank, dtype and
fixed dims (``check_input_spec``), paired by name (``input_names``: ``backend.iomap``), fed in the config's names and
dtypes (``MappedRunner``), with a team's own fp16 file's float16 inputs (``half_inputs``). Below every runtime and
artifact module: the runners (``backend.runtimes``) and the team's own files (``backend.onnx.artifacts.own``) both
check with it."""

import numpy as np

from paritygate.backend.base import BaseRunner, RunnerError


def half_inputs(spec, precision, runner):
    """The float16 inputs of a team's own fp16 ONNX whose config dtype is float32 (converters' default I/O,
    e.g. onnxconverter-common without keep_io_types): {reference input name: float16}, fed rounded to float16 as
    the team's serving code feeds them."""
    if precision not in spec.onnx_artifacts:
        return {}
    back = {c: r for r, c in input_names(spec, runner).items()}
    return {back.get(n, n): np.dtype(np.float16) for n, (dtype, _) in runner.input_metadata().items()
            if dtype == np.float16 and back.get(n, n) in spec.inputs
            and spec.inputs[back.get(n, n)].dtype_of("candidate") == np.float32}


def check_input_spec(spec, metadata, what, side="candidate", half=()):
    """The config's input spec must match the model's inputs by name, rank, dtype (the ``side``'s: reference or
    candidate) and fixed dims; the message names the config key first, then the model file (``what``)."""
    names, want = set(metadata), set(spec.inputs)
    if names != want:
        raise RunnerError(f"{spec.where('inputs')}: declares inputs {sorted(want)}, but {what} has inputs "
                          f"{sorted(names)}")
    for name, tensor in spec.inputs.items():
        dtype, shape = metadata[name]
        if len(shape) != len(tensor.shape):
            raise RunnerError(f"{spec.where(f'inputs.{name}.shape')}: declares rank {len(tensor.shape)} "
                              f"{list(tensor.shape)}, but {what} has input '{name}' of rank {len(shape)} {list(shape)}")
        if dtype != tensor.dtype_of(side) and name not in half:
            key = f"{side}_dtype" if getattr(tensor, f"{side}_dtype") else "dtype"
            raise RunnerError(f"{spec.where(f'inputs.{name}.{key}')}: declares {tensor.dtype_of(side)}, but {what} "
                              f"has input '{name}' of dtype {dtype}")
        for axis, (have, declared) in enumerate(zip(shape[1:], tensor.shape[1:]), start=1):
            if have not in (-1, declared) and declared != -1:
                raise RunnerError(f"{spec.where(f'inputs.{name}.shape')}: declares dimension {axis} = {declared}, "
                                  f"but {what} has input '{name}' with dimension {axis} = {have}")
            bounds = [s[axis] for s in tensor.profile] if declared == -1 else []
            if have != -1 and any(b != have for b in bounds):
                raise RunnerError(f"{spec.where(f'inputs.{name}.profile')}: dimension {axis} ranges over "
                                  f"{sorted(set(bounds))} (min/opt/max), but {what} has input '{name}' fixed at "
                                  f"dimension {axis} = {have}; expected {have} in min, opt and max")



def input_names(spec, runner):
    """Reference input name -> ``runner``'s input name (``backend.iomap``); RunnerError naming the config key."""
    from paritygate.backend import iomap

    try:
        return iomap.input_map(spec, list(runner.input_metadata()))
    except iomap.MappingError as err:
        raise RunnerError(f"{spec.where('inputs')}: {err}") from None
    except iomap.BindingsError as err:
        raise RunnerError(f"{spec.where('reference')}: {err}") from err


def declared_casts(spec, side):
    """{input: dtype} where the config declares another dtype on ``side`` (reference or candidate) than ``dtype``."""
    return {n: t.dtype_of(side) for n, t in spec.inputs.items() if t.dtype_of(side) != t.dtype}


class MappedRunner(BaseRunner):
    """A runner fed by the config's input names and dtypes: renames the feed to the runner's names and casts
    inputs whose side declares another dtype (config.py accepts only casts that are exact over the range)."""

    def __init__(self, runner, inputs, casts=None):
        super().__init__(runner.name)
        self.runner, self.inputs, self.casts = runner, inputs, dict(casts or {})
        self.path = getattr(runner, "path", None)
        self.is_active = runner.is_active

    @property
    def output_names(self):
        """The runner's, read when asked: a lazy runner (a cached reference, a child process) loads nothing here."""
        return self.runner.output_names

    @output_names.setter
    def output_names(self, value):  # BaseRunner.__init__ sets None
        pass

    def activate_impl(self):
        self.runner.activate()

    def infer_bounded(self, feed):  # the wrapped runner bounds its own calls
        return self.infer_impl(feed)

    def infer_impl(self, feed):
        outputs = self.runner.infer({self.inputs.get(k, k): v.astype(self.casts[k]) if k in self.casts else v
                                     for k, v in feed.items()})
        self.last_inference_time = self.runner.last_inference_time
        return outputs

    def input_metadata_impl(self):
        back = {c: r for r, c in self.inputs.items()}
        return {back.get(k, k): v for k, v in self.runner.input_metadata().items()}

    def deactivate_impl(self):
        self.runner.deactivate()

    def __getattr__(self, name):  # runtime-specific attributes (engine, session options) of the wrapped runner
        return getattr(self.__dict__["runner"], name)
