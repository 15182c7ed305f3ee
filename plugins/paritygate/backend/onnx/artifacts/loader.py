"""ONNX artifacts per precision, shared by every runtime, each validated before it is cached by content hash.

fp32: the configured ONNX (used as it is), or the reference converted with tf2onnx (a ``.keras`` reference is
      first exported as a SavedModel, ``paritygate.backend.tf.loader``).
fp16: fp32 converted with onnxconverter-common, I/O kept float32, a stated op list kept in FP32 (``fp16.py``).
int8: explicit Q/DQ ONNX from onnxruntime.quantization.quantize_static, calibrated on the model's inputs
      (``int8.py``).

Every artifact the suite builds passes ``validate.py`` (checker, strict shape inference, an ONNX Runtime session,
one smoke run) and the TensorRT lint (``lint/trt_lint.py``) before it is cached; a build that fails raises
``ArtifactError`` (a ``SuiteError``: status ``error``, never the candidate's ``fail``) and leaves no file. Its
build report (converter, settings, lint findings, blocked FP16 nodes, constants FP16 cannot hold) is cached beside
it and read back by ``artifact_report``.

Lint policy: a finding that a suite build adds to its source graph (an fp16 or int8 artifact with an INT32
DequantizeLinear, say) is the suite's error and stops the build. A finding the source already had (an op in the
user's ONNX, or in tf2onnx's faithful conversion of the user's SavedModel) is the candidate's: it is reported in
the check details and does not fail the ONNX Runtime checks; on a GPU, TensorRT's own parser decides.
"""

import json
import subprocess
import sys
from pathlib import Path

from paritygate.backend.base import RunnerError
from paritygate.backend.cache import cache_root, cached_file, hash_path, key_of, report_path
from paritygate.backend.onnx.artifacts import failures, gaps, validate
from paritygate.backend.onnx.artifacts.validate import ArtifactError
from paritygate.backend.onnx.lint import trt_lint
from paritygate.common import apart
from paritygate.files import check_file
from paritygate.lazy import dist_version as _version
from paritygate.lazy import lazy_import

onnx = lazy_import("onnx")

OPSET = 17  # tf2onnx 1.17's default target; TensorRT 10's ONNX parser supports opsets 9..20 (trt_lint's table)

# Ops whose FP16 execution overflows or loses too much: LayerNorm and softmax reductions overflow in FP16
# (NVIDIA/TensorRT#2564, #3101, #4355); Exp/Pow/Sqrt/Reduce* are the pieces tf2onnx decomposes them into.
FP16_KEEP_FP32 = ("LayerNormalization", "Softmax", "Exp", "Pow", "Sqrt", "ReduceMean", "ReduceSum", "Erf")

# Static Q/DQ quantization that TensorRT accepts: see int8.py for each setting's source.
INT8_OPS = ("Conv", "MatMul", "Gemm")

# Part of every artifact's cache key: bump when a build changes, so that no stale artifact is served.
BUILD = {"fp32": "tf2onnx+validated+lint-v3",
         "fp16": "isolated-outputs+exact-constants+node-retry+subgraph-captures+cast-targets+split-initializers+index-paths"
                 "+innermost-retry+validated+lint-v7",
         "int8": "qdq-s8-perchannel-float-bias+unshared-biases+validated+lint-v3"}
TF2ONNX = "tf2onnx"


def load_checked(path):
    """onnx.load + checker, with errors naming the file."""
    path = check_file(path, "ONNX model", "onnx", RunnerError)
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except FileNotFoundError as err:
        raise RunnerError(f"{path}: ONNX file not found") from err
    except Exception as err:
        raise RunnerError(f"{path}: not a valid ONNX model: {str(err).splitlines()[0][:300]}") from err
    return model


def _input_names(spec, model):
    """Reference input name -> ``model``'s input name (paritygate.backend.iomap), errors naming the config key."""
    from paritygate.backend import iomap

    try:
        return iomap.input_map(spec, [i.name for i in model.graph.input])
    except iomap.MappingError as err:
        raise RunnerError(f"{spec.where('inputs')}: {err}") from None


def _lint_or_raise(source, model, report, converter):
    """Record the artifact's lint findings; raise when the build added any to its source's."""
    report["lint"] = trt_lint.lint(model)
    added = trt_lint.new_findings(trt_lint.lint(source), report["lint"])
    if added:
        text = "; ".join(f"{f['message']} ({f['source']})" for f in added[:5])
        more = f" (and {len(added) - 5} more)" if len(added) > 5 else ""
        raise ArtifactError(converter, f"TensorRT lint ({len(added)} finding(s) the build added)", text + more,
                            added[0]["node"])


