"""ONNX Runtime's CUDA provider (the onnxruntime-cuda candidate) against the reference, beside strict emulation on the
CPU, on the bundled and third-party models at every precision they list (issue 40; tables in docs/gpu.md).

The GPU machine has no TensorFlow, so the work is split in three, and the verdicts are the suite's own:

    .venv/bin/python docs/measure_cuda.py prep FOLDER            # here: each model's artifacts, the batches to feed
    python3 docs/measure_cuda.py run FOLDER OUT [--cpu]           # on the GPU: every batch on the CUDA provider
    python3 docs/measure_cuda.py placement FOLDER OUT/placement.json  # on the GPU: which nodes ONNX Runtime puts on the CPU
    .venv/bin/python docs/measure_cuda.py judge FOLDER OUT [JSON] # here: ``judge.parity.candidate_parity`` on each

``prep`` writes, per model, the ONNX artifact of each precision (``onnx_artifact``, the file the candidate runs), the
input groups ``matches_reference`` feeds (``reference_set``: goldens, or the model's input set through live
TensorFlow) and how the candidate runner renames and casts them. ``run`` (numpy, onnxruntime-gpu and this package's
backend modules only) feeds every batch through ``OnnxrtRunner(SessionFromOnnx(artifact, cuda_providers()))`` as the
registry's onnxruntime-cuda entry builds it, fp32 also with TF32 on, and keeps each batch's outputs under the
suite's digest of the batch; it also records whether every node is placed on the CUDA provider
(``session.disable_cpu_ep_fallback``). ``judge`` runs ``candidate_parity`` (the ``matches_reference`` check: the
model's policy, reference noise floors, task metric, vacuity, coverage) once with ONNX Runtime's CPU candidate under
strict numerics and once per CUDA variant, the CUDA candidate played back from ``run``'s outputs (a batch not
recorded there is an error). ``run --cpu`` plays the CPU provider in the CUDA provider's place: its fp32 rows must then
read exactly as the CPU candidate's, which checks the pipeline itself. TensorRT-RTX's builder gate is left out of both (nakdimon's Loop would stop its checks
before any number): the table notes where the builder rejects.
"""

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
BUNDLED = ("linear", "mobilenet", "bert", "ssd")
THIRDPARTY = ("basic_pitch", "nakdimon", "fer", "pnet")
VARIANTS = {"fp32": (("cuda", False), ("cuda-tf32", True)), "fp16": (("cuda", False),), "int8": (("cuda", False),)}


# -- here, with TensorFlow -----------------------------------------------------------------------------------
def models(only=()):
    """(name, RunOptions, spec) per model: the bundled zoo, then one config per third-party model."""
    import tempfile

    from paritygate.context import RunOptions

    options = RunOptions()
    for spec in options.models:
        if spec.name in BUNDLED and (not only or spec.name in only):
            yield spec.name, options, spec
    from tests.thirdparty.conftest import EXPORTS, exported, missing, one_model_config

    for name in THIRDPARTY:
        if only and name not in only:
            continue
        if missing(name):
            print(f"skipped {name}: {missing(name)}")
            continue
        if name in EXPORTS:
            exported(name)
        options = RunOptions(one_model_config(name, Path(tempfile.mkdtemp(prefix=f"cuda-{name}-"))))
        yield name, options, options.models[0]


def prep(folder, only=()):
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact
    from paritygate.backend.runtimes import candidate_runner
    from paritygate.judge.parity import reference_set

    for name, options, spec in models(only):
        ctx, out = options.context, Path(folder) / name
        out.mkdir(parents=True, exist_ok=True)
        groups = reference_set(ctx, spec).groups
        np.savez_compressed(out / "groups.npz", **{f"{i}|{k}": v for i, g in enumerate(groups) for k, v in g.inputs.items()})
        meta = {"model": name, "max_batch": spec.max_batch, "groups": len(groups), "precisions": {}}
        for precision in spec.precisions:
            (out / f"{precision}.onnx").write_bytes(Path(onnx_artifact(spec, precision, ctx.fp16_keep_fp32)).read_bytes())
            fed = candidate_runner(ctx, spec, precision, engine=False)
            meta["precisions"][precision] = {"renames": dict(getattr(fed, "inputs", {})),
                                             "casts": {k: np.dtype(v).str for k, v in getattr(fed, "casts", {}).items()}}
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
        size = sum(p.stat().st_size for p in out.iterdir()) / 2**20
        print(f"{name}: {len(groups)} group(s), precisions {list(meta['precisions'])}, {size:.1f} MiB")
        options.close()


