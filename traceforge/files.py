"""Replacing a file whole, for the files other programs read while traceforge may be writing them
(an export's manifest and card, its commit journal, analyze's summary.json)."""

from __future__ import annotations

import os
from pathlib import Path


def replace_text(path: Path, text: str, scratch: Path | None = None) -> None:
    """Replace `path` with `text` in one step: written to `scratch` (by default `path`'s folder) as
    `<name>.new`, flushed to disk, then renamed over it. A reader, or a process that dies, sees the
    old text or the new, never part of it; a write that fails (a full disk) removes what it staged
    and leaves `path` as it was."""
    staged = (scratch or path.parent) / f"{path.name}.new"
    try:
        with staged.open("w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        staged.replace(path)
    except OSError:
        staged.unlink(missing_ok=True)
        raise
