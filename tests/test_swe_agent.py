"""SWE-agent `.traj` files: function-calling and text-action runs, retry attempts, real trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from cli_ingest import ingest_cli

FIXTURES = Path(__file__).parent / "fixtures" / "swe-agent"


def test_function_calling_run_with_a_requeried_step(runner, db_path):
    report = ingest_cli(runner, [FIXTURES / "function_calling_requery.traj"], db_path)
    (file,) = report["files"]
    assert (file["format"], file["traces"], file["llm_calls"], file["tool_calls"]) == ("swe-agent", 1, 3, 3)
    con = duckdb.connect(str(db_path), read_only=True)
    trace_id, outcome, attributes = con.execute("SELECT trace_id, outcome, attributes FROM traces").fetchone()
    attributes = json.loads(attributes)
    assert trace_id == "swe-agent/marshmallow-code__marshmallow-1867"  # from replay_config
    assert outcome == "success"
    assert attributes["model_stats"] == {
        "instance_cost": 0.3142,
        "tokens_sent": 45210,
        "tokens_received": 913,
        "api_calls": 4,
    }
    assert attributes["steps_not_in_history"] == 1  # the format error that was requeried
    # Aggregate stats cannot be split per call: no call claims tokens.
    calls = con.execute(
        "SELECT DISTINCT model, provider, usage_reported, input_tokens FROM llm_calls"
    ).fetchall()
    assert calls == [("claude-3-7-sonnet-20250219", "anthropic", False, None)]
    tools = con.execute(
        "SELECT tool_call_id, name, duration_ms, left(result, 10) FROM tool_calls ORDER BY seq"
    ).fetchall()
    assert tools == [
        ("call_find", "find_file", 250.0, "Found 1 ma"),
        ("call_open", "open", 500.0, "[File: src"),
        ("call_submit", "submit", 1500.0, "diff --git"),  # result from the step: the history ends first
    ]
    reasoning = con.execute("SELECT reasoning FROM messages WHERE reasoning IS NOT NULL").fetchall()
    assert reasoning == [("The rounding happens in TimeDelta._serialize.",)]


def test_retry_agent_attempts_are_separate_traces(runner, db_path):
    ingest_cli(runner, [FIXTURES / "retry_text_actions.traj"], db_path)
    con = duckdb.connect(str(db_path), read_only=True)
    traces = con.execute(
        "SELECT trace_id, outcome, attributes->>'best_attempt', attributes->>'action_format', "
        "attributes->'model_stats'->>'api_calls' FROM traces ORDER BY trace_id"
    ).fetchall()
    assert traces == [
        ("swe-agent/retry_text_actions/attempt-0", "failure", "false", "text", "1"),
        ("swe-agent/retry_text_actions/attempt-1", "success", "true", "text", "1"),
    ]
    tools = con.execute(
        "SELECT name, arguments->>'command', result, duration_ms FROM tool_calls ORDER BY trace_id"
    ).fetchall()
    assert tools == [
        ("pytest", "pytest tests/test_io.py", "1 failed", 2000.0),
        ("sed", "sed -i 's/rb/r/' src/io.py && submit", "diff --git a/src/io.py b/src/io.py", 2000.0),
    ]
    # The observation was a user message in the history; it is stored as the call's tool result.
    roles = con.execute(
        "SELECT list(role ORDER BY seq) FROM messages WHERE trace_id LIKE '%attempt-0'"
    ).fetchone()[0]
    assert roles == ["system", "user", "assistant", "tool"]


def test_not_a_trajectory_under_forced_format_is_a_reject(runner, tmp_path, db_path):
    (tmp_path / "x.traj").write_text(json.dumps({"trajectory": "none", "note": "copied by hand"}))
    report = ingest_cli(runner, [tmp_path / "x.traj"], db_path, "--format", "swe-agent")
    assert report["totals"]["rejected"] == 1 and report["totals"]["traces"] == 0
    con = duckdb.connect(str(db_path), read_only=True)
    assert "not a SWE-agent trajectory" in con.execute("SELECT error FROM rejects").fetchone()[0]


def _expected(run: dict) -> dict:
    history = [h for h in run["history"] if not h.get("is_demo")]
    turns = [h for h in history if h["role"] == "assistant"]
    calls = sum(
        len(h["tool_calls"]) if h.get("tool_calls") else bool((h.get("action") or "").strip()) for h in turns
    )
    return {"llm_calls": len(turns), "tool_calls": calls, "info": run.get("info") or {}}


def test_every_real_swe_agent_trajectory(shared_data, runner, db_path):
    folder = shared_data / "swe-agent"
    paths = sorted(folder.glob("*.traj"))
    assert paths
    report = ingest_cli(runner, [folder], db_path)
    by_path = {Path(f["path"]).name: f for f in report["files"]}
    con = duckdb.connect(str(db_path), read_only=True)
    for path in paths:
        expected = _expected(json.loads(path.read_text()))
        file = by_path[path.name]
        assert (file["format"], file["rejected"], file["traces"]) == ("swe-agent", 0, 1), path.name
        assert (file["llm_calls"], file["tool_calls"]) == (expected["llm_calls"], expected["tool_calls"]), (
            path.name
        )
        trace_id = f"swe-agent/{path.stem}"
        outcome, stats = con.execute(
            "SELECT outcome, attributes->'model_stats' FROM traces WHERE trace_id = ?", [trace_id]
        ).fetchone()
        raw_stats = expected["info"].get("model_stats")
        if raw_stats:
            assert json.loads(stats)["tokens_sent"] == raw_stats["tokens_sent"]
            assert json.loads(stats)["api_calls"] == raw_stats["api_calls"]
        submitted = bool((expected["info"].get("submission") or "").strip())
        assert outcome == ("success" if submitted else "failure" if expected["info"] else "unknown")
        reported = con.execute(
            "SELECT count(*) FILTER (WHERE usage_reported) FROM llm_calls WHERE trace_id = ?", [trace_id]
        ).fetchone()[0]
        assert reported == 0
        unanswered = con.execute(
            "SELECT count(*) FROM tool_calls WHERE trace_id = ? AND result IS NULL", [trace_id]
        ).fetchone()[0]
        assert unanswered == 0, path.name