# -- on the GPU machine ----------------------------------------------------------------------------------------
def _placement(path):
    """'all on CUDA', or ONNX Runtime's words when a node needs the CPU provider (fallback disabled)."""
    import onnxruntime as ort

    from paritygate.backend.onnxrt.loader import cuda_providers

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    try:
        ort.InferenceSession(str(path), sess_options=options, providers=cuda_providers()[:1])
    except Exception as err:  # noqa: BLE001 - ONNX Runtime's own words are the answer
        return f"not all on CUDA: {str(err).splitlines()[0][:400]}"
    return "all on CUDA"


def run(folder, out, cpu=False):
    import time

    from paritygate.backend.base import BaseRunner, run_batched
    from paritygate.backend.inputspec import MappedRunner
    from paritygate.backend.onnxrt.loader import SessionFromOnnx, cuda_providers
    from paritygate.backend.onnxrt.runner import OnnxrtRunner
    from paritygate.common.digest import digest

    class Recorder(BaseRunner):
        def __init__(self, runner, kept):
            super().__init__(runner.name)
            self.runner, self.kept, self.is_active = runner, kept, True

        def infer_impl(self, feed):
            outputs = self.runner.infer(feed)
            self.kept[digest(feed)] = outputs
            return outputs

    report, out, files = {"models": {}}, Path(out), {}
    for meta_path in sorted(Path(folder).glob("*/meta.json")):
        meta = json.loads(meta_path.read_text())
        arrays = files.setdefault("bundled" if meta["model"] in BUNDLED else meta["model"], {})
        with np.load(meta_path.parent / "groups.npz") as data:
            groups = [{k.split("|", 1)[1]: data[k] for k in data.files if k.startswith(f"{i}|")}
                      for i in range(meta["groups"])]
        found = report["models"][meta["model"]] = {}
        for precision, how in meta["precisions"].items():
            path = meta_path.parent / f"{precision}.onnx"
            found[precision] = {"placement": "CPU (--cpu)" if cpu else _placement(path)}
            for variant, tf32 in VARIANTS[precision]:
                kept, started = {}, time.perf_counter()
                try:
                    providers = ["CPUExecutionProvider"] if cpu else cuda_providers(tf32=tf32)
                    runner = OnnxrtRunner(SessionFromOnnx(path, providers, fake_quant=False),
                                          name=f"onnxruntime-cuda:{meta['model']}:{precision}", numerics="ort").activate()
                    casts = {k: np.dtype(v) for k, v in how["casts"].items()}
                    fed = MappedRunner(runner, how["renames"], casts) if how["renames"] or casts else runner
                    for group in groups:
                        run_batched(Recorder(fed, kept), group, meta["max_batch"])
                except Exception as err:  # noqa: BLE001 - recorded, the judge step reports it as the row's error
                    found[precision][variant] = {"error": f"{type(err).__name__}: {str(err)[:600]}"}
                    continue
                found[precision][variant] = {"batches": len(kept), "seconds": round(time.perf_counter() - started, 3)}
                for key, outputs in kept.items():
                    arrays.update({f"{meta['model']}|{precision}|{variant}|{key}|{k}": v for k, v in outputs.items()})
            print(meta["model"], precision, found[precision], flush=True)
    for name, arrays in files.items():  # at most 8 files come back from the GPU machine: the bundled models in one
        np.savez_compressed(out / f"cuda-{name}.npz", **arrays)
    report["environment"] = _environment(cpu)
    (out / "cuda.json").write_text(json.dumps(report, indent=1))


