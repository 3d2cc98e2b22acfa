"""`files.replace_text`: a file others read is replaced whole, or left as it was."""

from __future__ import annotations

import errno
import os

import pytest

from traceforge import files


def test_a_file_is_replaced_whole(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    files.replace_text(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_write_that_fails_leaves_the_old_text_and_nothing_staged(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("old")
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def disk_full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        files.replace_text(target, "new", scratch)
    assert target.read_text() == "old"
    assert not list(scratch.iterdir())


def test_an_interrupted_write_leaves_the_old_text_and_nothing_staged(tmp_path):
    target = tmp_path / "replay.jsonl"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), files.replacing(target) as staged:
        staged.write_text("half")
        raise KeyboardInterrupt
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["replay.jsonl"]
