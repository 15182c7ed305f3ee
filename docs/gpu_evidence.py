"""Strict FP16 emulation against real FP16 GPU kernels (issue 15, item 5): for each model folder that
docs/gpu_evidence_prep.py made on the CPU machine, run its fp16 artifact through onnx2torch on CUDA (the artifact
as typed: its float16 initializers and Casts make PyTorch run those ops in float16, its kept-FP32 ops in float32),
and write a JSON of the errors against the TensorFlow reference for

  (a) ONNX Runtime CPU's own numerics (``ort.npz``, made on the CPU machine),
  (b) strict emulation (``strict.npz``, made on the CPU machine),
  (c) GPU FP16 kernels (computed here),

with, per check (rows of the inputs: matches_reference, corner:low, corner:high), pass/fail under the model's fp16
tolerance for each, whether (b) and (c) agree, and the ratio of their max errors. No TensorFlow and no TensorRT
are needed or claimed: (c) is PyTorch's CUDA FP16 kernels (cuDNN / cuBLAS), not a TensorRT engine.

Needs torch, onnx and numpy; onnx2torch 1.5.15 is imported from its pure-Python wheel (``--wheels``, default
``.whl``). onnx2torch imports torchvision at import time for its NMS / RoIAlign converters only; without
torchvision a stub stands in (those two converters then raise), and the JSON says so.

    python3 docs/gpu_evidence.py [--folder .gpuev] [--wheels .whl] [--device cuda] [--out $OUT/gpu_evidence.json]
"""

import argparse
import json
import sys
import time
import types
from pathlib import Path

import numpy as np


def import_onnx2torch(wheels):
    if "onnx2torch" in sys.modules:  # imported (and its converters added) once per process: adding twice raises
        return sys.modules["onnx2torch"], getattr(sys.modules.get("torchvision"), "__version__", "") == "0+stub"
    for wheel in sorted(Path(wheels).glob("onnx2torch-*.whl")):
        sys.path.insert(0, str(wheel))  # a pure-Python wheel is a zip archive Python imports from
    stubbed = False
    try:
        import torchvision  # noqa: F401
    except ImportError:
        stubbed = True
        stub, ops = types.ModuleType("torchvision"), types.ModuleType("torchvision.ops")

        def missing(*args, **kwargs):
            raise NotImplementedError("torchvision is not installed (gpu_evidence.py stub)")

        ops.nms = ops.box_convert = ops.roi_align = missing
        stub.ops, stub.__version__ = ops, "0+stub"
        sys.modules.update({"torchvision": stub, "torchvision.ops": ops})
    import onnx2torch

    add_converters()
    return onnx2torch, stubbed


def add_converters():
    """Two converters onnx2torch 1.5.15 lacks, both exact (they only move or select values): GlobalMaxPool (the
    bundled ssd) and Pad in reflect / edge mode over any axis (basic_pitch pads its batch-major audio on axis 1;
    onnx2torch leaves that to torch.nn.functional.pad, which reflects only the last dimensions). No Loop converter:
    a model with a Loop (nakdimon's LSTMs) stays CPU-only here."""
    import torch
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, add_converter
    from onnx2torch.utils.common import OperationConverterResult, onnx_mapping_from_node

    class GlobalMaxPool(torch.nn.Module):
        def forward(self, x):
            return x.amax(dim=tuple(range(2, x.dim())), keepdim=True)

    class Pad(torch.nn.Module):
        def __init__(self, mode):
            super().__init__()
            self.mode = mode

        def forward(self, x, pads, value=None, axes=None):
            pads = [int(p) for p in pads.tolist()]
            axes = list(range(x.dim())) if axes is None else [int(a) % x.dim() for a in axes.tolist()]
            for axis, begin, end in zip(axes, pads[:len(axes)], pads[len(axes):]):
                if begin < 0 or end < 0:
                    raise NotImplementedError("negative pads")
                n = x.shape[axis]
                if self.mode == "constant":
                    fill = 0 if value is None else value
                    before, after = list(x.shape[:axis]), list(x.shape[axis + 1:])
                    x = torch.cat([x.new_full([*before, begin, *after], fill), x,
                                   x.new_full([*before, end, *after], fill)], dim=axis)
                    continue
                body = torch.arange(n, device=x.device)
                if self.mode == "reflect":
                    head, tail = torch.arange(begin, 0, -1, device=x.device), torch.arange(n - 2, n - 2 - end, -1, device=x.device)
                else:  # edge
                    head, tail = torch.zeros(begin, dtype=torch.long, device=x.device), torch.full((end,), n - 1, device=x.device)
                x = x.index_select(axis, torch.cat([head, body, tail]))
            return x

    add_converter(operation_type="GlobalMaxPool", version=1)(
        lambda node, graph: OperationConverterResult(torch_module=GlobalMaxPool(),
                                                     onnx_mapping=onnx_mapping_from_node(node=node)))
    for key in [k for k in _CONVERTER_REGISTRY if k.operation_type == "Pad"]:
        _CONVERTER_REGISTRY[key] = lambda node, graph: OperationConverterResult(
            torch_module=Pad(node.attributes.get("mode", "constant")), onnx_mapping=onnx_mapping_from_node(node=node))


