"""Stores larger than memory: DuckDB settings from the environment, a capped store that spills and
still gives the same results, the dependency analysis streamed in batches, and per-request logs
grouped without holding every request; the analyses' worker processes give what one process gives."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb
import pytest

from traceforge import store
from traceforge.analysis import batches, prefix_cache
from traceforge.analysis.dag import analyze_dependencies
from traceforge.cli import cli
from traceforge.export import profile as profile_module
from traceforge.export.profile import build_profile
from traceforge.ingest import api_log, ingest_paths
from traceforge.ingest.sources import Record

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import corpus as bench_corpus  # noqa: E402

ANALYSIS = {
    "trace_dag": "SELECT * EXCLUDE (settings) FROM trace_dag ORDER BY trace_id",
    "tool_deps": "SELECT * FROM tool_deps ORDER BY trace_id, src_tool_call_id, dst_tool_call_id, kind",
    "tool_schedule": "SELECT * FROM tool_schedule ORDER BY trace_id, tool_call_id",
}


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ooc") / "logs"
    bench_corpus.generate(folder, tool_calls=400, file_mb=1)
    return folder


def test_duckdb_s_cache_is_capped_unless_told_otherwise(monkeypatch, tmp_path):
    monkeypatch.delenv("TRACEFORGE_MEMORY_LIMIT", raising=False)
    monkeypatch.delenv("TRACEFORGE_CHECKPOINT_THRESHOLD", raising=False)
    con = store.connect(tmp_path / "a.duckdb")
    try:
        limit, threshold = con.execute(
            "SELECT current_setting('memory_limit'), current_setting('checkpoint_threshold')"
        ).fetchone()
    finally:
        con.close()
    assert limit == "488.2 MiB"  # 512MB, as DuckDB prints it; its own default is 80% of RAM
    assert threshold == "953.6 MiB"  # 1GB; DuckDB's own is 16 MB
    con = store.connect(tmp_path / "a.duckdb", settings={"memory_limit": "2GB"})
    try:
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "1.8 GiB"
    finally:
        con.close()


def test_duckdb_settings_come_from_the_environment_and_bad_ones_are_named(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEFORGE_MEMORY_LIMIT", "300MB")
    monkeypatch.setenv("TRACEFORGE_THREADS", "1")
    monkeypatch.setenv("TRACEFORGE_TEMP_DIRECTORY", str(tmp_path / "spill"))
    monkeypatch.setenv("TRACEFORGE_CHECKPOINT_THRESHOLD", "16MB")
    con = store.connect(tmp_path / "a.duckdb")
    try:
        limit, threads, temp, threshold = con.execute(
            "SELECT current_setting('memory_limit'), current_setting('threads'), "
            "current_setting('temp_directory'), current_setting('checkpoint_threshold')"
        ).fetchone()
    finally:
        con.close()
    assert limit.startswith("286") and threads == 1 and temp == str(tmp_path / "spill")
    assert threshold == "15.2 MiB"
    monkeypatch.setenv("TRACEFORGE_MEMORY_LIMIT", "lots")
    with pytest.raises(store.StoreError, match=r"memory_limit='lots'.*TRACEFORGE_MEMORY_LIMIT"):
        store.connect(tmp_path / "b.duckdb")


def test_the_cache_is_given_back_for_python_work_and_its_limit_restored(logs, tmp_path):
    con = store.connect(tmp_path / "a.duckdb", settings={"memory_limit": "2GB"})
    try:
        ingest_paths(con, [logs])
        con.execute("SELECT * FROM messages ORDER BY content").fetchall()  # fills the cache

        def cached() -> int:
            return con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0]

        before = cached()
        with store.cache_released(con, limit="8MB"):  # below this small store's cache
            during = cached()
            assert con.execute("SELECT count(*) FROM messages").fetchone()[0] > 0  # still queryable
        (limit,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
        with store.cache_released(con, limit="1MB"):  # below the primary-key indexes it cannot evict
            (held,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
    finally:
        con.close()
    assert during < before
    assert limit == "1.8 GiB"
    assert held == "1.8 GiB"  # left as it was: nothing fails


def test_the_profile_reads_its_requests_with_the_cache_given_back(monkeypatch, logs, tmp_path):
    """The requests pile up in Python while `load_requests` reads the conversations: DuckDB runs
    at the low limit meanwhile, its cache not beside them, and gets its limit back after."""
    con = store.connect(tmp_path / "a.duckdb", settings={"memory_limit": "2GB"})
    limits = []

    def watched(con, **kwargs):
        limits.append(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        return prefix_cache.load_requests(con, **kwargs)

    monkeypatch.setattr(profile_module, "load_requests", watched)
    try:
        ingest_paths(con, [logs])
        assert build_profile(con).log.requests
        (after,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
    finally:
        con.close()
    assert limits == ["122.0 MiB"]  # store.RELEASED_MEMORY_LIMIT, 128 MB, as DuckDB prints it
    assert after == "1.8 GiB"


def test_a_store_capped_below_its_data_gives_the_same_results(monkeypatch, logs, tmp_path):
    results = {}
    for name, settings in (("free", {}), ("capped", {"memory_limit": "64MB", "threads": "1"})):
        for key, value in settings.items():
            monkeypatch.setenv(store.SETTINGS_FROM_ENV[key], value)
        if settings:
            monkeypatch.setenv("TRACEFORGE_TEMP_DIRECTORY", str(tmp_path / "spill"))
        con = store.connect(tmp_path / f"{name}.duckdb")
        try:
            ingest_paths(con, [logs], workers=1)
            analyze_dependencies(con)
            # a join and a sort over every message, under the cap
            results[name] = {table: con.execute(sql).fetchall() for table, sql in ANALYSIS.items()}
            results[name]["messages"] = con.execute(
                "SELECT m.trace_id, m.seq, length(m.content), t.workload FROM messages m "
                "JOIN traces t USING (trace_id) ORDER BY m.content, m.trace_id, m.seq"
            ).fetchall()
        finally:
            con.close()
    assert results["capped"] == results["free"]


def test_the_dependency_analysis_is_read_in_batches(logs, tmp_path):
    rows = {}
    for batch_calls in (1_000_000, 50):
        con = store.connect(tmp_path / f"b{batch_calls}.duckdb")
        try:
            ingest_paths(con, [logs], workers=1)
            summary = analyze_dependencies(con, batch_calls=batch_calls)
            rows[batch_calls] = (
                {table: con.execute(sql).fetchall() for table, sql in ANALYSIS.items()},
                summary,
            )
        finally:
            con.close()
    (whole, whole_summary), (batched, batched_summary) = rows[1_000_000], rows[50]
    assert whole_summary["batches"] == 1
    tool_calls = whole_summary["tool_calls"]
    assert batched_summary["batches"] >= tool_calls // 50 // 2  # traces are never split between batches
    assert batched == whole


def test_a_batch_reads_its_own_traces_rows_and_none_of_a_table_it_has_no_rows_in():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE calls AS SELECT * FROM (VALUES ('a', 1), ('a', 2), ('b', 3), ('c', 4)) v(trace_id, x)"
    )
    con.execute("CREATE TABLE notes AS SELECT * FROM (VALUES ('a', 'n1'), ('c', 'n2')) v(trace_id, note)")
    spans = batches.trace_spans(con, ["calls", "notes"])
    assert spans.main_rows == 4

    def read(batch: batches.TraceBatch, table: str, column: str) -> list:
        where, values = batch.within("x", table)
        return [row[0] for row in con.execute(f"SELECT x.{column} FROM {table} x {where}", values).fetchall()]

    per_trace = spans.batches(1)
    assert [b.trace_ids for b in per_trace] == [["a"], ["b"], ["c"]]
    assert [read(b, "calls", "x") for b in per_trace] == [[1, 2], [3], [4]]
    assert [read(b, "notes", "note") for b in per_trace] == [["n1"], [], ["n2"]]  # b has no notes
    (whole,) = spans.batches(10)
    assert read(whole, "notes", "note") == ["n1", "n2"]


def _log_record(line: int, messages: list[dict], reply: str, conversation: str) -> Record:
    value = {
        "request": {"model": "gpt-4.1", "messages": messages},
        "response": {
            "id": f"chatcmpl-{line}",
            "choices": [{"message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10 * line, "completion_tokens": 5},
        },
        "metadata": {"conversation": conversation},
    }
    return Record(line=line, value=value, raw=json.dumps(value))


def test_the_profile_s_worker_processes_give_the_same_profile(logs, tmp_path, monkeypatch):
    con = store.connect(tmp_path / "profile.duckdb")
    try:
        ingest_paths(con, [logs])
        analyze_dependencies(con)
        # 1: all in this process; 2: conversations rendered in two workers, the workloads
        # replayed in one; 3: in three and two. Small batches, so that many go to each worker.
        monkeypatch.setattr(prefix_cache, "CONVERSATION_BATCH_CALLS", 100)
        profiles = [build_profile(con, workers=workers) for workers in (1, 2, 3)]
    finally:
        con.close()
    documents = [profile.document for profile in profiles]
    for document in documents:
        document.pop("generated_at")
    assert len(documents[0]["workloads"]) > 2  # so the two workers share them
    assert documents[0] == documents[1] == documents[2]
    requests = [profile.log.requests for profile in profiles]
    assert sum(len(r.hash_ids) for r in requests[0]) > len(requests[0])  # blocks to number
    assert requests[0] == requests[1] == requests[2]  # the same hash ids, times and sizes
    for log in requests:  # names every request repeats are held once, however they arrived
        for field in ("session_id", "workload", "model"):
            values = [getattr(r, field) for r in log]
            assert len({id(v) for v in values}) == len(set(values)) < len(values)
        assert {r.hash_ids.typecode for r in log} == {"i"}  # 32-bit ids


def test_a_log_s_conversations_keep_only_their_latest_request():
    """Each request re-sends the conversation: after a continuation, the request before it is let
    go (its length and response kept), so memory follows the conversation, not its square."""
    conversations = api_log.Conversations()
    keys = api_log.RequestKeys()
    history: list[dict] = [{"role": "system", "content": "You help."}]
    exchanges = []
    for turn in range(1, 6):
        history.append({"role": "user", "content": f"question {turn}"})
        exchange = api_log.exchange_of(_log_record(turn, list(history), f"answer {turn}", "c"), keys)
        conversations.add(exchange)
        exchanges.append(exchange)
        history.append({"role": "assistant", "content": f"answer {turn}"})
    assert [e.convert_request is None and e.request == [] for e in exchanges] == [True] * 4 + [False]
    (trace,) = conversations.traces()
    assert [m.content for m in trace.messages] == [m["content"] for m in history]
    assert [m.call_index for m in trace.messages if m.role == "assistant"] == [0, 1, 2, 3, 4]
    # every distinct message was converted once for its key, however often it was re-sent
    assert len(keys.known) == len(history) - 1


def test_running_out_of_duckdb_memory_says_what_to_do_and_a_rerun_finishes_the_job(
    runner, monkeypatch, tmp_path
):
    sample = REPO / "sample_traces"
    db = tmp_path / "s.duckdb"
    counts = "SELECT " + ", ".join(
        f"(SELECT count(*) FROM {t})" for t in ("traces", "tool_calls", "trace_dag")
    )
    monkeypatch.setenv("TRACEFORGE_THREADS", "2")  # DuckDB's memory use follows its threads
    # out of memory inserting a file's rows, committing them, then in the analysis
    for limit in ("4MB", "8MB", "16MB"):
        monkeypatch.setenv("TRACEFORGE_MEMORY_LIMIT", limit)
        result = runner.invoke(cli, ["analyze", str(sample), "--db", str(db), "--out", str(tmp_path / "out")])
        assert result.exit_code == 1
        assert f"more memory than its limit ({limit})" in result.output
        assert "TRACEFORGE_MEMORY_LIMIT=2GB" in result.output and "internal error" not in result.output
    monkeypatch.delenv("TRACEFORGE_MEMORY_LIMIT")
    rerun = runner.invoke(cli, ["analyze", str(sample), "--db", str(db), "--out", str(tmp_path / "out")])
    assert rerun.exit_code == 0, rerun.output
    fresh = tmp_path / "fresh.duckdb"
    once = runner.invoke(cli, ["analyze", str(sample), "--db", str(fresh), "--out", str(tmp_path / "o2")])
    assert once.exit_code == 0, once.output
    with duckdb.connect(str(db), read_only=True) as con, duckdb.connect(str(fresh), read_only=True) as other:
        assert con.execute(counts).fetchone() == other.execute(counts).fetchone()