PLACEMENT = """
import sys, onnxruntime as ort
so = ort.SessionOptions(); so.log_severity_level = 0
ort.InferenceSession(sys.argv[1], sess_options=so, providers=[('CUDAExecutionProvider', {'use_tf32': '0'}), 'CPUExecutionProvider'])
"""


def placement(folder, out):
    """Per artifact: nodes per provider and the op types on the CPU provider, read from ONNX Runtime's verbose
    placement log ("Node(s) placed on [...]. Number of nodes: N", then one line per node), in a child process."""
    import collections
    import re
    import subprocess

    found = {}
    for path in sorted(Path(folder).glob("*/*.onnx")):
        err = subprocess.run([sys.executable, "-c", PLACEMENT, str(path)], capture_output=True, text=True,
                             check=False).stderr
        ep, counts, cpu = None, {}, collections.Counter()
        for line in err.splitlines():
            m = re.search(r"(?:All nodes placed on|Node\(s\) placed on) \[(\w+)\]\. Number of nodes: (\d+)", line)
            if m:
                ep = m.group(1)
                counts[ep] = int(m.group(2))
                continue
            m = re.search(r"\]\s{2,}(\w+) \(", line)
            if m and ep == "CPUExecutionProvider":
                cpu[m.group(1)] += 1
        found[f"{path.parent.name}/{path.stem}"] = {"nodes": counts, "cpu_ops": dict(cpu)}
        print(path.parent.name, path.stem, counts, dict(cpu), flush=True)
    Path(out).write_text(json.dumps(found, indent=1))


def _environment(cpu=False):
    import platform
    import subprocess

    import onnxruntime as ort

    smi = "none (--cpu)" if cpu else subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True, check=False).stdout.strip()
    return {"nvidia_smi": smi, "onnxruntime": ort.__version__, "providers": ort.get_available_providers(),
            "cuda_version": getattr(ort, "cuda_version", None),
            "build_info": ort.get_build_info() if hasattr(ort, "get_build_info") else None,
            "python": platform.python_version(), "numpy": np.__version__}


# -- here again: the suite's own judgement ----------------------------------------------------------------------
class Playback:
    """The CUDA candidate as ``run`` recorded it: a batch's outputs by the suite's digest of the batch."""

    def __init__(self, name, table):
        self.name, self.table, self.is_active = name, table, True

    def infer(self, feed):
        from paritygate.common.digest import digest
        from paritygate.verdict import SuiteError

        key = digest(feed)
        if key not in self.table:
            raise SuiteError(f"{self.name}: no CUDA output recorded for batch {key[:12]} (make the folder again)")
        return self.table[key]


def _row(result):
    worst = max((o["max_abs"] for o in result.to_dict()["details"]["outputs"]), default=float("nan"))
    task = result.task or {}
    if task.get("metric") == "classification":
        top1 = f"{task['top1_agreement']:.3f}"
    elif task.get("metric") == "detection":
        top1 = f"{task['matched']}/{task['reference_detections']} detections"
    else:
        top1 = "—"
    verdict = "inconclusive" if result.passed and result.inconclusive else ("pass" if result.passed else "fail")
    return {"max_abs": worst, "top1": top1, "verdict": verdict, "failures": result.failures[:3]}


def _judged(ctx, spec, precision):
    from paritygate.backend.base import RunnerError
    from paritygate.judge.parity import candidate_parity
    from paritygate.verdict import SuiteError

    try:
        return _row(candidate_parity(ctx, spec, precision)[0])
    except (RunnerError, SuiteError) as err:
        return {"max_abs": float("nan"), "top1": "—", "verdict": "error", "failures": [str(err)[:300]]}


def judge(folder, cuda_out, json_out=None):
    import tempfile

    from paritygate.backend.engines import ENGINE_BUILDS, engine_build
    from paritygate.backend.runtimes import CANDIDATES
    from paritygate.common.memo import ArtifactKey, PrecisionKey

    cuda = json.loads((Path(cuda_out) / "cuda.json").read_text())
    placed = Path(cuda_out) / "placement.json"  # ONNX Runtime's verbose placement log, per artifact (docs/gpu.md)
    placed = json.loads(placed.read_text()) if placed.exists() else {}
    table, recorded = {"environment": cuda["environment"], "models": {}}, {}
    for path in sorted(Path(cuda_out).glob("cuda-*.npz")):
        with np.load(path) as data:
            recorded.update({k: data[k] for k in data.files})
    for name, options, spec in models([p.parent.name for p in Path(folder).glob("*/meta.json")]):
        ctx = options.context
        ctx.reproducer_dir = Path(tempfile.mkdtemp(prefix="cuda-repro-"))
        rows = table["models"][name] = {}
        for precision in spec.precisions:
            ctx.runtime = "onnxruntime"
            built = engine_build(ctx, spec, precision)
            builder = "not built" if built is None else ("builds" if built["built"] else "rejects")
            ENGINE_BUILDS.put(ctx, PrecisionKey(spec.name, precision), None)  # the gate left out: numbers for all
            rows[precision] = {"builder": builder, "placement": placed.get(f"{name}/{precision}")
                               or cuda["models"][name][precision]["placement"],
                               "strict CPU": _judged(ctx, spec, precision)}
            ctx.runtime = "onnxruntime-cuda"
            for variant, _ in VARIANTS[precision]:
                ran = cuda["models"][name][precision][variant]
                if "error" in ran:
                    rows[precision][variant] = {"max_abs": float("nan"), "top1": "—", "verdict": "error",
                                                "failures": [ran["error"]]}
                    continue
                prefix = f"{name}|{precision}|{variant}|"
                batches = {}
                for key, value in recorded.items():
                    if key.startswith(prefix):
                        digest, output = key[len(prefix):].split("|", 1)
                        batches.setdefault(digest, {})[output] = value
                key = ArtifactKey("onnxruntime-cuda", spec.name, precision)
                CANDIDATES.put(ctx, key, Playback(f"onnxruntime-cuda:{name}:{precision}:{variant}", batches))
                rows[precision][variant] = _judged(ctx, spec, precision)
                CANDIDATES.pop(ctx, key)
        options.close()
        print_model(name, rows)
    if json_out:
        Path(json_out).write_text(json.dumps(table, indent=1) + "\n")


LABELS = {"strict CPU": "strict emulation, ONNX Runtime CPU", "cuda": "CUDA provider", "cuda-tf32": "CUDA provider, TF32 on"}


def print_model(name, rows):
    print(f"\n**{name}**\n\n| precision | candidate | max abs | top-1 | verdict |\n|---|---|---|---|---|")
    notes = []
    for precision, row in rows.items():
        for key, label in LABELS.items():
            if key in row:
                r = row[key]
                label = {("strict CPU", "fp32"): "ONNX Runtime CPU", ("cuda", "fp32"): "CUDA provider, TF32 off"}.get(
                    (key, precision), label)
                print(f"| {precision} | {label} | {r['max_abs']:.3g} | {r['top1']} | {r['verdict']} |")
        placement = row["placement"]
        if isinstance(placement, dict):
            cpu = placement["cpu_ops"]
            placement = (f"{sum(placement['nodes'].values())} nodes, " + (
                f"{sum(cpu.values())} on the CPU ({', '.join(f'{k} {v}' for k, v in sorted(cpu.items()))})"
                if cpu else "all on CUDA"))
        notes.append(f"{precision}: TensorRT-RTX's builder {row['builder']} it; {placement}")
    print("\n" + "; ".join(notes) + ".")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "prep":
        prep(args[0], set(args[1:]))
    elif command == "run":
        run(args[0], args[1], cpu="--cpu" in args[2:])
    elif command == "placement":
        placement(args[0], args[1])
    elif command == "judge":
        judge(*args[:3])
    else:
        raise SystemExit(f"unknown command {command!r}: expected prep, run or judge")
