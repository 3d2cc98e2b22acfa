"""OpenTelemetry ingest: OTLP/JSON, ReadableSpan JSON and bare attribute maps, in every GenAI dialect.

The fixtures under tests/fixtures/otlp/ are hand-written, one per dialect; their expected values below
are the values written into them. The real recorded spans under ../shared/data/otel are checked
against counts this file computes from the raw JSON itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from traceforge.cli import cli
from traceforge.ingest import detect, ingest_paths, otlp
from traceforge.ingest.otel_wire import any_value, nanos_time, normalize_id
from traceforge.ingest.sources import SourceError, load, read_records

FIXTURES = Path(__file__).parent / "fixtures" / "otlp"
BASE_MS = 1_760_000_000_000  # the fixtures' time origin, in epoch milliseconds


def rows(con, sql: str, *params) -> list[tuple]:
    return con.execute(sql, list(params)).fetchall()


def source_row(con, path: Path) -> dict:
    cursor = con.execute(
        "SELECT format, records, ingested, rejected, skipped, skipped_by_kind, traces FROM sources "
        "WHERE path = ?",
        [str(path)],
    )
    names = [d[0] for d in cursor.description]
    row = dict(zip(names, cursor.fetchone(), strict=True))
    row["skipped_by_kind"] = json.loads(row["skipped_by_kind"])
    return row


def write_jsonl(path: Path, documents: list) -> Path:
    path.write_text("".join((d if isinstance(d, str) else json.dumps(d)) + "\n" for d in documents))
    return path


def kv(attributes: dict) -> list[dict]:
    """OTLP KeyValues for plain values (strings and ints only; enough for inline cases)."""
    return [
        {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
        for k, v in attributes.items()
    ]


def otlp_span(trace, span_id, name, start_ms, end_ms, attributes, parent=None, **extra):
    span = {
        "traceId": trace,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str((BASE_MS + start_ms) * 1_000_000),
        "endTimeUnixNano": str((BASE_MS + end_ms) * 1_000_000),
        "attributes": kv(attributes),
        **extra,
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def document(*spans, service="svc") -> dict:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": kv({"service.name": service})},
                "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}],
            }
        ]
    }


# ---------------------------------------------------------------- hand-written fixtures, per dialect


def test_otel_genai_current_rebuilds_a_parallel_turn_with_sibling_tool_spans(con):
    path = FIXTURES / "otel_genai_current.jsonl"
    ingest_paths(con, [path])

    traces = rows(
        con, "SELECT trace_id, workload, agent, outcome, source_format FROM traces ORDER BY trace_id"
    )
    assert traces == [
        ("0af7651916cd43dd8448eb211c80319c", "billing-agent", "refund_agent", "failure", "otlp"),
        ("5b8efff798038103d269b633813fc60c", "travel-agent", "travel_planner", "success", "otlp"),
    ]
    trace = "5b8efff798038103d269b633813fc60c"
    calls = rows(
        con,
        "SELECT call_id, model, provider, input_tokens, cache_read_tokens, output_tokens, reasoning_tokens,"
        " ttft_ms, finish_reason, usage_reported, duration_ms FROM llm_calls WHERE trace_id = ? ORDER BY seq",
        trace,
    )
    assert calls == [
        (
            "chatcmpl-A1",
            "gpt-4o-2024-08-06",
            "openai",
            1850,
            1536,
            64,
            None,
            410.0,
            "tool_calls",
            True,
            1290.0,
        ),
        ("chatcmpl-A2", "gpt-4o-2024-08-06", "openai", 1990, 1792, 52, 12, None, "stop", True, 1190.0),
    ]
    # Both tool spans are siblings of the chat spans (children of invoke_agent): joined by call id.
    tools = rows(
        con,
        "SELECT tool_call_id, call_id, name, json(arguments)::VARCHAR, result, is_error,"
        " epoch_ms(started_at), epoch_ms(ended_at), duration_ms FROM tool_calls WHERE trace_id = ?"
        " ORDER BY seq",
        trace,
    )
    assert tools == [
        (
            "call_1",
            "chatcmpl-A1",
            "search_flights",
            '{"to":"PAR"}',
            '{"flights": ["AF1234"]}',
            False,
            BASE_MS + 1310,
            BASE_MS + 2100,
            790.0,
        ),
        (
            "call_2",
            "chatcmpl-A1",
            "search_hotels",
            '{"city":"Paris"}',
            '{"hotels": ["Hotel Lutetia"]}',
            False,
            BASE_MS + 2110,
            BASE_MS + 2900,
            790.0,
        ),
    ]
    messages = rows(
        con, "SELECT role, tool_call_id, call_id FROM messages WHERE trace_id = ? ORDER BY seq", trace
    )
    assert messages == [
        ("system", None, None),
        ("user", None, None),
        ("assistant", None, "chatcmpl-A1"),
        ("tool", "call_1", None),
        ("tool", "call_2", None),
        ("assistant", None, "chatcmpl-A2"),
    ]
    assert rows(con, "SELECT name FROM tool_defs WHERE trace_id = ? ORDER BY name", trace) == [
        ("search_flights",),
        ("search_hotels",),
    ]
    attributes = json.loads(rows(con, "SELECT attributes FROM traces WHERE trace_id = ?", trace)[0][0])
    assert attributes["conversation_id"] == "conv_abc"

    # The second trace records its messages only in the inference-details event; its tool failed.
    refund = rows(
        con,
        "SELECT name, json(arguments)::VARCHAR, result, is_error, duration_ms FROM tool_calls"
        " WHERE trace_id = ?",
        "0af7651916cd43dd8448eb211c80319c",
    )
    assert refund == [("refund", '{"order":42}', None, True, 1000.0)]

    source = source_row(con, path)
    assert source["format"] == "otlp" and source["rejected"] == 0 and source["traces"] == 2
    assert source["skipped_by_kind"] == {"agent span": 2, "http span": 1}
    assert source["records"] == 9 == source["ingested"] + source["skipped"]


def test_deprecated_conventions_base64_ids_and_tool_spans_joined_by_name(con):
    path = FIXTURES / "otel_genai_deprecated.json"
    ingest_paths(con, [path])
    # base64 ids, as protobuf's own JSON printer writes them, come out as the usual hex.
    ((trace_id, workload, outcome),) = rows(con, "SELECT trace_id, workload, outcome FROM traces")
    assert trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert workload.startswith("fp-")  # service.name is the SDK default: no workload name at all
    assert outcome == "success"
    calls = rows(
        con,
        "SELECT provider, input_tokens, output_tokens, finish_reason, call_id FROM llm_calls ORDER BY seq",
    )
    assert calls == [
        ("anthropic", 1200, 80, "tool_use", "c000000000000002"),
        ("anthropic", 1320, 40, "end_turn", "c000000000000005"),
    ]
    # The tool spans carry no call id: each takes the next unexecuted call of its name, in order.
    tools = rows(
        con,
        "SELECT tool_call_id, call_id, json(arguments)::VARCHAR, is_error, epoch_ms(started_at) - ?"
        " FROM tool_calls ORDER BY seq",
        BASE_MS,
    )
    assert tools == [
        ("toolu_1", "c000000000000002", '{"id":42}', False, 1050),
        ("toolu_2", "c000000000000002", '{"id":43}', True, 1450),
    ]
    contents = rows(con, "SELECT role, content FROM messages ORDER BY seq")
    assert contents[0] == ("system", "You are a support agent.")
    assert contents[-1] == ("assistant", "Order 42 has shipped; order 43 was not found.")
    assert len(contents) == 6


def test_openinference_wrapper_llm_span_is_not_counted_twice(con):
    path = FIXTURES / "openinference.jsonl"
    ingest_paths(con, [path])
    ((agent, workload),) = rows(con, "SELECT agent, workload FROM traces")
    assert (agent, workload) == ("weather_bot", "weather-svc")
    calls = rows(
        con,
        "SELECT call_id, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens FROM llm_calls"
        " ORDER BY seq",
    )
    # ChatOpenAI (LangChain) wraps ChatCompletion (the OpenAI client): only the inner call counts.
    assert calls == [("d000000000000003", 420, None, 100, 38), ("d000000000000006", 520, 400, None, 30)]
    tools = rows(
        con,
        "SELECT tool_call_id, call_id, result, epoch_ms(started_at) - ?, epoch_ms(ended_at) - ?"
        " FROM tool_calls ORDER BY seq",
        BASE_MS,
        BASE_MS,
    )
    # Paris's span has no id (joined by name), Rome's names call_b; they ran overlapping in time.
    assert tools == [
        ("call_a", "d000000000000003", "18C sunny", 1020, 1600),
        ("call_b", "d000000000000003", "21C cloudy", 1030, 1750),
    ]
    ((parameters,),) = rows(con, "SELECT parameters FROM tool_defs WHERE name = 'get_weather'")
    assert json.loads(parameters)["properties"] == {"city": {"type": "string"}}
    assert source_row(con, path)["skipped_by_kind"] == {
        "agent span": 1,
        "chain span": 1,
        "llm wrapper span": 1,
    }


def test_openllmetry_indexed_prompts_and_a_tool_span_without_ids(con):
    path = FIXTURES / "openllmetry.jsonl"
    ingest_paths(con, [path])
    assert rows(con, "SELECT workload, agent FROM traces") == [("trip_planner", None)]
    calls = rows(
        con,
        "SELECT input_tokens, cache_read_tokens, output_tokens, ttft_ms, provider FROM llm_calls"
        " ORDER BY seq",
    )
    assert calls == [(210, 128, 25, 250.0, "openai"), (260, None, 12, None, "openai")]
    tools = rows(
        con, "SELECT tool_call_id, name, json(arguments)::VARCHAR, result, duration_ms FROM tool_calls"
    )
    assert tools == [("call_x", "find_flight", '{"dest":"TYO"}', "JL 43 at 10:05", 500.0)]
    ((parameters,),) = rows(con, "SELECT parameters FROM tool_defs")
    assert json.loads(parameters) == {"type": "object", "properties": {"dest": {"type": "string"}}}


def test_vercel_ai_sdk_steps_tool_calls_and_error_results(con):
    path = FIXTURES / "vercel_ai.jsonl"
    ingest_paths(con, [path])
    assert rows(con, "SELECT workload FROM traces") == [("weather-chat",)]
    calls = rows(
        con,
        "SELECT provider, input_tokens, cache_read_tokens, output_tokens, ttft_ms FROM llm_calls"
        " ORDER BY seq",
    )
    assert calls == [("openai", 100, 64, 30, 320.5), ("openai", 180, None, 15, 410.0)]
    tools = rows(
        con, "SELECT tool_call_id, json(arguments)::VARCHAR, result, is_error FROM tool_calls ORDER BY seq"
    )
    assert tools == [
        ("call_v1", '{"city":"SF"}', '{"temp": 18}', False),
        ("call_v2", '{"city":"NYC"}', "weather service down", True),
    ]
    assert source_row(con, path)["skipped_by_kind"] == {"chain span": 1}


# ---------------------------------------------------------------- wire details


def test_any_value_kinds_and_64_bit_integers():
    nested = {
        "kvlistValue": {
            "values": [
                {"key": "n", "value": {"intValue": "9007199254740993"}},
                {"key": "ok", "value": {"boolValue": True}},
                {"key": "x", "value": {"doubleValue": 0.5}},
                {"key": "raw", "value": {"bytesValue": "AAE="}},
                {"key": "list", "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": 3}]}}},
            ]
        }
    }
    assert any_value(nested) == {"n": 9007199254740993, "ok": True, "x": 0.5, "raw": "AAE=", "list": ["a", 3]}
    assert any_value({}) is None
    # Nanosecond timestamps keep their microseconds exactly, from strings and numbers alike.
    assert nanos_time("1760000000123456789") == nanos_time(1760000000123456789)
    assert nanos_time("1760000000123456789").microsecond == 123456
    assert nanos_time("0") is None


@pytest.mark.parametrize(
    ("raw", "size", "expected"),
    [
        ("5B8EFFF798038103D269B633813FC60C", 16, "5b8efff798038103d269b633813fc60c"),
        ("0x00f067aa0ba902b7", 8, "00f067aa0ba902b7"),
        ("S/kvNXezTaajzpKdDg5HNg==", 16, "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("APBnqgupArc=", 8, "00f067aa0ba902b7"),
        ("00000000000000000000000000000000", 16, None),
        ("", 8, None),
    ],
)
def test_ids_in_hex_or_base64(raw, size, expected):
    assert normalize_id(raw, size) == expected


def test_python_sdk_to_json_spans(con, tmp_path):
    """The Python SDK's `span.to_json()` shape: 0x ids, ISO times, status names, a resource."""
    trace = "0x" + "ab" * 16
    spans = [
        {
            "name": "chat gpt-4o",
            "context": {"trace_id": trace, "span_id": "0x" + "01" * 8, "trace_state": "[]"},
            "kind": "SpanKind.CLIENT",
            "parent_id": "0x" + "02" * 8,
            "start_time": "2025-06-01T10:00:00.000000Z",
            "end_time": "2025-06-01T10:00:02.500000Z",
            "status": {"status_code": "ERROR", "description": "rate limited"},
            "attributes": {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 11,
                "gen_ai.usage.output_tokens": 0,
            },
            "events": [],
            "links": [],
            "resource": {"attributes": {"service.name": "py-agent"}, "schema_url": ""},
        },
        {
            "name": "invoke_agent",
            "context": {"trace_id": trace, "span_id": "0x" + "02" * 8, "trace_state": "[]"},
            "kind": "SpanKind.INTERNAL",
            "parent_id": None,
            "start_time": "2025-06-01T10:00:00.000000Z",
            "end_time": "2025-06-01T10:00:03.000000Z",
            "status": {"status_code": "ERROR"},
            "attributes": {"gen_ai.operation.name": "invoke_agent"},
            "events": [],
            "resource": {"attributes": {"service.name": "py-agent"}, "schema_url": ""},
        },
    ]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(spans, indent=4))
    ingest_paths(con, [path])
    assert rows(con, "SELECT trace_id, workload, outcome FROM traces") == [("ab" * 16, "py-agent", "failure")]
    assert rows(con, "SELECT input_tokens, output_tokens, duration_ms FROM llm_calls") == [(11, 0, 2500.0)]