# -- fp32 --------------------------------------------------------------------------------------------------
def fp32_onnx(spec):
    """The fp32 candidate: ``spec.onnx`` when given, else the reference converted with tf2onnx (cached)."""
    if spec.onnx is not None:
        load_checked(spec.onnx)
        return Path(spec.onnx)
    from paritygate.backend.tf.loader import EXPORT_VERSION, is_keras, keras_name

    key = key_of(reference=hash_path(spec.reference), signature=None if is_keras(spec.reference) else spec.signature,
                 opset=OPSET, tf2onnx=_version("tf2onnx"), tf=_version("tensorflow-cpu") or _version("tensorflow"),
                 keras=(EXPORT_VERSION, keras_name(spec.reference)) if is_keras(spec.reference) else None, build=BUILD["fp32"])
    failed = failures.recorded(key)  # an earlier run's conversion of the same bytes with the same tools failed
    if failed is not None:
        raise failed
    try:
        return cached_file("onnx", f"{spec.name}-fp32-{key}", ".onnx", lambda tmp: _convert(spec, tmp, key))
    except ArtifactError as err:
        failures.record(key, err)
        raise


def _convert(spec, out, key):
    """tf2onnx's conversion of the reference, validated on ``spec``'s own inputs. The conversion depends on nothing
    but ``key`` (the reference's files, signature, versions), so another model of the config over the same
    reference reuses its file (a twin) and only validates it: the suite's own tests ran tf2onnx (2.6 s a run) on
    one toy SavedModel under five model names."""
    twin = next(iter(sorted((cache_root() / "onnx").glob(f"*-fp32-{key}.onnx"))), None)
    if twin is not None:
        import shutil

        shutil.copyfile(twin, out)
        made = json.loads(report_path(twin).read_text()) if report_path(twin).exists() else {}
        cmd, source = made.get("command"), made.get("source")
    else:
        from paritygate.backend.tf.loader import saved_model_of

        saved_model, signature = saved_model_of(spec)
        source = str(saved_model)
        # tf2onnx's command line with its garbage collected as it goes (convert.py: its peak memory bounded)
        cmd = [sys.executable, "-m", "paritygate.backend.onnx.artifacts.convert", "--saved-model", source,
               "--signature_def", signature, "--opset", str(OPSET), "--output", str(out)]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=_quiet_env())
        if proc.returncode != 0:  # its own error (gaps.tool_error), not the last lines of its log
            said = gaps.tool_error(proc.stderr, proc.returncode)
            raise ArtifactError(TF2ONNX, f"conversion of {spec.reference} (exit {proc.returncode}: {' '.join(cmd)})",
                                said, validate.node_of(said), lasting=proc.returncode > 0)
    model = onnx.load(str(out))
    try:
        validate.check_graph(model, TF2ONNX)
    except ArtifactError as err:  # the checker on tf2onnx's output: as lasting as the conversion itself
        err.lasting = True
        raise
    feeds = validate.smoke_feeds(spec, model, _input_names(spec, model))
    validate.check_runtime(model.SerializeToString(), feeds, TF2ONNX)
    return {"converter": TF2ONNX, "version": _version("tf2onnx"), "command": cmd, "source": source,
            "lint": trt_lint.lint(model), **({"copied_from": str(twin)} if twin is not None else {})}


def _quiet_env():
    import os

    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


# -- fp16 --------------------------------------------------------------------------------------------------
def fp16_onnx(spec, keep_fp32=FP16_KEEP_FP32):
    src = fp32_onnx(spec)
    plan = precision_list(spec, "fp16_keep_fp32")  # [models.precision]: node names or op types kept in FP32
    key = key_of(src=hash_path(src), keep=sorted(keep_fp32), occ=_version("onnxconverter-common"),
                 onnx=_version("onnx"), ort=_version("onnxruntime"), build=BUILD["fp16"],
                 **({"plan": sorted(plan)} if plan else {}))
    return cached_file("onnx", f"{spec.name}-fp16-{key}", ".onnx",
                       lambda out: apart_if_large(src, build_fp16, spec, src, tuple(keep_fp32), plan, out))


def build_fp16(spec, src, keep_fp32, plan, out):
    """Write the fp16 artifact of the fp32 ONNX ``src`` to ``out``; its build report."""
    from paritygate.backend.onnx.artifacts import fp16

    source = fp16.name_nodes(load_checked(src))
    check_precision_list(spec, "fp16_keep_fp32", plan, source)
    feeds = validate.smoke_feeds(spec, source, _input_names(spec, source))
    model, report = fp16.convert(source, list(keep_fp32) + list(plan), feeds, keep_nodes=plan)
    _lint_or_raise(source, model, report, fp16.CONVERTER)
    onnx.save(model, str(out))
    return report


def apart_if_large(src, build, *args):
    """``build(*args)``, in a process of its own (``common.apart``) when the fp32 ONNX ``src`` is at least
    ``APART_BYTES``: a build holds several copies of the weights at once (issue 37), the run keeps none of them."""
    return apart.apart(build, *args) if apart.large(src) else build(*args)


