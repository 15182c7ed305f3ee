"""A step run in a Python process of its own, so that the memory it holds at its peak is never the run's (issue 37:
a real-size model's fp16 and int8 builds each hold several copies of its weights at once).

    report = apart(build_fp16, spec, src, keep, plan, out)   # build_fp16(...) in a fresh process: its result

The process is started fresh (``spawn``: nothing of the run's threads, sessions or TensorFlow is copied into it), runs
``function(*args)`` (a module-level function; arguments and result are pickled) and ends; what it raised is raised
here, its own traceback attached as the cause. A process that dies (killed for memory, say) raises ``ApartError``.
"""

import concurrent.futures
import multiprocessing

from paritygate.verdict import SuiteError

# A model this large (its fp32 ONNX, or its SavedModel) has its artifact builds, its localization and its TensorFlow
# reference run apart (issue 37): ResNet50's (98 MB) fp16 build took the run's process from 1.3 to 2.05 GiB, its int8
# build to 2.4 GiB, its int8 localization from 2.2 to 3.3 GiB, and its reference, loaded and run, held 0.8 GiB of the
# run's 1.77. Smaller ones stay in the run, where a process's start (0.6 s and 80 MB for onnx and ONNX Runtime; 6 s
# and 0.5 GiB for TensorFlow) costs more than their memory.
APART_BYTES = 8 * 2**20


class ApartError(SuiteError):
    """The process running a step ended before it answered."""


def apart(function, *args):
    """``function(*args)`` in a fresh Python process: its result, or what it raised."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        try:
            return pool.submit(function, *args).result()
        except concurrent.futures.process.BrokenProcessPool as err:
            raise ApartError(f"the process running {function.__module__}.{function.__qualname__} ended before it "
                             f"answered (killed, for memory or by a signal?): {err}") from err
