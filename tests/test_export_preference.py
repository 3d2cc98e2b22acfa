"""`traceforge export preference` (parallel chosen, sequential rejected) and `export rl`, loaded back
and compared with the store."""

from __future__ import annotations

import json
from pathlib import Path

from datasets import load_dataset
from export_helpers import (
    store_messages,
)

from traceforge import store
from traceforge.cli import cli


def export(runner, kind: str, db: Path, out: Path, *extra: str) -> dict:
    args = ["export", kind, "--db", str(db), "--out", str(out), "--split", "train=1", "--no-redact", "--json"]
    result = runner.invoke(cli, [*args, *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def plain(message: dict) -> tuple:
    calls = [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"] or []
    ]
    return message["role"], message["content"], calls, message["tool_call_id"]


def stored(message: dict) -> tuple:
    calls = [(c["id"], c["name"], c["arguments"]) for c in message["tool_calls"] or []]
    return message["role"], message["content"], calls, message["tool_call_id"]


def test_pairs_at_the_first_differing_turn(runner, db, tmp_path):
    out = tmp_path / "data"
    export(runner, "preference", db, out)
    rows = list(load_dataset(str(out), "preference", split="train", cache_dir=str(tmp_path / "c")))
    con = store.connect(db, read_only=True)
    for row in rows:
        recorded = store_messages(con, row["trace_id"])
        cut = len(row["prompt"])
        # the prompt is the recording up to the turn, which is an assistant turn with calls
        assert [plain(m) for m in row["prompt"]] == [stored(m) for m in recorded[:cut]]
        assert recorded[cut]["role"] == "assistant" and recorded[cut]["tool_calls"]
        (chosen,) = row["chosen"]
        (rejected,) = row["rejected"]
        assert plain(rejected) == stored(recorded[cut])
        chosen_ids = [c["id"] for c in chosen["tool_calls"]]
        rejected_ids = [c["id"] for c in rejected["tool_calls"]]
        # chosen issues the recorded calls and more, all of which were made later in the same segment
        assert chosen_ids[: len(rejected_ids)] == rejected_ids and len(chosen_ids) > len(rejected_ids)
        later = [c["id"] for m in recorded[cut + 1 :] for c in m["tool_calls"] or []]
        assert set(chosen_ids) - set(rejected_ids) <= set(later)
        assert chosen["content"] == rejected["content"]
        assert (row["chosen_calls"], row["rejected_calls"]) == (len(chosen_ids), len(rejected_ids))
    con.close()
    assert sorted(r["trace_id"] for r in rows) == ["stock-anthropic", "trip-two-turns", "trip-weather"]
    two_turns = next(r for r in rows if r["trace_id"] == "trip-two-turns")
    assert [c["function"]["arguments"]["city"] for c in two_turns["chosen"][0]["tool_calls"]] == [
        "Oslo",
        "Bergen",
        "Tromso",
    ]


def test_openai_preference_lines(runner, db, tmp_path):
    out = tmp_path / "data"
    export(runner, "preference", db, out, "--format", "openai")
    lines = [json.loads(x) for x in (out / "preference-openai" / "train.jsonl").read_text().splitlines()]
    assert len(lines) == 3
    for line in lines:
        assert set(line) == {"input", "preferred_output", "non_preferred_output"}
        assert line["input"]["parallel_tool_calls"] is True
        assert len(line["preferred_output"]) == len(line["non_preferred_output"]) == 1
        assert len(line["preferred_output"][0]["tool_calls"]) > len(
            line["non_preferred_output"][0]["tool_calls"]
        )
        assert line["input"]["messages"][-1]["role"] != "assistant"


def test_rl_rows(runner, db, tmp_path):
    out = tmp_path / "data"
    report = export(runner, "rl", db, out)
    rows = list(load_dataset(str(out), "rl", split="train", cache_dir=str(tmp_path / "c")))
    assert report["rows"]["train"] == len(rows) == 6
    con = store.connect(db, read_only=True)
    for row in rows:
        recorded = store_messages(con, row["trace_id"])
        first_assistant = next(i for i, m in enumerate(recorded) if m["role"] == "assistant")
        assert [plain(m) for m in row["prompt"]] == [stored(m) for m in recorded[:first_assistant]]
        outcome = con.execute("SELECT outcome FROM traces WHERE trace_id = ?", [row["trace_id"]]).fetchone()[
            0
        ]
        assert row["outcome"] == outcome
        calls = con.execute(
            "SELECT name, arguments FROM tool_calls WHERE trace_id = ? ORDER BY seq", [row["trace_id"]]
        ).fetchall()
        assert row["recorded_calls"] == [{"name": n, "arguments": json.loads(a)} for n, a in calls]
        assert row["recorded_answer"] == recorded[-1]["content"]
        assert row["recorded_turns"] == sum(1 for m in recorded if m["role"] == "assistant")
    con.close()


def test_a_conversation_giving_two_pairs_is_counted_once(runner, tmp_path):
    """Two user turns, each answered with independent calls made one after another: two preference
    rows from one conversation, whose redactions (and removals) count once, as in its sft row."""
    from export_helpers import WEATHER, assistant, call, result

    from traceforge.analysis.dag import analyze_dependencies
    from traceforge.ingest import ingest_paths

    turns = []
    for first, second in (("Oslo", "Bergen"), ("Rome", "Milan")):
        turns += [
            {"role": "user", "content": f"Weather in {first} and {second}? I am ann.lee@example.org"},
            assistant(call(f"c-{first}", "get_weather", {"city": first})),
            result(f"c-{first}", f"{first}: 5C"),
            assistant(call(f"c-{second}", "get_weather", {"city": second})),
            result(f"c-{second}", f"{second}: 7C"),
            assistant(content=f"{first} 5C, {second} 7C."),
        ]
    transcript = {"id": "two-questions", "model": "gpt-4o", "tools": [WEATHER], "messages": turns}
    source = tmp_path / "runs.jsonl"
    source.write_text(json.dumps(transcript) + "\n")
    db = tmp_path / "store.duckdb"
    con = store.connect(db)
    ingest_paths(con, [source])
    analyze_dependencies(con)
    con.close()

    def report(kind: str) -> dict:
        out = str(tmp_path / "out")
        args = ["export", kind, "--db", str(db), "--out", out, "--split", "train=1", "--json"]
        done = runner.invoke(cli, args, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        return json.loads(done.output)

    pairs, sft = report("preference"), report("sft")
    assert pairs["rows"] == {"train": 2} and sft["rows"] == {"train": 1}
    assert pairs["redaction"] == sft["redaction"] == {"enabled": True, "counts": {"email": 2}, "traces": 1}
