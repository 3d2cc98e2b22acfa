"""Small stores for the export tests: OpenAI and Anthropic transcripts written here, ingested through
the real adapters, plus `tool_deps` rows inserted the way the dependency analysis writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from traceforge.ingest import ingest_paths

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
EMAIL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "description": "Send an email",
        "parameters": {
            "type": "object",
            "properties": {
                "to": {"type": "string"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
        },
    },
}
FLIGHTS = {
    "type": "function",
    "function": {
        "name": "search_flights",
        "parameters": {
            "type": "object",
            "properties": {"origin": {"type": "string"}, "dest": {"type": "string"}},
        },
    },
}
BOOK = {
    "type": "function",
    "function": {
        "name": "book_flight",
        "parameters": {"type": "object", "properties": {"flight": {"type": "string"}}},
    },
}


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def assistant(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = list(calls)
    return out


def result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def openai_conversations() -> list[dict[str, Any]]:
    """Transcripts covering the export cases; `deps` lists each one's dependency edges by source id."""
    weather_trip = {
        "id": "trip-weather",
        "workload": "travel",
        "model": "gpt-4o",
        "outcome": "success",
        "started_at": "2025-03-01T10:00:00Z",
        "tools": [WEATHER, EMAIL],
        "messages": [
            {"role": "system", "content": "You are a travel assistant."},
            {"role": "user", "content": "Weather in Paris and Rome, then mail it to ann.lee@example.org"},
            assistant(call("call_w1", "get_weather", {"city": "Paris"}), content="Checking Paris first."),
            result("call_w1", "Paris: 20C, sunny"),
            assistant(call("call_w2", "get_weather", {"city": "Rome"}), content="Paris is 20C. Now Rome."),
            result("call_w2", "Rome: 25C, clear"),
            assistant(
                call(
                    "call_w3",
                    "send_email",
                    {"to": "ann.lee@example.org", "subject": "Weather", "body": "Paris 20C, Rome 25C"},
                )
            ),
            result("call_w3", "sent"),
            assistant(content="Paris is 20C and Rome 25C; I mailed you the summary."),
        ],
    }
    chain = {
        "id": "trip-chain",
        "workload": "travel",
        "model": "gpt-4o",
        "outcome": "failure",
        "started_at": "2025-03-02T09:00:00Z",
        "tools": [FLIGHTS, BOOK],
        "messages": [
            {"role": "user", "content": "Book the first flight from Oslo to Lima"},
            assistant(call("call_c1", "search_flights", {"origin": "OSL", "dest": "LIM"})),
            result("call_c1", '[{"flight": "LA8071"}]'),
            assistant(call("call_c2", "book_flight", {"flight": "LA8071"})),
            result("call_c2", "booked"),
            assistant(content="Booked LA8071."),
        ],
    }
    two_turns = {
        "id": "trip-two-turns",
        "workload": "travel",
        "model": "gpt-4o-mini",
        "outcome": "success",
        "started_at": "2025-03-03T08:00:00Z",
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Oslo, Bergen and Tromso?"},
            assistant(call("call_t1", "get_weather", {"city": "Oslo"})),
            result("call_t1", "Oslo: 3C"),
            assistant(call("call_t2", "get_weather", {"city": "Bergen"}), content="Oslo done."),
            result("call_t2", "Bergen: 6C, rain"),
            assistant(call("call_t3", "get_weather", {"city": "Tromso"})),
            result("call_t3", "Tromso: -4C"),
            assistant(content="Oslo 3C, Bergen 6C, Tromso -4C."),
            {"role": "user", "content": "And Paris?"},
            assistant(call("call_t4", "get_weather", {"city": "Paris"})),
            result("call_t4", "Paris: 20C"),
            assistant(content="Paris is 20C."),
        ],
    }
    secrets = {
        "id": "ops-secrets",
        "workload": "ops",
        "model": "gpt-4o",
        "outcome": "unknown",
        "started_at": "2025-03-04T08:00:00Z",
        "tools": [],
        "messages": [
            {"role": "user", "content": "Check the deploy; call me on +44 20 7946 0958 if it fails."},
            assistant(call("call_s1", "http_get", {"url": "https://deploy:hunter2pass@ci.internal/status"})),
            result("call_s1", "status ok from 10.20.30.40, token " + FAKE_OPENAI_KEY),
            assistant(
                call("call_s2", "http_get", {"url": "https://ci.internal/log", "api_key": FAKE_OPENAI_KEY})
            ),
            result("call_s2", "card on file 4111 1111 1111 1111"),
            assistant(content="Deploy is fine."),
        ],
    }
    unanswered = {
        "id": "broken-unanswered",
        "workload": "travel",
        "model": "gpt-4o",
        "started_at": "2025-03-05T08:00:00Z",
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Lima?"},
            assistant(call("call_u1", "get_weather", {"city": "Lima"})),
        ],
    }
    not_analysed = {
        "id": "trip-not-analysed",
        "workload": "travel",
        "model": "gpt-4o",
        "started_at": "2025-03-06T08:00:00Z",
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Quito and Cusco?"},
            assistant(call("call_n1", "get_weather", {"city": "Quito"})),
            result("call_n1", "Quito: 14C"),
            assistant(call("call_n2", "get_weather", {"city": "Cusco"})),
            result("call_n2", "Cusco: 11C"),
            assistant(content="Quito 14C, Cusco 11C."),
        ],
    }
    duplicate = json.loads(json.dumps(weather_trip))
    duplicate["id"] = "trip-weather-again"
    duplicate["started_at"] = "2025-03-07T08:00:00Z"
    return [weather_trip, chain, two_turns, secrets, unanswered, not_analysed, duplicate]


