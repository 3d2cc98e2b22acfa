"""Langfuse traces whose observations lie in several files: a scheduled export cut by the hour, or
API pages cut by count, in the middle of a trace. Ingested together, one after the other in either
order, overlapping, or with the last file still growing, they give the traces the whole export gives.

The observations are the fixture `observations.json` (a LangGraph trace with two parallel tools and
a support trace) written as JSON Lines, one observation per line, as the ClickHouse / blob export
writes them; cutting between lines is what a cut export does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from accounting import assert_accounting
from split_traces import content, ingest, lines_read_again, query, run, where_from, whole, write

from traceforge import store
from traceforge.ingest.sources import sha256_file

FIXTURE = Path(__file__).parent / "fixtures" / "langfuse" / "observations.json"
WEATHER = "7f3c2a1e9b8d4c6f8a2b1c3d4e5f6a7b"  # observations 0-9: agent, generation, two tools, generation
SUPPORT = "c0ffee0000000000000000000000a002"


def observations() -> list[str]:
    return [json.dumps(row) + "\n" for row in json.loads(FIXTURE.read_text())]


def with_sub_agent() -> list[str]:
    """The support trace with a sub-agent: a generation of the same Langfuse trace with a prompt of
    its own is a second conversation, the child trace `<id>/2`."""
    rows = []
    for row in json.loads(FIXTURE.read_text()):
        if row["traceId"].endswith("a003"):
            row["traceId"] = SUPPORT
            if row["type"] == "GENERATION":
                row["input"]["messages"] = [
                    {"role": "system", "content": "You are the shipping sub-agent of ACME."},
                    {"role": "user", "content": "Send order A-1001 to the customer's office address."},
                ]
        rows.append(json.dumps(row) + "\n")
    return rows


@pytest.mark.parametrize("cut", [3, 6, 8])  # after the first generation, between the tools, after them
def test_observations_over_two_files_ingested_together_are_the_trace_of_the_whole_export(
    runner, tmp_path, cut
):
    rows = observations()
    early = write(tmp_path / "export" / "2025-10-10T09.jsonl", "".join(rows[:cut]))
    late = write(tmp_path / "export" / "2025-10-10T10.jsonl", "".join(rows[cut:]))
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, tmp_path / "export")
    assert report["joined"] == [WEATHER] and report["left_apart"] == {}
    assert content(runner, db) == whole(runner, tmp_path, rows)
    sources = {row[0]: row[1:] for row in where_from(db)}
    assert sources[WEATHER] == (str(early), json.dumps([str(early), str(late)], separators=(",", ":")))
    assert sources[SUPPORT] == (str(late), None)  # whole in one file: not a joined trace
    output = run(runner, "ingest", str(tmp_path / "export"), "--db", str(db))
    assert "Nothing new" in output and "Joined" not in output


def test_only_the_lines_holding_a_split_trace_are_read_again(runner, tmp_path, monkeypatch):
    rows = observations()
    write(tmp_path / "export" / "2025-10-10T09.jsonl", "".join(rows[:6]))
    write(tmp_path / "export" / "2025-10-10T10.jsonl", "".join(rows[6:]))
    read_again = lines_read_again(monkeypatch)
    assert ingest(runner, tmp_path / "store.duckdb", tmp_path / "export")["joined"] == [WEATHER]
    holding = [n for n, row in enumerate(rows, start=1) if WEATHER in row]
    assert len(holding) < len(rows)
    assert sorted(read_again) == sorted(n if n <= 6 else n - 6 for n in holding)


@pytest.mark.parametrize("trace_id", ["commande-été-42", "orders/42/weather", "wx-1"])
def test_a_trace_id_that_may_be_written_otherwise_is_joined_by_reading_every_line(runner, tmp_path, trace_id):
    """Ids that a JSON writer may escape (json.dumps writes `é` as `\\u00e9`; some writers `/` as
    `\\/`) are not searched for in the files' raw lines: every line is read again, and the trace is
    whole. So are ids too short to tell from a number's text."""
    rows = []
    for row in json.loads(FIXTURE.read_text()):
        if row["traceId"] == WEATHER:
            row["traceId"] = trace_id
        rows.append(json.dumps(row).replace("/", "\\/") + "\n")
    write(tmp_path / "export" / "2025-10-10T09.jsonl", "".join(rows[:6]))
    write(tmp_path / "export" / "2025-10-10T10.jsonl", "".join(rows[6:]))
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, tmp_path / "export")
    assert report["joined"] == [trace_id] and report["left_apart"] == {}
    assert content(runner, db) == whole(runner, tmp_path, rows)


