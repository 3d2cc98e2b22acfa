"""ToolBench answer files: the chosen path taken once, legacy function calls, invalid answers."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from cli_ingest import ingest_cli

FIXTURES = Path(__file__).parent / "fixtures" / "toolbench"


def test_chosen_path_once_with_results_paired_by_order_and_name(runner, db_path):
    report = ingest_cli(runner, [FIXTURES / "G2_answer" / "7_ChatGPT_DFS_woFilter_w2.json"], db_path)
    (file,) = report["files"]
    # Three cumulative prefixes of one conversation: three model turns, not 3 + 5 + 7 messages.
    assert (file["format"], file["traces"], file["llm_calls"], file["tool_calls"]) == ("toolbench", 1, 3, 3)
    con = duckdb.connect(str(db_path), read_only=True)
    assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == 7
    tools = con.execute(
        "SELECT name, arguments->>'city', result, is_error FROM tool_calls ORDER BY seq"
    ).fetchall()
    # Two calls of the same tool without ids: each result answers the earliest unanswered one.
    assert tools[0][:2] == ("current_weather_for_weatherapi", "Paris") and "temp_c" in tools[0][2]
    assert tools[1][:2] == ("current_weather_for_weatherapi", "Lyon") and "city not found" in tools[1][2]
    assert [t[3] for t in tools] == [False, True, False]
    assert tools[2][0] == "Finish" and tools[2][2] is None
    trace_id, outcome, attributes = con.execute("SELECT trace_id, outcome, attributes FROM traces").fetchone()
    attributes = json.loads(attributes)
    assert (trace_id, outcome) == ("toolbench/G2_answer/7_ChatGPT_DFS_woFilter_w2", "success")
    assert attributes["tree"] == {
        "size": 10,
        "max_length": 8,
        "nodes": 10,
        "leaves": 2,
        "branch_points": 1,
        "max_children": 2,
        "pruned": 1,
        "depth": 7,
    }
    assert (attributes["query_count"], attributes["total_tokens"]) == (4, 5120)
    assert con.execute("SELECT bool_or(usage_reported) FROM llm_calls").fetchone()[0] is False
    assert con.execute("SELECT count(*) FROM tool_defs").fetchone()[0] == 2


def test_invalid_answer_is_a_failed_trace_without_calls(runner, db_path):
    report = ingest_cli(runner, [FIXTURES / "G2_answer" / "8_ChatGPT_DFS_woFilter_w2.json"], db_path)
    assert report["totals"] == {**report["totals"], "traces": 1, "llm_calls": 0, "rejected": 0, "skipped": 0}
    con = duckdb.connect(str(db_path), read_only=True)
    outcome, valid, queries = con.execute(
        "SELECT outcome, attributes->>'valid_data', attributes->>'query_count' FROM traces"
    ).fetchone()
    assert (outcome, valid, queries) == ("failure", "false", "21")
    assert con.execute("SELECT role, content FROM messages").fetchall() == [
        ("user", "Find flights from Nice to Oslo next Friday.")
    ]


def test_give_up_is_a_failure(runner, tmp_path, db_path):
    answer = json.loads((FIXTURES / "G2_answer" / "7_ChatGPT_DFS_woFilter_w2.json").read_text())
    answer["answer_generation"]["finish_type"] = "give_up"
    (tmp_path / "give_up.json").write_text(json.dumps(answer))
    ingest_cli(runner, [tmp_path / "give_up.json"], db_path)
    con = duckdb.connect(str(db_path), read_only=True)
    assert con.execute("SELECT outcome FROM traces").fetchone() == ("failure",)


def test_every_real_toolbench_answer(shared_data, runner, db_path):
    folder = shared_data / "toolbench"
    paths = sorted(folder.rglob("*.json"))
    assert paths
    report = ingest_cli(runner, [folder], db_path)
    by_path = {Path(f["path"]).name: f for f in report["files"]}
    con = duckdb.connect(str(db_path), read_only=True)
    for path in paths:
        answer = json.loads(path.read_text())["answer_generation"]
        prefixes = answer.get("train_messages") or []
        conversation = prefixes[-1] if prefixes else []
        turns = [m for m in conversation if m["role"] == "assistant"]
        file = by_path[path.name]
        assert (file["format"], file["rejected"], file["traces"]) == ("toolbench", 0, 1), path.name
        assert file["llm_calls"] == len(turns) == len(prefixes), path.name  # one model turn per prefix
        assert file["tool_calls"] == sum(1 for m in turns if m.get("function_call")), path.name
        trace_id = f"toolbench/{path.parent.name}/{path.stem}"
        outcome, total_tokens = con.execute(
            "SELECT outcome, (attributes->>'total_tokens')::BIGINT FROM traces WHERE trace_id = ?", [trace_id]
        ).fetchone()
        assert total_tokens == answer["total_tokens"]
        if not answer["valid_data"]:
            assert outcome == "failure"
        answered = con.execute(
            "SELECT count(*) FROM tool_calls WHERE trace_id = ? AND result IS NOT NULL", [trace_id]
        ).fetchone()[0]
        assert answered == sum(1 for m in conversation if m["role"] == "function"), path.name
