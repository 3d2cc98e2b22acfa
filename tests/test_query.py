"""`traceforge.query.run_query`: a long result keeps its first and last rows, streamed in batches."""

from __future__ import annotations

import duckdb
import pytest

from traceforge import query


@pytest.mark.parametrize("total", [0, 1, 39, 40, 41, 57, 100, 1000])
@pytest.mark.parametrize("batch", [1, 7, 20, 8192])
def test_the_first_and_last_rows_are_kept_whatever_the_batches(monkeypatch, total, batch):
    monkeypatch.setattr(query, "ROWS_PER_BATCH", batch)
    con = duckdb.connect()
    sql = f"SELECT range AS n, 'row ' || range AS label, [range, range + 1] AS pair FROM range({total})"
    result = query.run_query(con, sql, as_text=True, shown=40)
    everything = query.run_query(con, sql, as_text=True)
    assert result.columns == everything.columns == ["n", "label", "pair"]
    assert result.total == everything.total == total
    assert everything.rows == [(n, f"row {n}", f"[{n}, {n + 1}]") for n in range(total)]
    expected = everything.rows if total <= 40 else everything.rows[:20] + everything.rows[-20:]
    assert result.rows == expected


def test_columns_of_one_name_stay_apart_and_values_keep_their_types():
    con = duckdb.connect()
    sql = "SELECT 1 AS a, 'x' AS a, 2.5 AS b, NULL AS c, true AS d, INTERVAL 3 DAY AS e, MAP {'k': 1} AS m"
    for shown in (None, 40):
        result = query.run_query(con, sql, as_text=True, shown=shown)
        assert result.columns == ["a", "a", "b", "c", "d", "e", "m"]
        assert result.rows == [(1, "x", 2.5, None, True, "3 days", "{k=1}")]
    as_values = query.run_query(con, sql, as_text=False)
    assert as_values.rows[0][-1] == {"k": 1} and as_values.rows[0][-2].days == 3
