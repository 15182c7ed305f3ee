"""The whole gate on real-size models (issue 37), as a team runs it: wall time, peak memory and the longest
silence, against a bare tf2onnx conversion of the same SavedModel.

    flock /work/coord/heavy.lock .venv/bin/python docs/bench_real_size.py --work /tmp/bench37 \
        [--models efficientnetb0 resnet50 bert] [--gate-args='-m "not latency" -p no:xdist'] [--keep-cache] [--per-test]
        [--site SITE]   # SITE: a wheel installed with `pip install --no-deps --target SITE paritygate-*.whl`
        [--bytecode cached|as-is] [--memory as-is|free] [--bare-runs 3]

Each model is generated here, nothing downloaded: ``keras.applications`` EfficientNetB0 and ResNet50 with
``weights=None`` and a BERT-base-size encoder from Keras layers (12 layers, hidden 768, 12 heads, sequence 128,
vocabulary 30,522: 109 M parameters; tanh-approximate GELU, since tf2onnx 1.17 converts Keras 3's exact one to an
``Erfc`` ONNX has not), all seeded with ``keras.utils.set_random_seed(0)`` and exported with ``model.export``
(a SavedModel). In ``WORK/<model>/`` (outside the checkout): ``paritygate init model`` writes ``parity.toml``, whose
``# CONFIRM`` lines are then set as a team would (fp32, fp16 and int8, the calibration file written beside it, the
input ranges the model takes, the task). Then, each under ``/usr/bin/time -v``:

- ``bare``: ``python -m tf2onnx.convert --saved-model model --signature_def serving_default --opset 17`` (the
  command the suite runs), alone, ``--bare-runs`` times (default 3): the run of median wall time stands, each is kept;
- ``idle``: a Python that imports TensorFlow, ONNX Runtime and Beam (the suite's idle footprint);
- ``gate``: ``paritygate run parity.toml --report report`` plus ``--gate-args`` (default: the README's
  ``-m 'not latency' -p no:xdist``), ``HYPOTHESIS_PROFILE=ci``, with an empty ``PARITYGATE_CACHE`` (cold) in
  ``WORK/<model>/cache``; its stdout and stderr are read as they come, the longest time nothing arrived kept.

``--bytecode``: ``cached`` (default) runs every command with Python's own default, what a team's virtualenv and
``.ci/run`` have: bytecode caches read and written (``PYTHONDONTWRITEBYTECODE`` unset), in
``WORK/pycache`` (``PYTHONPYCACHEPREFIX``), compiled beforehand (``compileall``: the standard library, the
environment's packages, ``--site``) so that no timed run compiles what it imports. Where the shell sets
``PYTHONDONTWRITEBYTECODE`` and the packages ship no ``.pyc`` (uv installs none), as on this machine, ``as-is`` has
every process compile the modules it imports: 4-5 s for TensorFlow's, paid once by the bare conversion and by each
of the gate's processes, mostly side by side. ``as-is`` runs them in this shell's environment, as every run before this
option did (docs/measured.md).

The bare conversion's time depends on the machine's memory: it holds 7 GB (ResNet50) to 13 GB (BERT), and where the
page cache fills the rest the kernel reclaims it as the conversion grows (its system time). ResNet50's measured
14.3-24 s on this 24 GiB machine: 24 s with 14 GiB of page cache, 14.3 s with it dropped. The gate's conversion holds
1.3 GB and is not affected. Each run records ``memory_before`` (available memory and page cache); ``--memory free``
drops the page cache before each model (root only) and reads the libraries once, untimed, so that every timed run
starts with them cached and the rest of the memory free.

The memory budget is issue 37's: idle + 3 x (the SavedModel's size + the fp32, fp16 and int8 ONNX artifacts the
engines were built from, not a localization search's rebuilds). Printed: one table row per model and ``WORK/results.json``; the gate's output is in
``WORK/<model>/gate.log``. Load average: sampled every 5 s during each gate run (mean and max of the 1-min value).
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = ("efficientnetb0", "resnet50", "bert")
SEQ, VOCAB, HIDDEN, LAYERS, HEADS, FFN = 128, 30522, 768, 12, 12, 3072
IDLE = "import tensorflow, onnxruntime, apache_beam"


# -- the models (run in a child: `bench_real_size.py make MODEL DIR`) ----------------------------------------
def _bert():
    import keras

    class _Positions(keras.layers.Layer):  # BERT's learned positions: 512 rows, the first SEQ added
        def build(self, shape):
            self.table = self.add_weight(shape=(512, HIDDEN), initializer="glorot_uniform", name="table")

        def call(self, x):
            return x + self.table[None, :SEQ]
    from keras import layers

    ids = keras.Input((SEQ,), dtype="int32", name="input_ids")
    mask = keras.Input((SEQ,), dtype="int32", name="attention_mask")
    x = _Positions(name="position_embeddings")(layers.Embedding(VOCAB, HIDDEN, name="word_embeddings")(ids))
    x = layers.LayerNormalization(epsilon=1e-12, name="embeddings_norm")(x)
    pair = keras.ops.cast(mask[:, None, :], "bool") & keras.ops.ones((1, SEQ, 1), "bool")  # [B, query, key]
    for i in range(LAYERS):
        att = layers.MultiHeadAttention(HEADS, HIDDEN // HEADS, name=f"attention_{i}")(x, x, attention_mask=pair)
        x = layers.LayerNormalization(epsilon=1e-12, name=f"attention_norm_{i}")(x + att)
        h = layers.Dense(FFN, activation=lambda t: keras.activations.gelu(t, approximate=True), name=f"ffn_in_{i}")(x)
        x = layers.LayerNormalization(epsilon=1e-12, name=f"ffn_norm_{i}")(x + layers.Dense(HIDDEN, name=f"ffn_out_{i}")(h))
    pooled = layers.Dense(HIDDEN, activation="tanh", name="pooler")(x[:, 0])
    return keras.Model({"input_ids": ids, "attention_mask": mask}, {"sequence": x, "pooled": pooled}, name="bert")


def make(model, folder):
    """Export ``model`` to ``folder/model`` (SavedModel) and write ``folder/calibration.npz`` (32 seeded rows)."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    folder, rng = Path(folder), np.random.default_rng(0)
    if model == "bert":
        net = _bert()
        calib = {"input_ids": rng.integers(0, VOCAB, (32, SEQ)).astype("int32"),
                 "attention_mask": (np.arange(SEQ)[None, :] < rng.integers(8, SEQ + 1, (32, 1))).astype("int32")}
    else:
        net = {"efficientnetb0": keras.applications.EfficientNetB0,
               "resnet50": keras.applications.ResNet50}[model](weights=None)
        low, high = RANGES[model]["*"]
        calib = {"*": rng.uniform(low, high, (32, 224, 224, 3)).astype("float32")}
    net.export(str(folder / "model"), verbose=False)
    print(f"{model}: {net.count_params()} parameters")
    return calib


