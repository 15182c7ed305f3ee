"""paritygate.files: a path is stat'ed before it is opened; a FIFO, a device, a folder, a symlink loop or a file over
its kind's limit is one line naming the path and what was expected, never a hang; reads are bounded."""

import os
import threading

import pytest

from paritygate.files import LIMITS, MB, FileRefused, check_file, check_version, limit_bytes, read_bytes, read_json


def within(seconds, fn, *args, **kwargs):
    """``fn(*args)``'s result or exception, failing the test when it has not returned in ``seconds`` (a FIFO
    read that blocks must not hang the test run: the thread is a daemon)."""
    box = {}

    def call():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - handed to the test as it is
            box["error"] = err

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__}{args} still running after {seconds} s: it blocks"
    return box


def refused(box, *words):
    err = box.get("error")
    assert isinstance(err, FileRefused), box
    text = str(err)
    assert "\n" not in text and all(w in text for w in words), text
    return text


def test_a_regular_file_within_its_limit_is_read_whole(tmp_path):
    (tmp_path / "a.json").write_text('{"a": [1, 2]}')
    assert read_bytes(tmp_path / "a.json", "thing", "json") == b'{"a": [1, 2]}'
    assert read_json(tmp_path / "a.json", "thing") == {"a": [1, 2]}


@pytest.mark.parametrize("special", ["fifo", "folder", "loop", "device", "missing"])
def test_special_paths_are_one_line_naming_the_path_and_never_block(tmp_path, special):
    path = tmp_path / "x"
    if special == "fifo":
        os.mkfifo(path)
    elif special == "folder":
        path.mkdir()
    elif special == "loop":
        os.symlink(path, path)
    elif special == "device":
        os.symlink("/dev/zero", path)
    expected = {"fifo": "a FIFO (named pipe), expected a regular file", "folder": "a folder, expected a regular file",
                "loop": "a symlink loop", "device": "a character device", "missing": "file not found"}[special]
    refused(within(10, read_bytes, path, "config file", "config"), str(path), "config file", expected)


def test_a_folder_is_accepted_where_a_savedmodel_may_be(tmp_path):
    assert check_file(tmp_path, "reference", "model", folder_ok=True) == tmp_path


@pytest.mark.parametrize("kind", sorted(LIMITS))
def test_a_sparse_file_over_the_limit_is_refused_before_a_read_naming_the_limit_and_the_variable(tmp_path, kind):
    path = tmp_path / "huge"
    with open(path, "wb") as f:
        f.truncate(limit_bytes(kind) + 1)  # sparse: no disk, no read
    default, env = LIMITS[kind]
    refused(within(10, check_file, path, "thing", kind), str(path), f"{default} MB limit", f"{env}=<MB>")


def test_the_environment_raises_a_limit_and_a_bad_value_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "c.toml"
    path.write_bytes(b"#" * (MB + 1))
    with pytest.raises(FileRefused, match="PARITYGATE_MAX_CONFIG_MB"):
        read_bytes(path, "config file", "config")
    monkeypatch.setenv("PARITYGATE_MAX_CONFIG_MB", "2")
    assert len(read_bytes(path, "config file", "config")) == MB + 1
    monkeypatch.setenv("PARITYGATE_MAX_CONFIG_MB", "lots")
    with pytest.raises(FileRefused, match="PARITYGATE_MAX_CONFIG_MB='lots': expected a positive number"):
        read_bytes(path, "config file", "config")


def test_json_nested_too_deep_or_not_utf8_is_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    refused(within(10, read_json, deep, "report"), "nested too deep")
    (tmp_path / "latin.json").write_bytes(b'{"a": "\xe9"}')
    refused(within(10, read_json, tmp_path / "latin.json", "report"), "not UTF-8 text (byte 7)")


def test_an_unknown_schema_version_names_the_file_the_version_and_the_supported_ones():
    with pytest.raises(FileRefused, match=r"^r.json: report has schema version 99; this paritygate reads schema "
                                          r"version\(s\) 1$"):
        check_version("r.json", "report", 99, (1,))
    with pytest.raises(FileRefused, match="has no schema version"):
        check_version("r.json", "report", None, (1,))
    with pytest.raises(FileRefused, match="schema version True"):
        check_version("r.json", "report", True, (1,))  # JSON true == 1 in Python: not a version


def test_write_file_replaces_a_planted_symlink_and_never_follows_it(tmp_path):
    from paritygate.files import write_file

    victim, link = tmp_path / "victim", tmp_path / "report" / "parity-report.md"
    victim.write_text("keep")
    link.parent.mkdir()
    link.symlink_to(victim)
    write_file(link, "new")
    assert victim.read_text() == "keep" and not link.is_symlink() and link.read_text() == "new"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    write_file(tmp_path / "dangling", b"bytes")
    assert not (tmp_path / "nowhere").exists() and (tmp_path / "dangling").read_bytes() == b"bytes"
    with pytest.raises(OSError, match="report: cannot write the report: it is a folder"):
        write_file(tmp_path / "report", "x", "the report")
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["parity-report.md"]  # no temporary file left
