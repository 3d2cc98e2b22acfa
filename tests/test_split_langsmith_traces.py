"""LangSmith traces whose runs lie in several files: run queries paged or cut by time in the middle
of a trace. Ingested together, one after the other in either order, overlapping, or with the last
file still growing, they give the traces the whole export gives.

The runs are the fixture `runs.jsonl` (a LangGraph trace whose two tools ran one after the other,
and a shorter trace), one run per line; cutting between lines is what a cut export does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from accounting import assert_accounting
from split_traces import content, ingest, where_from, whole, write

from traceforge import store

FIXTURE = Path(__file__).parent / "fixtures" / "langsmith" / "runs.jsonl"
TRAVEL = "1f0a3b6c-2d4e-4f80-9a1b-3c5d7e9f0a21"  # runs 0-8: chains, a generation, two tools, a generation


def runs() -> list[str]:
    return FIXTURE.read_text().splitlines(keepends=True)


@pytest.mark.parametrize("cut", [3, 6, 8])  # after the first generation, between the tools, before the last
def test_runs_over_two_files_ingested_together_are_the_trace_of_the_whole_export(runner, tmp_path, cut):
    rows = runs()
    early = write(tmp_path / "export" / "runs-1.jsonl", "".join(rows[:cut]))
    late = write(tmp_path / "export" / "runs-2.jsonl", "".join(rows[cut:]))
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, tmp_path / "export")
    assert report["joined"] == [TRAVEL] and report["left_apart"] == {}
    assert content(runner, db) == whole(runner, tmp_path, rows)
    sources = {row[0]: row[1:] for row in where_from(db)}
    assert sources[TRAVEL] == (str(early), json.dumps([str(early), str(late)], separators=(",", ":")))
    con = store.connect(db, read_only=True)
    try:
        assert_accounting(con)
    finally:
        con.close()


def test_files_in_either_order_overlapping_or_growing_are_joined(runner, tmp_path):
    rows = runs()
    expected = whole(runner, tmp_path, rows)
    a = write(tmp_path / "a" / "page-1.jsonl", "".join(rows[:7]))
    b = write(tmp_path / "b" / "page-2.jsonl", "".join(rows[4:]))  # overlaps the first page
    for name, order in (("forward", (a, b)), ("backward", (b, a))):
        db = tmp_path / f"{name}.duckdb"
        assert ingest(runner, db, order[0])["joined"] == []
        assert ingest(runner, db, order[1])["joined"] == [TRAVEL], name
        assert content(runner, db) == expected, name
    growing = write(tmp_path / "c" / "runs.jsonl", "".join(rows[5:7]))
    db = tmp_path / "growing.duckdb"
    assert ingest(runner, db, a, growing)["joined"] == [TRAVEL]
    write(growing, "".join(rows[5:]))
    report = ingest(runner, db, a, growing)
    assert report["totals"]["files_changed"] == 1 and report["joined"] == [TRAVEL]
    assert content(runner, db) == expected


def test_a_run_exported_twice_in_one_file_counts_once(runner, tmp_path):
    rows = runs()
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, write(tmp_path / "runs.jsonl", "".join(rows[:7] + rows[4:])))
    assert report["files"][0]["skipped"]["duplicate run"] == 3
    assert content(runner, db) == whole(runner, tmp_path, rows)
