"""Replacing a file whole, for the files other programs read while traceforge may be writing them
(an export's manifest and card, its commit journal, analyze's and profile's outputs)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: Path, scratch: Path | None = None) -> Iterator[Path]:
    """The path to write `path`'s new content to (`<name>.new` in `scratch`, by default `path`'s
    folder), which replaces `path` in one step, flushed to disk, when the block ends. A reader, or a
    process that dies, sees the old content or the new, never part of it; a write that fails (a
    full disk) or is interrupted (Ctrl-C) removes what it staged and leaves `path` as it was."""
    staged = (scratch or path.parent) / f"{path.name}.new"
    try:
        yield staged
        descriptor = os.open(staged, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        staged.replace(path)
    except (OSError, KeyboardInterrupt):
        staged.unlink(missing_ok=True)
        raise


def replace_text(path: Path, text: str, scratch: Path | None = None) -> None:
    """Replace `path` with `text` in one step (see `replacing`)."""
    with replacing(path, scratch) as staged:
        staged.write_text(text, encoding="utf-8")
