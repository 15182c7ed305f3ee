"""The model config: TOML validated against ``config_schema.json``, turned into ``ModelSpec`` objects.

Every error is a ``ConfigError`` whose one-line message names the file, the model and the key.
"""

import functools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paritygate.common.numerics import PRECISIONS
from paritygate.files import FileRefused, check_file, limit_value, read_bytes
from paritygate.models.bundled import fixtures_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCHEMA_PATH = Path(__file__).with_name("config_schema.json")
BUNDLED_CONFIG = fixtures_dir() / "parity.toml"  # package data in a wheel, fixtures/ in a checkout
MAX_FEED_MB = (1024, "PARITYGATE_MAX_FEED_MB")  # one batch of max_batch rows over all inputs: the suite holds a
# few copies of it at once (reference, candidate, batch splits) on a CI runner (GitHub's standard Linux runner for
# public repositories has 16 GB)


class ConfigError(ValueError):
    """The config file is wrong; the message names the file, model and key."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple  # -1 at index 0 marks the batch dimension; -1 elsewhere a dynamic dim, bounded by ``profile``
    dtype: np.dtype
    range: tuple  # inclusive (low, high)
    candidate: str = None  # the candidate's name for this input, when it differs (``candidate = "..."``)
    reference_dtype: np.dtype = None  # the dtype a side declares, when it differs: its feed is cast, exactly
    candidate_dtype: np.dtype = None
    profile: tuple = None  # (min, opt, max) shapes, TensorRT's optimization profile; None for a fixed shape

    @property
    def dynamic(self):
        return -1 in self.shape[1:]

    @property
    def dims(self):
        """The non-batch dims a feed takes by default: the declared ones, the profile's opt for a dynamic dim."""
        return tuple(self.profile[1][1:]) if self.profile else tuple(self.shape[1:])

    def with_batch(self, batch, dims=None):
        """The concrete shape ``[batch, *dims]``; ``dims`` defaults to ``self.dims`` (opt for dynamic dims)."""
        return (batch,) + tuple(self.dims if dims is None else dims)

    def profile_dims(self):
        """The non-batch dims of the profile's min, opt and max shapes (the declared dims when fixed)."""
        return [tuple(s[1:]) for s in self.profile] if self.profile else [self.dims]

    def accepts_dims(self, dims):
        """Whether non-batch ``dims`` lie within the profile (equal the declared dims when fixed)."""
        lo, hi = (self.profile[0][1:], self.profile[2][1:]) if self.profile else (self.shape[1:], self.shape[1:])
        return len(dims) == len(lo) and all(a <= d <= b for a, d, b in zip(lo, dims, hi))

    def dtype_of(self, side):
        """The dtype ``side`` ("reference" / "candidate") is fed: its own declared dtype, else ``dtype``."""
        return getattr(self, f"{side}_dtype") or self.dtype


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: Path  # the config file this model came from
    reference: Path
    precisions: tuple
    max_batch: int
    inputs: dict  # name -> TensorSpec, in config order
    signature: str = "serving_default"
    onnx: Path = None
    onnx_artifacts: dict = field(default_factory=dict)  # the team's own fp16/int8 ONNX: precision -> Path
    min_precision_coverage: float = None  # minimum MAC share of an fp16/int8 pass (None: coverage.MIN_MAC_SHARE)
    engines: dict = field(default_factory=dict)
    task: str = "generic"
    task_output: str = None  # the one reference output the task metric judges (default: see comparator/task.py)
    calibration: Path = None
    outputs: dict = field(default_factory=dict)  # reference output name -> candidate output name
    tolerances: dict = field(default_factory=dict)
    beam: dict = None
    latency: dict = field(default_factory=dict)
    precision: dict = field(default_factory=dict)  # [models.precision]: fp16_keep_fp32 / int8_exclude lists
    allow_uninformative: bool = False  # an uninformative check is recorded as inconclusive, not failing the run
    nondeterministic: str = None  # why repeated runs may differ (the runtime's docs): determinism is bounded
    allow_nonfinite_reference: object = False  # true or why: a NaN/Inf reference is judged (same value), not inconclusive

    def where(self, key):
        return f"{self.source}: model '{self.name}': key '{key}'"


@functools.lru_cache(maxsize=1)
def _schema_validator():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    # JSON Schema counts 8.0 as an integer; TOML tells them apart, and a float max_batch or shape breaks numpy.
    base = jsonschema.Draft202012Validator
    # TOML's nan and inf are no number a config means: every number of the schema is finite.
    checker = base.TYPE_CHECKER.redefine_many({
        "integer": lambda _, v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda _, v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)})
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


def _key_path(error):
    parts = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "<top level>"