# What a team sets for the CONFIRM lines: EfficientNet rescales raw pixels itself; ResNet50 takes Caffe-mode input
# (BGR minus the ImageNet mean); BERT's ids index its 30,522-row embedding, its mask is 0/1.
RANGES = {"efficientnetb0": {"*": (0.0, 255.0)}, "resnet50": {"*": (-123.68, 151.061)},
          "bert": {"input_ids": (0, VOCAB - 1), "attention_mask": (0, 1)}}
TASKS = {"efficientnetb0": "classification", "resnet50": "classification", "bert": "generic"}
# A row a team declares invalid (``inputs.<name>.not_all``): a BERT mask of all 0 masks every token (issue 37).
NOT_ALL = {"bert": {"attention_mask": [0]}}


def confirm(toml, model):
    """``parity.toml`` as written by ``init``, with its CONFIRM lines set for ``model``."""
    toml = re.sub(r'precisions = \["fp32"\].*', 'precisions = ["fp32", "fp16", "int8"]\ncalibration = '
                  '"calibration.npz"', toml)
    toml = re.sub(r'task = "generic".*', f'task = "{TASKS[model]}"', toml)
    lines, table = [], None
    for line in toml.splitlines():
        table = (re.fullmatch(r"\[models\.inputs\.(.+)\]", line) or [None, table])[1]
        if table and line.startswith("range = "):
            low, high = RANGES[model].get(table, RANGES[model].get("*"))
            line = f"range = [{low}, {high}]"
            if table in NOT_ALL.get(model, {}):
                line += f"\nnot_all = {NOT_ALL[model][table]}"
        lines.append(line)
    return "\n".join(lines) + "\n"


