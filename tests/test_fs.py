"""noterag.base.files: the one way a whole file is replaced (atomic, durable, no temporary left)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from noterag.base import files as _fs


def test_replaces_the_file_with_the_new_content(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text("old")
    _fs.atomic_write_json(path, {"name": "Fenwick ü", "n": 2})
    assert path.read_text(encoding="utf-8") == '{\n  "name": "Fenwick ü",\n  "n": 2\n}\n'
    _fs.atomic_write_text(path, "text\n")
    assert path.read_bytes() == b"text\n"
    _fs.atomic_write_bytes(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert _fs.atomic_write_lines(path, iter([b"a\n", b"b\n"])) == 2
    assert path.read_bytes() == b"a\nb\n"
    assert os.listdir(tmp_path) == ["run.json"]  # no temporary left behind


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text("old\n")

    def lines():
        yield b"new\n"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fs.atomic_write_lines(path, lines())
    with pytest.raises(ValueError), _fs.atomic_writer(path) as handle:
        handle.write("half")
        raise ValueError("nothing to write after all")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["corpus.jsonl"]


def test_the_new_file_gets_the_usual_permissions(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        _fs.atomic_write_text(tmp_path / "summary.json", "{}")
    finally:
        os.umask(old_umask)
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600


def test_the_file_and_its_directory_are_fsynced_before_it_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    _fs.atomic_write_json(tmp_path / "x.json", [1])
    assert events == ["fsync file", "replace", "fsync dir"]
    assert json.loads((tmp_path / "x.json").read_text()) == [1]
