"""The checks every reliability test applies: each file's accounting in `sources`, and a whole store.

Accounting (per `sources` row): records = ingested + rejected + skipped; `rejected` is the number of
`rejects` rows of the file, `skipped` the sum of `skipped_by_kind`; `traces` the number of `traces`
rows from the file; a file that failed as a whole gave no trace and has a reject without a line that
says why; a duplicate file gave nothing. Integrity: no row without its trace, no trace without its
file's `sources` row, no id twice.

These are written from the store's contract (docs/schema.md), not from the ingest code, so that a
bug in the code cannot hide itself here.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from traceforge.model import ParseResult

TRACE_CHILD_TABLES = ("llm_calls", "tool_calls", "messages", "tool_defs")
UNIQUE_IDS = {
    "traces": "trace_id",
    "llm_calls": "call_id",
    "tool_calls": "tool_call_id",
    "sources": "path",
}


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params or [])
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def accounting_problems(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every way a `sources` row breaks the accounting, one line each (empty: all files hold)."""
    problems = []
    rows = _rows(
        con,
        """
        SELECT s.*,
               (SELECT count(*) FROM rejects r WHERE r.source_path = s.path) AS reject_rows,
               (SELECT count(*) FROM rejects r WHERE r.source_path = s.path AND r.line IS NULL
                   AND r.error = s.error) AS file_rejects,
               (SELECT count(*) FROM rejects r WHERE r.source_path = s.path
                   AND coalesce(trim(r.error), '') = '') AS rejects_without_reason,
               -- a trace joined from several files' spans (ingest.joins) counts in each of them
               (SELECT count(*) FROM traces t WHERE t.source_path = s.path OR list_contains(
                   coalesce(json_extract_string(t.attributes, '$.source_paths[*]'), []), s.path)
               ) AS trace_rows,
               (SELECT count(*) FROM sources o WHERE o.path = s.duplicate_of) AS original_rows
        FROM sources s ORDER BY s.path
        """,
    )
    for row in rows:
        name = row["path"]
        records, ingested, rejected, skipped = (
            row[k] for k in ("records", "ingested", "rejected", "skipped")
        )
        by_kind = json.loads(row["skipped_by_kind"] or "{}")
        if records != ingested + rejected + skipped:
            problems.append(
                f"{name}: records {records} != ingested {ingested} + rejected {rejected} + skipped {skipped}"
            )
        if min(records, ingested, rejected, skipped) < 0:
            problems.append(f"{name}: a negative count {(records, ingested, rejected, skipped)}")
        if skipped != sum(by_kind.values()) or any(
            not isinstance(n, int) or n <= 0 or not kind.strip() for kind, n in by_kind.items()
        ):
            problems.append(f"{name}: skipped {skipped} does not match skipped_by_kind {by_kind}")
        if rejected != row["reject_rows"]:
            problems.append(f"{name}: rejected {rejected} but {row['reject_rows']} rows in rejects")
        if row["rejects_without_reason"]:
            problems.append(f"{name}: {row['rejects_without_reason']} rejects without a reason")
        if row["traces"] != row["trace_rows"]:
            problems.append(f"{name}: traces {row['traces']} but {row['trace_rows']} rows in traces")
        if row["error"] is not None:
            if ingested or row["trace_rows"]:
                problems.append(f"{name}: failed ({row['error']}) yet ingested {ingested}")
            if row["file_rejects"] != 1:
                problems.append(f"{name}: failed but no reject row without a line gives its error")
        elif row["duplicate_of"] is not None:
            if records or row["trace_rows"] or row["reject_rows"]:
                problems.append(f"{name}: a duplicate of {row['duplicate_of']} that gave rows")
            if row["original_rows"] != 1:
                problems.append(f"{name}: duplicate of {row['duplicate_of']}, which is not in sources")
        elif (ingested > 0) != (row["trace_rows"] > 0):
            problems.append(f"{name}: ingested {ingested} records but gave {row['trace_rows']} traces")
    return problems


def integrity_problems(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Rows without their trace, traces without their file, ids held twice (empty: a whole store)."""
    problems = []

    def count(sql: str) -> int:
        return con.execute(sql).fetchone()[0]

    for table, column in UNIQUE_IDS.items():
        twice = count(f"SELECT count(*) - count(DISTINCT {column}) FROM {table}")
        if twice:
            problems.append(f"{table}: {twice} {column} values held twice")
    if count("SELECT count(*) - count(DISTINCT (trace_id, seq)) FROM messages"):
        problems.append("messages: a (trace_id, seq) held twice")
    if count("SELECT count(*) - count(DISTINCT (trace_id, name)) FROM tool_defs"):
        problems.append("tool_defs: a (trace_id, name) held twice")
    for table in TRACE_CHILD_TABLES:
        orphans = count(f"SELECT count(*) FROM {table} WHERE trace_id NOT IN (SELECT trace_id FROM traces)")
        if orphans:
            problems.append(f"{table}: {orphans} rows whose trace is not in traces")
    orphans = count("SELECT count(*) FROM traces WHERE source_path NOT IN (SELECT path FROM sources)")
    if orphans:
        problems.append(f"traces: {orphans} rows whose file has no sources row")
    orphans = count("SELECT count(*) FROM rejects WHERE source_path NOT IN (SELECT path FROM sources)")
    if orphans:
        problems.append(f"rejects: {orphans} rows whose file has no sources row")
    strays = count(
        """SELECT count(*) FROM tool_calls tc WHERE tc.call_id IS NOT NULL AND NOT EXISTS
           (SELECT 1 FROM llm_calls c WHERE c.call_id = tc.call_id AND c.trace_id = tc.trace_id)"""
    )
    if strays:
        problems.append(f"tool_calls: {strays} rows naming an LLM call their trace does not have")
    return problems


def assert_accounting(con: duckdb.DuckDBPyConnection) -> None:
    """Fail with every problem found when any file's accounting or the store's integrity breaks."""
    problems = accounting_problems(con) + integrity_problems(con)
    assert not problems, "\n".join(problems)


def check_parse_result(result: ParseResult) -> None:
    """An adapter's own accounting of one file: no record counted twice, every reject explained."""
    skipped = sum(result.skipped.values())
    assert result.records >= len(result.rejects) + skipped, (
        f"records {result.records} < rejected {len(result.rejects)} + skipped {result.skipped}"
    )
    assert all(n > 0 for n in result.skipped.values()), result.skipped
    assert all(reject.error and reject.error.strip() for reject in result.rejects)
    ingested = result.records - len(result.rejects) - skipped
    assert (ingested > 0) == bool(result.traces), (
        f"{ingested} records ingested but {len(result.traces)} traces"
    )
