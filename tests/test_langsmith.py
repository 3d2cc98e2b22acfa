"""LangSmith run exports: flat run lists and nested run trees.

No real LangSmith export exists under ../shared/data (reference/real-trace-formats.md §9), so the
fixtures under tests/fixtures/langsmith/ are hand-written in the documented run format
(https://docs.langchain.com/langsmith/run-data-format; langchain-ai/langsmith-sdk
python/langsmith/schemas.py `Run`): `id`, `name`, `run_type`, `start_time` / `end_time`, `inputs` /
`outputs`, `extra.metadata` (`ls_provider`, `ls_model_name`, LangGraph's `langgraph_node`),
`extra.invocation_params`, `error`, `events`, `tags`, `parent_run_id`, `trace_id`, `dotted_order`
(`<start %Y%m%dT%H%M%S%fZ><run id>` joined by `.` from the root), `session_id`, `status`,
`prompt_tokens` / `completion_tokens` / `total_tokens`, `prompt_token_details.cache_read`,
`first_token_time`, `total_cost`. runs.jsonl is what `client.list_runs()` gives for a LangGraph agent
traced by LangChain's tracer: chat-model inputs as a batch of messages serialized by `dumpd`
(`{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}`), outputs as an
`LLMResult` (`generations[[{"message": ...}]]`, `llm_output.token_usage`), tool runs returning a
ToolMessage with `tool_call_id` and `status`; it also holds a trace whose model call failed.
run_tree.json is one run tree with `child_runs` nested (children carry neither trace id nor
dotted order) from `@traceable` and `wrap_openai`: OpenAI-style `{"messages", "model", "tools"}`
inputs, chat-completion outputs with `usage`, tool runs without tool call ids, and a second user turn.
Every expected count below is computed from the raw files with plain json.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from cli_ingest import ingest_cli

from traceforge import store
from traceforge.ingest import detect, ingest_paths, langfuse, langsmith, openai_chat, openai_responses
from traceforge.ingest.sources import load, read_records

FIXTURES = Path(__file__).parent / "fixtures" / "langsmith"
RUNS = FIXTURES / "runs.jsonl"
TREE = FIXTURES / "run_tree.json"


def table(con, sql: str, *params) -> list[tuple]:
    return con.execute(sql, list(params)).fetchall()


def when(text: str) -> datetime:
    return datetime.fromisoformat(text + "+00:00")


def flatten(run: dict, parent: dict | None = None) -> list[tuple[dict, dict | None]]:
    out = [(run, parent)]
    for child in run.get("child_runs") or []:
        out += flatten(child, run)
    return out


def emitted_tool_calls(run: dict) -> list[dict]:
    """The tool calls the AIMessage of an llm run's LLMResult output requests."""
    message = run["outputs"]["generations"][0][0]["message"]
    return message["kwargs"]["tool_calls"]


def test_flat_run_export_through_the_cli(runner, db_path):
    runs = [json.loads(line) for line in RUNS.read_text().splitlines()]
    llm = [r for r in runs if r["run_type"] == "llm"]
    tools = [r for r in runs if r["run_type"] == "tool"]
    skipped: dict[str, int] = {}
    for run in runs:
        if run["run_type"] not in ("llm", "tool"):
            skipped[run["run_type"]] = skipped.get(run["run_type"], 0) + 1

    report = ingest_cli(runner, [RUNS], db_path)
    con = store.connect(db_path)

    (file,) = report["files"]
    assert file["format"] == "langsmith"
    assert (file["records"], file["rejected"], file["skipped"]) == (len(runs), 0, skipped)
    assert (file["llm_calls"], file["tool_calls"]) == (len(llm), len(tools))
    assert file["traces"] == len({r["trace_id"] for r in llm + tools})
    reported = [r for r in llm if r["prompt_tokens"] or r["completion_tokens"]]
    assert table(
        con,
        "SELECT sum(input_tokens), sum(cache_read_tokens), sum(output_tokens), sum(cost_usd) FROM llm_calls",
    )[0] == (
        sum(r["prompt_tokens"] for r in reported),
        sum(r["prompt_token_details"]["cache_read"] for r in reported),
        sum(r["completion_tokens"] for r in reported),
        sum(r["total_cost"] for r in reported),
    )
    usage = dict(table(con, "SELECT call_id, usage_reported FROM llm_calls"))
    assert usage == {r["id"]: r in reported for r in llm}
    ttft = dict(table(con, "SELECT call_id, ttft_ms FROM llm_calls WHERE ttft_ms IS NOT NULL"))
    assert ttft == {
        r["id"]: (when(r["first_token_time"]) - when(r["start_time"])) / timedelta(milliseconds=1)
        for r in llm
        if r["first_token_time"]
    }
    roots = {r["id"]: r for r in runs if r["parent_run_id"] is None}
    traces = table(con, "SELECT trace_id, workload, agent, outcome FROM traces ORDER BY trace_id")
    assert traces == sorted(
        (i, r["session_name"], r["name"], "failure" if r["error"] else "unknown") for i, r in roots.items()
    )


