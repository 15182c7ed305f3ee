"""TrtRunner: TensorRT 10/11 inference through the tensor-name API, with fresh outputs and two timings.

Per infer: ``set_input_shape`` for each input, device buffers reused per tensor (grown when needed),
``set_tensor_address`` for every I/O tensor, ``execute_async_v3(stream)`` between two CUDA events, and the
outputs copied back into NEW numpy arrays, never views into a reused buffer. The flow is Polygraphy's
TrtRunner's (polygraphy/backend/trt/runner.py, ``_infer_impl``) without what this project does not need:
its outputs are views into host buffers it reuses, it imports torch on every infer where torch is installed
(``util.array.is_torch``), and it cannot time the engine apart from the copies.

Timings: ``last_compute_ms`` is execute_async_v3 alone (CUDA events on the stream); ``last_e2e_ms`` is the
whole infer on the host clock: feed checks, host->device copies, compute, device->host copies, sync.
"""

import os
import time

import numpy as np

from paritygate.backend.base import BaseRunner, RunnerError
from paritygate.backend.trt import util
from paritygate.backend.trt.loader import EngineFromPath, engine_io
from paritygate.lazy import lazy_import

cudart = lazy_import("cuda.bindings.runtime")


class TrtRunner(BaseRunner):
    """Runs a TensorRT engine.

    Args:
        engine: a trt.ICudaEngine, or a loader returning one (``EngineFromPath``), or a loader returning a
            .plan path (``EngineFromOnnx``), which is then deserialized with ``EngineFromPath(path, loader.spec)``.
        name: the runner's name in messages.
    """

    def __init__(self, engine, name=None):
        super().__init__(name or "tensorrt")
        self._source = engine
        self._path_loader = None
        self.engine = self.context = self.io = self._cuda = None
        self.last_compute_ms = None  # execute_async_v3 alone, CUDA events
        self.last_e2e_ms = None  # the whole infer_impl, host clock

    # -- lifecycle -----------------------------------------------------------------------------------
    def activate_impl(self):
        util.require_trt()
        engine = self._load_engine()
        context = engine.create_execution_context()
        if context is None:
            raise RunnerError(f"{self.name}: TensorRT could not create an execution context: "
                              f"{util.take_messages() or 'see its log above'}")
        self.engine, self.context, self.io = engine, context, engine_io(engine)
        self._cuda = _CudaIO()

    def _load_engine(self):
        made = self._source() if callable(self._source) else self._source
        if isinstance(made, (str, os.PathLike)):
            self._path_loader = EngineFromPath(made, getattr(self._source, "spec", None))
            made = self._path_loader()
        if not hasattr(made, "create_execution_context"):
            raise RunnerError(f"{self.name}: expected a TensorRT engine or a loader of one, got {type(made).__name__}")
        return made

    def deactivate_impl(self):
        if self._cuda is not None:
            self._cuda.close()
        self._cuda = self.context = self.engine = self.io = None  # context before engine (dropped in order)
        self._path_loader = None

    # -- inference -----------------------------------------------------------------------------------
    def infer_impl(self, feed):
        start = time.perf_counter()
        self.last_compute_ms = self.last_e2e_ms = None
        inputs = [t for t in self.io if t.is_input]
        check_feed(inputs, feed, self.name)
        cuda, context = self._cuda, self.context
        staged = []  # host arrays stay alive until the stream is synchronized
        for tensor in inputs:
            array = np.ascontiguousarray(feed[tensor.name])
            if not context.set_input_shape(tensor.name, array.shape):
                raise RunnerError(f"{self.name}: TensorRT refused shape {list(array.shape)} for input "
                                  f"'{tensor.name}': {util.take_messages() or 'see its log above'}")
            self._set_address(tensor.name, cuda.upload(tensor.name, array))
            staged.append(array)
        outputs = {}
        for tensor in (t for t in self.io if not t.is_input):
            outputs[tensor.name] = self._output_array(tensor)
            self._set_address(tensor.name, cuda.buffer(tensor.name, outputs[tensor.name].nbytes))
        cuda.record(0)
        ok = context.execute_async_v3(cuda.stream_handle)
        cuda.record(1)
        if not ok:
            cuda.synchronize()
            raise RunnerError(f"{self.name}: execute_async_v3 failed: {util.take_messages() or 'see its log above'}")
        for name, array in outputs.items():
            cuda.download(array, name)
        cuda.synchronize()
        self.last_compute_ms = cuda.elapsed_ms()
        self.last_e2e_ms = (time.perf_counter() - start) * 1e3
        return outputs

    def _output_array(self, tensor):
        shape = tuple(self.context.get_tensor_shape(tensor.name))
        if any(d < 0 for d in shape):
            raise RunnerError(f"{self.name}: output '{tensor.name}' has a data-dependent shape {list(shape)}, which "
                              "this runner does not support (it sizes outputs before execution)")
        if not isinstance(tensor.dtype, np.dtype):
            raise RunnerError(f"{self.name}: output '{tensor.name}' is TensorRT type {tensor.dtype}, which has no "
                              "numpy equivalent: cast it to float32 in the ONNX model")
        return np.empty(shape, tensor.dtype)  # fresh per infer: results never alias a reused buffer

    def _set_address(self, name, ptr):
        if not self.context.set_tensor_address(name, ptr):
            raise RunnerError(f"{self.name}: TensorRT refused the device address of '{name}': "
                              f"{util.take_messages() or 'see its log above'}")

    def input_metadata_impl(self):
        return {t.name: (t.dtype, t.shape) for t in self.io if t.is_input}


