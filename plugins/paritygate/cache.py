"""Content-addressed artifact cache outside the source tree (``$PARITYGATE_CACHE``, default ~/.cache/paritygate).

An artifact's key hashes everything it depends on (input bytes, settings, tool versions), so a warm run
converts and quantizes nothing, and a changed input can never be served a stale artifact.
"""

import hashlib
import json
import os
import tempfile
from pathlib import Path

STATS = {"hits": 0, "builds": 0}  # per process; the tests read it to prove a warm run builds nothing


def cache_root():
    return Path(os.environ.get("PARITYGATE_CACHE") or Path.home() / ".cache" / "paritygate")


def hash_path(path):
    """sha256 of a file, or of a directory's relative file names and bytes."""
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        digest.update(str(f.relative_to(path) if f != path else f.name).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def key_of(**parts):
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def cached_file(kind, key, suffix, build):
    """Return ``<root>/<kind>/<key><suffix>``, calling ``build(tmp_path)`` to make it when absent.

    The build writes a temporary file that is renamed into place, so concurrent xdist workers never see
    a half-written artifact; the loser of a race simply overwrites with identical content.
    """
    target = cache_root() / kind / f"{key}{suffix}"
    if target.exists():
        STATS["hits"] += 1
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{key}-", suffix=suffix)
    os.close(fd)
    try:
        build(Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    STATS["builds"] += 1
    return target