def test_log_records_in_the_same_file_become_the_span_s_message_events(con, tmp_path):
    trace, span_id = "11" * 16, "22" * 8
    chat = otlp_span(
        trace, span_id, "chat m", 0, 900, {"gen_ai.operation.name": "chat", "gen_ai.system": "openai"}
    )

    def log(event_name, body, span=span_id):
        return {
            "timeUnixNano": str((BASE_MS + 10) * 1_000_000),
            "eventName": event_name,
            "traceId": trace,
            "spanId": span,
            "body": {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in body.items()]}},
        }

    logs = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            log("gen_ai.user.message", {"content": {"stringValue": "hi"}}),
                            log(
                                "gen_ai.choice",
                                {
                                    "index": {"intValue": "0"},
                                    "finish_reason": {"stringValue": "stop"},
                                    "message": {
                                        "kvlistValue": {
                                            "values": [{"key": "content", "value": {"stringValue": "hello"}}]
                                        }
                                    },
                                },
                            ),
                            log("gen_ai.user.message", {"content": {"stringValue": "lost"}}, span="33" * 8),
                        ]
                    }
                ]
            }
        ]
    }
    path = write_jsonl(tmp_path / "collector.jsonl", [document(chat), logs])
    ingest_paths(con, [path])
    assert rows(con, "SELECT role, content FROM messages ORDER BY seq") == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    assert rows(con, "SELECT finish_reason FROM llm_calls") == [("stop",)]
    source = source_row(con, path)
    assert source["skipped_by_kind"] == {"log record whose span is not in this file": 1}
    assert source["records"] == 4 == source["ingested"] + source["skipped"]