def run_gpu(folder, device, onnx2torch):
    import onnx
    import torch

    model = onnx.load(str(folder / "fp16.onnx"))
    module = onnx2torch.convert(model).to(device).eval()
    with np.load(folder / "inputs.npz") as data:
        feed = [torch.from_numpy(np.ascontiguousarray(data[i.name])).to(device) for i in model.graph.input]
    with torch.inference_mode():
        out = module(*feed)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    out = out if isinstance(out, (list, tuple)) else [out]
    return {o.name: v.float().cpu().numpy() for o, v in zip(model.graph.output, out)}


def errors(ref, x):
    """max / mean abs error over the elements finite in both; the count of elements non-finite in x only."""
    ref, x = ref.astype(np.float64), x.astype(np.float64)
    both = np.isfinite(ref) & np.isfinite(x)
    diff = np.abs(ref[both] - x[both])
    return {"max_abs": float(diff.max()) if diff.size else None, "mean_abs": float(diff.mean()) if diff.size else None,
            "nonfinite": int((np.isfinite(ref) & ~np.isfinite(x)).sum())}


def passes(ref, x, tol):
    ref, x = ref.astype(np.float64), x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.abs(x - ref) <= tol["atol"] + tol["rtol"] * np.abs(ref)
    ok |= ~np.isfinite(ref) & (ref == x)
    return bool(ok.all())


def ratio(b, c):
    if b is None or c is None:
        return None
    return c / b if b > 0 else (None if c > 0 else 1.0)


def compare(folder, gpu):
    meta = json.loads((folder / "meta.json").read_text())
    cpu = {}
    for key, name in (("ref", "ref"), ("a_ort", "ort"), ("b_strict", "strict")):
        with np.load(folder / f"{name}.npz") as data:
            cpu[key] = {k: data[k] for k in data.files}
    variants = {"a_ort": cpu["a_ort"], "b_strict": cpu["b_strict"], "c_gpu_fp16": gpu}
    outputs, checks = {}, {}
    for ref_name, name in meta["outputs"].items():
        ref = cpu["ref"][name]
        row = {v: errors(ref, vals[name].reshape(ref.shape)) for v, vals in variants.items()}
        row["max_ratio_c_over_b"] = ratio(row["b_strict"]["max_abs"], row["c_gpu_fp16"]["max_abs"])
        outputs[ref_name] = row
    for check, (lo, hi) in meta["checks"].items():
        verdict = {}
        for v, vals in variants.items():
            verdict[v] = "pass" if all(
                passes(cpu["ref"][n][lo:hi], vals[n].reshape(cpu["ref"][n].shape)[lo:hi], meta["tolerance"][r])
                for r, n in meta["outputs"].items()) else "fail"
        b_max = max((errors(cpu["ref"][n][lo:hi], cpu["b_strict"][n][lo:hi])["max_abs"] or 0) for n in meta["outputs"].values())
        c_max = max((errors(cpu["ref"][n][lo:hi], gpu[n].reshape(cpu["ref"][n].shape)[lo:hi])["max_abs"] or 0)
                    for n in meta["outputs"].values())
        checks[check] = {**verdict, "b_c_agree": verdict["b_strict"] == verdict["c_gpu_fp16"],
                         "max_abs_b": b_max, "max_abs_c": c_max, "max_ratio_c_over_b": ratio(b_max, c_max)}
    return {"outputs": outputs, "checks": checks, "tolerance": meta["tolerance"], "rule": meta["rule"],
            "made_with": meta.get("made_with"), "strict_build": meta.get("strict_build")}