def _explain(error):
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        allowed = sorted(error.schema.get("properties", {}))
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"unknown key(s) {', '.join(repr(k) for k in extra)}{hint}"
    if error.validator == "required":
        return error.message.replace("is a required property", "is required but missing")
    if error.validator == "type":
        if error.validator_value == "number" and isinstance(error.instance, float):
            return f"expected a finite number, got {error.instance}"
        return f"expected {error.validator_value}, got {type(error.instance).__name__} {error.instance!r}"
    if error.validator in ("maximum", "minimum", "exclusiveMinimum", "maxLength", "maxItems", "pattern"):
        why = error.schema.get("description") if error.validator in ("maximum", "maxLength", "pattern") else None
        bound = {"maximum": "at most", "minimum": "at least", "exclusiveMinimum": "more than",
                 "maxLength": "at most", "maxItems": "at most", "pattern": "a value matching"}[error.validator]
        unit = {"maxLength": " characters", "maxItems": " items"}.get(error.validator, "")
        shown = error.instance if not isinstance(error.instance, str) or len(error.instance) <= 40 else \
            f"{error.instance[:40]}... ({len(error.instance)} characters)"
        return f"expected {bound} {error.validator_value}{unit}, got {shown!r}" + (f" ({why})" if why else "")
    if error.validator == "enum":
        return f"expected one of {error.validator_value}, got {error.instance!r}"
    if error.validator == "oneOf" and error.context:  # e.g. onnx: a path, or a table of paths per precision
        kinds = " or ".join("a string" if s.get("type") == "string" else
                            f"a table with keys {', '.join(s.get('properties', {}))} (strings)"
                            for s in error.validator_value)
        return f"expected {kinds}, got {type(error.instance).__name__} {error.instance!r}"
    return error.message


def _format_schema_error(path, doc, error):
    loc = list(error.absolute_path)
    model = ""
    if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int):
        entry = doc["models"][loc[1]]
        name = entry.get("name") if isinstance(entry, dict) else None
        valid = isinstance(name, str) and check_model_value("name", name) is None
        model = f" model '{name}'" if valid else f" models[{loc[1]}]"  # a bad name: named by its place
        key = ".".join(str(p) for p in loc[2:])
        if error.validator == "required":  # name the missing key itself, e.g. 'inputs.image.dtype'
            missing = error.message.split("'")[1]
            key = f"{key}.{missing}" if key else missing
            return f"{path}:{model}: key '{key}': required but missing"
        return f"{path}:{model}: key '{key or '<model table>'}': {_explain(error)}"
    return f"{path}: key '{_key_path(error)}': {_explain(error)}"


def _resolve(base, value, spec_where, must_exist=True, kind="onnx", folder_ok=False):
    """``value`` against the config's folder; with ``must_exist``, checked to be a regular file of ``kind``
    within its size limit (or a folder where ``folder_ok``): a FIFO, a device or a symlink loop is one line."""
    p = Path(value)
    p = p if p.is_absolute() else (base / p)
    if must_exist:
        try:
            check_file(p, "the file this key names", kind, folder_ok=folder_ok)
        except ValueError as err:
            raise ConfigError(f"{spec_where}: {err}") from None
    return p


def _check_feed_size(where, table):
    """One batch of ``max_batch`` rows at the largest shapes, over all inputs, within PARITYGATE_MAX_FEED_MB."""
    default, env = MAX_FEED_MB
    row_bytes = 0
    for t in table["inputs"].values():
        dims = t["profile"]["max"][1:] if "profile" in t else t["shape"][1:]
        row_bytes += math.prod(dims) * np.dtype(t["dtype"]).itemsize
    try:
        limit = limit_value(env, default) * 2**20
    except FileRefused as err:
        raise ConfigError(f"{where('max_batch')}: {err}") from None
    size = row_bytes * table["max_batch"]
    if size > limit:
        raise ConfigError(f"{where('max_batch')}: {table['max_batch']} rows of {row_bytes} bytes each is "
                          f"{size / 2**20:.0f} MB per batch, over the {limit / 2**20:g} MB limit (default {default}); "
                          f"lower max_batch or raise it with {env}=<MB>")


