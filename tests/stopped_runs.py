"""A run of `ingest` stopped, as by Ctrl-C, while it writes a file in parts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from traceforge.ingest import writer


def stop_at_part(monkeypatch, path: Path, part: int) -> Callable[[], None]:
    """Make the ingest raise KeyboardInterrupt as it comes to `path`'s part number `part` (from 1),
    the parts before it written; returns what undoes it."""
    real_part_rows = writer.part_rows
    calls = []

    def stopped(*args):
        calls.append(args[1])
        if calls.count(str(path)) == part:
            raise KeyboardInterrupt  # Ctrl-C
        return real_part_rows(*args)

    monkeypatch.setattr(writer, "part_rows", stopped)
    return lambda: monkeypatch.setattr(writer, "part_rows", real_part_rows)
