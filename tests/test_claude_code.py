"""Claude Code session logs: the real spotter session with its subagent and compaction side-chain,
and hand-written fixtures for split messages, parallel calls, errors, branches and linking.

Expected numbers for the real files are computed here from the raw JSON Lines with plain `json`,
never taken from the adapter."""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from traceforge import store
from traceforge.analysis.prefix_cache import estimate_tokens, load_requests, provider_comparison, simulate
from traceforge.analysis.workloads import assign_workloads, compute_workloads
from traceforge.cli import cli
from traceforge.ingest import anthropic_messages, claude_code, openai_chat
from traceforge.ingest.sources import Record
from traceforge.pricing import load_prices

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
SESSION = "4d5611e5-241a-462a-8d15-5122611a9569"
LINKED = "33333333-3333-4333-8333-333333333333"


def ingest(runner, db_path: Path, *paths: Path):
    result = runner.invoke(cli, ["ingest", *map(str, paths), "--db", str(db_path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def query(db_path: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = store.connect(db_path)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def raw_lines(path: Path) -> list[dict]:
    return [json.loads(text) for text in path.read_text().splitlines() if text.strip()]


def expected_from_raw(path: Path) -> dict:
    """What a correct reading of one file gives, by the rules stated in docs/formats/claude-code.md:
    one LLM call per message.id, its usage once (the line with the largest output_tokens), one tool
    call per tool_use id, every non-message line skipped under its own type."""
    lines = raw_lines(path)
    by_message: dict[str, list[dict]] = {}
    tool_ids = set()
    for line in lines:
        if line["type"] != "assistant" or line["message"].get("model") == "<synthetic>":
            continue
        by_message.setdefault(line["message"]["id"], []).append(line["message"]["usage"])
        tool_ids |= {b["id"] for b in line["message"]["content"] if b["type"] == "tool_use"}
    usages = [max(us, key=lambda u: u["output_tokens"]) for us in by_message.values()]
    return {
        "records": len(lines),
        "message_lines": sum(1 for line in lines if line["type"] in ("user", "assistant")),
        "llm_calls": len(by_message),
        "tool_calls": len(tool_ids),
        "input_tokens": sum(
            u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
            for u in usages
        ),
        "cache_read_tokens": sum(u["cache_read_input_tokens"] for u in usages),
        "output_tokens": sum(u["output_tokens"] for u in usages),
        "skipped": Counter(line["type"] for line in lines if line["type"] not in ("user", "assistant")),
    }


def stored_for(db_path: Path, path: Path) -> dict:
    [(records, ingested, rejected, skipped)] = query(
        db_path,
        "SELECT records, ingested, rejected, skipped_by_kind FROM sources WHERE path = ?",
        [str(path)],
    )
    [(calls, inputs, reads, outputs)] = query(
        db_path,
        """SELECT count(*), sum(input_tokens), sum(cache_read_tokens), sum(output_tokens)
           FROM llm_calls JOIN traces USING (trace_id) WHERE source_path = ?""",
        [str(path)],
    )
    [(tools,)] = query(
        db_path,
        "SELECT count(*) FROM tool_calls JOIN traces USING (trace_id) WHERE source_path = ?",
        [str(path)],
    )
    return {
        "records": records,
        "ingested": ingested,
        "rejected": rejected,
        "skipped": json.loads(skipped),
        "llm_calls": calls,
        "input_tokens": inputs or 0,
        "cache_read_tokens": reads or 0,
        "output_tokens": outputs or 0,
        "tool_calls": tools,
    }


def real_files(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "claude-code").rglob("*.jsonl"))


def test_real_session_and_subagents_ingest_with_counts_from_the_raw_lines(shared_data, runner, db_path):
    files = real_files(shared_data)
    assert len(files) == 3
    report = ingest(runner, db_path, shared_data / "claude-code")
    assert {f["format"] for f in report["files"]} == {"claude-code"}
    assert report["totals"]["rejected"] == 0
    for path in files:
        expected, stored = expected_from_raw(path), stored_for(db_path, path)
        assert stored["rejected"] == 0, path
        assert stored["records"] == expected["records"], path
        for key in ("llm_calls", "tool_calls", "input_tokens", "cache_read_tokens", "output_tokens"):
            assert stored[key] == expected[key], (path.name, key)
        # Every non-message line is skipped under its type; message lines are ingested, except user
        # lines of a branch that made no LLM call (counted as `user-off-branch`).
        by_type = {k: v for k, v in stored["skipped"].items() if k != "user-off-branch"}
        assert by_type == dict(expected["skipped"]), path.name
        assert stored["ingested"] + stored["skipped"].get("user-off-branch", 0) == expected["message_lines"]
    session = next(p for p in files if p.name == f"{SESSION}.jsonl")
    assert expected_from_raw(session)["llm_calls"] < sum(
        1 for line in raw_lines(session) if line["type"] == "assistant"
    ), "the real session splits messages over lines: the test would not show grouping otherwise"


def test_real_session_is_one_trace_across_its_compaction(shared_data, runner, db_path):
    session = shared_data / "claude-code" / f"{SESSION}.jsonl"
    ingest(runner, db_path, session)
    lines = raw_lines(session)
    [(trace_id, workload, agent, started, ended, attributes)] = query(
        db_path,
        "SELECT trace_id, workload, agent, started_at, ended_at, attributes FROM traces",
    )
    attributes = json.loads(attributes)
    assert trace_id == SESSION
    assert agent == "claude-code"
    assert workload == next(line["cwd"] for line in lines if "cwd" in line)
    stamps = [datetime.fromisoformat(line["timestamp"]) for line in lines if "timestamp" in line]
    assert (started, ended) == (min(stamps), max(stamps))
    boundaries = [n for n, line in enumerate(lines, 1) if line.get("subtype") == "compact_boundary"]
    assert [c["line"] for c in attributes["compactions"]] == boundaries
    # The message right after the boundary is the summary the model continued from.
    seq = attributes["compactions"][0]["message_seq"]
    [(content,)] = query(db_path, "SELECT content FROM messages WHERE seq = ?", [seq])
    summary = next(line for line in lines if line.get("isCompactSummary"))
    assert content == summary["message"]["content"]


def test_max_tokens_counts_a_partial_output_at_least_as_its_text(runner, tmp_path):
    lines = raw_lines(FIXTURES / "parallel_session.jsonl")
    final = next(line for line in lines if line.get("uuid") == "b-1")["message"]
    final["usage"] = {**final["usage"], "output_tokens": 1}
    del final["usage"]["iterations"]  # msg_B, the last call, logged only its opening usage
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    db = tmp_path / "store.duckdb"
    assert runner.invoke(cli, ["ingest", str(path), "--db", str(db)]).exit_code == 0
    text = len(final["content"][0]["text"])
    # Its context was 6,304 tokens; the answer's 1 logged token is less than its text's length / 4.
    assert text // 4 > 1

    def usable(limit: int) -> bool:
        out = tmp_path / f"out-{limit}"
        args = ["export", "sft", "--db", str(db), "--out", str(out), "--max-tokens", str(limit)]
        result = runner.invoke(cli, args)
        assert result.exit_code in (0, 1), result.output  # 1: no rows written
        return "1 usable" in result.output

    assert usable(6304 + text // 4)
    assert not usable(6304 + text // 4 - 1)


def test_real_calls_without_their_final_usage_are_flagged_and_their_output_estimated(
    shared_data, runner, db_path
):
    ingest(runner, db_path, shared_data / "claude-code")
    # Which messages have only their opening usage, read from the raw lines: no line of the
    # message has a stop_reason or the `iterations` Claude Code writes with the final counts.
    by_message: dict[str, list[dict]] = {}
    for path in real_files(shared_data):
        for line in raw_lines(path):
            if line["type"] == "assistant" and line["message"].get("model") != "<synthetic>":
                by_message.setdefault(line["message"]["id"], []).append(line["message"])
    expected = {
        key
        for key, parts in by_message.items()
        if not any(m.get("stop_reason") or "iterations" in m["usage"] for m in parts)
    }
    flagged = {row[0] for row in query(db_path, "SELECT call_id FROM llm_calls WHERE output_tokens_partial")}
    assert flagged == expected
    assert len(expected) > len(by_message) / 2, "most calls of the real session are partial"
    # The output estimate, fitted on one half of the calls with their whole output, comes within
    # 15% of the other half's reported total (character counts are proportional to the estimates:
    # the held-out estimate is the half's estimates rescaled by the other half's fit).
    con = store.connect(db_path)
    try:
        con.register("_estimates", estimate_tokens(con))
        whole = con.execute(
            """SELECT e.output_tokens, c.output_tokens FROM llm_calls c JOIN _estimates e USING (call_id)
               WHERE NOT c.output_tokens_partial AND c.model = 'claude-opus-4-6' ORDER BY call_id"""
        ).fetchall()
    finally:
        con.close()
    # Fitted on all of them, the estimates add up to what they reported (the input's characters
    # per token, 2.6 here against 2.9 for output, would make it 8% more).
    assert sum(e for e, _ in whole) == pytest.approx(sum(t for _, t in whole), rel=0.01)
    halves = whole[::2], whole[1::2]
    for fit, held_out in (halves, halves[::-1]):
        scale = sum(t for _, t in fit) / sum(e for e, _ in fit)
        ratio = sum(e for e, _ in held_out) * scale / sum(t for _, t in held_out)
        assert 0.85 < ratio < 1.15, ratio


def test_real_llm_call_times_and_tool_durations_come_from_line_timestamps(shared_data, runner, db_path):
    session = shared_data / "claude-code" / f"{SESSION}.jsonl"
    ingest(runner, db_path, session)
    lines = raw_lines(session)
    by_uuid = {line["uuid"]: line for line in lines if "uuid" in line}
    first_id = next(line["message"]["id"] for line in lines if line["type"] == "assistant")
    parts = [line for line in lines if line["type"] == "assistant" and line["message"]["id"] == first_id]
    sent = datetime.fromisoformat(by_uuid[parts[0]["parentUuid"]]["timestamp"])
    last = max(datetime.fromisoformat(p["timestamp"]) for p in parts)
    [(started, ended, duration)] = query(
        db_path, "SELECT started_at, ended_at, duration_ms FROM llm_calls WHERE call_id = ?", [first_id]
    )
    assert (started, ended) == (sent, last)
    assert duration == (last - sent).total_seconds() * 1000
    uses = {
        b["id"]: line["timestamp"]
        for line in lines
        if line["type"] == "assistant"
        for b in line["message"]["content"]
        if b["type"] == "tool_use"
    }
    results = {
        b["tool_use_id"]: (line["timestamp"], b.get("is_error", False))
        for line in lines
        if line["type"] == "user" and isinstance(line["message"]["content"], list)
        for b in line["message"]["content"]
        if b.get("type") == "tool_result"
    }
    stored = query(db_path, "SELECT tool_call_id, started_at, ended_at, is_error, call_id FROM tool_calls")
    assert len(stored) == len(uses)
    for tool_id, started, ended, is_error, _ in stored:
        assert started == datetime.fromisoformat(uses[tool_id])
        assert ended == datetime.fromisoformat(results[tool_id][0])
        assert is_error == results[tool_id][1]
    assert sum(1 for _, _, _, is_error, _ in stored if is_error) == sum(e for _, e in results.values()) > 0
    # Parallel tool_use blocks of one message are one turn: they share the LLM call.
    per_message = Counter(
        line["message"]["id"]
        for line in lines
        if line["type"] == "assistant"
        for b in line["message"]["content"]
        if b["type"] == "tool_use"
    )
    assert Counter(call_id for *_, call_id in stored) == per_message


def test_real_subagent_is_linked_to_the_task_call_and_compaction_is_marked(shared_data, runner, db_path):
    folder = shared_data / "claude-code"
    ingest(runner, db_path, folder)
    parent_lines = raw_lines(folder / f"{SESSION}.jsonl")
    task_ids = {
        line["data"]["agentId"]: line["parentToolUseID"]
        for line in parent_lines
        if line["type"] == "progress" and line["data"].get("type") == "agent_progress"
    }
    rows = {
        trace_id: (parent, json.loads(attributes))
        for trace_id, parent, attributes in query(
            db_path, "SELECT trace_id, parent_trace_id, attributes FROM traces"
        )
    }
    for path in (folder / SESSION / "subagents").glob("agent-*.jsonl"):
        agent_id = raw_lines(path)[0]["agentId"]
        parent, attributes = rows[f"{SESSION}/agent-{agent_id}"]
        assert parent == SESSION
        assert attributes["agent_id"] == agent_id
        if path.name.startswith("agent-acompact-"):
            assert attributes["kind"] == "compaction"
            assert "parent_tool_call_id" not in attributes
        else:
            assert attributes["kind"] == "subagent"
            assert attributes["parent_tool_call_id"] == task_ids[agent_id]
            [(name,)] = query(
                db_path,
                "SELECT name FROM tool_calls WHERE trace_id = ? AND tool_call_id = ?",
                [SESSION, task_ids[agent_id]],
            )
            assert name in ("Task", "Agent")
    session_attributes = rows[SESSION][1]
    assert set(session_attributes["subagents"]) == set(task_ids)


def test_real_subagent_ingested_before_its_session_still_resolves(shared_data, runner, db_path):
    folder = shared_data / "claude-code"
    ingest(runner, db_path, folder / SESSION / "subagents")
    ingest(runner, db_path, folder / f"{SESSION}.jsonl")
    orphans = query(
        db_path,
        """SELECT c.trace_id FROM traces c LEFT JOIN traces p ON p.trace_id = c.parent_trace_id
           WHERE c.parent_trace_id IS NOT NULL AND p.trace_id IS NULL""",
    )
    assert orphans == []
    [(children,)] = query(db_path, "SELECT count(*) FROM traces WHERE parent_trace_id = ?", [SESSION])
    assert children == 2


def test_split_message_is_one_call_with_usage_once_and_parallel_tools(runner, db_path):
    path = FIXTURES / "parallel_session.jsonl"
    report = ingest(runner, db_path, path)
    assert report["files"][0]["format"] == "claude-code"
    calls = query(
        db_path,
        """SELECT call_id, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
                  started_at, ended_at FROM llm_calls ORDER BY seq""",
    )
    # msg_A is four lines; its usage (3 + 5000 read + 1000 written, final output 120) counts once.
    assert [(c[0], c[1], c[2], c[3], c[4]) for c in calls] == [
        ("msg_A", 6003, 5000, 1000, 120),
        ("msg_B", 6304, 6003, 300, 41),
    ]
    # msg_A went out when the user's line was written and ended with its last block's line.
    assert calls[0][5].isoformat() == "2026-03-02T10:00:01+00:00"
    assert calls[0][6].isoformat() == "2026-03-02T10:00:04.400000+00:00"
    tools = query(
        db_path,
        "SELECT tool_call_id, name, call_id, is_error, duration_ms, result FROM tool_calls ORDER BY seq",
    )
    assert [(t[0], t[1], t[2], t[3], t[4]) for t in tools] == [
        ("toolu_X", "Bash", "msg_A", True, 2000.0),
        ("toolu_Y", "Read", "msg_A", False, 500.0),
    ]
    assert tools[0][5].startswith("Exit code 1")
    messages = query(db_path, "SELECT role, tool_calls, tool_call_id, reasoning FROM messages ORDER BY seq")
    assert [m[0] for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    assert [c["id"] for c in json.loads(messages[1][1])] == ["toolu_X", "toolu_Y"]
    assert messages[1][3] == "The two lookups are independent."
    assert {messages[2][2], messages[3][2]} == {"toolu_X", "toolu_Y"}
    [(skipped, ingested)] = query(db_path, "SELECT skipped_by_kind, ingested FROM sources")
    assert json.loads(skipped) == {
        "file-history-snapshot": 1,
        "progress": 2,
        "queue-operation": 1,
        "system": 1,
        "assistant-synthetic": 1,
    }
    assert ingested == 9


def opening_usage_only(lines: list[dict]) -> list[dict]:
    """The lines with msg_A's final usage replaced by the usage its stream opened with, as Claude
    Code leaves it for most calls of the real session (no stop_reason, no `iterations`)."""
    opening = next(line for line in lines if line.get("uuid") == "a-1")["message"]["usage"]
    for line in lines:
        if line.get("uuid") == "a-4":
            line["message"]["usage"] = dict(opening)
    return lines


def analyzed(runner, tmp_path: Path, lines: list[dict], name: str) -> dict:
    """`traceforge analyze` of `lines` written as one session file: its text output, the stored
    calls, the replay's requests, the profile and the workload row."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "session.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    db, out = tmp_path / f"{name}.duckdb", tmp_path / f"{name}-out"
    result = runner.invoke(cli, ["analyze", str(folder), "--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    con = store.connect(db)
    try:
        calls = con.execute(
            "SELECT call_id, output_tokens, output_tokens_partial FROM llm_calls ORDER BY seq"
        ).fetchall()
        [workload] = con.execute(
            "SELECT output_tokens, calls_output_partial, cost_priced_usd, cost_estimated_usd FROM workloads"
        ).fetchall()
        [demand] = con.execute("SELECT output_tokens, calls_estimated FROM inference_profile").fetchall()
    finally:
        con.close()
    replay = [json.loads(text) for text in (out / "replay.jsonl").read_text().splitlines()]
    report = (out / "report.html").read_text()
    profile = json.loads((out / "profile.json").read_text())
    return {
        "db": db,
        "output": result.output,
        "report": report,
        "calls": calls,
        "replay": replay,
        "profile": profile,
        "workload": workload,
        "demand": demand,
    }


def test_a_call_logged_with_only_its_opening_usage_has_its_output_estimated(runner, tmp_path):
    session = FIXTURES / "parallel_session.jsonl"
    whole = analyzed(runner, tmp_path, raw_lines(session), "whole")
    cut = analyzed(runner, tmp_path, opening_usage_only(raw_lines(session)), "cut")
    # As logged: msg_A's final usage (120 output tokens) is there in one file and not in the other.
    assert whole["calls"] == [("msg_A", 120, False), ("msg_B", 41, False)]
    assert cut["calls"] == [("msg_A", 2, True), ("msg_B", 41, False)]
    assert "1 LLM calls logged only a lower bound" in cut["output"]
    assert "1 calls only a lower bound" in cut["report"]
    assert "lower bound" not in whole["output"] and "lower bound" not in whole["report"]
    # The replay decodes msg_A's estimate, not the 2 tokens logged; msg_B keeps its reported 41.
    assert [r["output_length"] for r in whole["replay"]] == [120, 41]
    estimate, reported_b = (r["output_length"] for r in cut["replay"])
    assert reported_b == 41 and estimate > 2
    # The output ratio is fitted on msg_B alone (msg_A's count is partial) and estimates msg_A.
    fit = cut["profile"]["estimation"]["chars_per_token"]["claude-opus-4-6"]
    assert (fit["output_method"], fit["output_calibrated_on_calls"]) == ("ratio", 1)
    assert cut["profile"]["estimation"]["counts"]["output_estimated"] == 1
    # Decode demand counts the estimate and says one call was estimated.
    assert whole["demand"] == (161, 0)
    assert cut["demand"] == (41 + estimate, 1)
    # Spend: the reported tokens priced as before, the estimated extra output apart.
    price = load_prices().lookup("claude-opus-4-6")
    tokens, partial, priced, estimated = cut["workload"]
    assert (tokens, partial) == (43, 1)  # the table keeps the reported counts
    assert priced == pytest.approx(whole["workload"][2] - (120 - 2) * price.output / 1e6)
    assert estimated == pytest.approx((estimate - 2) * price.output / 1e6)
    assert whole["workload"][1:] == (0, whole["workload"][2], 0.0)
    # Spend computed on its own (not by the profile) estimates the partial call the same way.
    con = store.connect(cut["db"])
    try:
        alone = compute_workloads(con).totals
    finally:
        con.close()
    assert alone["calls_output_partial"] == 1
    assert alone["cost_estimated_usd"] == pytest.approx(estimated)
    # The profile's own report names the estimated output and why.
    result = runner.invoke(cli, ["profile", "--db", str(cut["db"]), "--out", str(tmp_path / "profile")])
    assert result.exit_code == 0, result.output
    assert "1 calls' output tokens (no usage reported, or only a lower bound of the output)" in result.output


def test_rewound_conversation_keeps_the_last_branch_and_the_abandoned_one_as_a_child(runner, db_path):
    ingest(runner, db_path, FIXTURES / "branched_session.jsonl")
    session = "22222222-2222-4222-8222-222222222222"
    traces = query(db_path, "SELECT trace_id, parent_trace_id, attributes FROM traces ORDER BY trace_id")
    assert [(t[0], t[1]) for t in traces] == [(session, None), (f"{session}/branch-u-2", session)]
    assert json.loads(traces[1][2])["forked_from_uuid"] == "a-1"
    calls = query(db_path, "SELECT trace_id, call_id FROM llm_calls ORDER BY trace_id, seq")
    assert calls == [
        (session, "msg_1"),
        (session, "msg_4"),
        (session, "msg_5"),
        (f"{session}/branch-u-2", "msg_2"),
        (f"{session}/branch-u-2", "msg_3"),
    ]
    contents = [
        c
        for (c,) in query(db_path, "SELECT content FROM messages WHERE trace_id = ? ORDER BY seq", [session])
    ]
    assert "Actually it is in helpers.py." in contents
    assert "utils.py" not in contents and "hmm, wait" not in contents
    [(skipped,)] = query(db_path, "SELECT skipped_by_kind FROM sources")
    assert json.loads(skipped) == {"user-off-branch": 1}  # the prompt that was never answered


def test_subagent_links_to_task_call_in_the_same_run(runner, db_path):
    ingest(runner, db_path, FIXTURES / "linked")
    [(parent, attributes)] = query(
        db_path,
        "SELECT parent_trace_id, attributes FROM traces WHERE trace_id = ?",
        [f"{LINKED}/agent-a5b6c7d"],
    )
    attributes = json.loads(attributes)
    assert parent == LINKED
    assert (attributes["kind"], attributes["parent_tool_call_id"]) == ("subagent", "toolu_T")
    assert attributes["parent_link"] == "tool_result"
    [(models,)] = query(
        db_path, "SELECT list(DISTINCT model) FROM llm_calls WHERE trace_id = ?", [f"{LINKED}/agent-a5b6c7d"]
    )
    assert models == ["claude-haiku-4-5"]
    [(subagents,)] = query(db_path, "SELECT attributes->'subagents' FROM traces WHERE trace_id = ?", [LINKED])
    assert json.loads(subagents)["a5b6c7d"]["trace_id"] == f"{LINKED}/agent-a5b6c7d"


def test_subagent_without_its_session_file_links_once_the_session_arrives(runner, db_path, tmp_path):
    alone = tmp_path / "project" / LINKED / "subagents"
    alone.mkdir(parents=True)
    child = shutil.copy(FIXTURES / "linked" / LINKED / "subagents" / "agent-a5b6c7d.jsonl", alone)
    ingest(runner, db_path, Path(child))
    [(parent, attributes)] = query(db_path, "SELECT parent_trace_id, attributes FROM traces")
    assert parent == LINKED
    assert "parent_tool_call_id" not in json.loads(attributes)
    assert json.loads(attributes)["parent_link"].startswith("not found")
    ingest(runner, db_path, FIXTURES / "linked" / f"{LINKED}.jsonl")
    [(tool_call_id, name)] = query(
        db_path,
        """SELECT tc.tool_call_id, tc.name
           FROM traces c JOIN traces p ON p.trace_id = c.parent_trace_id
           JOIN tool_calls tc ON tc.trace_id = p.trace_id
             AND tc.tool_call_id
               = (json_extract(p.attributes->'subagents', c.attributes->>'agent_id')->>'tool_call_id')
           WHERE c.trace_id = ?""",
        [f"{LINKED}/agent-a5b6c7d"],
    )
    assert (tool_call_id, name) == ("toolu_T", "Task")


def test_parent_in_another_file_of_the_batch_resolves_to_its_final_id(runner, db_path, tmp_path):
    # An older copy of the session holds the id first, so this run's session gets a suffixed id:
    # its subagent, in another file of the same batch, must point at that one.
    older = tmp_path / f"{LINKED}.jsonl"
    older.write_text("".join((FIXTURES / "linked" / f"{LINKED}.jsonl").read_text().splitlines(True)[:2]))
    ingest(runner, db_path, older)
    ingest(runner, db_path, FIXTURES / "linked")
    [(parent_id,)] = query(
        db_path,
        "SELECT trace_id FROM traces WHERE source_path = ?",
        [str(FIXTURES / "linked" / f"{LINKED}.jsonl")],
    )
    assert parent_id != LINKED and parent_id.startswith(LINKED)
    [(child_parent,)] = query(
        db_path, "SELECT parent_trace_id FROM traces WHERE trace_id = ?", [f"{LINKED}/agent-a5b6c7d"]
    )
    assert child_parent == parent_id


def test_bad_lines_are_rejected_with_their_line_and_the_rest_kept(runner, db_path, tmp_path):
    lines = (FIXTURES / "parallel_session.jsonl").read_text().splitlines()
    bad = tmp_path / "session.jsonl"
    bad.write_text(
        "\n".join(
            [*lines[:3], '{"no_type": true}', '{"type": "user", "uuid": "z"}', "{truncated", *lines[3:]]
        )
        + "\n"
    )
    ingest(runner, db_path, bad)
    rejects = query(db_path, "SELECT line, error FROM rejects ORDER BY line")
    assert [line for line, _ in rejects] == [4, 5, 6]
    assert "string `type`" in rejects[0][1] and "without a `message`" in rejects[1][1]
    [(calls,)] = query(db_path, "SELECT count(*) FROM llm_calls")
    assert calls == 2


def record(value: dict) -> Record:
    return Record(1, value, json.dumps(value))


def _compacted_requests(db_path: Path, session: str, block_size: int):
    """The session's requests split at its (first) compaction, and the request log (its fit and
    counts)."""
    con = store.connect(db_path)
    try:
        assign_workloads(con)
        [(attributes,)] = con.execute(
            "SELECT attributes FROM traces WHERE trace_id = ?", [session]
        ).fetchall()
        boundary = json.loads(attributes)["compactions"][0]["message_seq"]
        first_seq = dict(
            con.execute(
                "SELECT call_id, min(seq) FROM messages "
                "WHERE trace_id = ? AND role = 'assistant' GROUP BY call_id",
                [session],
            ).fetchall()
        )
        log = load_requests(con, block_size=block_size)
    finally:
        con.close()
    mine = [r for r in log.requests if r.session_id == session]
    before = [r for r in mine if first_seq[r.call_id] < boundary]
    after = [r for r in mine if first_seq[r.call_id] > boundary]
    return before, after, log


COMPACTED = "55555555-5555-4555-8555-555555555555"  # the session of compacted_session.jsonl


def _input_tokens(usage: dict) -> int:
    """A Claude Code call's whole input: uncached, written to the cache and read from it."""
    return sum(usage[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))


def _with_hidden_reminders(hidden: int) -> tuple[list[dict], list[dict]]:
    """The compacted fixture's lines and its assistant lines, with `hidden` tokens more in the
    input of the calls before the compaction but the first (a reminder the client added that the
    log does not hold)."""
    lines = raw_lines(FIXTURES / "compacted_session.jsonl")
    calls = [line for line in lines if line["type"] == "assistant"]
    for call in calls[1:4]:
        call["message"]["usage"]["cache_read_input_tokens"] += hidden
    return lines, calls


def _shared_prefix(a, b) -> int:
    return next(
        (k for k, (x, y) in enumerate(zip(a.hash_ids, b.hash_ids, strict=False)) if x != y),
        min(len(a.hash_ids), len(b.hash_ids)),
    )


def test_a_call_after_a_compaction_is_rendered_from_the_summary_on(runner, db_path):
    """The fixture's session reports input tokens = 8,300 (system prompt and tools, not logged) +
    its rendered conversation's characters / 3. After the compaction the model saw only the summary
    and what followed: rendered so, the calls fit that line exactly, and their blocks share with
    the calls before only the overhead's."""
    ingest(runner, db_path, FIXTURES / "compacted_session.jsonl")
    block = 16
    before, after, log = _compacted_requests(db_path, COMPACTED, block)
    assert (len(before), len(after)) == (4, 3)
    assert log.counts["padded"] == 0, "every call's input is its rendered text and the overhead"
    fit = log.chars_per_token["claude-opus-4-6"]
    assert fit["method"] == "fixed-effects"
    assert fit["chars_per_token"] == pytest.approx(3.0, rel=0.01)
    [overhead] = fit["overhead_tokens"].values()
    assert overhead == pytest.approx(8300, abs=5)
    overhead_blocks = overhead // block
    for late in after:
        assert all(_shared_prefix(late, early) <= overhead_blocks for early in before)
    # the calls after the compaction continue one context: each holds the one before it
    for previous, late in itertools.pairwise(after):
        assert _shared_prefix(previous, late) > overhead_blocks


def test_real_session_after_its_compaction_shares_only_the_overhead_with_the_history(
    shared_data, runner, db_path
):
    ingest(runner, db_path, shared_data / "claude-code" / f"{SESSION}.jsonl")
    before, after, log = _compacted_requests(db_path, SESSION, 512)
    assert len(before) > 10 and len(after) > 10
    fit = log.chars_per_token["claude-opus-4-6"]
    # rendering the history the model no longer saw made the fit fall back to the plain ratio
    assert fit["method"] == "fixed-effects"
    assert 1.0 < fit["chars_per_token"] < 10.0
    [overhead] = fit["overhead_tokens"].values()
    overhead_blocks = overhead // 512
    for late in after:
        assert max(_shared_prefix(late, early) for early in before) <= overhead_blocks


@pytest.mark.parametrize(
    ("hidden", "method"),
    # 3,000 tokens bend the line past 10 characters per token, and the plain ratio of the sums,
    # the system prompt's 8,300 tokens in it, is under 1: the text counts at 4 characters per token
    [(320, "fixed-effects"), (3000, "default-slope")],
)
def test_tokens_a_log_leaves_out_are_reused_by_the_calls_after_them(
    runner, db_path, tmp_path, hidden, method
):
    """The compacted fixture with `hidden` tokens more in every call's input from its second on (a
    reminder the client added that the log does not hold): the fit is as `method` says, the calls
    it falls short on are counted, and the calls after them re-send those tokens, so each call's
    blocks start with all of the previous call's full blocks, and an unlimited cache misses only
    about what each call added."""
    lines, calls = _with_hidden_reminders(hidden)
    path = tmp_path / "hidden_reminder.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ingest(runner, db_path, path)
    block = 16
    before, _, log = _compacted_requests(db_path, COMPACTED, block)
    fit = log.chars_per_token["claude-opus-4-6"]
    assert fit["method"] == method
    assert 1.0 <= fit["chars_per_token"] <= 10.0
    assert log.counts["padded"] > 0
    assert [r.input_length for r in before][1:] == [_input_tokens(c["message"]["usage"]) for c in calls[1:4]]
    hits = simulate(before, block_size=block).per_request_hit_tokens
    for (previous, call), hit in zip(itertools.pairwise(before), hits[1:], strict=True):
        assert _shared_prefix(previous, call) >= len(previous.hash_ids) - 1
        assert call.input_length - hit <= call.input_length - previous.input_length + 2 * block


def test_a_call_without_usage_in_a_log_hiding_most_of_its_input_is_estimated_near_its_size(
    runner, db_path, tmp_path
):
    """The compacted fixture with 3,000 tokens the log does not show in each call's input from its
    second on, and one call's usage gone: its estimate is the calls' overhead, its text at 4
    characters per token and the hidden tokens before it, within 1% of what it had (the plain
    ratio, 0.11 characters per token, made it 3x that), and priced as that."""
    lines, calls = _with_hidden_reminders(3000)
    had = _input_tokens(calls[3]["message"].pop("usage"))
    path = tmp_path / "no_usage.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ingest(runner, db_path, path)
    before, _, log = _compacted_requests(db_path, COMPACTED, 16)
    assert log.chars_per_token["claude-opus-4-6"]["method"] == "default-slope"
    estimated = [r for r in before if r.input_estimated]
    assert [r.call_id for r in estimated] == [calls[3]["message"]["id"]]
    assert estimated[0].input_length == pytest.approx(had, rel=0.01)
    # its price is of the same estimate
    con = store.connect(db_path)
    try:
        priced = dict(estimate_tokens(con).select("call_id", "input_tokens").iter_rows())
    finally:
        con.close()
    assert priced[estimated[0].call_id] == estimated[0].input_length


def test_real_session_misses_about_what_the_provider_reported_missing(shared_data, runner, db_path):
    """The real session's log leaves out part of what Claude Code sent (reported input grows faster
    than the rendered text on a quarter of its calls): with those tokens kept in the chain for the
    calls after them, an unlimited cache's hit ratio is within 2 points of the provider's, and the
    median call's uncached input is near the provider's (6.2k tokens against 472 when each
    call's shortfall counted as never reused)."""
    ingest(runner, db_path, *real_files(shared_data))
    con = store.connect(db_path)
    try:
        assign_workloads(con)
        log = load_requests(con)
    finally:
        con.close()
    assert log.counts["padded"] > 20, "the log falls short on many calls: the test would not show reuse"
    comparison = provider_comparison(log.requests)
    assert comparison["simulated_unlimited_hit_ratio"] == pytest.approx(
        comparison["reported_hit_ratio"], abs=0.02
    )
    hits = simulate(log.requests).per_request_hit_tokens
    reported = [
        (r, hit) for r, hit in zip(log.requests, hits, strict=True) if r.cache_read_tokens is not None
    ]
    simulated_miss = statistics.median(r.input_length - hit for r, hit in reported)
    provider_miss = statistics.median(r.input_length - r.cache_read_tokens for r, _ in reported)
    assert provider_miss / 2 <= simulated_miss <= provider_miss * 2


@pytest.mark.parametrize("name", ["parallel_session.jsonl", "branched_session.jsonl"])
def test_sniffing_claims_claude_code_and_leaves_the_others(name):
    sample = [record(v) for v in raw_lines(FIXTURES / name)]
    assert claude_code.sniff(sample) >= 0.5
    assert anthropic_messages.sniff(sample) < 0.5
    assert openai_chat.sniff(sample) < 0.5


def test_sniffing_leaves_anthropic_messages_logs_alone():
    log = {
        "request": {
            "model": "claude-sonnet-4-5",
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"user_id": "u"},
        },
        "response": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 2},
        },
    }
    transcript = {"session_id": "s", "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}
    assert claude_code.sniff([record(log), record(transcript)]) < 0.5
    assert anthropic_messages.sniff([record(log)]) >= 0.5