def _tensor_spec(where, name, table, max_batch=None):
    """``where(key)`` names the config file, the model and the key; each error names ``inputs.<name>.<field>``."""
    def key(field):
        return where(f"inputs.{name}.{field}")

    shape = tuple(table["shape"])
    if shape[0] != -1:
        raise ConfigError(f"{key('shape')}: {list(shape)}: expected -1 as the first (batch) dimension")
    if 0 in shape:
        raise ConfigError(f"{key('shape')}: {list(shape)}: dimensions must be positive")
    profile = _profile(key, name, shape, table.get("profile"), max_batch)
    low, high = table["range"]
    if low > high:
        raise ConfigError(f"{key('range')}: {[low, high]}: low must be <= high")
    dtype = np.dtype(table["dtype"])
    if dtype.kind in "iub":
        if dtype.kind == "b" and (low < 0 or high > 1):
            raise ConfigError(f"{key('range')}: {[low, high]}: bool inputs take [0, 1]")
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            integral = all(isinstance(v, int) or float(v).is_integer() for v in (low, high))  # inf/nan: no
            if not integral or low < info.min or high > info.max:
                raise ConfigError(f"{key('range')}: {[low, high]}: expected integers within {dtype} "
                                  f"[{info.min}, {info.max}]")
    elif not (np.isfinite(low) and np.isfinite(high)) or max(abs(low), abs(high)) > float(np.finfo(dtype).max):
        raise ConfigError(f"{key('range')}: {[low, high]}: expected finite bounds within {dtype}")
    sides = {f"{side}_dtype": _exact_cast(key(f"{side}_dtype"), name, dtype, (low, high), table.get(f"{side}_dtype"))
             for side in ("reference", "candidate")}
    return TensorSpec(name=name, shape=shape, dtype=dtype, range=(low, high), candidate=table.get("candidate"),
                      profile=profile, **sides)


def _profile(key, name, shape, table, max_batch):
    """The (min, opt, max) shapes of a dynamic input: TensorRT's optimization profile (IOptimizationProfile::
    setDimensions takes the same three), checked against the declared shape and max_batch."""
    if table is None:
        if -1 in shape[1:]:
            batch = {"min": 1, "opt": max_batch or 1, "max": max_batch or 1}
            example = {k: [b] + [{"min": 16, "opt": 64, "max": 256}[k] if d == -1 else d for d in shape[1:]]
                       for k, b in batch.items()}
            line = "profile = { " + ", ".join(f"{k} = {v}" for k, v in example.items()) + " }"
            raise ConfigError(f"{key('shape')}: {list(shape)}: a dynamic (-1) dimension other than the batch needs "
                              f"the sizes it takes; write e.g. `{line}` in the table of inputs.{name}, with your "
                              "sizes for the -1 dims (min <= opt <= max per dim, TensorRT's optimization profile)")
        return None
    shapes = tuple(tuple(table[k]) for k in ("min", "opt", "max"))
    for k, s in zip(("min", "opt", "max"), shapes):
        if len(s) != len(shape):
            raise ConfigError(f"{key('profile.' + k)}: {list(s)}: rank {len(s)}, expected rank {len(shape)} "
                              f"of shape {list(shape)}")
        for axis, (have, declared) in enumerate(zip(s[1:], shape[1:]), start=1):
            if declared != -1 and have != declared:
                raise ConfigError(f"{key('profile.' + k)}: {list(s)}: dimension {axis} is {have}, expected "
                                  f"{declared} (fixed in shape {list(shape)})")
    for axis, (lo, opt, hi) in enumerate(zip(*shapes)):
        if not lo <= opt <= hi:
            raise ConfigError(f"{key('profile')}: dimension {axis}: min {lo}, opt {opt}, max {hi}: expected "
                              "min <= opt <= max")
    if max_batch is not None and shapes[2][0] != max_batch:
        raise ConfigError(f"{key('profile.max')}: {list(shapes[2])}: batch dimension {shapes[2][0]}, expected "
                          f"max_batch = {max_batch} (the largest batch the suite runs)")
    return shapes


def _exact_cast(where, name, dtype, bounds, target):
    """A side's declared dtype, accepted only when every value of ``dtype`` within ``bounds`` survives the cast
    (ints into wider ints or into floats whose mantissa holds them; floats into wider floats; bool into any)."""
    if target is None:
        return None
    to = np.dtype(target)
    if dtype.kind == "b" or to == dtype:
        return to
    if dtype.kind in "iu" and to.kind in "iu":
        info = np.iinfo(to)
        exact = info.min <= bounds[0] and bounds[1] <= info.max
    elif dtype.kind in "iu" and to.kind == "f":
        exact = max(abs(bounds[0]), abs(bounds[1])) <= 2 ** (np.finfo(to).nmant + 1)
    else:
        exact = dtype.kind == "f" and to.kind == "f" and to.itemsize > dtype.itemsize
    if not exact:
        raise ConfigError(f"{where}: input '{name}': {dtype} values in {list(bounds)} do not all survive a cast to "
                          f"{to}; a side's dtype may only differ where the cast is exact")
    return to