# -- measuring ---------------------------------------------------------------------------------------------
def timed(cmd, log, cwd, env=None):
    """Run ``cmd`` under ``/usr/bin/time -v``: {wall_s, cpu_s (user + system, children included), peak_rss_gb (the
    largest single process), silence_s, load_mean, load_max, rc}."""
    tv = Path(log).with_suffix(".time")
    loads, peaks, done = [], {}, threading.Event()

    def sample():
        tick = 0
        while not done.wait(1.0):
            tick += 1
            if tick % 5 == 0:
                loads.append(os.getloadavg()[0])
            found = _descendants(proc.pid)
            for role, hwm, _ in found:  # each process's own peak so far, by what it is
                peaks[role] = max(peaks.get(role, 0.0), hwm)
            peaks["all at once"] = max(peaks.get("all at once", 0.0), sum(rss for _, _, rss in found))

    memory = memory_state()
    start = last = time.perf_counter()
    silence, where, tail = 0.0, None, b""
    with open(log, "wb") as out:
        proc = subprocess.Popen(["/usr/bin/time", "-v", "-o", str(tv), *cmd], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=sample, daemon=True).start()
        while chunk := os.read(proc.stdout.fileno(), 65536):
            now = time.perf_counter()
            if now - last > silence:  # the longest gap so far: when it began, after which output
                silence, where = now - last, (round(last - start, 1), tail.decode(errors="replace").strip()[-160:])
            last, tail = now, (tail + chunk)[-400:]
            out.write(chunk)
            out.flush()
        rc = proc.wait()
    done.set()
    end = time.perf_counter()
    text = tv.read_text()
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", text).group(1)) for k in ("User", "System"))
    return {"wall_s": round(end - start, 1), "cpu_s": round(cpu, 1), "peak_rss_gb": round(rss_kb / 2**20, 3),
            "silence_s": round(max(silence, end - last), 1), "silence_after": where, "rc": rc,
            "load_mean": round(sum(loads) / len(loads), 2) if loads else None,
            "load_max": round(max(loads), 2) if loads else None,
            "peak_by_process_gb": {k: round(v, 3) for k, v in sorted(peaks.items())}, "memory_before": memory}


def memory_state():
    """{available_gib, page_cache_gib} from /proc/meminfo when a run starts: the bare conversion holds 7 GB
    (ResNet50) to 13 GB (BERT), and its time depends on what the kernel must reclaim for it (module doc)."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    except (OSError, ValueError):
        return None
    kib = {k: int(v.split()[0]) for k, v in info.items() if k in ("MemAvailable", "Cached")}
    return {"available_gib": round(kib.get("MemAvailable", 0) / 2**20, 1), "page_cache_gib": round(kib.get("Cached", 0) / 2**20, 1)}


def free_memory(env):
    """``--memory free``: the page cache dropped (root only: /proc/sys/vm/drop_caches), then the libraries and model
    files read once by an untimed import, so that each timed run starts with them cached and the rest free."""
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as err:
        raise SystemExit(f"--memory free: cannot drop the page cache ({err}); run as root, or use --memory as-is")
    subprocess.run([sys.executable, "-c", IDLE + ", tf2onnx.convert"], env=env, check=True, capture_output=True)


ROLES = (("tf2onnx.convert", "tf2onnx"), ("artifacts.convert", "tf2onnx"), ("paritygate.backend.trt.aot", "trt-rtx builder"),
         ("paritygate.backend.tf.process", "tensorflow child"), ("paritygate.common.apart", "apart worker"),
         ("pytest", "pytest"))


def _descendants(root):
    """(role, VmHWM GiB, VmRSS GiB) of every live process under ``root`` (sampled each second: a process that lives
    less may be missed; "all at once" is the largest sum of their resident sets seen)."""
    children, found = {}, []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            children.setdefault(int(fields["PPid"]), []).append((int(status.parent.name), fields))
        except (OSError, ValueError, KeyError):
            continue
    todo = [root]
    while todo:
        for pid, fields in children.get(todo.pop(), []):
            todo.append(pid)
            try:
                cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            role = next((r for key, r in ROLES if key in cmdline), "other")
            if "VmHWM" in fields:
                found.append((role, int(fields["VmHWM"].split()[0]) / 2**20, int(fields["VmRSS"].split()[0]) / 2**20))
    return found


def _name_calibration(folder):
    """The calibration rows of an image model were written as "*": named now after the input ``init`` found."""
    import numpy as np
    import tomllib

    names = list(tomllib.loads((folder / "parity.toml").read_text())["models"][0]["inputs"])
    calib = dict(np.load(folder / "calibration.npz"))
    if "*" in calib:
        (name,) = names
        np.savez(folder / "calibration.npz", **{name: calib["*"]})


def size_gb(*paths):
    return sum(p.stat().st_size for path in paths for p in ([path] if path.is_file() else path.rglob("*"))
               if p.is_file()) / 1e9


def summary(log):
    """The gate's ``paritygate: time:`` line and its verdict counts (from the report)."""
    text = Path(log).read_text(errors="replace")
    time_line = next((ln for ln in reversed(text.splitlines()) if ln.startswith("paritygate: time:")), None)
    return time_line


