"""paritygate.backend.cache: content keys change exactly when what they hash changes; a warm call builds nothing; a
failed build leaves nothing behind. (The ONNX artifacts per precision: tests/backend/onnx/artifacts/test_loader.py.)"""

from pathlib import Path

import pytest

from paritygate.backend import cache
from paritygate.backend.cache import STATS, cache_root, cached_file, hash_path, key_of


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_root_from_the_environment_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv("PARITYGATE_CACHE")
    assert cache_root() == Path.home() / ".cache" / "paritygate"
    monkeypatch.setenv("PARITYGATE_CACHE", "")  # set but empty: the default
    assert cache_root() == Path.home() / ".cache" / "paritygate"


def test_key_of_changes_with_any_part_and_ignores_argument_order():
    base = key_of(src="abc", ops=["MatMul"], ort="1.31.1")
    assert base == key_of(ort="1.31.1", ops=["MatMul"], src="abc")
    assert len(base) == 24 and int(base, 16) >= 0
    assert len({base, key_of(src="abd", ops=["MatMul"], ort="1.31.1"),
                key_of(src="abc", ops=["MatMul", "Conv"], ort="1.31.1"),
                key_of(src="abc", ops=["MatMul"], ort="1.31.2"),
                key_of(src="abc", ops=["MatMul"], ort=None),
                key_of(src="abc", ops=["MatMul"])}) == 6
    assert key_of(p=Path("/a")) == key_of(p="/a")  # non-JSON values hash by str()


def test_hash_path_of_a_file_follows_its_bytes(tmp_path):
    f = tmp_path / "model.onnx"
    f.write_bytes(b"one")
    first = hash_path(f)
    assert hash_path(f) == first
    f.write_bytes(b"two")
    assert hash_path(f) != first


def test_hash_path_reads_a_settled_file_once_and_a_changed_or_fresh_one_again(tmp_path, monkeypatch):
    import os

    reads = []
    monkeypatch.setattr(cache, "_HASHES", {})
    monkeypatch.setattr(cache, "_sha256", lambda path, files: reads.append(path) or f"sha of {path.read_bytes()}")
    f = tmp_path / "model.onnx"
    f.write_bytes(b"one")
    hash_path(f), hash_path(f)
    assert len(reads) == 2  # written just now: within RACY_S a same-size rewrite could keep its mtime
    os.utime(f, ns=(10**18, 10**18))  # settled: an mtime long past
    assert hash_path(f) == hash_path(f) == "sha of b'one'" and len(reads) == 3
    f.write_bytes(b"two")  # same size, and a new mtime
    os.utime(f, ns=(10**18 + 1, 10**18 + 1))
    assert hash_path(f) == "sha of b'two'" and len(reads) == 4


def test_hash_path_of_a_directory_follows_names_and_bytes(tmp_path):
    d = tmp_path / "saved_model"
    (d / "variables").mkdir(parents=True)
    (d / "saved_model.pb").write_bytes(b"graph")
    (d / "variables" / "variables.data").write_bytes(b"weights")
    first = hash_path(d)
    copy = tmp_path / "elsewhere" / "sm"
    (copy / "variables").mkdir(parents=True)
    (copy / "saved_model.pb").write_bytes(b"graph")
    (copy / "variables" / "variables.data").write_bytes(b"weights")
    assert hash_path(copy) == first  # where the folder lives does not matter
    (d / "variables" / "variables.data").write_bytes(b"weights2")
    assert hash_path(d) != first
    (d / "variables" / "variables.data").write_bytes(b"weights")
    (d / "variables" / "variables.data").rename(d / "variables" / "renamed.data")
    assert hash_path(d) != first
    (d / "variables" / "renamed.data").rename(d / "variables" / "variables.data")
    assert hash_path(d) == first
    (d / "extra").write_bytes(b"")
    assert hash_path(d) != first


def test_a_second_call_builds_nothing(root):
    calls = []

    def build(tmp):
        calls.append(tmp)
        tmp.write_text("artifact")

    before = dict(STATS)
    first = cached_file("onnx", "k1", ".onnx", build)
    assert first == root / "onnx" / "k1.onnx" and first.read_text() == "artifact"
    assert (STATS["builds"], STATS["hits"]) == (before["builds"] + 1, before["hits"])
    second = cached_file("onnx", "k1", ".onnx", build)
    assert second == first and len(calls) == 1
    assert (STATS["builds"], STATS["hits"]) == (before["builds"] + 1, before["hits"] + 1)
    assert calls[0].parent == first.parent and calls[0] != first  # built beside the target, then renamed
    assert sorted(p.name for p in first.parent.iterdir()) == ["k1.onnx"]


def test_a_thread_that_needs_a_file_another_is_building_waits_for_it(root):
    """``backend.ahead`` builds beside the checks: one build, both threads given the file."""
    import threading
    import time

    calls, started, got = [], threading.Event(), []

    def build(tmp):
        calls.append(tmp)
        started.set()
        time.sleep(0.2)
        tmp.write_text("artifact")

    other = threading.Thread(target=lambda: got.append(cached_file("onnx", "k1", ".onnx", build)))
    other.start()
    started.wait(5)
    path = cached_file("onnx", "k1", ".onnx", build)
    other.join()
    assert got == [path] and len(calls) == 1 and path.read_text() == "artifact"


def test_another_key_builds_again(root):
    before = STATS["builds"]
    a = cached_file("onnx", "ka", ".onnx", lambda tmp: tmp.write_text("a"))
    b = cached_file("onnx", "kb", ".onnx", lambda tmp: tmp.write_text("b"))
    assert a != b and STATS["builds"] == before + 2 and (a.read_text(), b.read_text()) == ("a", "b")


def test_a_failed_build_leaves_nothing_and_raises(root):
    def build(tmp):
        tmp.write_text("half written")
        raise RuntimeError("converter crashed")

    before = dict(STATS)
    with pytest.raises(RuntimeError, match="converter crashed"):
        cached_file("onnx", "bad", ".onnx", build)
    assert list((root / "onnx").iterdir()) == []
    assert STATS == before
    # the next call builds for real
    assert cached_file("onnx", "bad", ".onnx", lambda tmp: tmp.write_text("ok")).read_text() == "ok"


def test_stats_are_one_dict_per_process():
    assert cache.STATS is STATS and set(STATS) == {"hits", "builds"}