def environment(device, stubbed):
    import onnx
    import torch

    env = {"torch": torch.__version__, "onnx": onnx.__version__, "numpy": np.__version__, "device": device,
           "torchvision": "stub (not installed)" if stubbed else sys.modules["torchvision"].__version__,
           "python": sys.version.split()[0]}
    if device.startswith("cuda"):
        env.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                   allow_tf32_matmul=torch.backends.cuda.matmul.allow_tf32, allow_tf32_cudnn=torch.backends.cudnn.allow_tf32,
                   allow_fp16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
    return env


def table(results):
    lines = ["| model | output | (a) ORT own max / mean | (b) strict max / mean | (c) GPU FP16 max / mean | c/b |",
             "| --- | --- | --- | --- | --- | --- |"]
    fmt = lambda e: ("none finite" if e["max_abs"] is None else f"{e['max_abs']:.3g} / {e['mean_abs']:.2g}") + (
        f" ({e['nonfinite']} non-finite)" if e["nonfinite"] else "")
    for model, r in results.items():
        if "error" in r:
            lines.append(f"| {model} | — | — | — | {r['error'][:120]} | — |")
            continue
        for out, row in r["outputs"].items():
            q = row["max_ratio_c_over_b"]
            lines.append(f"| {model} | {out} | {fmt(row['a_ort'])} | {fmt(row['b_strict'])} | {fmt(row['c_gpu_fp16'])} "
                         f"| {'—' if q is None else f'{q:.2f}'} |")
    lines += ["", "| model | check | (a) | (b) | (c) | b = c |", "| --- | --- | --- | --- | --- | --- |"]
    for model, r in results.items():
        for check, c in r.get("checks", {}).items():
            lines.append(f"| {model} | {check} | {c['a_ort']} | {c['b_strict']} | {c['c_gpu_fp16']} | "
                         f"{'yes' if c['b_c_agree'] else 'NO'} |")
    return "\n".join(lines)


def measure(folder, wheels=".whl", device="cuda"):
    """({model: compare()'s result, or {"error": ...}}, torchvision stubbed) for every model folder under
    ``folder`` that docs/gpu_evidence_prep.py made: the table's computation (main, tests/backend/onnx/strict/
    test_gpu.py)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # the kept-FP32 ops stay FP32 (TF32 would round their inputs)
    torch.backends.cudnn.allow_tf32 = False
    onnx2torch, stubbed = import_onnx2torch(wheels)
    results = {}
    for sub in sorted(p for p in Path(folder).iterdir() if (p / "meta.json").exists()):
        started = time.perf_counter()
        try:
            results[sub.name] = compare(sub, run_gpu(sub, device, onnx2torch))
        except Exception as err:  # noqa: BLE001 - one model's converter gap must not hide the others
            results[sub.name] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:400] if str(err) else ''}"}
        results[sub.name]["seconds"] = round(time.perf_counter() - started, 2)
        print(sub.name, "error: " + results[sub.name]["error"] if "error" in results[sub.name] else "ok", flush=True)
    return results, stubbed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=".gpuev")
    parser.add_argument("--wheels", default=".whl")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None, help="JSON path (default: $OUT/gpu_evidence.json, else ./)")
    args = parser.parse_args(argv)
    import os

    results, stubbed = measure(args.folder, args.wheels, args.device)
    doc = {"environment": environment(args.device, stubbed), "models": results}
    out = Path(args.out or Path(os.environ.get("OUT", ".")) / "gpu_evidence.json")
    out.write_text(json.dumps(doc, indent=1))
    print(table(results))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