def test_unusable_records_are_rejected_with_their_line(con, tmp_path):
    trace = "44" * 16
    good = document(
        otlp_span(trace, "55" * 8, "execute_tool t", 0, 5, {"gen_ai.operation.name": "execute_tool"})
    )
    no_trace_id = {"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "66" * 8, "name": "x"}]}]}]}
    path = write_jsonl(
        tmp_path / "mixed.jsonl",
        [good, no_trace_id, {"some": "thing else"}, '{"resourceSpans": [{"scopeSp', {"resourceSpans": []}],
    )
    ingest_paths(con, [path])
    rejects = rows(con, "SELECT line, error FROM rejects ORDER BY line")
    assert [line for line, _ in rejects] == [2, 3, 4]
    assert "traceId" in rejects[0][1]
    assert "not an OpenTelemetry trace record" in rejects[1][1]
    assert "invalid JSON" in rejects[2][1]
    assert rows(con, "SELECT name, call_id FROM tool_calls") == [("t", None)]
    source = source_row(con, path)
    assert source["skipped_by_kind"] == {"empty document": 1}
    assert source["records"] == source["ingested"] + source["rejected"] + source["skipped"] == 5


def test_tool_span_joins_the_llm_call_under_its_nearest_parent_before_time_order(con, tmp_path):
    """Two agent steps overlap in time; a tool span inside step 1 starts after step 2's LLM call
    began. With no call id, the step it sits in decides, not the clock."""
    t = "77" * 16
    spans = [
        otlp_span(t, "0000000000000001", "root", 0, 100, {}),
        otlp_span(
            t,
            "0000000000000002",
            "step 1",
            0,
            90,
            {"gen_ai.operation.name": "agent_step"},
            "0000000000000001",
        ),
        otlp_span(
            t,
            "0000000000000003",
            "step 2",
            5,
            95,
            {"gen_ai.operation.name": "agent_step"},
            "0000000000000001",
        ),
        otlp_span(
            t, "000000000000000a", "chat", 1, 10, {"gen_ai.operation.name": "chat"}, "0000000000000002"
        ),
        otlp_span(
            t, "000000000000000b", "chat", 6, 12, {"gen_ai.operation.name": "chat"}, "0000000000000003"
        ),
        otlp_span(
            t,
            "000000000000000c",
            "execute_tool a",
            20,
            30,
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "a"},
            "0000000000000002",
        ),
        otlp_span(
            t,
            "000000000000000d",
            "execute_tool b",
            21,
            31,
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "b"},
        ),
    ]
    ingest_paths(con, [write_jsonl(tmp_path / "steps.jsonl", [document(*spans)])])
    assert rows(con, "SELECT name, call_id FROM tool_calls ORDER BY name") == [
        ("a", "000000000000000a"),  # under step 1, though step 2's call started later
        ("b", "000000000000000b"),  # parent not in the trace: the latest call started before it
    ]


