"""`traceforge export sft`: rows in TRL's conversational format (and OpenAI JSONL), loaded back with
`datasets` and compared with the store, plus the folder, the card and the selection options."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml
from datasets import Json, load_dataset
from export_helpers import openai_conversations, store_messages
from rich.console import Console

from traceforge import store
from traceforge.cli import cli
from traceforge.export.selection import Criteria, unmatched_filters
from traceforge.report.datasets import render_unmatched


def run(runner, *args: str):
    result = runner.invoke(cli, list(args), catch_exceptions=False)
    return result


def load(out: Path, config: str, tmp_path: Path, split: str = "train"):
    return load_dataset(str(out), config, split=split, cache_dir=str(tmp_path / "hf-cache"))


def answered_trace_ids(db: Path) -> list[str]:
    """Traces whose every tool call has a result, oldest first, straight from the store."""
    con = store.connect(db, read_only=True)
    try:
        rows = con.execute(
            """
            SELECT trace_id FROM traces
            WHERE trace_id NOT IN (SELECT trace_id FROM tool_calls WHERE result IS NULL)
            ORDER BY started_at, trace_id
            """
        ).fetchall()
        return [row[0] for row in rows]
    finally:
        con.close()


def expected_trace_ids(db: Path) -> list[str]:
    """Usable traces: every call answered, duplicates (same messages apart from ids) removed
    keeping the earliest, oldest first."""
    con = store.connect(db, read_only=True)
    try:
        seen, keep = set(), []
        for trace_id in answered_trace_ids(db):
            shape = json.dumps(
                [
                    (m["role"], m["content"], [(c["name"], c["arguments"]) for c in m["tool_calls"] or []])
                    for m in store_messages(con, trace_id)
                ]
            )
            if shape not in seen:
                seen.add(shape)
                keep.append(trace_id)
        return keep
    finally:
        con.close()


def test_sft_rows_are_the_store_conversations(runner, db, tmp_path):
    out = tmp_path / "data"
    result = run(
        runner, "export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1", "--no-redact"
    )
    assert result.exit_code == 0, result.output
    rows = list(load(out, "sft", tmp_path))
    assert [r["trace_id"] for r in rows] == expected_trace_ids(db)

    con = store.connect(db, read_only=True)
    for row in rows:
        recorded = store_messages(con, row["trace_id"])
        assert [m["role"] for m in row["messages"]] == [m["role"] for m in recorded]
        for got, want in zip(row["messages"], recorded, strict=True):
            assert got["content"] == want["content"]
            assert got["reasoning_content"] == want["reasoning"]
            if want["tool_calls"]:
                assert [
                    (c["id"], c["type"], c["function"]["name"], c["function"]["arguments"])
                    for c in got["tool_calls"]
                ] == [(c["id"], "function", c["name"], c["arguments"]) for c in want["tool_calls"]]
            else:
                assert got["tool_calls"] is None
            if want["role"] == "tool":
                assert (got["tool_call_id"], got["name"]) == (want["tool_call_id"], want["name"])
        # results right after their turn, in call order
        for index, message in enumerate(row["messages"]):
            if message["tool_calls"]:
                ids = [c["id"] for c in message["tool_calls"]]
                following = row["messages"][index + 1 : index + 1 + len(ids)]
                assert [m["tool_call_id"] for m in following] == ids
        defs = con.execute(
            "SELECT name, description, parameters FROM tool_defs WHERE trace_id = ? ORDER BY name",
            [row["trace_id"]],
        ).fetchall()
        defined = {name for name, _, _ in defs}
        recorded_tools = [t["function"] for t in row["tools"] if t["function"]["name"] in defined]
        assert [(f["name"], f.get("description"), f["parameters"]) for f in recorded_tools] == [
            (name, description, json.loads(parameters)) for name, description, parameters in defs
        ]
        calls = [c for m in recorded for c in m["tool_calls"] or []]
        inferred = {t["function"]["name"] for t in row["tools"]} - defined
        assert inferred == {c["name"] for c in calls} - defined  # a schema for every tool called
        assert row["num_tool_calls"] == len(calls)
        trace = con.execute(
            "SELECT workload, outcome FROM traces WHERE trace_id = ?", [row["trace_id"]]
        ).fetchone()
        assert (row["workload"], row["outcome"]) == trace
    con.close()


def test_arguments_keep_their_own_keys(runner, db, tmp_path):
    """The Json feature: calls with different argument keys are not padded with nulls."""
    out = tmp_path / "data"
    assert (
        run(runner, "export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1").exit_code == 0
    )
    dataset = load(out, "sft", tmp_path)
    assert isinstance(dataset.features["messages"].feature["tool_calls"].feature, Json)
    assert isinstance(dataset.features["tools"].feature, Json)
    keys = {}
    for row in dataset:
        for message in row["messages"]:
            for call in message["tool_calls"] or []:
                keys.setdefault(call["function"]["name"], set()).add(
                    tuple(sorted(call["function"]["arguments"]))
                )
    assert keys["get_weather"] == {("city",)}
    assert keys["send_email"] == {("body", "subject", "to")}
    assert keys["get_news"] == {("limit", "symbol")}
    # On disk each call is JSON text (Arrow's JSON extension type): one column type whatever the arguments.
    shard = next((out / "sft").glob("train-*.parquet"))
    call_type = pq.read_schema(shard).field("messages").type.value_type.field("tool_calls").type.value_type
    assert (call_type.extension_name, str(call_type.storage_type)) == ("arrow.json", "string")


def test_openai_format_lines(runner, db, tmp_path):
    out = tmp_path / "data"
    result = run(
        runner,
        "export",
        "sft",
        "--db",
        str(db),
        "--out",
        str(out),
        "--format",
        "openai",
        "--split",
        "train=1",
        "--no-redact",
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in (out / "sft-openai" / "train.jsonl").read_text().splitlines()]
    con = store.connect(db, read_only=True)
    for line, trace_id in zip(lines, expected_trace_ids(db), strict=True):
        recorded = store_messages(con, trace_id)
        assert [m["role"] for m in line["messages"]] == [m["role"] for m in recorded]
        for got, want in zip(line["messages"], recorded, strict=True):
            assert "reasoning_content" not in got
            if want["tool_calls"]:
                for call, stored in zip(got["tool_calls"], want["tool_calls"], strict=True):
                    assert isinstance(call["function"]["arguments"], str)
                    assert json.loads(call["function"]["arguments"]) == stored["arguments"]
                    assert call["id"] == stored["id"]
            if want["role"] == "tool":
                assert got["tool_call_id"] == want["tool_call_id"]
        assert all(t["type"] == "function" for t in line["tools"])
    con.close()


def test_folder_card_and_default_config(runner, db, tmp_path):
    out = tmp_path / "data"
    args = ["--db", str(db), "--out", str(out), "--license", "apache-2.0", "--seed", "3"]
    assert run(runner, "export", "sft", *args).exit_code == 0
    assert run(runner, "export", "rl", *args).exit_code == 0
    readme = (out / "README.md").read_text()
    header = yaml.safe_load(readme.split("---")[1])
    assert header["license"] == "apache-2.0"
    configs = {c["config_name"]: c for c in header["configs"]}
    assert configs["sft"]["default"] is True
    assert {c["config_name"] for c in header["dataset_info"]} == {"sft", "rl"}
    manifest = json.loads((out / "traceforge-export.json").read_text())
    for info in header["dataset_info"]:
        rows = manifest["configs"][info["config_name"]]["rows"]
        assert {s["name"]: s["num_examples"] for s in info["splits"]} == rows
    assert "exact duplicate: 1" in readme and "a tool call without a result: 1" in readme
    assert "Traces calling a tool with no recorded definition: 1" in readme  # http_get in ops-secrets
    # load_dataset(folder) without a config name reads the default one, every split present
    everything = load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))
    assert set(everything) == set(manifest["configs"]["sft"]["rows"])
    assert sum(len(split) for split in everything.values()) == len(expected_trace_ids(db))


def test_split_is_by_trace_and_seeded(runner, db, tmp_path):
    def assignment(out: Path, config: str) -> dict[str, str]:
        manifest = json.loads((out / "traceforge-export.json").read_text())
        return {
            row["trace_id"]: split
            for split in manifest["configs"][config]["rows"]
            for row in load(out, config, tmp_path, split)
        }

    out = tmp_path / "a"
    for kind in ("sft", "rl"):
        args = [
            "export",
            kind,
            "--db",
            str(db),
            "--out",
            str(out),
            "--split",
            "train=0.5,test=0.5",
            "--seed",
            "7",
        ]
        assert run(runner, *args).exit_code == 0
    sft, rl = assignment(out, "sft"), assignment(out, "rl")
    assert sorted(sft) == sorted(expected_trace_ids(db))  # each trace once, in one split
    assert sft == rl  # the same trace lands in the same split in every export with that seed


def test_length_limits_drop_whole_conversations(runner, db, tmp_path):
    out = tmp_path / "data"
    result = run(
        runner,
        "export",
        "sft",
        "--db",
        str(db),
        "--out",
        str(out),
        "--split",
        "train=1",
        "--max-messages",
        "7",
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    con = store.connect(db, read_only=True)
    lengths = dict(con.execute("SELECT trace_id, count(*) FROM messages GROUP BY 1").fetchall())
    con.close()
    # limits apply before duplicates are looked for
    assert report["dropped"]["over_max_messages"] == sum(1 for t in answered_trace_ids(db) if lengths[t] > 7)
    kept = expected_trace_ids(db)
    rows = list(load(out, "sft", tmp_path))
    assert rows and all(len(r["messages"]) <= 7 for r in rows)
    assert {r["trace_id"] for r in rows} == {t for t in kept if lengths[t] <= 7}


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--workload", "finance"], {"stock-anthropic"}),
        (["--outcome", "failure"], {"trip-chain"}),
        (["--model", "gpt-4o-mini"], {"trip-two-turns"}),
        (["--model", "claude-*"], {"stock-anthropic"}),
        (["--since", "2025-03-03", "--until", "2025-03-05"], {"trip-two-turns", "ops-secrets"}),
        (["--min-tool-calls", "3"], {"trip-weather", "trip-two-turns"}),
    ],
)
def test_selection_options(runner, db, tmp_path, options, expected):
    out = tmp_path / "data"
    result = run(runner, "export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1", *options)
    assert result.exit_code == 0, result.output
    assert {r["trace_id"] for r in load(out, "sft", tmp_path)} == expected


def test_bad_usage_and_bad_folders(runner, db, tmp_path):
    base = ["export", "sft", "--db", str(db), "--out", str(tmp_path / "x")]
    result = run(runner, *base, "--split", "train=0.5")
    assert result.exit_code == 2 and "add up to 0.5" in result.output
    result = run(runner, *base, "--since", "March")
    assert result.exit_code == 2 and "2025-03-01" in result.output
    result = run(runner, "export", "rl", "--db", str(db), "--format", "openai")
    assert result.exit_code == 2
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    result = run(runner, "export", "sft", "--db", str(db), "--out", str(busy))
    assert result.exit_code == 1 and "not empty" in result.output
    assert (busy / "notes.txt").read_text() == "mine"
    result = run(runner, "export", "sft", "--db", str(tmp_path / "missing.duckdb"))
    assert result.exit_code == 1 and "no such store" in result.output


def test_nothing_selected_exits_1_and_says_what_the_store_holds(runner, db, tmp_path):
    """A misspelt workload or a model no call used: the store's values, most traces first."""
    held = json.loads(
        run(
            runner, "sql", "--db", str(db), "--json", "SELECT workload, count(*) AS n FROM traces GROUP BY 1"
        ).output
    )
    out = str(tmp_path / "o")
    result = run(runner, "export", "sft", "--db", str(db), "--out", out, "--workload", "nope")
    assert result.exit_code == 1
    assert "No rows written" in result.output
    assert f"wrote no rows: {out}/ left as it was" in result.output and "Dataset card" not in result.output
    assert not Path(out).exists()  # no folder holding an empty dataset's card
    listed = re.search(r"--workload nope matches no trace; the store's workloads: (.*)\n", result.output)
    assert listed, result.output
    expected = sorted(held, key=lambda w: (-w["n"], w["workload"]))
    assert listed.group(1) == ", ".join(
        f"{w['workload']} ({w['n']} trace{'s' * (w['n'] != 1)})" for w in expected
    )
    # a filter that matches on its own is not listed: only the one that matched nothing
    workload = expected[0]["workload"]
    result = run(
        runner, "export", "sft", "--db", str(db), "--out", out, "--workload", workload, "--model", "gpt-9*"
    )
    assert result.exit_code == 1
    assert "--model gpt-9* matches no trace; the store's models: " in result.output
    assert "--workload" not in result.output.split("matches no trace")[0]
    # dates: the store's first and last start, in UTC
    result = run(runner, "export", "sft", "--db", str(db), "--out", out, "--since", "2099-01-01")
    assert result.exit_code == 1
    said = re.search(
        r"--since 2099-01-01 matches no trace; the store's traces started from (.*) UTC to (.*) UTC\n",
        result.output,
    )
    assert said, result.output
    second = "strftime({}(started_at) AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S')"
    query = f"SELECT {second.format('min')} AS first, {second.format('max')} AS last FROM traces"
    (starts,) = json.loads(run(runner, "sql", "--db", str(db), "--json", query).output)
    assert said.groups() == (starts["first"], starts["last"])
    # an outcome no trace has, named with those the store holds
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE traces SET outcome = 'success'")
    result = run(runner, "export", "sft", "--db", str(db), "--out", out, "--outcome", "failure")
    assert result.exit_code == 1
    traces = sum(w["n"] for w in held)
    assert (
        f"--outcome failure matches no trace; the store's outcomes: success ({traces} traces)\n"
        in result.output
    )
    # a rerun into a folder that holds an export leaves it as it was: the old rows are not wiped
    assert run(runner, "export", "sft", "--db", str(db), "--out", out).exit_code == 0
    before = {p: p.read_bytes() for p in Path(out).rglob("*") if p.is_file()}
    assert any(p.suffix == ".parquet" for p in before)
    result = run(runner, "export", "sft", "--db", str(db), "--out", out, "--outcome", "failure")
    assert result.exit_code == 1 and "left as it was" in result.output
    assert {p: p.read_bytes() for p in Path(out).rglob("*") if p.is_file()} == before
    # a store whose traces carry no start time says so, rather than naming dates
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE traces SET started_at = NULL")
    result = run(runner, "export", "sft", "--db", str(db), "--out", out, "--since", "2099-01-01")
    said = "--since 2099-01-01 matches no trace; the store's traces started at no recorded time\n"
    assert result.exit_code == 1 and said in result.output
    # past the `shown` most common, how many more
    with duckdb.connect(str(db), read_only=True) as con:
        unmatched = unmatched_filters(con, Criteria(workloads=("nope",)))
    console = Console(record=True, width=1000)
    render_unmatched(console, unmatched, shown=1)
    top = expected[0]
    assert console.export_text().rstrip("\n") == (
        f"--workload nope matches no trace; the store's workloads: {top['workload']} ({top['n']} traces) "
        f"and {len(expected) - 1} more"
    )


