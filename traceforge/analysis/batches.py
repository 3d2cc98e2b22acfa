"""Reading a big store a batch of traces at a time, in linear time.

A batch read as `... JOIN batch_ids USING (trace_id)` scans the whole table for every batch, so
reading a store in batches costs batches x store: quadratic. Here each batch also carries, per
table, the range of row ids that holds all its rows, and batches follow the physical order of the
main table (the ingest writes a trace's rows together, in every table). A query that adds
`WHERE rowid BETWEEN ? AND ?` lets DuckDB skip the rest of the table, so each batch reads one
stretch of each table and the whole store is read about once.

The ranges are exact bounds whatever the layout (a trace re-ingested later sits elsewhere: its
batch's range is wider, never wrong), so the join on trace ids still decides which rows belong.
Views (a store attached to a Parquet lake, `traceforge lake attach`) have no row ids: their
batches carry no ranges and are read with the join alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import duckdb

EMPTY_RANGE = (1, 0)  # BETWEEN 1 AND 0 holds no row


@dataclass
class TraceBatch:
    """Traces read together, with the row-id range of their rows in each table."""

    trace_ids: list[str] = field(default_factory=list)
    rows: int = 0  # their rows in the main table
    rowids: dict[str, tuple[int, int]] | None = field(default_factory=dict)  # None: views, no row ids

    def within(self, alias: str, table: str) -> tuple[str, list[int]]:
        """A WHERE clause keeping `alias`'s rows to this batch's range of `table`, and its values."""
        if self.rowids is None:
            return "", []
        return f"WHERE {alias}.rowid BETWEEN ? AND ?", list(self.rowids[table])


def trace_batches(
    con: duckdb.DuckDBPyConnection,
    tables: Sequence[str],
    batch_rows: int,
    where: str = "TRUE",
    params: Sequence[object] = (),
) -> list[TraceBatch]:
    """The traces with rows in `tables[0]` (the main table) and satisfying `where` (a condition on
    `trace_id`, with `params` bound to its placeholders), in batches of about `batch_rows` rows of
    the main table (a trace is never split), in the main table's physical order.

    >>> con = store.connect("traceforge.duckdb")                             # doctest: +SKIP
    >>> [b.trace_ids for b in trace_batches(con, ["tool_calls", "messages"], 20_000)]  # doctest: +SKIP
    [['t1', 't2', ...], ...]
    """
    main, *others = tables
    base_tables = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if not base_tables.issuperset(tables):  # views: no row ids, traces in id order
        query = f"SELECT trace_id, count(*) FROM {main} WHERE {where} GROUP BY trace_id ORDER BY trace_id"
        return _batched(con.execute(query, list(params)).fetchall(), None, batch_rows)
    spans = " ".join(
        f"LEFT JOIN (SELECT trace_id, min(rowid) AS lo, max(rowid) AS hi FROM {table} GROUP BY trace_id) "
        f"AS {table} USING (trace_id)"
        for table in others
    )
    rows = con.execute(
        f"""
        WITH main AS (
            SELECT trace_id, count(*) AS n, min(rowid) AS lo, max(rowid) AS hi
            FROM {main} GROUP BY trace_id
        )
        SELECT main.trace_id, main.n, main.lo, main.hi
               {"".join(f", {table}.lo, {table}.hi" for table in others)}
        FROM main {spans}
        WHERE {where}
        ORDER BY main.lo
        """,
        list(params),
    ).fetchall()
    return _batched(rows, tables, batch_rows)


def rows_by_trace(rows: Iterable[tuple]) -> dict[str, list[tuple]]:
    """Query rows whose first column is the trace id, grouped by it, without it, in their order."""
    grouped: dict[str, list[tuple]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row[1:])
    return grouped


def _batched(rows: list[tuple], tables: Sequence[str] | None, batch_rows: int) -> list[TraceBatch]:
    """Rows of (trace_id, rows in the main table, then a low and a high row id per table when
    `tables` is given) cut into batches; each batch's range per table spans its traces'."""
    batches: list[TraceBatch] = []
    for trace_id, count, *bounds in rows:
        if not batches or batches[-1].rows >= batch_rows:
            batches.append(TraceBatch(rowids=None if tables is None else dict.fromkeys(tables, EMPTY_RANGE)))
        batch = batches[-1]
        batch.trace_ids.append(trace_id)
        batch.rows += count
        for position, table in enumerate(tables or ()):
            low, high = bounds[2 * position], bounds[2 * position + 1]
            if low is None:
                continue  # no rows of this trace in that table
            old_low, old_high = batch.rowids[table]
            if (old_low, old_high) == EMPTY_RANGE:
                batch.rowids[table] = (low, high)
            else:
                batch.rowids[table] = (min(old_low, low), max(old_high, high))
    return batches