def test_tool_runs_join_the_llm_run_that_requested_them_by_tool_call_id(con):
    runs = [json.loads(line) for line in RUNS.read_text().splitlines()]
    requested_by = {
        c["id"]: r["id"]
        for r in runs
        if r["run_type"] == "llm" and r["outputs"]
        for c in emitted_tool_calls(r)
    }
    tools = {r["outputs"]["output"]["kwargs"]["tool_call_id"]: r for r in runs if r["run_type"] == "tool"}

    ingest_paths(con, [RUNS])

    stored = table(
        con, "SELECT tool_call_id, call_id, is_error, started_at, ended_at, result FROM tool_calls"
    )
    assert {row[0]: row[1] for row in stored} == requested_by
    for tool_call_id, _, is_error, started, ended, result in stored:
        run = tools[tool_call_id]
        assert is_error == (run["error"] is not None)
        assert (started, ended) == (when(run["start_time"]), when(run["end_time"]))
        assert result == run["outputs"]["output"]["kwargs"]["content"]
    # both searches came from one model turn and ran one after the other
    (first, second) = sorted(stored, key=lambda row: row[3])
    assert first[1] == second[1] and first[4] <= second[3]
    # the failed model call is kept as an LLM call without tokens or messages of its own
    failed = [r for r in runs if r["run_type"] == "llm" and r["error"]]
    assert table(
        con, "SELECT call_id, finish_reason, usage_reported FROM llm_calls WHERE finish_reason = 'error'"
    ) == [(r["id"], "error", False) for r in failed]


def test_run_tree_with_nested_child_runs_and_no_tool_call_ids(runner, db_path):
    document = json.loads(TREE.read_text())
    runs = flatten(document)
    llm = [r for r, _ in runs if r["run_type"] == "llm"]
    tools = [r for r, _ in runs if r["run_type"] == "tool"]

    report = ingest_cli(runner, [TREE], db_path)
    con = store.connect(db_path)

    (file,) = report["files"]
    assert file["format"] == "langsmith"
    assert file["records"] == len(runs)
    assert (file["llm_calls"], file["tool_calls"], file["traces"]) == (len(llm), len(tools), 1)
    assert table(con, "SELECT trace_id, workload, agent FROM traces") == [
        (document["trace_id"], document["extra"]["metadata"]["workload"], document["name"])
    ]
    assert table(con, "SELECT sum(input_tokens), sum(cache_read_tokens), sum(output_tokens) FROM llm_calls")[
        0
    ] == (
        sum(r["outputs"]["usage"]["prompt_tokens"] for r in llm),
        sum(r["outputs"]["usage"]["prompt_tokens_details"]["cached_tokens"] for r in llm),
        sum(r["outputs"]["usage"]["completion_tokens"] for r in llm),
    )
    # without ids, each tool run joins the latest model call that started before it
    stored = table(con, "SELECT name, call_id, duration_ms FROM tool_calls ORDER BY seq")
    expected = []
    for tool in tools:
        requester = max(
            (r for r in llm if r["start_time"] <= tool["start_time"]), key=lambda r: r["start_time"]
        )
        duration = (when(tool["end_time"]) - when(tool["start_time"])) / timedelta(milliseconds=1)
        expected.append((tool["name"], requester["id"], duration))
    assert stored == expected
    # the second user turn continues the same conversation
    last = llm[-1]
    roles = [r for (r,) in table(con, "SELECT role FROM messages ORDER BY seq")]
    assert roles == [m["role"] for m in last["inputs"]["messages"]] + ["assistant"]
    assert table(con, "SELECT count(*) FROM tool_defs")[0][0] == len(last["inputs"]["tools"])


