"""paritygate.backend.registry: one entry per candidate runtime, and no runtime name compared anywhere else."""

import ast
from pathlib import Path

import pytest

from paritygate.backend import registry
from paritygate.context import RunContext, RunOptions

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*(ROOT / "plugins" / "paritygate").rglob("*.py"), *(ROOT / "conformance").rglob("*.py")]
REGISTRY = ROOT / "plugins" / "paritygate" / "backend" / "registry.py"


def _names(node):
    """The runtime names a compare operand holds: a string constant, or a tuple / list / set of them."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and i.value in registry.RUNTIMES}


def runtime_compares(path, root=ROOT):
    """``file:line`` of each comparison (==, !=, in, not in) with a runtime's name as a string constant, and of each
    ``startswith`` / ``endswith`` of one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        compared = isinstance(node, ast.Compare) and any(_names(n) for n in [node.left, *node.comparators])
        prefixed = isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("startswith", "endswith") \
            and any(_names(a) for a in node.args)
        if compared or prefixed:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_module_but_the_registry_compares_runtime_names():
    offenders = [hit for path in SOURCES if path != REGISTRY for hit in runtime_compares(path)]
    assert not offenders, "compare the runtime's entry (backend.registry), not its name:\n" + "\n".join(offenders)


def test_the_compare_check_sees_each_form(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("a = x == 'tensorrt'\nb = x in ('onnxruntime', 'y')\nc = 'tensorrt-rtx' != x\nd = x == 'gpu'\n"
                    "e = x not in ['onnxruntime-cuda']\nf = x.startswith('tensorrt')\ng = {'runtime': 'onnxruntime'}\n")
    assert runtime_compares(path, tmp_path) == ["m.py:1", "m.py:2", "m.py:3", "m.py:5", "m.py:6"]


def test_every_runtime_is_one_entry_with_what_the_suite_asks_of_it():
    assert registry.names() == ("onnxruntime", "onnxruntime-cuda", "tensorrt", "tensorrt-rtx")
    for name, entry in registry.RUNTIMES.items():
        assert entry.name == name and entry.summary and callable(entry.load) and callable(entry.needs)
        assert entry.mark in (None, "gpu", "trt")
        assert entry.follows_numerics or entry.numerics_note, name
    cpu = registry.get(registry.CPU)
    assert not cpu.needs_gpu and cpu.follows_numerics and cpu.validated and cpu.engine_gate
    assert all(registry.get(n).needs_gpu for n in ("onnxruntime-cuda", "tensorrt", "tensorrt-rtx"))
    with pytest.raises(ValueError, match="runtime 'onnxruntime-gpu': expected one of onnxruntime, onnxruntime-cuda"):
        registry.get("onnxruntime-gpu")


def test_the_numerics_label_is_the_mode_on_the_cpu_and_the_runtime_elsewhere():
    assert registry.numerics_label("onnxruntime", "ort") == "ort"
    assert registry.numerics_label("onnxruntime", "strict") == "strict"
    for name in ("onnxruntime-cuda", "tensorrt", "tensorrt-rtx"):
        assert registry.numerics_label(name, "strict") == name
        assert registry.describe_numerics(name).startswith(f"{name}: ")
    assert RunContext(runtime="tensorrt", numerics="ort").numerics_label == "tensorrt"
    assert RunOptions(runtime="onnxruntime", numerics="ort").numerics_label == "ort"


def test_a_runtime_sets_its_environment_before_its_libraries_load(monkeypatch):
    import os

    monkeypatch.setenv("POLYGRAPHY_USE_TENSORRT_RTX", "0")  # restored (unset) after the test
    RunOptions(runtime="onnxruntime")
    assert os.environ["POLYGRAPHY_USE_TENSORRT_RTX"] == "0"
    RunOptions(runtime="tensorrt-rtx")
    assert os.environ["POLYGRAPHY_USE_TENSORRT_RTX"] == "1"


@pytest.mark.tf
@pytest.mark.onnx
def test_where_the_cuda_runtime_cannot_run_its_checks_skip_with_its_reason_and_no_numerics_line(
        pytester, toy_saved_model):
    """--parity-runtime=onnxruntime-cuda on a machine without a GPU (or without onnxruntime-gpu): every candidate
    check skips with the runtime's own reason, none errors, and no fp16/int8 row claims numerics nothing computed."""
    import json

    from paritygate.backend.onnxrt.loader import cuda_reason
    from paritygate.gpu import device
    from tests.conftest import write_config

    pytest.importorskip("tensorflow")
    pytest.importorskip("onnxconverter_common")
    reason = device.probe().reason or cuda_reason()
    if reason is None:
        pytest.skip("ONNX Runtime's CUDA provider runs here")
    model = {"name": "toy", "reference": str(toy_saved_model), "precisions": ["fp32", "fp16"], "max_batch": 2,
             "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    config, report = write_config(pytester.path, {"models": [model]}), pytester.path / "report"
    result = pytester.runpytest(str(ROOT / "conformance" / "test_parity.py"), f"--parity-config={config}",
                                f"--parity-report={report}", "--parity-runtime=onnxruntime-cuda", "-rs",
                                "-p", "no:cacheprovider", "-p", "no:xdist")
    checks = json.loads((report / "parity-report.json").read_text())["checks"]
    assert checks and {c["status"] for c in checks} == {"skip"}, result.stdout.str()
    assert all(reason in c["details"]["reason"] for c in checks), [c["details"]["reason"] for c in checks]
    assert not [c for c in checks if c["details"].get("numerics")]
    assert "rows computed with" not in result.stdout.str()
    result.stdout.fnmatch_lines(["paritygate: runtime onnxruntime-cuda, * checks: 0 pass, 0 fail, 0 error, *"])


def test_a_runtime_names_its_own_refusal_before_what_the_run_lacks(monkeypatch):
    """docs/engine.md: on a GPU its runtime refuses, the checks skip with the runtime's words, not with a missing
    TensorFlow; where the runtime runs, what the run lacks is the reason."""
    from tests.conftest import toy_spec

    spec = toy_spec()  # no ONNX of its own: converting it needs tensorflow and tf2onnx
    monkeypatch.setattr(registry, "available", lambda name: False)
    monkeypatch.setitem(registry._REFUSED, "tensorrt-rtx", "TensorRT-RTX's runtime refuses this GPU: (9.0)")
    assert registry.get("tensorrt-rtx").needs([spec]) == "TensorRT-RTX's runtime refuses this GPU: (9.0)"
    monkeypatch.setitem(registry._REFUSED, "tensorrt-rtx", None)
    assert registry.get("tensorrt-rtx").needs([spec]).startswith("onnx is not installed")
    monkeypatch.setitem(registry._REFUSED, "onnxruntime-cuda", None)
    assert "tensorflow is not installed (pip install 'paritygate[tf]')" in registry.get("onnxruntime-cuda").needs([spec])