# -- int8 --------------------------------------------------------------------------------------------------
def load_calibration(spec, groups=False):
    """The calibration set's inputs, read and checked by ``paritygate.inputs.sets`` (an InputSetError, which is a
    SuiteError, names the file and the array); ``groups``: a list of them, one per shape the file holds."""
    if spec.calibration is None:
        raise RunnerError(f"{spec.where('calibration')}: int8 needs calibration data, but none is configured")
    from paritygate.inputs.sets import read_input_set

    found = read_input_set(spec, spec.calibration, "calibration set")
    return [g.inputs for g in found.groups] if groups else found.inputs


def int8_onnx(spec, ops=INT8_OPS):
    calib = load_calibration(spec, groups=True)
    src = fp32_onnx(spec)
    plan = precision_list(spec, "int8_exclude")  # [models.precision]: node names or op types left unquantized
    key = key_of(src=hash_path(src), calib=hash_path(spec.calibration), ops=sorted(ops),
                 ort=_version("onnxruntime"), onnx=_version("onnx"), build=BUILD["int8"],
                 **({"plan": sorted(plan)} if plan else {}))
    return cached_file("onnx", f"{spec.name}-int8-{key}", ".onnx",
                       lambda out: apart_if_large(src, build_int8, spec, src, calib, tuple(ops), plan, out))


def build_int8(spec, src, calib, ops, plan, out):
    """Write the int8 artifact of the fp32 ONNX ``src``, calibrated on ``calib`` (groups of inputs by reference
    name), to ``out``; its build report."""
    from paritygate.backend.onnx.artifacts import int8

    source = load_checked(src)
    check_precision_list(spec, "int8_exclude", plan, source)
    names = _input_names(spec, source)  # reference -> ONNX input names
    feeds = [{names[k]: v[i:i + 1] for k, v in group.items()}  # one row at a time, of each shape
             for group in calib for i in range(len(next(iter(group.values()))))]
    quantized = [op for op in ops if op not in plan]
    ranges = key_of(src=hash_path(src), calib=hash_path(spec.calibration), ops=sorted(quantized),
                    ort=_version("onnxruntime"), build=BUILD["int8"])  # a plan's nodes do not change them (int8.py)
    ranges = cache_root() / "calibration" / f"{spec.name}-{ranges}.json"
    try:
        report = int8.quantize(source, out, feeds, quantized, exclude=plan, ranges=ranges)
    except Exception as err:  # quantize_static raises ValueError, RuntimeError, ORT errors
        message = " ".join(str(err).strip().splitlines()[:3])[:600]
        raise ArtifactError(int8.CONVERTER, "quantization", message, validate.node_of(str(err))) from err
    model = onnx.load(str(out))
    validate.validate(model, feeds[0], int8.CONVERTER)
    _lint_or_raise(source, model, report, int8.CONVERTER)
    return report


def precision_list(spec, key):
    """A ``[models.precision]`` list of the model (node names or op types), as a tuple."""
    return tuple((getattr(spec, "precision", None) or {}).get(key, ()))


def check_precision_list(spec, key, entries, model):
    """Every entry must name a node or an op type of the FP32 graph: a typo must not silently keep nothing."""
    names = {n.name for n in model.graph.node} | {n.op_type for n in model.graph.node}
    unknown = [e for e in entries if e not in names]
    if unknown:
        raise RunnerError(f"{spec.where('precision.' + key)}: {unknown} name no node and no op type of the FP32 "
                          f"graph ({len(model.graph.node)} nodes, op types {sorted({n.op_type for n in model.graph.node})})")


def onnx_artifact(spec, precision, fp16_keep_fp32=None):
    """Path of the ONNX artifact for ``precision`` (built on first use, then served from the cache)."""
    if precision in getattr(spec, "onnx_artifacts", {}):  # the team's own file: judged as it is
        load_checked(spec.onnx_artifacts[precision])
        return Path(spec.onnx_artifacts[precision])
    if precision == "fp16":
        return fp16_onnx(spec, FP16_KEEP_FP32 if fp16_keep_fp32 is None else fp16_keep_fp32)
    return {"fp32": fp32_onnx, "int8": int8_onnx}[precision](spec)


def artifact_report(spec, precision, fp16_keep_fp32=None):
    """What the check details record about the candidate's artifact: its TensorRT ``lint`` findings, the nodes
    kept in FP32 because the runtime rejected them in FP16 (``fp16_blocked``), the constants FP16 cannot hold
    (``constants_out_of_range``), and the whole build ``report`` (None for a user-supplied ONNX, linted here)."""
    path = Path(onnx_artifact(spec, precision, fp16_keep_fp32))
    sidecar = report_path(path)
    built = cache_root() in path.parents and sidecar.exists()
    report = json.loads(sidecar.read_text()) if built else None
    lint = report.get("lint", []) if built else trt_lint.lint(load_checked(path))
    return {"artifact": str(path), "built_by_suite": built, "lint": lint,
            "fp16_blocked": (report or {}).get("fp16_blocked", []),
            "constants_out_of_range": (report or {}).get("constants_out_of_range", []), "report": report}
