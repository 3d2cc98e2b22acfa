"""`traceforge.query`: a table keeps a long result's first and last rows; --csv and --json stream
every row."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

from traceforge import query


@pytest.mark.parametrize("total", [0, 1, 39, 40, 41, 57, 100, 1000])
@pytest.mark.parametrize("batch", [1, 7, 20, 8192])
def test_the_first_and_last_rows_are_kept_whatever_the_batches(monkeypatch, total, batch):
    monkeypatch.setattr(query, "ROWS_PER_BATCH", batch)
    con = duckdb.connect()
    sql = f"SELECT range AS n, 'row ' || range AS label, [range, range + 1] AS pair FROM range({total})"
    result = query.run_query(con, sql, shown=40)
    columns, streamed = query.every_row(con, sql, as_text=True)
    everything = list(streamed)
    assert result.columns == columns == ["n", "label", "pair"]
    assert result.total == len(everything) == total
    assert everything == [(n, f"row {n}", f"[{n}, {n + 1}]") for n in range(total)]
    expected = everything if total <= 40 else everything[:20] + everything[-20:]
    assert result.rows == expected


def test_columns_of_one_name_stay_apart_and_values_keep_their_types():
    con = duckdb.connect()
    sql = "SELECT 1 AS a, 'x' AS a, 2.5 AS b, NULL AS c, true AS d, INTERVAL 3 DAY AS e, MAP {'k': 1} AS m"
    result = query.run_query(con, sql)
    columns, rows = query.every_row(con, sql, as_text=True)
    assert result.columns == columns == ["a", "a", "b", "c", "d", "e", "m"]
    assert result.rows == list(rows) == [(1, "x", 2.5, None, True, "3 days", "{k=1}")]
    _, as_values = query.every_row(con, sql, as_text=False)
    (row,) = as_values
    assert row[-1] == {"k": 1} and row[-2].days == 3


@pytest.mark.parametrize("as_text", [True, False])
def test_every_row_streams_rather_than_holding_the_result(as_text):
    """The first rows of a result of 10^10 rows come at once: a result held whole, or made Python
    objects whole, would not come in a minute (nor fit in memory)."""
    huge = "SELECT range AS n FROM range(10000000000)"
    program = (
        "import duckdb, itertools; from traceforge import query; "
        f"_, rows = query.every_row(duckdb.connect(), {huge!r}, as_text={as_text}); "
        "print(list(itertools.islice(rows, 3)))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(0,), (1,), (2,)]"
