"""Lazy imports, in the manner of Polygraphy's ``mod.lazy_import``.

The plugin must load and collect on a machine with only pytest + numpy, so every heavy framework
(tensorflow, tensorrt, apache_beam, cuda, onnxruntime, tf2onnx) is imported on first attribute access.
"""

import importlib
import importlib.util
import types


class MissingDependency(ImportError):
    """A heavy dependency is not installed; the message says which extra provides it."""


_EXTRA = {
    "tensorflow": "tf",
    "tf2onnx": "onnx",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "onnxconverter_common": "onnx",
    "apache_beam": "beam",
    "tensorrt": "gpu",
    "polygraphy": "gpu",
    "cuda": "gpu",
    "tensorrt_rtx": "trt-rtx",
}


# What each extra of pyproject.toml promises to make importable (its distributions' top-level modules), for
# PARITYGATE_REQUIRE_EXTRAS: cpu is pyproject's paritygate[tf,onnx,beam]; lint installs binaries only.
PROMISED = {
    "tf": ("tensorflow", "keras", "hypothesis", "xdist"),
    "onnx": ("onnx", "onnxruntime", "onnxconverter_common", "tf2onnx", "polygraphy", "hypothesis", "xdist"),
    "beam": ("apache_beam", "hypothesis", "xdist"),
    "gpu": ("tensorrt", "polygraphy", "cuda"),
    "ort-cuda": ("onnx", "onnxruntime", "onnxconverter_common", "tf2onnx", "polygraphy", "cuda", "hypothesis", "xdist"),
    "gpu-trt10": ("tensorrt", "polygraphy", "cuda"),
    "trt-rtx": ("tensorrt_rtx", "polygraphy"),
    "test": ("pytest_benchmark",),
    "lint": (),
    "docs": ("mkdocs", "material"),
}
ALIASES = {"cpu": ("tf", "onnx", "beam")}


def promised_by(extras):
    """Module root -> the first of ``extras`` that promises it. Raises ValueError naming an unknown extra."""
    found = {}
    for extra in extras:
        if extra not in PROMISED and extra not in ALIASES:
            raise ValueError(f"unknown extra {extra!r}; the extras are {sorted({*PROMISED, *ALIASES})}")
        for name in ALIASES.get(extra, (extra,)):
            for module in PROMISED[name]:
                found.setdefault(module, name)
    return found


def available(name):
    """True when ``name`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def missing_reason(name):
    root = name.split(".")[0]
    extra = _EXTRA.get(root, "cpu")
    return f"{name} is not installed (pip install 'paritygate[{extra}]')"


class _LazyModule(types.ModuleType):
    def __init__(self, name):
        super().__init__(name)
        self.__dict__["_lazy_name"] = name
        self.__dict__["_lazy_mod"] = None

    def _load(self):
        mod = self.__dict__["_lazy_mod"]
        if mod is None:
            name = self.__dict__["_lazy_name"]
            try:
                mod = importlib.import_module(name)
            except ImportError as err:
                raise MissingDependency(f"{missing_reason(name)}: {err}") from err
            self.__dict__["_lazy_mod"] = mod
        return mod

    def __getattr__(self, attr):
        return getattr(self._load(), attr)


def lazy_import(name):
    """Return a proxy that imports ``name`` on first attribute access."""
    return _LazyModule(name)


def module_dist(module, dists):
    """(name, version) of whichever of ``dists`` installed the ``module`` that imports: the distribution beside it on
    sys.path (onnxruntime and onnxruntime-gpu both install ``onnxruntime``, and only the first on the path imports,
    whatever else package metadata lists); the first installed of ``dists`` where none sits beside it; else None.
    Reads metadata only: nothing is imported."""
    from importlib import metadata
    from pathlib import Path

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        beside = Path(spec.origin).parent.parent
        for dist in metadata.distributions(path=[str(beside)]):
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
            if name in dists:
                return name, dist.version
    found = next(((d, dist_version(d)) for d in dists if dist_version(d)), None)
    return found


def dist_version(*dists):
    """The installed version of the first of ``dists`` that is installed (package metadata, nothing imported),
    else None."""
    from importlib import metadata

    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None
