"""A user's SQL on the store, its result as `traceforge sql` shows it.

DuckDB's shell is the model: a table shows at most the first and last rows of a long result (its
`.maxrows`), read as a stream so a query over millions of rows neither waits for them all to
become Python objects nor holds them; values Python would write otherwise than DuckDB (lists,
structs, maps, intervals, blobs) come as DuckDB's own text."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

SHOWN_ROWS = 40  # a longer result shows its first and last 20 rows, as DuckDB's shell (`.maxrows`)
# Types whose values DuckDB writes otherwise than Python: `[a, 'b,c']` not `['a', 'b,c']`, a map
# `{k=1}` not a struct's `{'k': 1}`, `3 days` not `3 days, 0:00:00`, `\x00a` not `b'\x00a'`.
TEXT_TYPES = frozenset({"list", "array", "struct", "map", "union", "interval", "blob"})
ROWS_PER_BATCH = 8192


@dataclass
class QueryResult:
    """`columns` and `rows` of a query's last statement; `total` rows in all, more than
    `len(rows)` where only the first and last half of `rows` were kept (`shown`)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    total: int


def run_query(con: duckdb.DuckDBPyConnection, query: str, shown: int = SHOWN_ROWS) -> QueryResult | None:
    """Run `query` (one statement or several: the last one's result) for a table: None where it
    returns no rows; the TEXT_TYPES as DuckDB writes them; of a result longer than `shown` rows,
    only the first and last `shown // 2`, the rest counted as they stream past."""
    found = _as_text(con, query)
    if found is None:
        return None
    columns, relation = found
    return _first_and_last(columns, relation.to_arrow_reader(ROWS_PER_BATCH), shown)


def every_row(
    con: duckdb.DuckDBPyConnection, query: str, *, as_text: bool
) -> tuple[list[str], Iterator[tuple[Any, ...]]] | None:
    """The columns and every row of `query` (as `run_query` runs it), streamed a batch at a time
    so a result bigger than memory can be written out: with `as_text` the TEXT_TYPES as DuckDB
    writes them (for CSV), else as Python values (for JSON: lists and structs as arrays and
    objects)."""
    if as_text:
        found = _as_text(con, query)
        if found is None:
            return None
        columns, relation = found
        batches = relation.to_arrow_reader(ROWS_PER_BATCH)
        return columns, (row for batch in batches for row in _tuples([batch]))
    cursor = con.execute(query)
    if cursor.description is None:
        return None
    return [d[0] for d in cursor.description], _fetched(cursor)


def _as_text(con: duckdb.DuckDBPyConnection, query: str) -> tuple[list[str], duckdb.DuckDBPyRelation] | None:
    relation = con.sql(query)
    if relation is None:
        return None
    columns, types = relation.columns, relation.types
    if any(kind.id in TEXT_TYPES for kind in types):
        cast = (f"#{n}::VARCHAR" if kind.id in TEXT_TYPES else f"#{n}" for n, kind in enumerate(types, 1))
        relation = relation.project(", ".join(cast))
    return columns, relation


def _fetched(cursor: duckdb.DuckDBPyConnection) -> Iterator[tuple[Any, ...]]:
    while rows := cursor.fetchmany(ROWS_PER_BATCH):
        yield from rows


def _first_and_last(columns: list[str], batches: pa.RecordBatchReader, shown: int) -> QueryResult:
    """The rows of a result of at most `shown` rows, or its first and last `shown // 2`: batches
    are kept only while they hold rows that may be shown."""
    half = shown // 2
    head: list[pa.RecordBatch] = []
    tail: deque[pa.RecordBatch] = deque()
    total = held = 0  # rows in all, and in `tail`
    for batch in batches:
        if total <= shown:  # every batch up to the one that goes past `shown`
            head.append(batch)
            total += batch.num_rows
            continue
        total += batch.num_rows
        tail.append(batch)
        held += batch.num_rows
        while tail and held - tail[0].num_rows >= half:
            held -= tail.popleft().num_rows
    if total <= shown:
        return QueryResult(columns, _tuples(head), total)
    kept = _tuples(head)
    ending = (kept + _tuples(list(tail)))[-half:]
    return QueryResult(columns, kept[:half] + ending, total)


def _tuples(batches: list[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    """Rows as tuples (a dict per row would merge columns of one name)."""
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    return list(zip(*(column.to_pylist() for column in table.columns), strict=True))