def candidate_artifacts(report):
    """The ONNX artifact of each precision the engine was built from (``engine_builds``' details): the model's
    artifacts, not a localization search's rebuilds."""
    try:
        checks = json.loads((report / "parity-report.json").read_text())["checks"]
    except (OSError, ValueError, KeyError):
        return []
    found = {c["precision"]: ((c.get("details") or {}).get("engine") or {}).get("artifact")
             for c in checks if c["check"] == "engine_builds"}
    return [Path(p) for p in found.values() if p and Path(p).is_file()]


def verdicts(report):
    """({status: count}, seconds localization took: each check's ``details.divergence.seconds``) of the report."""
    try:
        checks = json.loads((report / "parity-report.json").read_text())["checks"]
    except (OSError, ValueError, KeyError):
        return None, None
    counts, localization = {}, 0.0
    for check in checks:
        counts[check["status"]] = counts.get(check["status"], 0) + 1
        found = (check.get("details") or {}).get("divergence")
        localization += found.get("seconds", 0.0) if isinstance(found, dict) else 0.0
    return counts, round(localization, 1)


def bytecode_env(work, args):
    """The environment of every timed command (``--bytecode``, module doc)."""
    env = dict(os.environ)
    if args.bytecode == "cached":
        import sysconfig

        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        paths = sysconfig.get_paths()
        folders = dict.fromkeys([paths["stdlib"], paths["purelib"], paths["platlib"], *([str(args.site)] if args.site else [])])
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *folders], env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # a file that does not compile: its import says so
    return env


def bench(model, work, args, base_env):
    folder = work / model
    if not (folder / "model" / "saved_model.pb").exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        subprocess.run([sys.executable, __file__, "make", model, str(folder)], check=True)
    venv = Path(sys.executable).parent
    if not (folder / "parity.toml").exists():
        subprocess.run([str(venv / "paritygate"), "init", "model", "-o", "init.toml", "--force"], cwd=folder,
                       check=True, capture_output=True)
        (folder / "parity.toml").write_text(confirm((folder / "init.toml").read_text(), model))
        _name_calibration(folder)
    row = {"model": model, "saved_model_gb": round(size_gb(folder / "model"), 3)}
    if args.memory == "free":
        free_memory(base_env)
    if "bare" in args.runs:
        runs = []
        for i in range(args.bare_runs):
            (folder / "bare.onnx").unlink(missing_ok=True)
            runs.append(timed([sys.executable, "-m", "tf2onnx.convert", "--saved-model", "model", "--signature_def",
                               "serving_default", "--opset", "17", "--output", "bare.onnx"], folder / f"bare{i}.log",
                              folder, {**base_env, "TF_CPP_MIN_LOG_LEVEL": "3"}))
        # the run of median wall time stands for the bare conversion; each run is kept
        row["bare"] = {**sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2], "runs": runs}
    if "idle" in args.runs:
        row["idle"] = timed([sys.executable, "-c", IDLE], folder / "idle.log", folder, base_env)
    if "gate" in args.runs:
        cache = folder / "cache"
        if not args.keep_cache:
            shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(folder / "report", ignore_errors=True)
        env = {**base_env, "PARITYGATE_CACHE": str(cache), "HYPOTHESIS_PROFILE": "ci"}
        if args.site:  # a wheel installed there (pip install --no-deps --target DIR), ahead of the checkout's
            env["PYTHONPATH"] = _search_path(args.site, env.get("PYTHONPATH"))
        extra = []
        if args.per_test:  # docs/measure_cpu.py: CPU, wall and memory per test, in WORK/<model>/per_test.tsv
            (folder / "per_test.tsv").unlink(missing_ok=True)
            env.update(PYTHONPATH=_search_path(env.get("PYTHONPATH"), HERE), MEASURE_CPU_OUT=str(folder / "per_test.tsv"))
            extra = ["-p", "measure_cpu"]
        row["gate"] = timed([str(venv / "paritygate"), "run", "parity.toml", "--report", "report",
                             *shlex.split(args.gate_args), *extra], folder / "gate.log", folder, env)
        row["gate"]["time_line"] = summary(folder / "gate.log")
        row["gate"]["verdicts"], row["gate"]["localization_s"] = verdicts(folder / "report")
        row["gate"]["site"] = str(args.site) if args.site else "checkout"
        row["artifacts_gb"] = round(size_gb(*candidate_artifacts(folder / "report")), 3)
    row["bytecode"], row["memory"] = args.bytecode, args.memory  # the conditions the runs were made in
    return row


