"""Opening a user's file safely: the one way every reader of the suite (config, expectations, ONNX, .npz, goldens
manifest, report JSON, reproducer, baseline) gets at a file somebody else wrote.

Before a byte is read, ``os.stat`` says what the path is: a regular file (or a folder, where a SavedModel is
expected) within its kind's size limit. A FIFO, a device, a socket, a folder where a file is expected, a symlink
loop or a file over the limit is one line naming the path and what was expected, never a hang or a
``MemoryError``. The file is then opened without blocking, checked again on the open descriptor (it may have
been swapped since), and read at most up to the limit.

The limits, each with the environment variable that raises it (in MB, 2**20 bytes; docs/limits.md lists them):

    config  1 MB      PARITYGATE_MAX_CONFIG_MB  a TOML the team writes: the bundled ones are 6 and 13 kB
    json    256 MB    PARITYGATE_MAX_JSON_MB    reports, baselines, goldens manifests
    onnx    2048 MB   PARITYGATE_MAX_ONNX_MB    ONNX files and saved_model.pb: protobuf's 2 GiB message limit
    npz     4096 MB   PARITYGATE_MAX_NPZ_MB     input sets, calibration sets, goldens, reproducers
    model   8192 MB   PARITYGATE_MAX_MODEL_MB   a reference .keras/.h5 file, a TensorRT engine (a SavedModel is a folder)

Every file the suite writes for a person (the report's JSON, Markdown and HTML, reproducers, ``paritygate init``'s
config) goes through ``write_file``: a new temporary file in the target's folder, renamed over the target, so that
a symlink planted at the target is replaced, never followed, and a reader never sees half a file.

Errors are raised as the caller's own error class (``error=``), so that a config's file is a ``ConfigError`` and
an input set's an ``InputSetError``; the message never holds the file's bytes.
"""

import errno
import json
import os
import secrets
import stat
from pathlib import Path

MB = 2**20
LIMITS = {"config": (1, "PARITYGATE_MAX_CONFIG_MB"), "json": (256, "PARITYGATE_MAX_JSON_MB"),
          "onnx": (2048, "PARITYGATE_MAX_ONNX_MB"), "npz": (4096, "PARITYGATE_MAX_NPZ_MB"),
          "model": (8192, "PARITYGATE_MAX_MODEL_MB")}
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


class FileRefused(ValueError):
    """A path that is not a readable regular file within its size limit; the message names it."""


def limit_value(env, default):
    """The limit ``env`` sets (a positive number), or ``default`` when it is not set."""
    raw = os.environ.get(env)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1
    if not 0 < value < float("inf"):
        raise FileRefused(f"{env}={raw!r}: expected a positive number (default {default})")
    return value


def limit_bytes(kind):
    """The size limit of ``kind`` in bytes: its default, or its environment variable (MB) when set."""
    default, env = LIMITS[kind]
    return int(limit_value(env, default) * MB)


def _what_it_is(mode):
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def check_file(path, what, kind, error=FileRefused, folder_ok=False):
    """``path`` as a Path after ``os.stat`` shows a regular file within ``kind``'s limit (or a folder when
    ``folder_ok``); ``error`` with one line naming the path, ``what`` it should be and what it is otherwise."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: cannot read {what}: file not found") from None
    except OSError as err:
        why = {errno.ELOOP: "a symlink loop", errno.ENAMETOOLONG: "a name too long for the file system"}.get(
            err.errno, err.strerror)
        raise error(f"{path}: cannot read {what}: {why}") from None
    if folder_ok and stat.S_ISDIR(st.st_mode):
        return path
    if not stat.S_ISREG(st.st_mode):
        expected = "a regular file or a folder" if folder_ok else "a regular file"
        raise error(f"{path}: cannot read {what}: it is {_what_it_is(st.st_mode)}, expected {expected}")
    _check_size(path, what, kind, st.st_size, error)
    return path


def _check_size(path, what, kind, size, error):
    try:
        limit = limit_bytes(kind)
    except FileRefused as err:
        raise error(str(err)) from None
    if size > limit:
        default, env = LIMITS[kind]
        raise error(f"{path}: {what} is {size / MB:.1f} MB, over the {limit / MB:g} MB limit for {kind} files "
                    f"(default {default}); raise it with {env}=<MB>")


def read_bytes(path, what, kind, error=FileRefused):
    """The bytes of the regular file at ``path`` (see ``check_file``), read without blocking and at most up to
    ``kind``'s limit."""
    path = check_file(path, what, kind, error)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the stat
            raise error(f"{path}: cannot read {what}: it is {_what_it_is(st.st_mode)}, expected a regular file")
        limit = limit_bytes(kind)
        try:
            data = f.read(limit + 1)
        except OSError as err:
            raise error(f"{path}: cannot read {what}: {err.strerror}") from None
    _check_size(path, what, kind, len(data), error)
    return data


def read_text(path, what, kind, error=FileRefused):
    """``read_bytes`` decoded as UTF-8; bytes that are not UTF-8 are one line naming the file (not the bytes)."""
    data = read_bytes(path, what, kind, error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{path}: cannot read {what}: not UTF-8 text (byte {err.start})") from None


def read_json(path, what, kind="json", error=FileRefused):
    """The JSON document at ``path``; a syntax error or nesting too deep to parse is one line naming the file."""
    text = read_text(path, what, kind, error)
    try:
        return json.loads(text)
    except ValueError as err:
        raise error(f"{path}: cannot read {what}: not valid JSON ({err})") from None
    except RecursionError:
        raise error(f"{path}: cannot read {what}: JSON nested too deep to read") from None


def check_version(path, what, found, supported, error=FileRefused):
    """Refuse a versioned file whose schema version is not one of ``supported``: one line naming the file, the
    version found and the versions this paritygate reads."""
    if isinstance(found, bool) or found not in supported:
        have = "no schema version" if found is None else f"schema version {found!r}"
        raise error(f"{path}: {what} has {have}; this paritygate reads schema version(s) "
                    f"{', '.join(map(str, supported))}")


def present(path):
    """Whether something is at ``path``, a dangling or looping symlink included (``Path.exists`` says False for
    those): a file the suite looks for by name is then read, and its reader names what is wrong with it."""
    return os.path.lexists(path)


def write_file(path, data, what="file", error=OSError):
    """Write ``data`` (str: UTF-8, or bytes) to ``path`` through a temporary file created beside it (``O_EXCL``:
    never an existing file or link) and ``os.replace``: whatever is at ``path`` (a file, a symlink to anywhere)
    is replaced by the new file, and the target of a symlink is never written. ``error`` (one line naming the path
    and ``what``) when the folder cannot be written or ``path`` is a folder. Returns ``path`` as a Path."""
    path = Path(path)
    body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.replace(tmp, path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    except OSError as err:
        why = "it is a folder" if os.path.isdir(path) and not os.path.islink(path) else (err.strerror or str(err))
        raise error(f"{path}: cannot write {what}: {why}") from None
    return path
