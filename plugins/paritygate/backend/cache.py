"""Content-addressed artifact cache outside the source tree (``$PARITYGATE_CACHE``, default ~/.cache/paritygate).

An artifact's key hashes everything it depends on (input bytes, settings, tool versions), so a warm run
converts and quantizes nothing, and a changed input can never be served a stale artifact.
"""

import hashlib
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from pathlib import Path

from paritygate.common import progress
from paritygate.common.timeline import spent

STATS = {"hits": 0, "builds": 0}  # per process; the tests read it to prove a warm run builds nothing


def cache_root():
    return Path(os.environ.get("PARITYGATE_CACHE") or Path.home() / ".cache" / "paritygate")


_HASHES = {}  # (path, each file's name, size and mtime) -> sha256: see hash_path
RACY_S = 2.0
_TURNS, _TURNS_LOCK = {}, threading.Lock()  # target path -> the lock of its build in this process (_turn)


def hash_path(path):
    """sha256 of a file, or of a directory's relative file names and bytes. Read once per process while no file's
    name, size or mtime changes: a warm run of the bundled suite hashed bert's SavedModel 51 times and its ONNX 45
    (cache keys, the reference cache, validation), which for a team's 500 MB model is seconds each time. A file
    written in the last RACY_S seconds is read every time: timestamps are coarse (milliseconds), so a same-size
    rewrite within one tick would keep its mtime (git's "racily clean" rule)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    stats = [(str(f), st.st_size, st.st_mtime_ns) for f in files for st in [f.stat()]]
    if any(time.time_ns() - mtime < RACY_S * 1e9 for _, _, mtime in stats):
        return _sha256(path, files)
    stamp = (str(path.resolve()), tuple(stats))
    if stamp not in _HASHES:
        _HASHES[stamp] = _sha256(path, files)
    return _HASHES[stamp]


def _sha256(path, files):
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(path) if f != path else f.name).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def key_of(**parts):
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def cpu_flags():
    """This CPU's feature flags (Linux ``/proc/cpuinfo``), else what ``platform`` says of it: part of the key of an
    artifact built for this CPU (``backend.onnx.strict.twin``, ``backend.onnx.strict.round16``)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return sorted(line.split(":", 1)[1].split())
    except OSError:
        pass
    return [platform.machine(), platform.processor()]


def report_path(artifact):
    """The build report written beside an artifact (``<key>.report.json``)."""
    return Path(artifact).with_suffix(".report.json")


def cached_file(kind, key, suffix, build):
    """Return ``<root>/<kind>/<key><suffix>``, calling ``build(tmp_path)`` to make it when absent.

    The build writes a temporary file that is renamed into place, so concurrent xdist workers never see
    a half-written artifact; the loser of a race simply overwrites with identical content. A build that
    raises leaves nothing behind. When ``build`` returns a dict (its build report: converter, settings,
    findings), it is written as ``<key>.report.json`` beside the artifact, before the artifact appears.
    """
    target = cache_root() / kind / f"{key}{suffix}"
    with _turn(target):
        return target if _hit(target) else _build_file(target, key, kind, suffix, build)


def _build_file(target, key, kind, suffix, build):
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{key}-", suffix=suffix)
    os.close(fd)
    try:
        with spent("conversion"), progress.step(f"building {_label(kind, key)}"):
            report = build(Path(tmp))
        if report is not None:
            _write_atomically(report_path(target), json.dumps(report, indent=1, sort_keys=True, default=str))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    STATS["builds"] += 1
    return target


def cached_dir(kind, key, build):
    """Like ``cached_file`` for a folder (e.g. a SavedModel): ``build(tmp_dir)`` fills a fresh temporary folder
    that is renamed to ``<root>/<kind>/<key>``; a build that raises leaves nothing behind."""
    target = cache_root() / kind / key
    with _turn(target):
        return target if _hit(target) else _build_dir(target, key, kind, build)


def _hit(target):
    if target.exists():
        STATS["hits"] += 1
        return True
    return False


def _turn(target):
    """The lock of ``target``'s build in this process: a thread that needs a file another thread is building waits
    for it (``backend.ahead``); processes race as the docstring of ``cached_file`` says."""
    with _TURNS_LOCK:
        return _TURNS.setdefault(str(target), threading.RLock())


def _build_dir(target, key, kind, build):
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{key}-"))
    try:
        with spent("conversion"), progress.step(f"building {_label(kind, key)}"):
            build(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not target.exists():  # a concurrent worker renamed its identical folder first: keep that one
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    STATS["builds"] += 1
    return target


def _label(kind, key):
    """What a build makes, for the progress line: ``onnx efficientnetb0-fp16`` (the key's hash left out)."""
    import re

    return f"{kind} {re.sub(r'-[0-9a-f]{16,}', '', key)}"


def _write_atomically(path, text):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