def _search_path(*parts):
    """PYTHONPATH of the non-empty ``parts``: an empty entry would put the gate's working folder on every process's
    path, which ``paritygate run`` keeps off it (``python -P``); with it ResNet50's gate took 117.5 s and 212 CPU s,
    without it 111.6 s and 202 (one run each, the same wheel, 2026-11-29)."""
    return os.pathsep.join(str(p) for p in parts if p)


def table(rows):
    print("model | bare wall s (CPU s) [range] | bare RSS GiB | gate wall s (CPU s) | ratio wall (CPU) | localization s | "
          "ratio without it | gate RSS GiB (all at once) | budget GiB | longest silence s | load mean/max")
    for r in rows:
        bare, gate, idle = r.get("bare", {}), r.get("gate", {}), r.get("idle", {})
        cpu = f" ({gate['cpu_s'] / bare['cpu_s']:.1f}x)" if bare.get("cpu_s") and gate.get("cpu_s") else ""
        ratio = f"{gate['wall_s'] / bare['wall_s']:.1f}x{cpu}" if bare and gate else None
        spent = gate.get("localization_s") or 0.0
        without = f"{(gate['wall_s'] - spent) / bare['wall_s']:.1f}x" if bare and gate else None
        budget = f"{idle['peak_rss_gb'] + 3 * (r['saved_model_gb'] + r['artifacts_gb']) / 1.073741824:.2f}" \
            if idle and gate else None  # sizes in GB (1e9), RSS in GiB
        together = (gate.get("peak_by_process_gb") or {}).get("all at once")
        spread = [b["wall_s"] for b in bare.get("runs", [])]
        shown = bare and f"{bare['wall_s']} ({bare.get('cpu_s')})" + (f" [{min(spread)}-{max(spread)}]" if len(spread) > 1 else "")
        cells = (r["model"], shown, bare.get("peak_rss_gb"),
                 gate and f"{gate['wall_s']} ({gate.get('cpu_s')})", ratio, spent, without,
                 gate and f"{gate['peak_rss_gb']} ({together})", budget, gate.get("silence_s"),
                 gate and f"{gate['load_mean']}/{gate['load_max']}")
        print(" | ".join(str(c) for c in cells))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["make"]:
        import numpy as np

        calib = make(argv[1], argv[2])
        np.savez(Path(argv[2]) / "calibration.npz", **calib)  # "*": renamed to the input's name after init
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="folder for the models and runs (outside the checkout)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--runs", nargs="+", choices=("bare", "idle", "gate"), default=["bare", "idle", "gate"])
    parser.add_argument("--gate-args", default="-m 'not latency' -p no:xdist")
    parser.add_argument("--keep-cache", action="store_true", help="a warm run: keep WORK/<model>/cache")
    parser.add_argument("--site", type=Path, help="run the gate from a wheel installed in this folder (pip install "
                        "--no-deps --target SITE paritygate-*.whl), e.g. another commit's, instead of the checkout")
    parser.add_argument("--bytecode", choices=("as-is", "cached"), default="cached", help="cached: Python's default "
                        "bytecode caching, compiled before the runs; as-is: this shell's setting (module doc)")
    parser.add_argument("--memory", choices=("as-is", "free"), default="as-is", help="free: drop the page cache "
                        "before each model (root only), then read the libraries once (module doc)")
    parser.add_argument("--bare-runs", type=int, default=3, help="bare conversions per model; the median stands")
    parser.add_argument("--per-test", action="store_true", help="each test's CPU, wall and memory "
                        "(docs/measure_cpu.py) in WORK/<model>/per_test.tsv")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    results = work / "results.json"
    done = json.loads(results.read_text()) if results.exists() else {}
    rows, base_env = [], bytecode_env(work, args)
    for model in args.models:
        row = bench(model, work, args, base_env)
        done[model] = {**done.get(model, {}), **row}
        results.write_text(json.dumps(done, indent=1))
        rows.append(done[model])
        print(json.dumps(row))
    table(rows)


if __name__ == "__main__":
    main()
