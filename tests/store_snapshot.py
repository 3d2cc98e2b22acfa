"""A store's ingested rows, in a fixed order and without the columns that say when a row was written:
two ingests that should give the same store are compared by their snapshots (`ingest` writes one)."""

from __future__ import annotations

from pathlib import Path

from traceforge import store
from traceforge.ingest import IngestReport, ingest_paths

TABLES = {
    "traces": "trace_id",
    "llm_calls": "call_id",
    "tool_calls": "tool_call_id",
    "messages": "trace_id, seq",
    "tool_defs": "trace_id, name",
    "rejects": "source_path, line, error",
    "sources": "path",
}
# Columns that differ between two runs by nature (when a row was written).
VOLATILE = {"ingested_at", "rejected_at"}


def snapshot(db: Path) -> dict[str, list[tuple]]:
    con = store.connect(db, read_only=True)
    try:
        out = {}
        for table, order in TABLES.items():
            columns = [
                row[0]
                for row in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                    "ORDER BY ordinal_position",
                    [table],
                ).fetchall()
                if row[0] not in VOLATILE
            ]
            out[table] = con.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}").fetchall()
        return out
    finally:
        con.close()


def ingest(db: Path, paths: list[Path], workers: int = 1) -> IngestReport:
    """Ingest `paths` into the store file `db` (created if missing) with `workers` processes."""
    con = store.connect(db)
    try:
        return ingest_paths(con, paths, workers=workers)
    finally:
        con.close()