def test_real_tau2_simulations(runner, shared_data, tmp_path, db_path):
    """tau2-bench runs (agent and simulated user, the user with tools of its own): each simulation is
    one row whose agent calls, results and user text are the recording's, computed here with `json`,
    but for the user's messages after the agent's last (its ###STOP###), which are trimmed."""
    files = sorted((shared_data / "tau2-bench").glob("*.json"))
    ingest = runner.invoke(cli, ["ingest", "--db", str(db_path), *map(str, files)])
    assert ingest.exit_code == 0, ingest.output
    out = tmp_path / "tau2"
    args = ["export", "sft", "--db", str(db_path), "--out", str(out), "--split", "train=1", "--no-redact"]
    result = runner.invoke(cli, [*args, "--no-dedup", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = {r["trace_id"]: r for r in load(out, "sft", tmp_path)}

    simulations = [s for f in files for s in json.loads(f.read_text())["simulations"]]
    assert sorted(rows) == sorted(s["id"] for s in simulations)
    user_calls = trimmed = 0
    for simulation in simulations:
        raw = simulation["messages"]
        row = rows[simulation["id"]]
        agent_calls = [c for m in raw if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        got_calls = [c for m in row["messages"] for c in m["tool_calls"] or []]
        assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in got_calls] == [
            (c["id"], c["name"], c["arguments"]) for c in agent_calls
        ]
        agent_results = {
            m["id"]: m["content"] for m in raw if m["role"] == "tool" and m["requestor"] == "assistant"
        }
        assert {
            m["tool_call_id"]: m["content"] for m in row["messages"] if m["role"] == "tool"
        } == agent_results
        said = [m["content"] for m in raw if m["role"] == "user" and m.get("content")]
        # what the agent saw: its own results and the user's text, in order
        seen = [
            m
            for m in raw
            if (m["role"] == "tool" and m["requestor"] == "assistant")
            or (m["role"] == "user" and m.get("content"))
            or m["role"] == "assistant"
        ]
        unanswered = len(seen) - 1 - max(i for i, m in enumerate(seen) if m["role"] != "user")
        assert [m["content"] for m in row["messages"] if m["role"] == "user"] == said[
            : len(said) - unanswered
        ]
        assert row["messages"][-1]["role"] != "user"
        trimmed += unanswered
        user_calls += sum(len(m.get("tool_calls") or []) for m in raw if m["role"] == "user")
        reward = (simulation.get("reward_info") or {}).get("reward")
        assert row["outcome"] == ("success" if reward else "failure")
    report = json.loads(result.output)
    assert report["user_tool_calls_removed"] == user_calls > 0
    assert report["unanswered_user_messages_trimmed"] == trimmed > 30


def test_a_workload_is_selected_by_the_name_the_last_analysis_gave_it(runner, db, tmp_path):
    copy = tmp_path / "keyed.duckdb"
    shutil.copy(db, copy)
    result = run(
        runner, "profile", "--db", str(copy), "--out", str(tmp_path / "p"), "--workload-key", "model"
    )
    assert result.exit_code == 0, result.output
    con = store.connect(copy, read_only=True)
    try:
        assigned = dict(con.execute("SELECT trace_id, workload FROM trace_workloads").fetchall())
    finally:
        con.close()
    model = assigned["stock-anthropic"]  # the report's name for it under --workload-key model
    out = tmp_path / "data"
    base = ["export", "sft", "--db", str(copy), "--split", "train=1"]
    result = run(runner, *base, "--out", str(out), "--workload", model)
    assert result.exit_code == 0, result.output
    assert {r["trace_id"] for r in load(out, "sft", tmp_path)} == {
        t for t, w in assigned.items() if w == model
    } & set(expected_trace_ids(copy))
    # the source's own name still selects
    result = run(runner, *base, "--out", str(tmp_path / "d2"), "--workload", "finance")
    assert {r["trace_id"] for r in load(tmp_path / "d2", "sft", tmp_path)} == {"stock-anthropic"}


COMPACTED = Path(__file__).parent / "fixtures" / "claude_code" / "compacted_session.jsonl"


def test_a_compacted_session_is_a_row_per_context_and_an_rl_row_per_session(runner, tmp_path):
    """The model never saw the history and the compaction's summary together: each context is a
    conversation of its own, the later one opening with the summary, both in the session's split.
    An RL row is the session's task, so it stays one row with everything the session did."""
    db, out = tmp_path / "store.duckdb", tmp_path / "out"
    assert run(runner, "ingest", str(COMPACTED), "--db", str(db)).exit_code == 0
    lines = [json.loads(line) for line in COMPACTED.read_text().splitlines()]
    boundary = next(k for k, line in enumerate(lines) if line.get("subtype") == "compact_boundary")
    summary = lines[boundary + 1]["message"]["content"]
    tool_ids = [
        [
            block["id"]
            for line in part
            if line["type"] == "assistant"
            for block in line["message"]["content"]
            if block["type"] == "tool_use"
        ]
        for part in (lines[:boundary], lines[boundary:])
    ]

    result = run(runner, "export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1.0")
    assert result.exit_code == 0, result.output
    assert "1 traces matched, 2 usable (1 of them later contexts of compacted sessions" in result.output
    rows = load(out, "sft", tmp_path).to_list()
    assert [row["context"] for row in rows] == [0, 1]
    assert {row["trace_id"] for row in rows} == {lines[0]["sessionId"]}
    first, later = (row["messages"] for row in rows)
    assert first[0]["content"] == lines[0]["message"]["content"]
    assert summary not in [m["content"] for m in first]
    assert later[0] == {**later[0], "role": "user", "content": summary}
    for messages, ids in zip((first, later), tool_ids, strict=True):
        assert [c["id"] for m in messages for c in m["tool_calls"] or []] == ids
    assert "later contexts of compacted sessions" in (out / "README.md").read_text()
    again = run(runner, "export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1.0", "--json")
    assert again.exit_code == 0, again.output
    assert (json.loads(again.output)["selected"], json.loads(again.output)["later_contexts"]) == (2, 1)

    rl = tmp_path / "rl"
    assert (
        run(runner, "export", "rl", "--db", str(db), "--out", str(rl), "--split", "train=1.0").exit_code == 0
    )
    [task] = load(rl, "rl", tmp_path).to_list()
    assert task["context"] == 0
    assert [c["name"] for c in task["recorded_calls"]] == ["Read", "Bash", "Read", "Edit", "Bash"]


def test_the_token_limit_is_checked_per_context(runner, tmp_path):
    """The fixture's largest call before the compaction is 9,424 + 60 tokens; after it, 8,587 + 40:
    a 9,000-token limit drops the first context only."""
    db, out = tmp_path / "store.duckdb", tmp_path / "out"
    assert run(runner, "ingest", str(COMPACTED), "--db", str(db)).exit_code == 0
    args = ["export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1.0", "--max-tokens"]
    result = run(runner, *args, "9000")
    assert result.exit_code == 0, result.output
    assert [row["context"] for row in load(out, "sft", tmp_path).to_list()] == [1]
    shutil.rmtree(out)
    assert run(runner, *args, "9500").exit_code == 0
    assert [row["context"] for row in load(out, "sft", tmp_path).to_list()] == [0, 1]


def test_user_messages_nothing_answered_are_trimmed_from_sft_not_rl(runner, tmp_path, db_path):
    """A conversation whose user spoke last: its sft row ends at the agent's last turn, with the
    results of that turn's calls; rl keeps its whole-session answer as recorded (none here)."""
    ended_by_user = openai_conversations()[0]
    assert ended_by_user["messages"][-1]["role"] == "assistant"
    ended_by_user["messages"] += [
        {"role": "user", "content": "Thanks! ###STOP###"},
        {"role": "user", "content": "Are you still there?"},
    ]
    ended_by_results = openai_conversations()[0]  # a fresh copy
    ended_by_results["id"] = "results-last"
    *kept, _ = ended_by_results["messages"]  # without the final answer: the mail's result is last
    ended_by_results["messages"] = [*kept, {"role": "user", "content": "Did it go through?"}]
    source = tmp_path / "transcripts.jsonl"
    source.write_text("".join(json.dumps(c) + "\n" for c in (ended_by_user, ended_by_results)))
    assert run(runner, "ingest", "--db", str(db_path), str(source)).exit_code == 0

    out = tmp_path / "data"
    args = ["--db", str(db_path), "--out", str(out), "--split", "train=1", "--no-redact", "--no-dedup"]
    result = run(runner, "export", "sft", *args, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["unanswered_user_messages_trimmed"] == 3
    rows = {r["trace_id"]: r["messages"] for r in load(out, "sft", tmp_path)}
    recorded = ended_by_user["messages"][:-2]
    assert [(m["role"], m["content"]) for m in rows[ended_by_user["id"]]] == [
        (m["role"], m["content"]) for m in recorded
    ]
    assert [m["role"] for m in rows["results-last"]][-2:] == ["assistant", "tool"]
    card = (out / "README.md").read_text()
    assert "which nothing answered, trimmed: 3" in card
    printed = run(runner, "export", "sft", *args)
    assert "Trimmed 3 user messages nothing answered (after the last assistant turn)." in printed.output

    result = run(runner, "export", "rl", *args, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["unanswered_user_messages_trimmed"] == 0
    assert [r["recorded_answer"] for r in load(out, "rl", tmp_path)] == [None, None]