# ---------------------------------------------------------------- real recorded spans


def _vercel_spans(value) -> list[dict]:
    return value if isinstance(value, list) else [s for group in value.values() for s in group]


@pytest.mark.parametrize("name", ["all-spans.json", "spans-by-operation.json"])
def test_real_vercel_ai_sdk_spans(con, shared_data, name):
    path = shared_data / "otel" / "vercel_ai_v6_spans" / name
    spans = _vercel_spans(json.loads(path.read_text()))
    # The provider calls are the doGenerate / doStream spans; the outer ai.generateText etc. repeat
    # their usage and embeddings are no LLM call.
    provider_calls = [s for s in spans if s["name"].endswith((".doGenerate", ".doStream"))]
    expected_input = sum(s["attributes"]["gen_ai.usage.input_tokens"] for s in provider_calls)
    expected_output = sum(s["attributes"]["gen_ai.usage.output_tokens"] for s in provider_calls)
    expected_traces = {s["spanContext"]["traceId"] for s in provider_calls}

    ingest_paths(con, [path])
    assert rows(con, "SELECT count(*) FROM rejects") == [(0,)]
    ((traces, calls, tools, input_tokens, output_tokens),) = rows(
        con,
        "SELECT (SELECT count(*) FROM traces), count(*), (SELECT count(*) FROM tool_calls),"
        " sum(input_tokens), sum(output_tokens) FROM llm_calls",
    )
    assert (traces, calls, tools) == (len(expected_traces), len(provider_calls), 0)
    assert (input_tokens, output_tokens) == (expected_input, expected_output)
    assert {t for (t,) in rows(con, "SELECT trace_id FROM traces")} == expected_traces
    source = source_row(con, path)
    assert source["records"] == len(spans) == source["ingested"] + source["skipped"]
    streamed = [s for s in provider_calls if "ai.response.msToFirstChunk" in s["attributes"]]
    assert rows(con, "SELECT count(*) FROM llm_calls WHERE ttft_ms IS NOT NULL") == [(len(streamed),)]


