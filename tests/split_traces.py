"""What the tests of traces spread over several files share: ingesting through the CLI and reading
back everything a trace is made of, without where it was read from."""

from __future__ import annotations

import json
from pathlib import Path

from traceforge import store
from traceforge.cli import cli
from traceforge.ingest import joins
from traceforge.ingest.stream import open_records

# Everything a trace is made of, without where it was read from. A merge patch's null takes a key
# out (json_remove would too, but DuckDB 1.5, pyproject's lower bound, does not have it).
CONTENT = {
    "traces": "SELECT trace_id, started_at, ended_at, outcome, workload, agent, "
    "json_merge_patch(attributes, '{\"source_paths\": null}') FROM traces",
    "llm_calls": "SELECT * EXCLUDE (source_line) FROM llm_calls",
    "tool_calls": "SELECT * FROM tool_calls",
    "messages": "SELECT * FROM messages",
    "tool_defs": "SELECT * FROM tool_defs",
    "trace_dag": "SELECT * EXCLUDE (settings) FROM trace_dag",
    "tool_deps": "SELECT * FROM tool_deps",
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run(runner, *args: str) -> str:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def ingest(runner, db: Path, *paths: Path) -> dict:
    return json.loads(run(runner, "ingest", *map(str, paths), "--db", str(db), "--json"))


def content(runner, db: Path) -> dict[str, list[tuple]]:
    run(runner, "deps", "--db", str(db))
    con = store.connect(db)
    try:
        return {table: sorted(con.execute(sql).fetchall(), key=repr) for table, sql in CONTENT.items()}
    finally:
        con.close()


def query(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    """The rows of one query on the store `db`, opened read-only."""
    con = store.connect(db, read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def where_from(db: Path) -> list[tuple]:
    con = store.connect(db)
    try:
        return con.execute(
            "SELECT trace_id, source_path, attributes->'$.source_paths' FROM traces ORDER BY 1"
        ).fetchall()
    finally:
        con.close()


def whole(runner, folder: Path, lines: list[str]) -> dict[str, list[tuple]]:
    """The content of a store holding `lines` as one file: what the parts must add up to."""
    db = folder / "whole.duckdb"
    ingest(runner, db, write(folder / "whole" / "export.jsonl", "".join(lines)))
    return content(runner, db)


def lines_read_again(monkeypatch) -> list[int]:
    """The lines `ingest.joins` parses again from now on (of every file it reads again)."""
    read_again: list[int] = []

    def counted(*args, **kwargs):
        opened = open_records(*args, **kwargs)
        opened.records = (read_again.append(record.line) or record for record in opened.records)
        return opened

    monkeypatch.setattr(joins, "open_records", counted)
    return read_again
