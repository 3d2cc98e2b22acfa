"""OpenHands event streams: hand-written streams for each rule, then every real recorded stream."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from cli_ingest import ingest_cli

FIXTURES = Path(__file__).parent / "fixtures" / "openhands"


def test_parallel_calls_share_one_llm_call_and_results_link_by_id_or_cause(runner, db_path):
    report = ingest_cli(runner, [FIXTURES / "parallel_calls.json"], db_path)
    (file,) = report["files"]
    assert file["format"] == "openhands"
    assert file["rejected"] == 0
    # Environment events and the agent message's null observation are skipped by rule, by kind.
    assert file["skipped"] == {"environment:agent_state_changed": 4, "observation:null": 1}
    con = duckdb.connect(str(db_path), read_only=True)
    calls = con.execute(
        "SELECT call_id, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, usage_reported, "
        "provider, finish_reason FROM llm_calls ORDER BY seq"
    ).fetchall()
    assert [c[0] for c in calls] == [
        "chatcmpl-r1",
        "chatcmpl-r2",
        "openhands/parallel_calls/llm-2",
        "chatcmpl-r3",
    ]
    assert calls[0][1:] == (5000, 4000, 900, 120, True, "anthropic", "tool_calls")
    assert calls[2][5] is False  # the agent's plain message: an LLM turn whose usage was not recorded
    tools = con.execute(
        "SELECT tool_call_id, call_id, name, arguments->>'command', result, is_error, duration_ms "
        "FROM tool_calls ORDER BY seq"
    ).fetchall()
    assert [(t[0], t[1]) for t in tools] == [
        ("toolu_A", "chatcmpl-r1"),
        ("toolu_B", "chatcmpl-r1"),  # the second call of the same response
        ("toolu_C", "chatcmpl-r2"),
        ("toolu_D", "chatcmpl-r3"),
    ]
    assert tools[0][4] == "12 a.py\n[The command completed with exit code 0.]"
    assert tools[1][4].startswith("wc: b.py: No such file")  # linked through `cause` alone
    assert [t[5] for t in tools] == [False, True, True, False]  # exit code 1; an error observation
    assert tools[0][6] == 600.0 and tools[3][4] is None
    roles = [r for (r,) in con.execute("SELECT role FROM messages ORDER BY seq").fetchall()]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert con.execute("SELECT count(*) FROM tool_defs").fetchone()[0] == 2


def test_naive_local_times_are_corrected_from_response_created(runner, db_path):
    ingest_cli(runner, [FIXTURES / "parallel_calls.json"], db_path)
    con = duckdb.connect(str(db_path), read_only=True)
    started, offset, workload, outcome, cost = con.execute(
        "SELECT strftime(started_at AT TIME ZONE 'UTC', '%H:%M:%S'), "
        "attributes->>'recorded_utc_offset_hours', workload, outcome, attributes->>'accumulated_cost_usd' "
        "FROM traces"
    ).fetchone()
    # The recorder wrote 10:00:00 local time at UTC+2; the created epochs say so.
    assert (started, float(offset)) == ("08:00:00", 2.0)
    assert (workload, outcome, float(cost)) == ("openhands/CodeActAgent", "success", 0.021)
    # llm_metrics.response_latencies gives the first call's own latency.
    first = con.execute(
        "SELECT duration_ms, strftime(started_at AT TIME ZONE 'UTC', '%H:%M:%S.%g') "
        "FROM llm_calls WHERE seq = 0"
    ).fetchone()
    assert first == (2250.0, "08:00:01.750")


def test_evaluation_output_lines_are_traces_with_text_parsed_actions(runner, db_path):
    report = ingest_cli(runner, [FIXTURES / "eval_output.jsonl"], db_path)
    assert report["totals"]["traces"] == 2 and report["totals"]["rejected"] == 0
    con = duckdb.connect(str(db_path), read_only=True)
    traces = con.execute(
        "SELECT trace_id, outcome, attributes->'skipped_events' FROM traces ORDER BY trace_id"
    ).fetchall()
    assert traces[0][:2] == ("openhands/astropy__astropy-12907", "success")
    assert json.loads(traces[0][2]) == {"environment:agent_state_changed": 1}
    assert traces[1][:2] == ("openhands/django__django-11099", "failure")
    tools = con.execute(
        "SELECT name, result, is_error, duration_ms FROM tool_calls "
        "WHERE trace_id = 'openhands/astropy__astropy-12907' ORDER BY seq"
    ).fetchall()
    assert tools == [("run", "1 failed, 212 passed", True, 38000.0), ("finish", None, False, None)]
    models = con.execute("SELECT DISTINCT model, provider FROM llm_calls").fetchall()
    assert models == [("gpt-4o-2024-08-06", "openai")]


def test_an_event_array_with_a_stray_element_rejects_only_that_element(runner, tmp_path, db_path):
    events = json.loads((FIXTURES / "parallel_calls.json").read_text())
    events.insert(3, 42)
    (tmp_path / "stream.json").write_text(json.dumps(events))
    report = ingest_cli(runner, [tmp_path / "stream.json"], db_path)
    assert report["totals"]["rejected"] == 1 and report["totals"]["traces"] == 1
    con = duckdb.connect(str(db_path), read_only=True)
    line, error = con.execute("SELECT line, error FROM rejects").fetchone()
    assert line == 4 and "not an OpenHands event" in error


def _expected(events: list[dict]) -> dict:
    """Counts from the raw events with plain json, independent of the adapter."""
    responses: dict[str, dict] = {}
    tool_call_ids, results, plain_messages, skipped = set(), 0, 0, 0
    for event in events:
        metadata = event.get("tool_call_metadata")
        if event.get("source") == "environment" or event.get("observation") == "null":
            skipped += 1
        elif "action" in event and metadata:
            responses[metadata["model_response"]["id"]] = metadata["model_response"]["usage"]
            tool_call_ids.add(metadata["tool_call_id"])
        elif "action" in event and event["source"] == "agent" and event["action"] == "message":
            plain_messages += 1
        elif "observation" in event and metadata:
            results += 1
    usage = list(responses.values())
    return {
        "llm_calls": len(responses) + plain_messages,
        "tool_calls": len(tool_call_ids),
        "results": results,
        "skipped": skipped,
        "input": sum(u["prompt_tokens"] for u in usage),
        "output": sum(u["completion_tokens"] for u in usage),
        "cache_read": sum(u.get("cache_read_input_tokens") or 0 for u in usage),
        "cache_write": sum(u.get("cache_creation_input_tokens") or 0 for u in usage),
    }


def test_every_real_openhands_stream(shared_data, runner, db_path):
    folder = shared_data / "openhands"
    paths = sorted(folder.glob("*.json"))
    assert paths
    report = ingest_cli(runner, [folder], db_path)
    by_path = {Path(f["path"]).name: f for f in report["files"]}
    con = duckdb.connect(str(db_path), read_only=True)
    for path in paths:
        events = json.loads(path.read_text())
        expected = _expected(events)
        file = by_path[path.name]
        assert (file["format"], file["rejected"], file["traces"]) == ("openhands", 0, 1), path.name
        assert file["llm_calls"] == expected["llm_calls"], path.name
        assert file["tool_calls"] == expected["tool_calls"], path.name
        assert sum(file["skipped"].values()) == expected["skipped"], path.name
        trace_id = f"openhands/{path.stem}"
        tokens = con.execute(
            "SELECT sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens) "
            "FROM llm_calls WHERE trace_id = ?",
            [trace_id],
        ).fetchone()
        assert tokens == (
            expected["input"],
            expected["output"],
            expected["cache_read"],
            expected["cache_write"],
        )
        answered = con.execute(
            "SELECT count(*) FROM tool_calls WHERE trace_id = ? AND result IS NOT NULL", [trace_id]
        ).fetchone()[0]
        assert answered == expected["results"], path.name
        # Every tool call belongs to the LLM call whose response asked for it.
        orphans = con.execute(
            "SELECT count(*) FROM tool_calls t LEFT JOIN llm_calls c USING (call_id) "
            "WHERE t.trace_id = ? AND c.call_id IS NULL",
            [trace_id],
        ).fetchone()[0]
        assert orphans == 0