def test_trace_id_comes_from_the_dotted_order_when_a_run_lacks_one(tmp_path, con):
    runs = [json.loads(line) for line in RUNS.read_text().splitlines()]
    for run in runs:
        run.pop("trace_id")
    path = tmp_path / "no_trace_ids.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    ingest_paths(con, [path])
    roots = {r["dotted_order"].split(".")[0].split("Z", 1)[1] for r in runs}
    assert {t for (t,) in table(con, "SELECT trace_id FROM traces")} == roots


def test_detection_claims_langsmith_runs_and_nothing_else():
    for path in (RUNS, TREE):
        records = list(read_records(load(path), []))
        assert detect.detect(records) is langsmith, path.name
        for other in (langfuse, openai_chat, openai_responses):
            assert other.sniff(records) < detect.THRESHOLD, (path.name, other.FORMAT)


def lc_ai(*calls: tuple[str, str]) -> dict:
    tool_calls = [
        {"name": name, "args": {"q": call_id}, "id": call_id, "type": "tool_call"} for call_id, name in calls
    ]
    message = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"]}
    return {**message, "kwargs": {"content": "", "type": "ai", "tool_calls": tool_calls}}


def test_tool_runs_without_ids_follow_parentage_then_time(tmp_path, con):
    """A tool run joins the latest model call before it under its nearest ancestor: a sub-agent's
    tool finds the sub-agent's call although the main agent's model started later, and a call whose
    tool never ran (no tool run was recorded) does not capture a later call's tool run."""
    human = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "HumanMessage"]}

    def run(rid, run_type, parent, start, name, inputs=None, outputs=None):
        return {
            "id": rid, "name": name, "run_type": run_type, "trace_id": "root", "parent_run_id": parent,
            "start_time": f"2025-10-20T10:00:{start:02d}", "end_time": f"2025-10-20T10:00:{start:02d}.500000",
            "inputs": inputs or {}, "outputs": outputs,
        }  # fmt: skip

    def llm(rid, parent, start, prompt, *calls):
        inputs = {"messages": [[{**human, "kwargs": {"content": prompt}}]]}
        return run(
            rid, "llm", parent, start, "ChatModel", inputs, {"generations": [[{"message": lc_ai(*calls)}]]}
        )

    runs = [
        run("root", "chain", None, 0, "supervisor"),
        llm("main-1", "root", 1, "main task", ("m1", "lookup")),  # its lookup never ran
        run("sub", "chain", "root", 2, "researcher"),
        llm("sub-1", "sub", 3, "sub task", ("s1", "lookup")),
        llm("main-2", "root", 4, "main task, again", ("m2", "lookup")),
        run("t-sub", "tool", "sub", 5, "lookup", {"q": "s1"}, {"output": "sub result"}),
        run("t-main", "tool", "root", 6, "lookup", {"q": "m2"}, {"output": "main result"}),
    ]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))

    ingest_paths(con, [path])

    joined = table(
        con, "SELECT source_tool_call_id, call_id, result FROM tool_calls WHERE result IS NOT NULL"
    )
    assert sorted(joined) == [("m2", "main-2", "main result"), ("s1", "sub-1", "sub result")]
    assert table(con, "SELECT source_tool_call_id FROM tool_calls WHERE result IS NULL") == [("m1",)]