def _model_spec(path, table, check_files):
    base = path.parent
    name = table["name"]

    def where(key):
        return f"{path}: model '{name}': key '{key}'"

    inputs = {n: _tensor_spec(where, n, t, table["max_batch"]) for n, t in table["inputs"].items()}
    _check_feed_size(where, table)
    engines = {p: _resolve(base, v, where(f"engines.{p}"), check_files, "model")
               for p, v in table.get("engines", {}).items()}
    unknown = set(engines) - set(table["precisions"])
    if unknown:
        raise ConfigError(f"{where('engines')}: engines for {sorted(unknown)} but precisions are {table['precisions']}")
    onnx_files = table["onnx"] if isinstance(table.get("onnx"), dict) else {"fp32": table["onnx"]} \
        if "onnx" in table else {}
    unknown = set(onnx_files) - set(table["precisions"]) - {"fp32"}  # fp32: also the source of suite builds
    if unknown:
        raise ConfigError(f"{where('onnx')}: ONNX files for {sorted(unknown)} but precisions are {table['precisions']}")
    onnx_files = {p: _resolve(base, v, where(f"onnx.{p}" if isinstance(table["onnx"], dict) else "onnx"), check_files)
                  for p, v in onnx_files.items()}
    for precision in table.get("tolerances", {}):
        if precision not in table["precisions"]:
            raise ConfigError(f"{where('tolerances.' + precision)}: precision not listed in precisions")
    if "task_output" in table and table.get("task", "generic") != "classification":
        raise ConfigError(f"{where('task_output')}: selects the class-score output of a classification model, but "
                          f"task is '{table.get('task', 'generic')}' (detection reads its outputs by name: boxes, "
                          "scores, classes, num_detections)")
    calibration = table.get("calibration")
    if "int8" in table["precisions"] and calibration is None and "int8" not in onnx_files:
        raise ConfigError(f"{where('calibration')}: int8 is listed in precisions, so a calibration .npz "
                          "(representative inputs keyed by input name) is required, or your own int8 ONNX "
                          "(onnx = { int8 = \"model.int8.onnx\" })")
    return ModelSpec(
        name=name,
        source=path,
        reference=_resolve(base, table["reference"], where("reference"), check_files, "model", folder_ok=True),
        signature=table.get("signature", "serving_default"),
        onnx=onnx_files.get("fp32"),
        onnx_artifacts={p: v for p, v in onnx_files.items() if p != "fp32"},
        min_precision_coverage=table.get("min_precision_coverage"),
        engines=engines,
        precisions=tuple(p for p in PRECISIONS if p in table["precisions"]),
        max_batch=table["max_batch"],
        task=table.get("task", "generic"),
        task_output=table.get("task_output"),
        calibration=_resolve(base, calibration, where("calibration"), check_files, "npz") if calibration else None,
        inputs=inputs,
        outputs=dict(table.get("outputs", {})),
        tolerances=table.get("tolerances", {}),
        beam=table.get("beam"),
        latency=table.get("latency", {}),
        precision={k: list(v) for k, v in table.get("precision", {}).items()},
        allow_uninformative=table.get("allow_uninformative", False),
        nondeterministic=table.get("nondeterministic"),
        allow_nonfinite_reference=table.get("allow_nonfinite_reference", False),
    )


def check_model_value(key, value):
    """The schema's rule for the model key ``key`` (``name``, ``max_batch``) applied to ``value``: why it is
    refused (one line), or None. ``paritygate init`` checks its options with it before it writes anything."""
    schema = _schema_validator().schema
    rule = {**schema["$defs"]["model"]["properties"][key], "$defs": schema["$defs"]}
    error = next(iter(type(_schema_validator())(rule).iter_errors(value)), None)
    return None if error is None else _explain(error)


def parse_toml(text):
    """The one TOML parser call of the suite (configs, expectations.toml): ``ValueError`` for text that is not
    TOML, and for TOML nested deeper than Python's recursion limit lets tomllib read (200,000 ``[`` in a 1 MB
    config raised RecursionError, an INTERNALERROR of pytest's)."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ValueError(f"arrays or tables nested too deep to read (more than about {sys.getrecursionlimit()} "
                         "levels)") from None


def load_config(path, check_files=True):
    """Read, validate and resolve a config file; returns a list of ModelSpec."""
    raw = read_bytes(Path(path).absolute(), "config file", "config", ConfigError)  # the path as given
    path = Path(path).resolve()
    try:
        doc = parse_toml(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from err
    errors = sorted(_schema_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ConfigError(_format_schema_error(path, doc, errors[0]))
    seen = set()
    for table in doc["models"]:
        if table["name"] in seen:
            raise ConfigError(f"{path}: model '{table['name']}': key 'name': duplicate model name")
        seen.add(table["name"])
    return [_model_spec(path, table, check_files) for table in doc["models"]]