# Built at run time so that no secret scanner mistakes the test data for a leaked key.
FAKE_OPENAI_KEY = "sk-" + "proj-" + "Tst" * 10 + "x9"

# (trace source id, src call source id, dst call source id, kind)
DEPS = [
    ("trip-weather", "call_w1", "call_w3", "data"),
    ("trip-weather", "call_w2", "call_w3", "data"),
    ("trip-weather-again", "call_w1", "call_w3", "data"),
    ("trip-weather-again", "call_w2", "call_w3", "data"),
    ("trip-chain", "call_c1", "call_c2", "data"),
    ("ops-secrets", "call_s1", "call_s2", "control"),
]
# Traces the analysis covered but that have no edge: their calls are independent.
ANALYSED_WITHOUT_EDGES = ["trip-two-turns", "stock-anthropic"]


def anthropic_conversation() -> dict[str, Any]:
    """An Anthropic Messages transcript: thinking, text and tool_use blocks; results in user turns."""
    return {
        "id": "stock-anthropic",
        "workload": "finance",
        "model": "claude-sonnet-4",
        "outcome": "success",
        "started_at": "2025-03-08T08:00:00Z",
        "system": "You answer questions about stocks.",
        "tools": [
            {
                "name": "get_quote",
                "description": "Latest price",
                "input_schema": {"type": "object", "properties": {"symbol": {"type": "string"}}},
            },
            {
                "name": "get_news",
                "description": "Headlines",
                "input_schema": {
                    "type": "object",
                    "properties": {"symbol": {"type": "string"}, "limit": {"type": "integer"}},
                },
            },
        ],
        "messages": [
            {"role": "user", "content": "How is ACME doing today?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I need the quote and the news."},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_q", "name": "get_quote", "input": {"symbol": "ACME"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_q", "content": "101.5"}],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_n",
                        "name": "get_news",
                        "input": {"symbol": "ACME", "limit": 3},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_n", "content": "ACME beats estimates"}
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "ACME is at 101.5 after beating estimates."}],
            },
        ],
    }


def build_store(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    """Write the transcripts, ingest them, and record the dependency analysis for them."""
    openai_file = folder / "openai.jsonl"
    openai_file.write_text("\n".join(json.dumps(c) for c in openai_conversations()) + "\n")
    anthropic_file = folder / "anthropic.jsonl"
    anthropic_file.write_text(json.dumps(anthropic_conversation()) + "\n")
    report = ingest_paths(con, [openai_file, anthropic_file])
    assert report.totals()["rejected"] == 0, report
    insert_deps(con, DEPS)
    for source_id in ANALYSED_WITHOUT_EDGES + sorted({d[0] for d in DEPS}):
        con.execute(
            "INSERT INTO trace_dag (trace_id, tool_calls) SELECT trace_id, 0 FROM traces WHERE trace_id = ?",
            [source_id],
        )


def insert_deps(con: duckdb.DuckDBPyConnection, deps: list[tuple[str, str, str, str]]) -> None:
    for trace_id, src, dst, kind in deps:
        con.execute(
            """
            INSERT INTO tool_deps (trace_id, src_tool_call_id, dst_tool_call_id, kind, evidence)
            SELECT ?, s.tool_call_id, d.tool_call_id, ?, 'inserted by the test'
            FROM tool_calls s, tool_calls d
            WHERE s.trace_id = ? AND d.trace_id = ?
              AND s.source_tool_call_id = ? AND d.source_tool_call_id = ?
            """,
            [trace_id, kind, trace_id, trace_id, src, dst],
        )


def store_messages(con: duckdb.DuckDBPyConnection, trace_id: str) -> list[dict[str, Any]]:
    """The trace's messages straight from the store, as plain dicts (tool_calls JSON decoded)."""
    rows = con.execute(
        "SELECT role, content, tool_calls, tool_call_id, name, reasoning FROM messages "
        "WHERE trace_id = ? ORDER BY seq",
        [trace_id],
    ).fetchall()
    return [
        {
            "role": role,
            "content": content,
            "tool_calls": json.loads(calls) if calls else None,
            "tool_call_id": tool_call_id,
            "name": name,
            "reasoning": reasoning,
        }
        for role, content, calls, tool_call_id, name, reasoning in rows
    ]
