"""Claude Code sessions resumed with `claude --resume`: the new session file starts with a copy of
the conversation it resumes (same `message.id` and `requestId`), so every request of the copied part
is logged twice. The store marks the copies (`copy_of`) and counts each request once: a session cut
in two at a prompt and resumed must give what the whole session gives.

The resumed files are made the way Claude Code makes them: a `summary` line pointing at the last
line resumed, then every line of the session under the new session id, then what followed."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from resumed_sessions import CONTINUATION, FIXTURES, RESUMED, read_lines, resumed_copy, write_lines

from traceforge import store
from traceforge.cli import cli

SESSION = "4d5611e5-241a-462a-8d15-5122611a9569"


def message_ids(lines: list[dict]) -> set[str]:
    """The API responses a file logs (what a correct store counts once), from the raw lines."""
    return {
        line["message"]["id"]
        for line in lines
        if line.get("type") == "assistant" and line["message"].get("model") != "<synthetic>"
    }


def usage_from_raw(lines: list[dict]) -> tuple[int, int, int]:
    """(responses, input tokens, output tokens) with each response counted once, by the rules of
    docs/formats/claude-code.md: its usage from the line with the largest output count; input
    includes the cache reads and writes."""
    usages: dict[str, dict] = {}
    for line in lines:
        if line.get("type") == "assistant" and line["message"].get("model") != "<synthetic>":
            usage = line["message"]["usage"]
            kept = usages.setdefault(line["message"]["id"], usage)
            if usage["output_tokens"] > kept["output_tokens"]:
                usages[line["message"]["id"]] = usage
    inputs = sum(
        u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
        for u in usages.values()
    )
    return len(usages), inputs, sum(u["output_tokens"] for u in usages.values())


def analyze(runner, folder: Path, db: Path, out: Path) -> str:
    result = runner.invoke(cli, ["analyze", str(folder), "--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result.output


def query(db: Path, sql: str) -> list[tuple]:
    con = store.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def measures(db: Path, out: Path) -> dict[str, object]:
    """Every figure a user reads that a request counted twice would change."""
    return {
        "workloads": query(
            db,
            "SELECT sum(llm_calls), sum(input_tokens), sum(cache_read_tokens), sum(output_tokens), "
            "round(sum(cost_usd), 9), sum(calls_output_partial) FROM workloads",
        ),
        "profile": query(
            db,
            "SELECT model, llm_calls, input_tokens, uncached_input_tokens, output_tokens, calls_estimated "
            "FROM inference_profile ORDER BY ALL",
        ),
        "dag": query(
            db,
            "SELECT sum(tool_calls), sum(observed_turns), sum(min_turns), sum(turns_saved) FROM trace_dag",
        ),
        "trace_summary": query(
            db,
            "SELECT sum(llm_calls), sum(tool_calls), sum(input_tokens), sum(output_tokens) "
            "FROM v_trace_summary",
        ),
        "usage_view": query(
            db, "SELECT sum(llm_calls), sum(tool_calls), sum(input_tokens) FROM v_usage_by_workload_model"
        ),
        "replay_requests": len((out / "replay.jsonl").read_text().splitlines()),
        "summary_totals": {
            key: value
            for key, value in json.loads((out / "summary.json").read_text())["totals"].items()
            if key in ("llm_calls", "tool_calls", "input_tokens", "output_tokens")
        },
    }


def copies_by_trace(db: Path) -> dict[str, set[str]]:
    """Per trace, the message ids of its calls marked as copies."""
    found: dict[str, set[str]] = {}
    for trace_id, key in query(
        db, "SELECT trace_id, response_key FROM llm_calls WHERE copy_of IS NOT NULL ORDER BY ALL"
    ):
        found.setdefault(trace_id, set()).add(key.split("/")[0])
    return found


def test_a_real_session_resumed_at_a_prompt_counts_as_the_whole_session(shared_data, runner, tmp_path):
    lines = read_lines(shared_data / "claude-code" / f"{SESSION}.jsonl")
    prompts = [
        k
        for k, line in enumerate(lines)
        if line.get("type") == "user" and isinstance(line["message"].get("content"), str)
    ]
    cut = min(prompts[1:], key=lambda k: abs(k - len(lines) // 2))  # a prompt near the middle
    original, continuation = lines[:cut], lines[cut:]
    pair = tmp_path / "pair"
    write_lines(pair / f"{SESSION}.jsonl", original)
    write_lines(pair / f"{RESUMED}.jsonl", resumed_copy(original, continuation, RESUMED))
    write_lines(tmp_path / "whole" / f"{SESSION}.jsonl", lines)

    output = analyze(runner, pair, tmp_path / "pair.duckdb", tmp_path / "pair-out")
    analyze(runner, tmp_path / "whole", tmp_path / "whole.duckdb", tmp_path / "whole-out")

    copied = message_ids(original)
    assert len(copied) > 20 and message_ids(continuation) - copied, "both halves make calls of their own"
    # the resumed file's copies of the original's responses, and nothing else, are marked
    assert copies_by_trace(tmp_path / "pair.duckdb") == {RESUMED: copied}
    assert f"{len(copied)} LLM calls were logged again by resumed sessions" in output
    # spend, tokens, the profile, the replay and the dependency analysis: as if never cut in two
    assert measures(tmp_path / "pair.duckdb", tmp_path / "pair-out") == measures(
        tmp_path / "whole.duckdb", tmp_path / "whole-out"
    )
    # the resumed session's DAG holds only the calls it made itself
    [(tool_calls,)] = query(
        tmp_path / "pair.duckdb", f"SELECT tool_calls FROM trace_dag WHERE trace_id = '{RESUMED}'"
    )
    continuation_tools = {
        block["id"]
        for line in continuation
        if line.get("type") == "assistant"
        for block in line["message"]["content"]
        if block.get("type") == "tool_use"
    }
    assert tool_calls == len(continuation_tools)

    # The parallel-call rewrite: the original, copied whole, is exported in the resumed session,
    # whose copied part is re-laid by the original's dependencies: the whole session's rewrite.
    rewrites = {}
    for name in ("pair", "whole"):
        out = tmp_path / f"{name}-parallel"
        result = runner.invoke(
            cli, ["export", "parallel", "--db", str(tmp_path / f"{name}.duckdb"), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        rewrites[name] = (result.output, pl.read_parquet(out / "parallel" / "*.parquet"))
    assert "1  copied whole into a resumed session, exported there" in rewrites["pair"][0]
    pair, whole = rewrites["pair"][1], rewrites["whole"][1]
    # a row per context: the session was compacted once, so its two contexts are two conversations
    assert set(pair["trace_id"]) == {RESUMED}
    assert pair["context"].to_list() == whole["context"].to_list() == [0, 1]
    turns = ["original_turns", "parallel_turns", "turns_saved", "thoughts_dropped"]
    assert pair.select(turns).rows() == whole.select(turns).rows()
    assert pair["turns_saved"].sum() > 0
    assert [without_ids(m.to_list()) for m in pair["messages"]] == [
        without_ids(m.to_list()) for m in whole["messages"]
    ]


def without_ids(messages: list[dict]) -> list[dict]:
    """Messages without tool call ids (the store keeps a source's ids unique per store, so the same
    call can have another id in another store)."""
    out = []
    for m in messages:
        calls = [{**json.loads(c), "id": None} for c in m["tool_calls"] or []]  # each call is JSON
        out.append({**m, "tool_call_id": None, "tool_calls": calls})
    return out


def test_copies_are_marked_whichever_file_is_ingested_first_and_the_dag_is_redone(runner, tmp_path):
    original = read_lines(FIXTURES / "parallel_session.jsonl")
    session = original[1]["sessionId"]
    resumed = resumed_copy(original, CONTINUATION, RESUMED)
    first, second = tmp_path / "first", tmp_path / "second"
    write_lines(first / f"{session}.jsonl", original)
    write_lines(second / f"{RESUMED}.jsonl", resumed)

    # The original first, then the resumed session, in two runs.
    in_order = tmp_path / "in-order.duckdb"
    analyze(runner, first, in_order, tmp_path / "out-1")
    analyze(runner, second, in_order, tmp_path / "out-1")
    # The resumed session alone first (nothing to mark yet: its DAG holds the copied calls), then
    # the original it resumed.
    reverse = tmp_path / "reverse.duckdb"
    analyze(runner, second, reverse, tmp_path / "out-2")
    assert copies_by_trace(reverse) == {}
    [(alone,)] = query(reverse, f"SELECT tool_calls FROM trace_dag WHERE trace_id = '{RESUMED}'")
    assert alone == 4  # toolu_X and toolu_Y of the copy, toolu_C and toolu_D
    analyze(runner, first, reverse, tmp_path / "out-2")

    for db in (in_order, reverse):
        assert copies_by_trace(db) == {RESUMED: {"msg_A", "msg_B"}}
        # the tool calls of a copied response are copies of the original's, by the source's id
        assert query(
            db,
            "SELECT c.source_tool_call_id, o.trace_id FROM tool_calls c JOIN tool_calls o "
            "ON o.tool_call_id = c.copy_of ORDER BY 1",
        ) == [("toolu_X", session), ("toolu_Y", session)]
        # each trace's DAG holds the calls it made: the resumed one's was analysed again
        assert query(db, "SELECT trace_id, tool_calls, turns_saved FROM trace_dag ORDER BY 1") == [
            (session, 2, 0),
            (RESUMED, 2, 1),
        ]
        # spend and usage count msg_A and msg_B once: the five responses as logged
        assert query(db, "SELECT sum(llm_calls), sum(input_tokens), sum(output_tokens) FROM workloads") == [
            usage_from_raw(original + CONTINUATION)
        ]
    assert measures(in_order, tmp_path / "out-1") == measures(reverse, tmp_path / "out-2")
    assert "(2 copies in resumed sessions not counted)" in (tmp_path / "out-1" / "report.html").read_text()

    # An export takes the resumed session, which holds the original's whole conversation, once.
    exported = tmp_path / "sft"
    result = runner.invoke(cli, ["export", "sft", "--db", str(in_order), "--out", str(exported), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["dropped"] == {"resumed_elsewhere": 1}
    rows = pl.read_parquet(exported / "sft" / "*.parquet")
    assert rows["trace_id"].to_list() == [RESUMED]
    texts = [m["content"] for m in rows["messages"][0].to_list() if m["role"] in ("user", "assistant")]
    first_prompt = next(line["message"]["content"] for line in original if line.get("type") == "user")
    assert texts[0] == first_prompt and texts[-1] == CONTINUATION[-1]["message"]["content"][0]["text"]

    # Ingesting both again changes nothing.
    result = runner.invoke(cli, ["ingest", str(first), str(second), "--db", str(reverse), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["totals"]["files_unchanged"] == 2
    assert copies_by_trace(reverse) == {RESUMED: {"msg_A", "msg_B"}}
    assert query(reverse, "SELECT count(*) FROM trace_dag") == [(2,)]
