"""The parallel rewrite: a property test of its invariants on random conversations and DAGs, and
`traceforge export parallel` loaded back and compared with the store and its `tool_deps`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets import load_dataset
from export_helpers import (
    insert_deps,
    store_messages,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from traceforge import store
from traceforge.cli import cli
from traceforge.export.parallel import DependencyError, check, rewrite
from traceforge.export.source import message


def call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "tool", "arguments": {"n": call_id}}}


@st.composite
def conversations(draw):
    """A conversation of 1-3 user turns, each followed by calls laid out in recorded turns (calls
    share a turn only when independent), their results and a final answer; and the DAG."""
    messages = [message("system", "sys")]
    deps = []
    for segment in range(draw(st.integers(1, 3))):
        messages.append(message("user", f"question {segment}"))
        n = draw(st.integers(1, 7))
        ids = [f"s{segment}c{i}" for i in range(n)]
        edges = {(ids[i], ids[j]) for i in range(n) for j in range(i + 1, n) if draw(st.booleans())}
        deps.extend(edges)
        turns: list[list[str]] = []
        for call_id in ids:
            independent = turns and not any((other, call_id) in edges for other in turns[-1])
            if independent and draw(st.booleans()):
                turns[-1].append(call_id)
            else:
                turns.append([call_id])
        for number, turn in enumerate(turns):
            text = draw(st.sampled_from([None, f"thinking before turn {number}"]))
            messages.append(message("assistant", text, tool_calls=[call(i) for i in turn]))
            messages.extend(message("tool", f"result of {i}", tool_call_id=i, name="tool") for i in turn)
        messages.append(message("assistant", f"answer {segment}"))
    return messages, deps


def depth(ids: list[str], deps: list[tuple[str, str]]) -> int:
    """Longest path, counted in calls, of the DAG restricted to `ids` (ids are in recorded order)."""
    longest = {}
    for call_id in ids:
        longest[call_id] = 1 + max((longest[s] for s, d in deps if d == call_id and s in longest), default=0)
    return max(longest.values())


def by_segment(messages: list[dict]) -> list[list[dict]]:
    segments = []
    for m in messages:
        if m["role"] == "user":
            segments.append([])
        elif segments:
            segments[-1].append(m)
    return segments


@settings(max_examples=300, deadline=None)
@given(conversations())
def test_rewrite_keeps_every_call_and_result_once_and_never_breaks_a_dependency(case):
    original, deps = case
    result = rewrite(original, deps)
    new = result.messages
    check(original, new, deps)  # the exporter's own check agrees ...

    # ... and the invariants, checked here independently:
    calls = [c for m in new for c in m["tool_calls"] or []]
    assert sorted(c["id"] for c in calls) == sorted(c["id"] for m in original for c in m["tool_calls"] or [])
    assert len({c["id"] for c in calls}) == len(calls)
    assert all(c == call(c["id"]) for c in calls)
    results = [m for m in new if m["role"] == "tool"]
    assert sorted((m["tool_call_id"], m["content"]) for m in results) == sorted(
        (m["tool_call_id"], m["content"]) for m in original if m["role"] == "tool"
    )
    turn_of = {c["id"]: i for i, m in enumerate(new) for c in m["tool_calls"] or []}
    for src, dst in deps:
        assert turn_of[src] < turn_of[dst], (src, dst)
    for index, m in enumerate(new):
        if m["tool_calls"]:
            ids = [c["id"] for c in m["tool_calls"]]
            assert [r["tool_call_id"] for r in new[index + 1 : index + 1 + len(ids)]] == ids
    # nothing crosses a user message; final answers unchanged; each segment as short as its DAG allows
    assert [m for m in new if m["role"] in ("system", "user")] == [
        m for m in original if m["role"] in ("system", "user")
    ]
    for old_segment, new_segment in zip(by_segment(original), by_segment(new), strict=True):
        ids = [c["id"] for m in old_segment for c in m["tool_calls"] or []]
        assert sorted(c["id"] for m in new_segment for c in m["tool_calls"] or []) == sorted(ids)
        assert new_segment[-1] == old_segment[-1]
        old_turns = sum(1 for m in old_segment if m["tool_calls"])
        new_turns = sum(1 for m in new_segment if m["tool_calls"])
        assert new_turns == min(old_turns, depth(ids, deps))
    assert result.turns_saved == sum(1 for m in original if m["tool_calls"]) - sum(
        1 for m in new if m["tool_calls"]
    )


def test_text_is_kept_only_where_it_read_nothing_issued_later():
    messages = [
        message("user", "q"),
        message("assistant", "I will look up a.", tool_calls=[call("a")]),
        message("tool", "A", tool_call_id="a", name="tool"),
        message("assistant", "a said A; now b.", tool_calls=[call("b")]),
        message("tool", "B", tool_call_id="b", name="tool"),
        message("assistant", "done"),
    ]
    result = rewrite(messages, [])
    assert result.messages[1]["content"] == "I will look up a."
    assert [c["id"] for c in result.messages[1]["tool_calls"]] == ["a", "b"]
    assert "a said A; now b." not in json.dumps(result.messages)
    assert result.thoughts_dropped == 1


@pytest.mark.parametrize(
    ("deps", "why"),
    [
        ([("b", "a")], "did not come before"),
        ([("a", "zzz")], "does not have"),
    ],
)
def test_contradicting_dependencies_are_refused(deps, why):
    messages = [
        message("user", "q"),
        message("assistant", None, tool_calls=[call("a")]),
        message("tool", "A", tool_call_id="a", name="tool"),
        message("assistant", None, tool_calls=[call("b")]),
        message("tool", "B", tool_call_id="b", name="tool"),
    ]
    with pytest.raises(DependencyError, match=why):
        rewrite(messages, deps)


def export_parallel(runner, db: Path, out: Path, *extra: str) -> dict:
    result = runner.invoke(
        cli,
        ["export", "parallel", "--db", str(db), "--out", str(out), "--split", "train=1", "--json", *extra],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_parallel_rows_against_the_store(runner, db, tmp_path):
    out = tmp_path / "data"
    report = export_parallel(runner, db, out, "--no-redact")
    rows = {
        r["trace_id"]: r
        for r in load_dataset(str(out), "parallel", split="train", cache_dir=str(tmp_path / "c"))
    }
    con = store.connect(db, read_only=True)
    deps = con.execute("SELECT trace_id, src_tool_call_id, dst_tool_call_id FROM tool_deps").fetchall()
    results = dict(con.execute("SELECT tool_call_id, result FROM tool_calls").fetchall())
    analysed = {row[0] for row in con.execute("SELECT trace_id FROM trace_dag").fetchall()}
    saved_total = 0
    for trace_id, row in rows.items():
        recorded = store_messages(con, trace_id)
        new = row["messages"]
        calls = [c["id"] for m in new for c in m["tool_calls"] or []]
        assert sorted(calls) == sorted(c["id"] for m in recorded for c in m["tool_calls"] or [])
        assert len(set(calls)) == len(calls)
        for m in new:
            if m["role"] == "tool":
                assert m["content"] == results[m["tool_call_id"]]  # recorded results reused unchanged
        turn_of = {c["id"]: i for i, m in enumerate(new) for c in m["tool_calls"] or []}
        for _, src, dst in (d for d in deps if d[0] == trace_id):
            assert turn_of[src] < turn_of[dst]
        assert new[-1] == {**new[-1], "role": "assistant", "content": recorded[-1]["content"]}
        original_turns = sum(1 for m in recorded if m["tool_calls"])
        parallel_turns = sum(1 for m in new if m["tool_calls"])
        assert (row["original_turns"], row["parallel_turns"]) == (original_turns, parallel_turns)
        assert row["turns_saved"] == original_turns - parallel_turns > 0
        saved_total += row["turns_saved"]
    # trip-weather: Paris and Rome together, then the email that needs both
    weather = rows["trip-weather"]["messages"]
    assert [[c["id"] for c in m["tool_calls"]] for m in weather if m["tool_calls"]] == [
        ["call_w1", "call_w2"],
        ["call_w3"],
    ]
    assert weather[2]["content"] == "Checking Paris first."
    assert rows["trip-weather"]["thoughts_dropped"] == 1
    # what was left out, counted: traces with at most a chain of calls, and the unanalysed one
    assert set(rows) == {"trip-weather", "trip-two-turns", "stock-anthropic"}
    assert report["left_out"] == {"nothing_to_gain": 2, "not_analysed": 1}
    assert "trip-not-analysed" not in analysed
    assert report["turns"]["saved"] == saved_total
    con.close()


def test_inconsistent_dependencies_leave_the_trace_out(runner, db, tmp_path):
    con = store.connect(db)
    insert_deps(con, [("trip-two-turns", "call_t3", "call_t1", "data")])  # points backwards
    con.close()
    report = export_parallel(runner, db, tmp_path / "data")
    assert report["left_out"]["inconsistent_deps"] == 1
    rows = load_dataset(str(tmp_path / "data"), "parallel", split="train", cache_dir=str(tmp_path / "c"))
    assert "trip-two-turns" not in rows["trace_id"]


def test_openai_parallel_lines(runner, db, tmp_path):
    out = tmp_path / "data"
    export_parallel(runner, db, out, "--format", "openai")
    lines = [json.loads(line) for line in (out / "parallel-openai" / "train.jsonl").read_text().splitlines()]
    assert len(lines) == 3
    assert all(line["parallel_tool_calls"] is True for line in lines)
    widest = max(len(m.get("tool_calls", [])) for line in lines for m in line["messages"])
    assert widest == 3  # Oslo, Bergen and Tromso in one turn
    for line in lines:
        for m in line["messages"]:
            for c in m.get("tool_calls", []):
                assert isinstance(json.loads(c["function"]["arguments"]), dict)


@st.composite
def messy_transcripts(draw):
    """OpenAI transcripts as agents leave them: calls whose result never came, results for calls that
    do not exist, a result given twice, results out of call order, text between calls, several
    user turns; calls read values from earlier results (real dependencies) or not."""
    messages: list[dict] = [{"role": "system", "content": "You are an agent."}]
    brought: list[str] = []
    number = 0
    for segment in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": f"request {segment}: handle ORD-{segment}77"})
        for _ in range(draw(st.integers(1, 4))):
            calls, results = [], []
            for _ in range(draw(st.integers(1, 3))):
                call_id = f"call_{number}"
                value = (
                    draw(st.sampled_from(brought)) if brought and draw(st.booleans()) else f"ORD-{segment}77"
                )
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": draw(st.sampled_from(["get_order", "lookup", "search"])),
                            "arguments": json.dumps({"order_id": value}),
                        },
                    }
                )
                fate = draw(st.sampled_from(["answered"] * 15 + ["missing", "twice", "orphan"]))
                result = f"ref W-{number}{draw(st.integers(10000, 99999))}"
                brought.append(result.split()[-1])
                if fate != "missing":
                    results.append({"role": "tool", "tool_call_id": call_id, "content": result})
                if fate == "twice":
                    results.append({"role": "tool", "tool_call_id": call_id, "content": result + " again"})
                if fate == "orphan":
                    results.append({"role": "tool", "tool_call_id": f"ghost_{number}", "content": "?"})
                number += 1
            if draw(st.booleans()):
                results.reverse()
            text = draw(st.sampled_from([None, "Let me look that up."]))
            messages.append({"role": "assistant", "content": text, "tool_calls": calls})
            messages.extend(results)
        messages.append({"role": "assistant", "content": f"answer {segment}"})
    return messages


@settings(max_examples=40, deadline=None)
@given(st.lists(messy_transcripts(), min_size=1, max_size=3))
def test_rewrites_of_messy_stored_traces_keep_every_call_and_result_once(transcripts):
    """From the store: ingest, infer the dependencies, rewrite. Each trace is either left out for a
    stated reason or rewritten keeping every call and result exactly once and every edge forward."""
    from traceforge.analysis.dag import analyze_dependencies
    from traceforge.export.parallel import load_deps, rewrite_conversation
    from traceforge.export.source import iter_trace_rows, trace_conversations
    from traceforge.ingest import openai_chat
    from traceforge.ingest.parallel import write_batch
    from traceforge.ingest.sources import Record
    from traceforge.ingest.writer import ParsedFile

    con = store.connect(":memory:")
    try:
        records = [Record(i + 1, {"messages": t}) for i, t in enumerate(transcripts)]
        result = openai_chat.parse(records, "x")
        write_batch(con, [ParsedFile("runs.jsonl", "0" * 64, 0, openai_chat.FORMAT, result)], set())
        analyze_dependencies(con)
        trace_ids = [row[0] for row in con.execute("SELECT trace_id FROM traces ORDER BY 1").fetchall()]
        deps, analysed = load_deps(con, trace_ids)
        conversations = [c for rows in iter_trace_rows(con, trace_ids) for c in trace_conversations(rows)]
    finally:
        con.close()
    for conversation in conversations:
        if conversation.problem:  # a call without a result, a result without a call: no training row
            continue
        edges = deps.get(conversation.trace_id, [])
        outcome = rewrite_conversation(conversation, edges, conversation.trace_id in analysed)
        if outcome.rewrite is None:
            assert outcome.left_out in ("nothing_to_gain", "not_analysed", "inconsistent_deps"), outcome
            continue
        old, new = conversation.messages, outcome.rewrite.messages
        assert sorted(c["id"] for m in new for c in m["tool_calls"] or []) == sorted(
            c["id"] for m in old for c in m["tool_calls"] or []
        )
        assert sorted((m["tool_call_id"], m["content"]) for m in new if m["role"] == "tool") == sorted(
            (m["tool_call_id"], m["content"]) for m in old if m["role"] == "tool"
        )
        turn_of = {c["id"]: i for i, m in enumerate(new) for c in m["tool_calls"] or []}
        assert all(turn_of[src] < turn_of[dst] for src, dst in edges)
        assert [m for m in new if m["role"] in ("system", "user")] == [
            m for m in old if m["role"] in ("system", "user")
        ]
