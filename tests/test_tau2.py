"""tau2-bench results: one trace per simulation, tau2's tool-call shape, user-side tool calls."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from cli_ingest import ingest_cli

FIXTURES = Path(__file__).parent / "fixtures" / "tau2"


def test_anthropic_raw_data_user_tool_calls_and_missing_usage(runner, db_path):
    report = ingest_cli(runner, [FIXTURES / "telecom_results.json"], db_path)
    (file,) = report["files"]
    assert (file["format"], file["records"], file["traces"], file["rejected"]) == ("tau2", 2, 2, 0)
    con = duckdb.connect(str(db_path), read_only=True)
    calls = con.execute(
        "SELECT call_id, provider, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, "
        "cost_usd, finish_reason, duration_ms FROM llm_calls WHERE trace_id = 'sim-claude-telecom-1' "
        "ORDER BY seq"
    ).fetchall()
    # The canned greeting is no LLM call; ids, cache tokens and stop reasons come from raw_data.
    assert calls[0] == ("msg_01Aaa", "anthropic", 6100, 5000, 1000, 80, 0.03, "tool_use", 2500.0)
    assert [c[0] for c in calls] == ["msg_01Aaa", "msg_01Bbb", "msg_01Ccc"]
    tools = con.execute(
        "SELECT tool_call_id, requestor, call_id, is_error, duration_ms FROM tool_calls "
        "WHERE trace_id = 'sim-claude-telecom-1' ORDER BY seq"
    ).fetchall()
    assert tools == [
        ("toolu_01Cust", "assistant", "msg_01Aaa", False, 200.0),
        ("toolu_01Line", "assistant", "msg_01Aaa", True, 300.0),  # tau2's own error flag
        ("call_user1", "user", None, False, 100.0),  # the user simulator's own call, kept apart
    ]
    trace = con.execute(
        "SELECT workload, outcome, attributes FROM traces WHERE trace_id = 'sim-claude-telecom-1'"
    ).fetchone()
    attributes = json.loads(trace[2])
    assert trace[:2] == ("tau2/telecom", "success")
    assert attributes["user_simulator"] == {
        "calls": 3,
        "input_tokens": 6900,
        "output_tokens": 37,
        "cost_usd": 0.011,
    }
    assert (
        con.execute("SELECT count(*) FROM tool_defs WHERE trace_id = 'sim-claude-telecom-1'").fetchone()[0]
        == 2
    )
    system = con.execute(
        "SELECT content FROM messages WHERE trace_id = 'sim-claude-telecom-1' AND seq = 0"
    ).fetchone()[0]
    assert system.startswith("# Telecom Agent Policy")
    # A harness that recorded no usage: every assistant turn but the greeting, tokens not reported.
    bare = con.execute(
        "SELECT count(*), bool_or(usage_reported) FROM llm_calls WHERE trace_id = 'sim-no-usage-telecom-1'"
    ).fetchone()
    assert bare == (2, False)
    assert con.execute("SELECT outcome FROM traces WHERE trace_id = 'sim-no-usage-telecom-1'").fetchone() == (
        "failure",
    )


def test_a_simulation_without_messages_is_rejected_alone(runner, tmp_path, db_path):
    results = json.loads((FIXTURES / "telecom_results.json").read_text())
    results["simulations"].insert(1, {"id": "broken", "task_id": "x", "messages": "lost"})
    (tmp_path / "results.json").write_text(json.dumps(results))
    report = ingest_cli(runner, [tmp_path / "results.json"], db_path)
    assert report["totals"]["traces"] == 2 and report["totals"]["rejected"] == 1
    con = duckdb.connect(str(db_path), read_only=True)
    line, error = con.execute("SELECT line, error FROM rejects").fetchone()
    assert line == 2 and error.startswith("simulations[1] has no `messages` list")


def test_tau_bench_trajectories_stay_openai_chat_transcripts(runner, tmp_path, db_path):
    runs = [
        {
            "task_id": 0,
            "reward": 1.0,
            "trial": 0,
            "info": {"task": {"user_id": "mia_li_3668"}},
            "traj": [
                {"role": "system", "content": "# Airline Agent Policy"},
                {"role": "user", "content": "Book a flight."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "get_user_details",
                                "arguments": '{"user_id": "mia_li_3668"}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "name": "get_user_details", "content": "{}"},
            ],
        }
    ]
    (tmp_path / "gpt-4o-airline.json").write_text(json.dumps(runs))
    report = ingest_cli(runner, [tmp_path], db_path)
    assert report["files"][0]["format"] == "openai-chat"


def _expected(results: dict) -> dict:
    """Counts from the raw results with plain json, independent of the adapter."""
    out = {
        "sims": 0,
        "calls": 0,
        "input": 0,
        "output": 0,
        "cost": 0.0,
        "tools": {},
        "results": 0,
        "errors": 0,
    }
    out["success"] = 0
    for sim in results["simulations"]:
        out["sims"] += 1
        out["success"] += sim["reward_info"]["reward"] == 1.0
        for m in sim["messages"]:
            if m["role"] == "assistant" and (m.get("usage") or m.get("raw_data")):
                out["calls"] += 1
                out["input"] += m["usage"]["prompt_tokens"]
                out["output"] += m["usage"]["completion_tokens"]
                out["cost"] += m["cost"]
            for call in m.get("tool_calls") or []:
                out["tools"][call["requestor"]] = out["tools"].get(call["requestor"], 0) + 1
            if m["role"] == "tool":
                out["results"] += 1
                out["errors"] += bool(m.get("error"))
    return out


def test_every_real_tau2_results_file(shared_data, runner, db_path):
    folder = shared_data / "tau2-bench"
    paths = sorted(folder.glob("*.json"))
    assert paths
    report = ingest_cli(runner, [folder], db_path)
    by_path = {Path(f["path"]).name: f for f in report["files"]}
    con = duckdb.connect(str(db_path), read_only=True)
    for path in paths:
        results = json.loads(path.read_text())
        expected = _expected(results)
        file = by_path[path.name]
        assert (file["format"], file["rejected"]) == ("tau2", 0), path.name
        assert (file["traces"], file["llm_calls"]) == (expected["sims"], expected["calls"]), path.name
        ids = [s["id"] for s in results["simulations"]]
        got = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE outcome = 'success') "
            "FROM traces WHERE list_contains(?, trace_id)",
            [ids],
        ).fetchone()
        assert got == (expected["sims"], expected["success"])
        tokens = con.execute(
            "SELECT sum(input_tokens), sum(output_tokens), round(sum(cost_usd), 6), bool_and(usage_reported) "
            "FROM llm_calls WHERE list_contains(?, trace_id)",
            [ids],
        ).fetchone()
        assert tokens == (expected["input"], expected["output"], round(expected["cost"], 6), True)
        tools = dict(
            con.execute(
                "SELECT requestor, count(*) FROM tool_calls WHERE list_contains(?, trace_id) GROUP BY 1",
                [ids],
            ).fetchall()
        )
        assert tools == expected["tools"], path.name
        answered = con.execute(
            "SELECT count(*) FILTER (WHERE result IS NOT NULL), count(*) FILTER (WHERE is_error) "
            "FROM tool_calls WHERE list_contains(?, trace_id)",
            [ids],
        ).fetchone()
        assert answered == (expected["results"], expected["errors"]), path.name