def _tool_call_ids(attributes: dict) -> set[str]:
    """Tool call ids anywhere in a flat GenAI attribute map, read with plain json."""
    ids = set()
    for key, value in attributes.items():
        if re.fullmatch(r"llm\.(input|output)_messages\.\d+\.message\.tool_calls\.\d+\.tool_call\.id", key):
            ids.add(value)
        if isinstance(value, str) and value.startswith(("[", "{")):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                continue
            messages = parsed.get("messages", []) if isinstance(parsed, dict) else parsed
            for message in messages if isinstance(messages, list) else []:
                for part in message.get("parts", []) if isinstance(message, dict) else []:
                    if part.get("type") == "tool_call":
                        ids.add(part["id"])
    return ids


@pytest.mark.parametrize(
    "name",
    [
        "openinference_client_span_input_output_only.json",
        "openinference_client_span_tool_calls.json",
        "otel_genai_client_span_tool_calls.json",
        "otel_genai_deprecated_client_span_tool_calls.json",
        "otel_genai_tool_execution_span.json",
    ],
)
def test_real_genai_attribute_maps_ingest_as_one_span_traces(con, shared_data, name):
    path = shared_data / "otel" / "genai_fixtures" / name
    attributes = json.loads(path.read_text())
    is_tool_span = attributes.get("gen_ai.operation.name") == "execute_tool"
    expected_tools = 1 if is_tool_span else len(_tool_call_ids(attributes))
    expected_input = attributes.get("gen_ai.usage.input_tokens", attributes.get("llm.token_count.prompt"))

    ingest_paths(con, [path])
    assert rows(con, "SELECT count(*) FROM rejects") == [(0,)]
    assert rows(con, "SELECT count(*) FROM traces") == [(1,)]
    assert rows(con, "SELECT count(*), sum(input_tokens) FROM llm_calls") == [
        (0, None) if is_tool_span else (1, expected_input)
    ]
    assert rows(con, "SELECT count(*) FROM tool_calls") == [(expected_tools,)]
    if not is_tool_span:
        # The tool call in the history has its result linked, by id.
        assert rows(con, "SELECT count(*) FROM tool_calls WHERE result IS NOT NULL") == [(expected_tools,)]


