"""paritygate.gpu.device on any machine: the probe's reasons, device classes, xdist pinning, and the plugin's
gpu/trt skipping end to end (pytester). The GPU fixtures' behaviour on a real GPU is conformance/test_gpu.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paritygate.gpu import device as gpu
from tests.conftest import CudaResult

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("cuda", "tensorflow", "tensorrt", "apache_beam", "onnxruntime", "tf2onnx", "polygraphy")
# The plugin is loaded by module name in inner runs; blocking the entry point keeps it from loading twice.
PLUGIN_ARGS = ("-p", "no:paritygate", "-p", "paritygate.plugin", "--strict-markers")
NO_GPU = gpu.GpuProbe(False, "no GPU here (faked by tests/gpu/test_device.py)")
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
        "total_memory_bytes": 85_045_460_992, "driver_version": "13.0", "cuda_runtime_version": "13.0"}
ONE_GPU = gpu.GpuProbe(True, None, [H100], {"driver_release": "580.159.04"})

INNER_TESTS = """
import pytest

@pytest.mark.gpu
def test_marked_gpu():
    pass

@pytest.mark.trt
def test_marked_trt():
    pass

def test_uses_gpu_fixture(gpu):
    assert gpu.compute_capability

def test_plain():
    pass
"""


@pytest.fixture
def fake_probe(monkeypatch):
    """Swap the process-wide probe for a given GpuProbe (session.py and the fixtures call gpu.probe())."""
    def install(result, trt=None):
        monkeypatch.setattr(gpu, "probe", lambda: result)
        monkeypatch.setattr(gpu, "trt_reason", lambda: trt)
    return install


# -- importing is cheap ------------------------------------------------------------------------------------
def test_importing_the_plugin_imports_no_heavy_framework():
    code = ("import json, sys; import paritygate.plugin, paritygate.gpu.device, paritygate.gpu.measure; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


# -- the probe ---------------------------------------------------------------------------------------------
def test_probe_without_cuda_python_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda", None)  # makes `import cuda.bindings` fail like a missing install
    monkeypatch.setattr(gpu, "available", lambda name: False)  # ... and find_spec agree, also on a GPU host
    gpu.probe.cache_clear()
    try:
        found = gpu.probe()
    finally:
        gpu.probe.cache_clear()
    assert not found.available
    assert found.reason == "cuda-python (cuda.bindings) is not installed (pip install 'paritygate[gpu]')"
    assert found.describe() == {"available": False, "reason": found.reason}
    assert found.device_class() == "cpu"


_Err = CudaResult


OK = _Err(0, "CUDA_SUCCESS")


class FakeDriver:
    """The few cuda.bindings.driver calls probe_driver() makes, returning (err, *values) like the real one."""

    class CUdevice_attribute:
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = "major"
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = "minor"

    def __init__(self, init=OK, driver_version=13000, names=(b"NVIDIA H100 80GB HBM3\0\0",), init_raises=None):
        self.init, self.version, self.names, self.init_raises = init, driver_version, names, init_raises

    def cuInit(self, flags):
        if self.init_raises:
            raise self.init_raises
        return (self.init,)

    def cuDriverGetVersion(self):
        return OK, self.version

    def cuDeviceGetCount(self):
        return OK, len(self.names)

    def cuDeviceGet(self, index):
        return OK, index

    def cuDeviceGetAttribute(self, attr, dev):
        return OK, {"major": 9, "minor": 0}[attr]

    def cuDeviceGetName(self, length, dev):
        return OK, self.names[dev]

    def cuDeviceTotalMem(self, dev):
        return OK, 80 * 2**30


class FakeRuntime:
    @staticmethod
    def cudaRuntimeGetVersion():
        return OK, 13050


def test_probe_reports_each_device():
    found = gpu.probe_driver(FakeDriver(names=(b"NVIDIA H100 80GB HBM3\0", b"Tesla T4\0")), FakeRuntime, "13.5.0")
    assert found.available and found.reason is None
    assert [d["name"] for d in found.devices] == ["NVIDIA H100 80GB HBM3", "Tesla T4"]
    assert found.info() == gpu.GpuInfo(0, "NVIDIA H100 80GB HBM3", "9.0", 80 * 2**30, "13.0", "13.5")
    described = found.describe()
    assert described["device_count"] == 2 and described["cuda_bindings_version"] == "13.5.0"
    assert found.device_class() == "h100"


@pytest.mark.parametrize(("fake", "reason"), [
    (FakeDriver(init=_Err(100, "CUDA_ERROR_NO_DEVICE")), "cuInit failed: CUDA_ERROR_NO_DEVICE"),
    (FakeDriver(init=_Err(35, "CUDA_ERROR_INSUFFICIENT_DRIVER")),
     "cuInit failed: CUDA_ERROR_INSUFFICIENT_DRIVER; the NVIDIA driver is too old for cuda-bindings 13.5.0"),
    (FakeDriver(init_raises=RuntimeError("libcuda.so.1: cannot open shared object file")),
     "the NVIDIA driver library (libcuda.so.1) was not found: libcuda.so.1: cannot open shared object file"),
    (FakeDriver(driver_version=12040),
     ("the NVIDIA driver supports CUDA 12.4 but cuda-bindings 13.5.0 needs CUDA 13.0 or newer: upgrade the driver "
      "or pip install 'cuda-python==12.*'")),
    (FakeDriver(names=()), "the NVIDIA driver sees no CUDA device"),
], ids=["no-device", "old-driver", "no-libcuda", "driver-older-than-bindings", "none-visible"])
def test_probe_says_precisely_why_there_is_no_gpu(fake, reason, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = gpu.probe_driver(fake, FakeRuntime, "13.5.0")
    assert (found.available, found.reason) == (False, reason)
    with pytest.raises(RuntimeError, match="no GPU"):
        found.info()


def test_probe_names_an_empty_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    found = gpu.probe_driver(FakeDriver(names=()), FakeRuntime, "13.5.0")
    assert found.reason == "the NVIDIA driver sees no CUDA device (CUDA_VISIBLE_DEVICES='')"


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H100 PCIe", "h100"),
    ("NVIDIA H200", "h200"),
    ("Tesla T4", "t4"),
    ("NVIDIA A100-SXM4-40GB", "a100"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA L40S", "l40s"),
    ("Tesla V100-SXM2-16GB", "v100"),
    ("NVIDIA RTX A6000", "a6000"),
    ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ("Quadro RTX 8000", "quadro-rtx-8000"),
])
def test_device_class_from_gpu_name(name, expected):
    assert gpu.device_class(name) == expected


def test_trt_reason_names_what_is_missing(monkeypatch):
    installed = set()
    monkeypatch.setattr(gpu, "available", lambda name: name in installed)
    assert gpu.trt_reason() == "tensorrt and polygraphy are not installed (pip install 'paritygate[gpu]')"
    installed.add("polygraphy")
    assert gpu.trt_reason() == "tensorrt is not installed (pip install 'paritygate[gpu]')"
    installed.add("tensorrt")
    assert gpu.trt_reason() is None


# -- xdist pinning -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("workerid", "count", "expected"), [
    ("gw0", 4, "0"), ("gw1", 4, "1"), ("gw5", 4, "1"), ("gw3", 1, "0"),
])
def test_worker_pins_gpu_modulo_device_count(workerid, count, expected):
    env = {}
    assert gpu.pin_xdist_worker(workerid, env, device_count=count) == expected
    assert env == {"CUDA_VISIBLE_DEVICES": expected}


@pytest.mark.parametrize(("preset", "workerid", "expected"), [
    ("2,3", "gw0", "2"), ("2,3", "gw1", "3"), ("2,3", "gw2", "2"), (" 5 , 7 ", "gw1", "7"),
    ("GPU-aaaa,GPU-bbbb", "gw1", "GPU-bbbb"), ("MIG-1234", "gw3", "MIG-1234"),
])
def test_worker_indexes_into_a_preset_cuda_visible_devices(preset, workerid, expected):
    env = {"CUDA_VISIBLE_DEVICES": preset}
    assert gpu.pin_xdist_worker(workerid, env, device_count=8) == expected
    assert env["CUDA_VISIBLE_DEVICES"] == expected


def test_workers_sharing_a_gpu_are_flagged():
    env = {}
    assert gpu.pin_xdist_worker("gw2", env, device_count=2, worker_count=3) == "0"
    assert env == {"CUDA_VISIBLE_DEVICES": "0", gpu.SHARED_GPU_ENV: "2"}
    env = {}
    gpu.pin_xdist_worker("gw1", env, device_count=2, worker_count=2)
    assert gpu.SHARED_GPU_ENV not in env


@pytest.mark.parametrize(("workerid", "env", "count"), [
    ("gw0", {}, 0),  # no GPU known: leave the environment alone
    ("gw1", {"CUDA_VISIBLE_DEVICES": ""}, 4),  # the user hid every GPU
    ("master", {}, 4),
    (None, {}, 4),
])
def test_worker_pinning_changes_nothing_without_a_choice(workerid, env, count):
    before = dict(env)
    assert gpu.pin_xdist_worker(workerid, env, device_count=count) is None
    assert env == before


def test_xdist_workers_are_pinned_before_tests_run(pytester, monkeypatch):
    pytest.importorskip("xdist")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setenv("PIN_OUT", str(pytester.path))
    pytester.makepyfile(test_pinned="""
        import os
        from pathlib import Path

        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_env(i, worker_id):
            out = Path(os.environ["PIN_OUT"]) / f"{worker_id}.env"
            out.write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
    """)
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=4)
    written = {p.stem: p.read_text() for p in pytester.path.glob("gw*.env")}
    assert written == {"gw0": "4", "gw1": "6"}  # two workers, two GPUs listed: one each


# -- the plugin end to end (pytester) ----------------------------------------------------------------------
def test_gpu_tests_skip_with_the_probe_reason(pytester, fake_probe):
    fake_probe(NO_GPU)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-m", "gpu", "-rs")
    result.assert_outcomes(skipped=2, deselected=2)  # trt implies gpu, so `-m gpu` selects it too
    assert result.stdout.str().count("no GPU here (faked by tests/gpu/test_device.py)") == 2
    assert result.ret == pytest.ExitCode.OK


def test_gpu_fixture_skips_an_unmarked_test(pytester, fake_probe):
    fake_probe(NO_GPU)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-rs")
    result.assert_outcomes(passed=1, skipped=3)
    assert result.stdout.str().count("no GPU here (faked by tests/gpu/test_device.py)") == 3


def test_require_gpu_fails_the_run_and_says_why(pytester, fake_probe):
    fake_probe(NO_GPU)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "--require-gpu", "-rE")
    result.assert_outcomes(passed=1, errors=3)
    result.stdout.fnmatch_lines(["*--require-gpu: no GPU here (faked by tests/gpu/test_device.py)*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_trt_tests_skip_when_tensorrt_is_missing_but_the_gpu_is_there(pytester, fake_probe):
    fake_probe(ONE_GPU, trt="tensorrt is not installed (pip install 'paritygate[gpu]')")
    pytester.makepyfile(test_inner=INNER_TESTS.split("def test_uses_gpu_fixture")[0])
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-m", "gpu", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert "test_inner.py:7: tensorrt is not installed (pip install 'paritygate[gpu]')" in result.stdout.str()
    failed = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-m", "gpu", "--require-gpu")
    failed.assert_outcomes(passed=1, errors=1)
    failed.stdout.fnmatch_lines(["*--require-gpu: tensorrt is not installed*"])


def test_real_probe_decides_the_outcome(pytester):
    """No fake: on a GPU machine the marked test runs, elsewhere it skips with the probe's own reason."""
    found = gpu.probe()
    pytester.makepyfile(test_inner=INNER_TESTS.split("@pytest.mark.trt")[0])
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-m", "gpu", "-rs")
    if found.available:
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(skipped=1)
        assert found.reason in result.stdout.str()


def test_conformance_gpu_tests_skip_with_reasons_without_a_gpu():
    """The repository's own `pytest -m gpu`: collected, then each skipped with the probe's reason."""
    if gpu.probe().available:
        pytest.skip("a GPU is here: conformance/test_gpu.py runs for real instead")
    target = REPO / "conformance" / "test_gpu.py"
    command = [sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-m", "gpu", "-rs", "-q", "-p", "no:cacheprovider",
               str(target)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), *sys.path])}
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" not in proc.stdout and " skipped" in proc.stdout, proc.stdout
    assert gpu.probe().reason in proc.stdout