def test_files_ingested_one_after_the_other_in_either_order_are_joined(runner, tmp_path):
    rows = observations()
    a = write(tmp_path / "a" / "page-1.jsonl", "".join(rows[:6]))
    b = write(tmp_path / "b" / "page-2.jsonl", "".join(rows[6:]))
    expected = whole(runner, tmp_path, rows)
    for name, order in (("forward", (a, b)), ("backward", (b, a))):
        db = tmp_path / f"{name}.duckdb"
        assert ingest(runner, db, order[0])["joined"] == []
        assert ingest(runner, db, order[1])["joined"] == [WEATHER], name
        assert content(runner, db) == expected, name


def test_overlapping_pages_count_each_observation_once(runner, tmp_path):
    """Pages fetched while the trace was still being written overlap: the same observations in
    both files are one observation each."""
    rows = observations()
    db = tmp_path / "store.duckdb"
    report = ingest(
        runner,
        db,
        write(tmp_path / "pages" / "page-1.jsonl", "".join(rows[:8])),
        write(tmp_path / "pages" / "page-2.jsonl", "".join(rows[4:])),
    )
    assert report["joined"] == [WEATHER]
    assert content(runner, db) == whole(runner, tmp_path, rows)


def test_overlapping_pages_written_to_one_file_count_each_observation_once(runner, tmp_path):
    rows = observations()
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, write(tmp_path / "pages.jsonl", "".join(rows[:8] + rows[4:])))
    assert report["files"][0]["skipped"]["duplicate observation"] == 4
    assert content(runner, db) == whole(runner, tmp_path, rows)


def test_a_sub_agent_conversation_in_the_other_file_joins_as_the_child_trace(runner, tmp_path):
    rows = with_sub_agent()
    expected = whole(runner, tmp_path, rows)
    assert [t[0] for t in expected["traces"]] == [WEATHER, SUPPORT, f"{SUPPORT}/2"]
    db = tmp_path / "store.duckdb"
    cut = next(n for n, row in enumerate(rows) if json.loads(row)["id"].endswith("0011"))
    ingest(runner, db, write(tmp_path / "export" / "1.jsonl", "".join(rows[:cut])))
    report = ingest(runner, db, write(tmp_path / "export" / "2.jsonl", "".join(rows[cut:])))
    assert report["joined"] == [SUPPORT]
    assert content(runner, db) == expected
    con = store.connect(db, read_only=True)
    try:
        assert_accounting(con)  # each file's `traces` counts the parent and the child: both hold its data
        assert con.execute("SELECT traces FROM sources ORDER BY path").fetchall() == [(3,), (2,)]
    finally:
        con.close()
    run(runner, "deps", "--db", str(db))
    parents = run(
        runner, "sql", "--db", str(db), "--csv", "SELECT trace_id, parent_trace_id FROM traces ORDER BY 1"
    )
    assert f"{SUPPORT}/2,{SUPPORT}" in parents


def test_the_export_still_being_written_is_joined_again_with_its_new_content(runner, tmp_path):
    """The last file of an export grows until its hour is over: read again as changed, the joined
    trace is built again from both files, without the old content of the grown one."""
    rows = observations()
    early = write(tmp_path / "export" / "09.jsonl", "".join(rows[:6]))
    late = write(tmp_path / "export" / "10.jsonl", "".join(rows[6:8]))
    db = tmp_path / "store.duckdb"
    assert ingest(runner, db, early, late)["joined"] == [WEATHER]
    write(late, "".join(rows[6:]))
    report = ingest(runner, db, early, late)
    assert report["totals"]["files_changed"] == 1 and report["joined"] == [WEATHER]
    assert content(runner, db) == whole(runner, tmp_path, rows)


def test_the_traces_table_exported_apart_gives_what_one_file_holding_both_gives(runner, tmp_path):
    """Langfuse's batch export writes the traces table (session, user, release, metadata) and the
    observations table to different files: each trace is built with its record, in any order."""
    rows = observations()
    records = (FIXTURE.parent / "traces.jsonl").read_text().splitlines(keepends=True)
    expected = whole(runner, tmp_path, records + rows)
    sessions = {row[0]: json.loads(row[-1]).get("session_id") for row in expected["traces"]}
    assert sessions == {WEATHER: None, SUPPORT: "sess-42", "c0ffee0000000000000000000000a003": "sess-42"}
    table = write(tmp_path / "export" / "traces.jsonl", "".join(records))
    early = write(tmp_path / "export" / "observations-1.jsonl", "".join(rows[:6]))
    late = write(tmp_path / "export" / "observations-2.jsonl", "".join(rows[6:]))
    for name, runs in {
        "together": [(table, early, late)],
        "traces-table-first": [(table,), (early, late)],
        "traces-table-last": [(early,), (late,), (table,)],
    }.items():
        db = tmp_path / f"{name}.duckdb"
        for files in runs:
            ingest(runner, db, *files)
        assert content(runner, db) == expected, name
        con = store.connect(db, read_only=True)
        try:
            assert_accounting(con)
            traces = dict(
                con.execute("SELECT regexp_extract(path, '[^/]+$'), traces FROM sources").fetchall()
            )
        finally:
            con.close()
        assert traces == {"traces.jsonl": 3, "observations-1.jsonl": 1, "observations-2.jsonl": 3}, name
        assert ingest(runner, db, table, early, late)["joined"] == [], name  # a rerun changes nothing


def test_a_langfuse_trace_and_an_otel_trace_of_one_id_are_joined_together_each_as_its_own(runner, tmp_path):
    """Langfuse's trace ids are hex, as OTel's are, and a team ingesting both its Langfuse export and
    the spans its collector sent Langfuse holds two traces of one id, each split over two files. Joined in one
    transaction, the Langfuse sub-agent's conversation stays the Langfuse trace's child, and the
    OTel trace, named apart by its file's hash, is joined again when its active file grows."""
    shared = "5b8efff798038103d269b633813fc60c"  # the split trace of the OTel fixture below
    rows = [row.replace(SUPPORT, shared) for row in with_sub_agent()]
    cut = next(n for n, row in enumerate(rows) if json.loads(row)["id"].endswith("0011"))
    write(tmp_path / "logs" / "langfuse-1.jsonl", "".join(rows[:cut]))
    write(tmp_path / "logs" / "langfuse-2.jsonl", "".join(rows[cut:]))
    otel = FIXTURE.parent.parent / "otlp" / "otel_genai_current.jsonl"
    first, second = otel.read_text().splitlines(keepends=True)
    write(tmp_path / "logs" / "otel-1.jsonl", first)
    active = write(tmp_path / "logs" / "otel-2.jsonl", second)
    db = tmp_path / "store.duckdb"
    assert ingest(runner, db, tmp_path / "logs")["joined"] == [shared]
    sql = (
        "SELECT t.source_format, t.trace_id, p.source_format FROM traces t "
        "LEFT JOIN traces p ON t.parent_trace_id = p.trace_id WHERE t.trace_id LIKE ? || '%' ORDER BY 1, 2"
    )
    otel_id = f"{shared}@{sha256_file(active)[:8]}"
    assert query(db, sql, [shared]) == [
        ("langfuse", shared, None),
        ("langfuse", f"{shared}/2", "langfuse"),
        ("otlp", otel_id, None),
    ]
    other_trace = first.replace(shared, "e" * 32).replace('"a0000000000000', '"e0000000000000')
    write(active, second + other_trace)
    report = ingest(runner, db, tmp_path / "logs")
    assert report["joined"] == [shared] and report["totals"]["files_changed"] == 1
    assert [row[:2] for row in query(db, sql, [shared])][2:] == [
        ("otlp", f"{shared}@{sha256_file(active)[:8]}")
    ]
    assert query(db, "SELECT count(*) FROM traces WHERE source_format = 'otlp'") == [(3,)]