def _sample(path: Path) -> list:
    try:
        return list(read_records(load(path), []))[: detect.SAMPLE_SIZE]
    except SourceError:  # not JSON at all: no adapter gets to sniff it
        return []


def test_sniffers_never_claim_each_other_s_files(shared_data):
    span_files = [
        *sorted((shared_data / "otel" / "genai_fixtures").glob("*.json")),
        shared_data / "otel" / "vercel_ai_v6_spans" / "all-spans.json",
        shared_data / "otel" / "vercel_ai_v6_spans" / "spans-by-operation.json",
        *sorted(FIXTURES.iterdir()),
    ]
    for path in span_files:
        sample = _sample(path)
        assert otlp.sniff(sample) >= 0.5, path
        others = {a.FORMAT: a.sniff(sample) for a in detect.ADAPTERS if a is not otlp}
        assert all(score < 0.5 for score in others.values()), (path, others)
    not_spans = [
        shared_data / "otel" / "vercel_ai_v6_spans" / "capture-results.json",
        shared_data / "otel" / "anthropic_cassettes" / "reasoning-tool-use-non-streaming.json",
        *(
            p
            for p in sorted(shared_data.rglob("*"))
            if p.is_file() and "otel" not in p.parts and p.suffix != ".md"
        ),
    ]
    for path in not_spans:
        assert otlp.sniff(_sample(path)) < 0.5, path


# ---------------------------------------------------------------- through the CLI


def test_cli_ingests_every_dialect_without_a_format_flag(runner, db_path):
    result = runner.invoke(cli, ["ingest", str(FIXTURES), "--db", str(db_path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {f["format"] for f in report["files"]} == {"otlp"}
    assert report["totals"]["rejected"] == 0

    from traceforge import store

    con = store.connect(db_path)
    try:
        by_file = rows(
            con,
            "SELECT regexp_extract(t.source_path, '[^/]+$'), count(DISTINCT t.trace_id),"
            " (SELECT count(*) FROM llm_calls c WHERE c.trace_id IN"
            "   (SELECT trace_id FROM traces WHERE source_path = t.source_path)),"
            " (SELECT count(*) FROM tool_calls c WHERE c.trace_id IN"
            "   (SELECT trace_id FROM traces WHERE source_path = t.source_path))"
            " FROM traces t GROUP BY t.source_path ORDER BY 1",
        )
    finally:
        con.close()
    assert by_file == [
        ("openinference.jsonl", 1, 2, 2),
        ("openllmetry.jsonl", 1, 2, 1),
        ("otel_genai_current.jsonl", 2, 3, 3),
        ("otel_genai_deprecated.json", 1, 2, 2),
        ("vercel_ai.jsonl", 1, 2, 2),
    ]
