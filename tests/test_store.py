"""The store: migrations, in-place upgrades, the DuckDB shell reading the file, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from accounting import assert_accounting

from traceforge import store
from traceforge.cli import cli
from traceforge.cli.sql import shell_binary
from traceforge.ingest import ingest_paths

CONTRACT = {
    "traces": {
        "trace_id",
        "workload",
        "agent",
        "source_format",
        "source_path",
        "started_at",
        "ended_at",
        "outcome",
        "attributes",
    },
    "llm_calls": {
        "call_id",
        "trace_id",
        "seq",
        "model",
        "provider",
        "started_at",
        "ended_at",
        "duration_ms",
        "ttft_ms",
        "input_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "output_tokens",
        "reasoning_tokens",
        "usage_reported",
        "cost_usd",
        "finish_reason",
    },
    "tool_calls": {
        "tool_call_id",
        "trace_id",
        "call_id",
        "seq",
        "name",
        "arguments",
        "result",
        "is_error",
        "started_at",
        "ended_at",
        "duration_ms",
        "requestor",
    },
    "messages": {"trace_id", "seq", "role", "content", "tool_calls", "tool_call_id", "name"},
    "tool_defs": {"trace_id", "name", "description", "parameters"},
    "sources": {"path", "sha256", "format", "records", "rejected", "ingested_at"},
    "rejects": {"source_path", "line", "error", "raw"},
    "tool_deps": {"trace_id", "src_tool_call_id", "dst_tool_call_id", "kind", "evidence"},
    "trace_dag": {
        "trace_id",
        "tool_calls",
        "observed_turns",
        "min_turns",
        "turns_saved",
        "observed_ms",
        "parallel_ms",
        "tokens_saved",
    },
    "workloads": {
        "workload",
        "traces",
        "llm_calls",
        "input_tokens",
        "cache_read_tokens",
        "output_tokens",
        "cost_usd",
        "share",
        "rank",
    },
}


def columns(con, table: str) -> set[str]:
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
    ).fetchall()
    return {r[0] for r in rows}


def test_new_store_has_every_contract_table_and_column(con):
    for table, wanted in CONTRACT.items():
        assert wanted <= columns(con, table), f"{table} lacks {wanted - columns(con, table)}"
    assert store.applied_migrations(con) == sorted(m.version for m in store.MIGRATIONS)


def test_timestamps_are_timestamptz(con):
    types = dict(
        con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'llm_calls'"
        ).fetchall()
    )
    assert types["started_at"] == "TIMESTAMP WITH TIME ZONE"


def test_older_store_upgrades_in_place_keeping_its_rows(db_path):
    con = duckdb.connect(str(db_path), config={"storage_compatibility_version": store.SHELL_STORAGE_VERSION})
    store.migrate(con, upto=1)
    con.execute("INSERT INTO traces (trace_id, workload, outcome) VALUES ('t1', 'w', 'unknown')")
    assert "v_trace_summary" not in {
        r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()
    }
    con.close()

    con = store.connect(db_path)
    assert store.applied_migrations(con) == sorted(m.version for m in store.MIGRATIONS)
    assert con.execute("SELECT trace_id, llm_calls FROM v_trace_summary").fetchall() == [("t1", 0)]
    con.close()


def test_store_written_before_partial_output_counts_upgrades_and_profiles(db_path, tmp_path, runner):
    session = Path(__file__).parent / "fixtures" / "claude_code" / "parallel_session.jsonl"
    assert runner.invoke(cli, ["ingest", str(session), "--db", str(db_path)]).exit_code == 0
    con = store.connect(db_path)  # back to the store as migration 6 left it, rows and all
    con.execute("ALTER TABLE llm_calls DROP COLUMN output_tokens_partial")
    con.execute("ALTER TABLE workloads DROP COLUMN calls_output_partial")
    con.execute("DELETE FROM schema_migrations WHERE version = 7")
    con.close()

    result = runner.invoke(cli, ["profile", "--db", str(db_path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    con = store.connect(db_path, read_only=True)
    # Rows ingested before the flag existed have it unknown, and are counted as the source gave them.
    calls = con.execute("SELECT output_tokens, output_tokens_partial FROM llm_calls ORDER BY seq")
    assert calls.fetchall() == [(120, None), (41, None)]
    demand = con.execute("SELECT output_tokens, calls_estimated FROM inference_profile")
    assert demand.fetchall() == [(161, 0)]
    assert con.execute("SELECT calls_output_partial FROM workloads").fetchall() == [(0,)]
    con.close()


def test_store_written_before_described_traces_upgrades_and_joins_a_traces_table(db_path, runner):
    langfuse = Path(__file__).parent / "fixtures" / "langfuse"
    assert (
        runner.invoke(cli, ["ingest", str(langfuse / "observations.json"), "--db", str(db_path)]).exit_code
        == 0
    )
    con = store.connect(db_path)  # back to the store as migration 8 left it, rows and all
    con.execute("ALTER TABLE sources DROP COLUMN described_traces")
    con.execute("DELETE FROM schema_migrations WHERE version = 9")
    con.close()

    result = runner.invoke(cli, ["ingest", str(langfuse / "traces.jsonl"), "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    assert "Joined 3 traces" in result.output
    con = store.connect(db_path, read_only=True)
    assert store.applied_migrations(con) == sorted(m.version for m in store.MIGRATIONS)
    sessions = con.execute("SELECT attributes->>'$.session_id' FROM traces ORDER BY trace_id").fetchall()
    assert sessions == [(None,), ("sess-42",), ("sess-42",)]
    con.close()


def test_store_written_before_conversation_hashes_upgrades_and_ingests_the_rest_of_a_log(
    db_path, tmp_path, runner
):
    rows = (
        (Path(__file__).parent.parent / "sample_traces" / "openai_chat_gateway.jsonl")
        .read_text()
        .splitlines(True)
    )
    early, late = tmp_path / "gateway.1.jsonl", tmp_path / "gateway.2.jsonl"
    early.write_text("".join(rows[:20]))
    late.write_text("".join(rows[20:]))
    assert runner.invoke(cli, ["ingest", str(early), "--db", str(db_path)]).exit_code == 0
    con = store.connect(db_path)  # back to the store as migration 9 left it, rows and all
    for column in ("chain_state", "request_prefixes", "source_line_path"):
        con.execute(f"ALTER TABLE llm_calls DROP COLUMN {column}")
    con.execute("DELETE FROM schema_migrations WHERE version = 10")
    con.close()

    result = runner.invoke(cli, ["ingest", str(late), "--db", str(db_path), "--json"])
    assert result.exit_code == 0, result.output
    # the earlier part kept no hashes: the parts stay apart, as docs/formats.md says
    assert json.loads(result.stdout)["joined"] == []
    con = store.connect(db_path, read_only=True)
    assert store.applied_migrations(con) == sorted(m.version for m in store.MIGRATIONS)
    assert con.execute("SELECT count(*) FROM traces").fetchone() == (10,)
    con.close()
    fresh = tmp_path / "fresh.duckdb"
    result = runner.invoke(cli, ["ingest", str(early), str(late), "--db", str(fresh), "--json"])
    assert len(json.loads(result.stdout)["joined"]) == 2


def test_store_written_before_resumed_session_marks_upgrades_and_analyses(db_path, tmp_path, runner):
    session = Path(__file__).parent / "fixtures" / "claude_code" / "parallel_session.jsonl"
    assert runner.invoke(cli, ["ingest", str(session), "--db", str(db_path)]).exit_code == 0
    con = store.connect(db_path)  # back to the store as migration 7 left it, rows and all
    for table, column in (("llm_calls", "response_key"), ("llm_calls", "copy_of"), ("tool_calls", "copy_of")):
        con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.execute("DELETE FROM schema_migrations WHERE version = 8")
    con.close()

    result = runner.invoke(
        cli, ["analyze", str(session), "--db", str(db_path), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    con = store.connect(db_path, read_only=True)
    assert store.applied_migrations(con) == sorted(m.version for m in store.MIGRATIONS)
    # Rows ingested before the marks have no key: each counts, as before.
    assert con.execute("SELECT call_id, response_key, copy_of FROM llm_calls ORDER BY seq").fetchall() == [
        ("msg_A", None, None),
        ("msg_B", None, None),
    ]
    assert con.execute("SELECT llm_calls, tool_calls FROM v_trace_summary").fetchall() == [(2, 2)]
    assert con.execute("SELECT sum(llm_calls) FROM v_usage_by_workload_model").fetchall() == [(2,)]
    con.close()


KEYLESS = {
    "llm_calls": "call_id",
    "tool_calls": "tool_call_id",
    "messages": "trace_id, seq",
    "tool_defs": "trace_id, name",
}
# The columns of the tables migration 11 rebuilds (later migrations may add to others).
NULLABLE = (
    "SELECT table_name, column_name, is_nullable FROM information_schema.columns "
    f"WHERE table_name IN {tuple(KEYLESS)} ORDER BY ALL"
)


def test_store_written_with_primary_keys_on_the_ingest_tables_upgrades_keeping_rows_and_order(
    db_path, runner
):
    samples = Path(__file__).parents[1] / "sample_traces"
    first = runner.invoke(cli, ["ingest", str(samples / "openai_chat_gateway.jsonl"), "--db", str(db_path)])
    assert first.exit_code == 0, first.output
    con = store.connect(db_path)  # back to the store as migration 10 left it: keys indexed
    for table, key in KEYLESS.items():
        con.execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({key})")
    con.execute("DELETE FROM schema_migrations WHERE version = 11")
    rows = {table: con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall() for table in KEYLESS}
    con.close()
    before = duckdb.connect(str(db_path.with_name("v10.duckdb")))
    store.migrate(before, upto=10)
    nullable = before.execute(NULLABLE).fetchall()  # what a store made before migration 11 declares
    before.close()

    later = samples / "anthropic_messages_transcripts.jsonl"
    result = runner.invoke(cli, ["ingest", str(later), "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    con = store.connect(db_path, read_only=True)
    try:
        assert store.applied_migrations(con) == sorted(m.version for m in store.MIGRATIONS)
        for table in KEYLESS:  # the earlier rows first, in their order, then the new file's
            kept = con.execute(f"SELECT * FROM {table} ORDER BY rowid LIMIT ?", [len(rows[table])]).fetchall()
            assert kept == rows[table], table
        assert (
            con.execute("SELECT count(*) FROM traces WHERE source_path LIKE '%transcripts%'").fetchone()[0]
            > 0
        )
        keys = con.execute(
            "SELECT table_name FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'"
        )
        keyed = {table for (table,) in keys.fetchall()}
        assert keyed & set(KEYLESS) == set() and {"traces", "sources"} <= keyed
        assert con.execute(NULLABLE).fetchall() == nullable  # NOT NULL columns as they were
        assert_accounting(con)
    finally:
        con.close()


def test_store_from_a_newer_traceforge_is_refused(db_path):
    con = store.connect(db_path)
    con.execute("INSERT INTO schema_migrations VALUES (9999, 'from the future', now())")
    con.close()
    with pytest.raises(store.StoreError, match="newer than this traceforge"):
        store.connect(db_path)


def test_duckdb_shell_from_duckdb_cli_reads_the_store(con, db_path):
    con.execute("INSERT INTO traces (trace_id, workload, outcome) VALUES ('t1', 'travel', 'success')")
    con.close()
    binary = shell_binary()
    assert binary, "the duckdb shell (PyPI duckdb-cli) must be installed with traceforge"
    out = subprocess.run(
        [
            binary,
            "-readonly",
            "-csv",
            str(db_path),
            "-c",
            "SELECT workload, count(*) AS n FROM traces GROUP BY 1; SELECT count(*) FROM v_trace_summary;",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "travel,1" in out.stdout


def test_store_held_by_another_process_gives_a_clear_error(db_path):
    store.connect(db_path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(db_path)!r}); print('ok', flush=True); "
            "time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        with pytest.raises(store.StoreError, match="in use by another process"):
            store.connect(db_path)
    finally:
        holder.kill()
        holder.wait()


def test_not_a_database_file_is_a_clear_error(tmp_path):
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("hello, not a database\n" * 100)
    with pytest.raises(store.StoreError, match="cannot open as a DuckDB store"):
        store.connect(bogus)


def test_read_only_open_of_a_missing_store_says_what_to_run(tmp_path):
    with pytest.raises(store.StoreError, match="traceforge ingest"):
        store.connect(tmp_path / "absent.duckdb", read_only=True)


def test_every_table_view_and_column_is_documented(con):
    """docs/schema.md is the store's reference: a migration that adds a table, view or column must
    document it, each table's columns in that table's own section."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "schema.md").read_text()
    sections = {m.group(1): m.group(2) for m in re.finditer(r"### `(\w+)`[^\n]*\n(.*?)(?=\n#|\Z)", doc, re.S)}
    tables = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_name <> 'schema_migrations'"
    ).fetchall()
    missing = []
    for table, kind in tables:
        if kind == "VIEW":
            if f"`{table}`" not in doc:
                missing.append(table)
            continue
        section = sections.get(table, "")
        columns = [
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
            ).fetchall()
        ]
        missing += [f"{table}.{c}" for c in columns if not re.search(rf"\b{c}\b", section)]
    assert not missing, f"undocumented in docs/schema.md: {missing}"


def test_the_views_sum_spend_exactly_whatever_the_order(tmp_path, db_path):
    """Doubles summed one after another drift (ten calls of $0.10 make 0.9999999999999999), and
    DuckDB's parallel sum takes them in no fixed order, so the last digits changed from one query to
    the next: the views sum exact decimals."""
    messages = [{"role": "user", "content": "go"}]
    for n in range(10):
        messages += [
            {"role": "assistant", "content": f"step {n}", "cost": 0.1},
            {"role": "user", "content": "more"},
        ]
    path = tmp_path / "costs.jsonl"
    path.write_text(json.dumps({"id": "c1", "workload": "w", "messages": messages}) + "\n")
    con = store.connect(db_path)
    ingest_paths(con, [path])
    assert sum(row[0] for row in con.execute("SELECT cost_usd FROM llm_calls").fetchall()) != 1.0
    assert con.execute("SELECT cost_usd FROM v_trace_summary").fetchall() == [(1.0,)]
    assert con.execute("SELECT reported_cost_usd FROM v_usage_by_workload_model").fetchall() == [(1.0,)]
    con.close()
