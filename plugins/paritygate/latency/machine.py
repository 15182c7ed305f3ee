"""Machine info recorded with every latency check: timings mean nothing without the machine they came from."""

import os
import platform
from pathlib import Path


def cpu_model():
    """The CPU's model name ("AMD EPYC 7B13"), from /proc/cpuinfo on Linux, else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def usable_cores():
    """CPUs this process may run on (its affinity mask: a container's or taskset's limit shows here)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def load_average():
    """1, 5 and 15 minute load averages, or None where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info(ctx):
    """CPU, cores, load, GPU and versions; versions and GPU come from the run's context (``RunContext.versions``)."""
    env = ctx.versions()
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "load_average": load_average(),
        "gpu": env.get("gpu"),
        "python": env.get("python"),
        "platform": env.get("platform"),
        "tensorflow": env.get("tensorflow"),
        "onnxruntime": env.get("onnxruntime"),
        "tensorrt": env.get("tensorrt"),
        "candidate_runtime": ctx.runtime,
        "device_class": ctx.device_class,
    }


def load_note(load, cores):
    """A note when the machine was busier than its cores while measuring (timings then read high)."""
    if not load or not cores or load[0] <= cores:
        return None
    return (f"the machine was loaded while measuring (1-minute load average {load[0]} on {cores} usable cores): "
            "timings are likely pessimistic")
