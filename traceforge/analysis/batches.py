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

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import duckdb

Item = TypeVar("Item")
# Progress of work over traces: (traces done, traces in all).
TraceProgressCallback = Callable[[int, int], None]

NO_ROWS = (1, 0)  # BETWEEN 1 AND 0 holds no row: the range of a table the batch has no rows in


@dataclass
class TraceBatch:
    """Traces read together, with the row-id range of their rows in each table."""

    trace_ids: list[str] = field(default_factory=list)
    rows: int = 0  # their rows in the main table
    # Per table its traces have rows in, the lowest and highest row id of those rows; None: views,
    # which have no row ids.
    rowids: dict[str, tuple[int, int]] | None = field(default_factory=dict)

    def within(self, alias: str, table: str, condition: str | None = None) -> tuple[str, list[int]]:
        """A WHERE clause keeping `alias`'s rows to this batch's range of `table` (and to
        `condition`, when given), and its values."""
        clauses = [condition] if condition else []
        values: list[int] = []
        if self.rowids is not None:
            clauses.append(f"{alias}.rowid BETWEEN ? AND ?")
            values = list(self.rowids.get(table, NO_ROWS))
        return ("WHERE " + " AND ".join(clauses) if clauses else ""), values


@dataclass
class TraceSpans:
    """Per trace (in the main table's physical order, or by id for views): its rows in the main
    table, then a low and a high row id per table (None where it has no rows there). Batches are
    cut from these; the row total, known before, sizes them."""

    rows: list[tuple]
    tables: Sequence[str] | None  # None: views, whose rows carry no row ids

    @property
    def main_rows(self) -> int:
        """Rows of all the traces in the main table."""
        return sum(row[1] for row in self.rows)

    def batches(self, batch_rows: int) -> list[TraceBatch]:
        """The traces in batches of about `batch_rows` rows of the main table (a trace is never
        split); each batch's range per table spans its traces'."""
        batches: list[TraceBatch] = []
        for trace_id, count, *bounds in self.rows:
            if not batches or batches[-1].rows >= batch_rows:
                batches.append(TraceBatch(rowids=None if self.tables is None else {}))
            batch = batches[-1]
            batch.trace_ids.append(trace_id)
            batch.rows += count
            for position, table in enumerate(self.tables or ()):
                low, high = bounds[2 * position], bounds[2 * position + 1]
                if low is None:
                    continue  # no rows of this trace in that table
                old = batch.rowids.get(table)
                batch.rowids[table] = (low, high) if old is None else (min(old[0], low), max(old[1], high))
        return batches


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
    return trace_spans(con, tables, where, params).batches(batch_rows)


def trace_spans(
    con: duckdb.DuckDBPyConnection, tables: Sequence[str], where: str = "TRUE", params: Sequence[object] = ()
) -> TraceSpans:
    """What `trace_batches` cuts its batches from, in one scan of each table: for a caller that
    sizes its batches by the rows there are (`TraceSpans.main_rows`)."""
    main, *others = tables
    base_tables = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if not base_tables.issuperset(tables):  # views: no row ids, traces in id order
        query = f"SELECT trace_id, count(*) FROM {main} WHERE {where} GROUP BY trace_id ORDER BY trace_id"
        return TraceSpans(con.execute(query, list(params)).fetchall(), None)
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
    return TraceSpans(rows, tables)


def rows_by_trace(rows: Iterable[tuple]) -> dict[str, list[tuple]]:
    """Query rows whose first column is the trace id, grouped by it, without it, in their order."""
    grouped: dict[str, list[tuple]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row[1:])
    return grouped


def cut(
    items: Iterable[Item], weight: Callable[[Item], int], max_items: int, max_weight: int
) -> Iterator[list[Item]]:
    """`items` in consecutive lists of at most `max_items`, a list ending as soon as its weight
    reaches `max_weight` (so an item heavier than that is a list of its own).

    >>> list(cut([1, 5, 1, 1, 1, 1], weight=lambda n: n, max_items=3, max_weight=5))
    [[1, 5], [1, 1, 1], [1]]
    """
    batch: list[Item] = []
    held = 0
    for item in items:
        batch.append(item)
        held += weight(item)
        if len(batch) >= max_items or held >= max_weight:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch
