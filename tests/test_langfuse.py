"""Langfuse exports: batch-export JSON / JSONL / CSV tables and the API's full trace.

No real Langfuse export exists under ../shared/data (reference/real-trace-formats.md §9), so the
fixtures under tests/fixtures/langfuse/ are hand-written in the shapes Langfuse's own code produces:
- observation rows as the batch export writes them: `convertObservation` plus `latency`,
  `timeToFirstToken`, `traceName`, `traceTags`, `userId` (langfuse/langfuse
  packages/shared/src/server/repositories/observations.ts, `getObservationsTableWithModelData`), as a
  JSON array (transformStreamToJson) and as CSV (transformStreamToCsv: a quoted header from the first
  row's keys, every cell quoted, objects as JSON text);
- trace rows of the traces table export, and a `GET /api/public/traces/{id}` TraceWithFullDetails
  with nested ObservationsView objects and legacy `usage` {input, output, total, unit};
- `usageDetails` in Langfuse's non-overlapping buckets: the LangChain CallbackHandler's
  `_parse_usage_model` (input_token_details -> `input_cache_read`, subtracted from `input`) and the
  server's OpenAI usage schema (`prompt_tokens_details.cached_tokens` -> `input_cached_tokens`,
  subtracted) (langfuse/langfuse-python langfuse/langchain/CallbackHandler.py;
  langfuse/langfuse packages/shared/src/server/ingestion/types.ts);
- observation input/output as the integrations record them: the LangChain handler's
  `_convert_message_to_dict` (`tool_calls` as LangChain `{name, args, id}` beside
  `additional_kwargs.tool_calls`), ToolMessage dumps with `tool_call_id` / `status`, the OpenAI
  integration's `{"tools", "messages"}` input, Anthropic content blocks beside `tool_calls` (the
  LangGraph production shape in langfuse/langfuse normalizedIO/conventions/langchain/fixtures.ts).
Every expected count below is computed from the raw files with plain json / csv.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

from cli_ingest import ingest_cli

from traceforge import store
from traceforge.ingest import detect, ingest_paths, langfuse, langsmith, openai_chat, openai_responses
from traceforge.ingest.sources import load, read_records

FIXTURES = Path(__file__).parent / "fixtures" / "langfuse"
OBSERVATIONS = FIXTURES / "observations.json"
CSV_EXPORT = FIXTURES / "observations.csv"
FULL_TRACE = FIXTURES / "trace_full.json"
TRACES = FIXTURES / "traces.jsonl"


TOKEN_SUMS = (
    "SELECT sum(input_tokens), sum(cache_read_tokens), sum(cache_write_tokens), sum(output_tokens) "
    "FROM llm_calls"
)


def table(con, sql: str, *params) -> list[tuple]:
    return con.execute(sql, list(params)).fetchall()


def csv_rows(path: Path) -> tuple[list[dict], int]:
    """The rows of a CSV export as dicts with JSON cells parsed, and how many rows do not fit the header."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    good = [dict(zip(header, r, strict=True)) for r in rows if len(r) == len(header)]
    for row in good:
        for key, value in row.items():
            if value[:1] in ("{", "["):
                row[key] = json.loads(value)
    return good, sum(1 for r in rows if len(r) != len(header))


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def messages_in(value) -> list:
    if isinstance(value, dict) and "messages" in value:
        return value["messages"]
    if isinstance(value, list):
        return value
    return [value] if isinstance(value, dict) else []


def tool_call_ids(generations: list[dict]) -> set[str]:
    """Every tool call id an assistant message of these generations' input or output names (as
    `tool_calls` or as Anthropic `tool_use` blocks)."""
    ids = set()
    for generation in generations:
        for message in messages_in(generation["input"]) + messages_in(generation["output"]):
            if message.get("role") != "assistant":
                continue
            ids |= {c["id"] for c in message.get("tool_calls") or []}
            blocks = message["content"] if isinstance(message.get("content"), list) else []
            ids |= {b["id"] for b in blocks if b.get("type") == "tool_use"}
    return ids


def usage_totals(generations: list[dict]) -> tuple[int, int, int, int]:
    """(input including cache, cache read, cache write, output) from usageDetails buckets."""
    details = [g["usageDetails"] for g in generations]
    return (
        sum(v for d in details for k, v in d.items() if k.startswith("input")),
        sum(v for d in details for k, v in d.items() if k in ("input_cache_read", "input_cached_tokens")),
        sum(v for d in details for k, v in d.items() if k == "input_cache_creation"),
        sum(v for d in details for k, v in d.items() if k.startswith("output")),
    )


def test_batch_export_json_through_the_cli(runner, db_path):
    rows = json.loads(OBSERVATIONS.read_text())
    generations = [r for r in rows if r["type"] == "GENERATION"]
    by_trace: dict[str, list[dict]] = {}
    for generation in generations:
        by_trace.setdefault(generation["traceId"], []).append(generation)
    skipped: dict[str, int] = {}
    for row in rows:
        if row["type"] not in ("GENERATION", "TOOL"):
            skipped[row["type"].lower()] = skipped.get(row["type"].lower(), 0) + 1

    report = ingest_cli(runner, [OBSERVATIONS], db_path)
    con = store.connect(db_path)

    (file,) = report["files"]
    assert file["format"] == "langfuse"
    assert (file["records"], file["rejected"], file["skipped"]) == (len(rows), 0, skipped)
    assert file["llm_calls"] == len(generations)
    assert file["traces"] == len(by_trace)
    assert file["tool_calls"] == sum(len(tool_call_ids(g)) for g in by_trace.values())
    sums = table(con, TOKEN_SUMS)[0]
    assert sums == usage_totals(generations)
    assert table(con, "SELECT sum(cost_usd) FROM llm_calls")[0][0] == sum(
        g["costDetails"].get("total", 0) for g in generations
    )
    workloads = dict(table(con, "SELECT trace_id, workload FROM traces"))
    assert workloads == {r["traceId"]: r["traceName"] for r in generations}
    ttft = dict(table(con, "SELECT call_id, ttft_ms FROM llm_calls"))
    assert ttft == {
        g["id"]: g["timeToFirstToken"] * 1000 if g["timeToFirstToken"] is not None else None
        for g in generations
    }


def test_tool_observations_give_measured_times_to_the_calls_they_executed(con):
    rows = json.loads(OBSERVATIONS.read_text())
    tools = [r for r in rows if r["type"] == "TOOL"]
    ingest_paths(con, [OBSERVATIONS])

    stored = {
        (name, round(duration)): (call_id, error)
        for name, duration, call_id, error in table(
            con, "SELECT name, duration_ms, call_id, is_error FROM tool_calls WHERE duration_ms IS NOT NULL"
        )
    }
    for tool in tools:
        call_id, error = stored[(tool["name"], round(tool["latency"] * 1000))]
        assert error == (tool["level"] == "ERROR")
        # the generation that requested it: the latest GENERATION of its trace started before it
        before = [
            r
            for r in rows
            if r["type"] == "GENERATION"
            and r["traceId"] == tool["traceId"]
            and r["startTime"] <= tool["startTime"]
        ]
        assert call_id == max(before, key=lambda r: r["startTime"])["id"]
    # the two weather lookups were requested in one generation but ran one after the other
    weather = table(
        con,
        "SELECT call_id, started_at, ended_at FROM tool_calls WHERE name = 'get_weather' ORDER BY started_at",
    )
    assert weather[0][0] == weather[1][0] and weather[0][2] <= weather[1][1]
    by_id = {
        r["output"]["tool_call_id"]: r
        for r in tools
        if isinstance(r["output"], dict) and "tool_call_id" in r["output"]
    }
    for tool_call_id, result in table(
        con,
        "SELECT tool_call_id, result FROM tool_calls WHERE tool_call_id IN (SELECT unnest(?))",
        list(by_id),
    ):
        assert result == by_id[tool_call_id]["output"]["content"]


def test_csv_export_with_json_cells_and_a_broken_row(runner, db_path):
    rows, broken = csv_rows(CSV_EXPORT)
    generations = [r for r in rows if r["type"] == "GENERATION"]
    tool_rows = [r for r in rows if r["type"] == "TOOL"]

    report = ingest_cli(runner, [CSV_EXPORT], db_path)
    con = store.connect(db_path)

    (file,) = report["files"]
    assert file["format"] == "langfuse"
    assert file["records"] == len(rows) + broken
    assert file["rejected"] == broken
    assert file["llm_calls"] == len(generations)
    assert file["tool_calls"] == len(tool_call_ids(generations)) == len(tool_rows)
    sums = table(con, TOKEN_SUMS)[0]
    assert sums == usage_totals(generations)
    assert "the header has" in table(con, "SELECT error FROM rejects")[0][0]
    # Anthropic tool_use blocks and LangChain tool_calls name the same calls: one tool call each
    arguments = table(con, "SELECT tool_call_id, arguments FROM tool_calls ORDER BY seq")
    assert [(i, json.loads(a)) for i, a in arguments] == [
        (r["output"]["tool_call_id"], r["input"]) for r in tool_rows
    ]
    # both reads overlapped in time: the measured intervals are stored as they were
    spans = {r["output"]["tool_call_id"]: (when(r["startTime"]), when(r["endTime"])) for r in tool_rows}
    stored = table(con, "SELECT tool_call_id, started_at, ended_at FROM tool_calls")
    assert {i: (started, ended) for i, started, ended in stored} == spans
    provider, model = table(con, "SELECT DISTINCT provider, model FROM llm_calls")[0]
    assert (provider, model) == (generations[0]["metadata"]["ls_provider"], generations[0]["model"])


def test_full_trace_with_nested_observations_and_tools_recorded_as_spans(con):
    document = json.loads(FULL_TRACE.read_text())
    observations = document["observations"]
    generations = [o for o in observations if o["type"] == "GENERATION"]
    called = {c["name"] for g in generations for c in g["output"].get("tool_calls") or []}
    tool_spans = [o for o in observations if o["type"] == "SPAN" and o["name"] in called]

    (report,) = ingest_paths(con, [FULL_TRACE]).files

    assert report.records == 1 + len(observations)
    assert report.skipped == {"span": sum(1 for o in observations if o["type"] == "SPAN") - len(tool_spans)}
    trace = table(con, "SELECT trace_id, workload, started_at IS NOT NULL, attributes FROM traces")
    assert [(t[0], t[1]) for t in trace] == [(document["id"], document["metadata"]["workload"])]
    assert json.loads(trace[0][3])["user_id"] == document["userId"]
    assert table(con, "SELECT sum(input_tokens), sum(output_tokens) FROM llm_calls")[0] == (
        sum(g["usage"]["input"] for g in generations),
        sum(g["usage"]["output"] for g in generations),
    )
    tools = table(con, "SELECT tool_call_id, name, duration_ms, call_id FROM tool_calls")
    assert len(tools) == len(tool_call_ids(generations)) == len(tool_spans)
    (span,) = tool_spans
    assert tools[0][1:] == (span["name"], span["latency"] * 1000, generations[0]["id"])
    roles = [r for (r,) in table(con, "SELECT role FROM messages ORDER BY seq")]
    assert roles == [m["role"] for m in generations[-1]["input"]] + ["assistant"]


def test_trace_table_alone_is_recognised_and_skipped_by_rule(runner, db_path):
    lines = TRACES.read_text().splitlines()
    report = ingest_cli(runner, [TRACES], db_path)
    (file,) = report["files"]
    assert file["format"] == "langfuse"
    assert file["skipped"] == {"trace without generations or tools": len(lines)}
    assert file["rejected"] == 0


def test_usage_details_overlapping_producer_is_not_double_counted():
    # a producer that passed input including the cache read, with total = input + output
    assert langfuse.usage_from_details(
        {"input": 1000, "cache_read_input_tokens": 800, "output": 50, "total": 1050}
    ) == {
        "input": 1000,
        "cache_read": 800,
        "cache_write": 0,
        "output": 50,
        "reasoning": 0,
    }


def test_detection_claims_langfuse_files_and_nothing_else():
    for path in (OBSERVATIONS, CSV_EXPORT, FULL_TRACE, TRACES):
        records = list(read_records(load(path), []))
        assert detect.detect(records) is langfuse, path.name
        for other in (langsmith, openai_chat, openai_responses):
            assert other.sniff(records) < detect.THRESHOLD, (path.name, other.FORMAT)


def snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def test_api_pages_and_snake_case_rows_read_like_the_batch_export(tmp_path):
    rows = json.loads(OBSERVATIONS.read_text())
    page = tmp_path / "page.json"  # GET /api/public/observations
    page.write_text(
        json.dumps({"data": rows, "meta": {"page": 1, "limit": 50, "totalItems": len(rows), "totalPages": 1}})
    )
    clickhouse = tmp_path / "clickhouse.jsonl"  # ClickHouse column names, JSON columns as text
    clickhouse.write_text(
        "".join(
            json.dumps(
                {snake(k): json.dumps(v) if k in ("input", "output", "metadata") else v for k, v in r.items()}
            )
            + "\n"
            for r in rows
        )
    )
    seen = []
    for path in (OBSERVATIONS, page, clickhouse):  # each in a store of its own: in one, they would be joined
        con = store.connect(tmp_path / f"{path.stem}.duckdb")
        ingest_paths(con, [path])
        seen.append(
            table(
                con,
                "SELECT count(*), sum(input_tokens), sum(output_tokens), count(DISTINCT trace_id), "
                "(SELECT count(*) FROM tool_calls WHERE duration_ms IS NOT NULL) FROM llm_calls",
            )
        )
        con.close()
    assert seen[0][0][0] == sum(1 for r in rows if r["type"] == "GENERATION")
    assert seen[0][0][4] == sum(1 for r in rows if r["type"] == "TOOL")
    assert seen == [seen[0]] * 3
