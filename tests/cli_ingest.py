"""Driving `traceforge ingest` the way a user does (no --format: detection decides), for adapter tests."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from traceforge.cli import cli


def ingest_cli(runner: CliRunner, paths: list[Path | str], db: Path, *extra: str) -> dict:
    """Run `traceforge ingest PATHS --db DB --json`, assert it exited 0, and return its JSON report."""
    result = runner.invoke(cli, ["ingest", *map(str, paths), "--db", str(db), "--json", *extra])
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return json.loads(result.stdout)