def check_feed(inputs, feed, where):
    """The feed must hold exactly the engine's inputs, each of the engine's dtype and shape, with a batch
    that optimization profile 0 admits. Raises RunnerError naming the tensor and what was expected."""
    names = [t.name for t in inputs]
    for name in names:
        if name not in feed:
            raise RunnerError(f"{where}: the feed lacks input '{name}'; the engine's inputs are {names}")
    for name in feed:
        if name not in names:
            raise RunnerError(f"{where}: the feed has '{name}', which is not an input of the engine ({names})")
    for tensor in inputs:
        array = feed[tensor.name]
        if array.dtype != tensor.dtype:
            raise RunnerError(f"{where}: input '{tensor.name}' is {array.dtype}, the engine takes {tensor.dtype}")
        if array.ndim != len(tensor.shape) or any(want not in (-1, have)
                                                  for have, want in zip(array.shape, tensor.shape)):
            raise RunnerError(f"{where}: input '{tensor.name}' has shape {list(array.shape)}, the engine takes "
                              f"{list(tensor.shape)} (-1: any size)")
        if tensor.shape:
            low, high = util.batch_range(tensor)
            if not low <= array.shape[0] <= high:
                raise RunnerError(f"{where}: input '{tensor.name}' has batch {array.shape[0]}, optimization "
                                  f"profile 0 admits {low}..{high}")


class _CudaIO:
    """One CUDA stream, a device buffer per tensor name (grown as needed, reused), and two timing events,
    through cuda-python's runtime bindings (every call returns ``(err, *values)``: paritygate.gpu.device.check)."""

    def __init__(self):
        from paritygate.gpu.device import check

        self._check = check
        self.stream = check(cudart.cudaStreamCreate(), "cudaStreamCreate")
        self.stream_handle = int(self.stream)
        self.events = [check(cudart.cudaEventCreate(), "cudaEventCreate") for _ in range(2)]
        self.buffers = {}  # name -> (device pointer, bytes allocated)

    def buffer(self, name, nbytes):
        ptr, size = self.buffers.get(name, (0, 0))
        if nbytes > size:
            if ptr:
                self._check(cudart.cudaFree(ptr), "cudaFree")
            size = max(nbytes, 256)  # never a null address, even for an empty tensor
            ptr = int(self._check(cudart.cudaMalloc(size), f"cudaMalloc({size}) for '{name}'"))
            self.buffers[name] = (ptr, size)
        return ptr

    def upload(self, name, array):
        ptr = self.buffer(name, array.nbytes)
        if array.nbytes:
            self._check(cudart.cudaMemcpyAsync(ptr, array.ctypes.data, array.nbytes,
                                               cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, self.stream),
                        f"cudaMemcpyAsync (host to device) for '{name}'")
        return ptr

    def download(self, array, name):
        if array.nbytes:
            self._check(cudart.cudaMemcpyAsync(array.ctypes.data, self.buffers[name][0], array.nbytes,
                                               cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost, self.stream),
                        f"cudaMemcpyAsync (device to host) for '{name}'")

    def record(self, index):
        self._check(cudart.cudaEventRecord(self.events[index], self.stream), "cudaEventRecord")

    def elapsed_ms(self):
        return float(self._check(cudart.cudaEventElapsedTime(*self.events), "cudaEventElapsedTime"))

    def synchronize(self):
        self._check(cudart.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")

    def close(self):
        self.synchronize()
        for ptr, _ in self.buffers.values():
            self._check(cudart.cudaFree(ptr), "cudaFree")
        self.buffers.clear()
        for event in self.events:
            self._check(cudart.cudaEventDestroy(event), "cudaEventDestroy")
        self._check(cudart.cudaStreamDestroy(self.stream), "cudaStreamDestroy")
