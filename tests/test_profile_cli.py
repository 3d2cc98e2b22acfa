"""`traceforge profile` and `traceforge cache-sim` through the CLI: profile.json, and a replay trace
checked against the documented mooncake_trace fields (and AIPerf's own model where installed)."""

from __future__ import annotations

import json
import math

import pytest
from builders import WEATHER_TOOL, AnthropicLoop, OpenAILoop, openai_tool_call, write_jsonl
from conftest import REPO

from traceforge.cli import cli

BLOCK = 512


def write_logs(tmp_path) -> tuple[list[dict], list[dict]]:
    """Two OpenAI agent conversations (a named workload) and one Anthropic one (fingerprinted)."""
    openai_records = []
    for k, cities in enumerate((["Paris", "Rome", "Oslo"], ["Lima"])):
        loop = OpenAILoop(
            "You plan trips and check the weather first. " * 100,
            f"Plan trip {k}",
            tools=[WEATHER_TOOL],
            workload="trip-planner",
            t0=1_790_000_000 + 7 * k,
        )
        for i, city in enumerate(cities):
            loop.call(
                tool_calls=[openai_tool_call(f"call_{k}_{i}", "get_weather", {"city": city})],
                prompt_tokens=1_300 + 500 * i,
                completion_tokens=25,
                cached=1_152 if i else 0,
            )
            loop.result(f"call_{k}_{i}", json.dumps({"city": city, "forecast": "mild " * 300}))
        loop.call(content="Here is your plan.", prompt_tokens=1_300 + 500 * len(cities), completion_tokens=90)
        openai_records += loop.records
    anthropic = AnthropicLoop(
        "You answer billing questions.", "Why was I charged twice?", model="claude-sonnet-4-5-20250929"
    )
    anthropic.call(
        [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "charges"}}],
        input_tokens=40,
        cache_write=2_000,
        output_tokens=30,
    )
    anthropic.result("toolu_1", "two charges: one refunded")
    anthropic.call(
        [{"type": "text", "text": "One was refunded."}], input_tokens=60, cache_read=2_000, output_tokens=20
    )
    write_jsonl(tmp_path / "logs" / "openai.jsonl", openai_records)
    write_jsonl(tmp_path / "logs" / "anthropic.jsonl", anthropic.records)
    return openai_records, anthropic.records


@pytest.fixture
def profiled(tmp_path, runner, db_path):
    openai_records, anthropic_records = write_logs(tmp_path)
    ingest = runner.invoke(cli, ["ingest", "--db", str(db_path), str(tmp_path / "logs")])
    assert ingest.exit_code == 0, ingest.output
    out = tmp_path / "out"
    result = runner.invoke(cli, ["profile", "--db", str(db_path), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output), out, openai_records, anthropic_records


def canonical_input(record: dict) -> int:
    usage = record["response"]["usage"]
    if "prompt_tokens" in usage:
        return usage["prompt_tokens"]
    return usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]


def test_replay_trace_has_the_documented_fields_and_exact_block_cover(profiled):
    document, out, openai_records, anthropic_records = profiled
    lines = [json.loads(line) for line in (out / "replay.jsonl").read_text().splitlines()]
    records = openai_records + anthropic_records

    assert len(lines) == len(records) == document["replay"]["requests"]
    assert sorted(r["input_length"] for r in lines) == sorted(canonical_input(r) for r in records)
    assert sorted(r["output_length"] for r in lines) == sorted(
        r["response"]["usage"]["completion_tokens"]
        if "completion_tokens" in r["response"]["usage"]
        else r["response"]["usage"]["output_tokens"]
        for r in records
    )
    previous = 0
    sessions: dict[str, int] = {}
    for line in lines:
        assert set(line) <= {"timestamp", "input_length", "output_length", "hash_ids", "session_id", "delay"}
        assert isinstance(line["timestamp"], int) and line["timestamp"] >= previous
        previous = line["timestamp"]
        assert isinstance(line["input_length"], int) and line["input_length"] >= 1
        assert isinstance(line["output_length"], int) and line["output_length"] >= 1
        assert all(isinstance(i, int) for i in line["hash_ids"])
        assert len(line["hash_ids"]) == math.ceil(line["input_length"] / BLOCK)
        assert isinstance(line["session_id"], str)
        turn = sessions.get(line["session_id"], 0)
        if turn == 0:
            assert "delay" not in line  # only later turns wait on the previous response
        elif "delay" in line:
            assert line["delay"] == 1500  # the builders' logs end each call 1.5 s before the next
        sessions[line["session_id"]] = turn + 1
    assert sorted(sessions.values()) == [2, 2, 4]
    # OpenAI start times are epoch seconds in the log; replay times are ms, in the same spacing
    openai_starts = sorted(r["start_time"] for r in openai_records)
    openai_lengths = {r["response"]["usage"]["prompt_tokens"] for r in openai_records}
    openai_sessions = {line["session_id"] for line in lines if line["input_length"] in openai_lengths}
    assert len(openai_sessions) == 2
    openai_lines = sorted(line["timestamp"] for line in lines if line["session_id"] in openai_sessions)
    assert [t - openai_lines[0] for t in openai_lines] == [
        round((s - openai_starts[0]) * 1000) for s in openai_starts
    ]
    # ids are dense from 0 in first-seen order
    seen = []
    for line in lines:
        seen += [i for i in line["hash_ids"] if i not in seen]
    assert seen == list(range(len(seen)))


def test_replay_trace_loads_with_aiperfs_own_model(profiled):
    models = pytest.importorskip("aiperf.dataset.loader.models", reason="AIPerf is not installed")
    _, out, _, _ = profiled
    for line in (out / "replay.jsonl").read_text().splitlines():
        trace = models.MooncakeTrace.model_validate(json.loads(line))
        final_block = trace.input_length - (len(trace.hash_ids) - 1) * BLOCK
        assert 0 < final_block <= BLOCK  # the check AIPerf's prompt generator makes


def test_profile_json_holds_every_part(profiled):
    document, out, openai_records, anthropic_records = profiled
    on_disk = json.loads((out / "profile.json").read_text())
    assert on_disk["schema"] == "traceforge.profile" and on_disk["schema_version"] == 1
    assert on_disk["replay"]["path"] == "replay.jsonl"
    assert "--custom-dataset-type mooncake_trace" in on_disk["replay"]["commands"]["aiperf"]

    spend = document["spend"]
    assert spend["workload_key"] == "workload" and spend["basis"] == "cost_usd"
    names = [w["workload"] for w in spend["workloads"]]
    assert "trip-planner" in names and any(n.startswith("fp-") for n in names)
    assert sum(w["share"] for w in spend["workloads"]) == pytest.approx(1.0)

    trips = next(w for w in document["workloads"] if w["workload"] == "trip-planner")
    assert trips["llm_calls"] == len(openai_records)
    total = trips["prefill_decode"]["total"]
    assert total["input_tokens"] == sum(r["response"]["usage"]["prompt_tokens"] for r in openai_records)
    assert total["cache_read_tokens"] == sum(
        r["response"]["usage"]["prompt_tokens_details"]["cached_tokens"] for r in openai_records
    )
    assert trips["timing"]["turns_per_trace"]["max"] == 4
    assert trips["timing"]["tool_gap_ms"]["n"] == 4 and trips["timing"]["tool_gap_ms"]["p50"] == 1500.0
    assert trips["prefix_cache"]["provider"]["calls"] == len(openai_records)
    assert 0 < trips["prefix_cache"]["unlimited"]["hit_ratio"] < 1
    plan = trips["deployment"]["observed"][0]
    assert plan["prefill"]["instances"] >= 1 and plan["decode"]["instances"] >= 1
    assert plan["gpu_profile"] == document["settings"]["gpu_profile"]["name"]
    assert "trace_dag table is empty" in trips["deployment"]["projection_note"]
    assert document["overall"]["prefill_decode"]["total"]["llm_calls"] == len(openai_records) + len(
        anthropic_records
    )


def test_cache_sim_on_our_replay_agrees_with_the_profile(profiled, runner):
    document, out, _, _ = profiled
    result = runner.invoke(cli, ["cache-sim", str(out / "replay.jsonl"), "--json"])
    assert result.exit_code == 0, result.output
    unlimited = json.loads(result.output)["results"][-1]
    assert unlimited["capacity_blocks"] is None and unlimited["ttl_s"] is None
    assert unlimited["hit_ratio"] == pytest.approx(
        document["overall"]["prefix_cache"]["unlimited"]["hit_ratio"]
    )

    bounded = runner.invoke(
        cli, ["cache-sim", str(out / "replay.jsonl"), "--capacity-blocks", "2", "--ttl", "1"]
    )
    assert bounded.exit_code == 0, bounded.output
    assert "LRU 2 blocks, TTL 1s" in bounded.output and "unlimited" in bounded.output


def test_profile_terminal_output_sweep_and_errors(tmp_path, runner, db_path):
    write_logs(tmp_path)
    assert runner.invoke(cli, ["ingest", "--db", str(db_path), str(tmp_path / "logs")]).exit_code == 0
    out = tmp_path / "out"
    result = runner.invoke(
        cli,
        [
            "profile",
            "--db",
            str(db_path),
            "--out",
            str(out),
            "--target-rps",
            "5",
            "--target-rps",
            "50",
            "--gpu-profile",
            "h100-llama-3.1-8b-fp8",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "trip-planner" in result.output and "Power law" in result.output
    assert "@ 50 req/s on h100-llama-3.1-8b-fp8" in result.output
    assert f"wrote replay: {out / 'replay.jsonl'}" in result.output
    document = json.loads((out / "profile.json").read_text())
    plans = document["overall"]["deployment"]["observed"]
    assert [p["target_rps"] for p in plans] == [5.0, 50.0]
    assert plans[1]["decode"]["concurrent_sequences"] == pytest.approx(
        10 * plans[0]["decode"]["concurrent_sequences"]
    )

    missing = runner.invoke(cli, ["profile", "--db", str(tmp_path / "nope.duckdb")])
    assert missing.exit_code == 1 and "no such store" in missing.output
    bad_gpu = runner.invoke(
        cli, ["profile", "--db", str(db_path), "--out", str(out), "--gpu-profile", "tpu-v9"]
    )
    assert bad_gpu.exit_code == 1 and "shipped:" in bad_gpu.output


def test_an_out_folder_that_cannot_be_written_is_an_error_with_what_to_do(tmp_path, runner, db_path):
    write_logs(tmp_path)
    assert runner.invoke(cli, ["ingest", "--db", str(db_path), str(tmp_path / "logs")]).exit_code == 0
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    result = runner.invoke(cli, ["profile", "--db", str(db_path), "--out", str(blocked / "out")])
    assert result.exit_code == 1, result.output
    assert f"Error: cannot write the outputs to {blocked / 'out'} ({blocked / 'out'}: Not a directory)" in (
        result.output
    )
    assert "choose another --out, then run `traceforge profile` again" in result.output


def test_the_example_in_docs_profile_md_is_what_profile_prints(shared_data, runner, tmp_path, monkeypatch):
    """docs/profile.md shows the profile of the recorded traces, up to its `...`: a change to what
    `profile` prints must come with the page (its spend table once showed whole paths, cut)."""
    monkeypatch.chdir(tmp_path)
    folders = [str(shared_data / name) for name in ("tau2-bench", "openhands", "claude-code", "swe-agent")]
    ingested = runner.invoke(cli, ["ingest", *folders])
    assert ingested.exit_code == 0, ingested.output
    profiled = runner.invoke(cli, ["profile", "--target-rps", "10"], env={"COLUMNS": "100"})
    assert profiled.exit_code == 0, profiled.output
    page = (REPO / "docs" / "profile.md").read_text()
    example = page.split("$ traceforge ingest ../shared/data/", 1)[1].split("```", 1)[0].splitlines()
    ingest_line, command = example[2], example[3]
    assert ingest_line == ingested.output.splitlines()[-1]
    assert command == "$ traceforge profile --target-rps 10"
    shown = example[4 : example.index("...", 4)]
    assert len(shown) > 30
    assert [line.rstrip() for line in profiled.stdout.splitlines()[: len(shown)]] == shown
