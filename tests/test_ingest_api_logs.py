"""Per-request API logs (OpenAI Chat Completions and Anthropic Messages): conversion, token
semantics, and grouping records into conversations."""

from __future__ import annotations

import json

from builders import BOOK_TOOL, WEATHER_TOOL, AnthropicLoop, OpenAILoop, openai_tool_call, write_jsonl

from traceforge.ingest import ingest_paths


def weather_conversation(user: str, cities: list[str], **kwargs) -> OpenAILoop:
    """An agent that looks up each city's weather one call per turn, then answers."""
    loop = OpenAILoop("You are a weather assistant.", user, tools=[WEATHER_TOOL], **kwargs)
    for i, city in enumerate(cities):
        call_id = f"call_{city.lower()}_{i}"
        loop.call(tool_calls=[openai_tool_call(call_id, "get_weather", {"city": city})])
        loop.result(call_id, json.dumps({"city": city, "temp_c": 10 + i}))
    loop.call(content="Here is the weather.")
    return loop


def test_openai_log_builds_one_trace_with_calls_tools_and_messages(tmp_path, con):
    loop = weather_conversation("Weather in Paris and Oslo?", ["Paris", "Oslo"], workload="weather-bot")
    write_jsonl(tmp_path / "gateway.jsonl", loop.records)

    report = ingest_paths(con, [tmp_path])

    assert [f.status for f in report.files] == ["new"]
    assert con.execute(
        "SELECT count(*), any_value(workload), any_value(source_format) FROM traces"
    ).fetchone() == (1, "weather-bot", "openai-chat")
    calls = con.execute(
        "SELECT call_id, seq, input_tokens, output_tokens, usage_reported, finish_reason "
        "FROM llm_calls ORDER BY seq"
    ).fetchall()
    assert [c[0] for c in calls] == [r["response"]["id"] for r in loop.records]
    assert [c[1] for c in calls] == [0, 1, 2]
    assert all(c[4] for c in calls)
    assert [c[5] for c in calls] == ["tool_calls", "tool_calls", "stop"]
    tools = con.execute(
        "SELECT tool_call_id, call_id, name, arguments->>'city', result FROM tool_calls ORDER BY seq"
    ).fetchall()
    assert [t[0] for t in tools] == ["call_paris_0", "call_oslo_1"]
    assert [t[1] for t in tools] == [calls[0][0], calls[1][0]]  # emitted by the call that asked
    assert [t[3] for t in tools] == ["Paris", "Oslo"]
    assert json.loads(tools[1][4]) == {"city": "Oslo", "temp_c": 11}
    roles = [r[0] for r in con.execute("SELECT role FROM messages ORDER BY seq").fetchall()]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert con.execute("SELECT name FROM tool_defs").fetchall() == [("get_weather",)]


def test_parallel_tool_calls_share_their_llm_call(tmp_path, con):
    loop = OpenAILoop("sys", "Weather in Paris and Rome?", tools=[WEATHER_TOOL])
    loop.call(
        tool_calls=[
            openai_tool_call("call_a", "get_weather", {"city": "Paris"}),
            openai_tool_call("call_b", "get_weather", {"city": "Rome"}),
        ]
    )
    loop.result("call_b", "rain")  # results may come back in any order
    loop.result("call_a", "sun")
    loop.call(content="Paris sun, Rome rain.")
    write_jsonl(tmp_path / "log.jsonl", loop.records)
    ingest_paths(con, [tmp_path])
    rows = con.execute("SELECT tool_call_id, call_id, seq, result FROM tool_calls ORDER BY seq").fetchall()
    assert [(r[0], r[2], r[3]) for r in rows] == [("call_a", 0, "sun"), ("call_b", 1, "rain")]
    assert rows[0][1] == rows[1][1] == loop.records[0]["response"]["id"]


def test_cached_tokens_are_part_of_input_tokens(tmp_path, con):
    loop = OpenAILoop("sys", "hi")
    loop.call(content="hello", prompt_tokens=1200, completion_tokens=7, cached=1024)
    write_jsonl(tmp_path / "log.jsonl", loop.records)
    ingest_paths(con, [tmp_path])
    assert con.execute(
        "SELECT input_tokens, cache_read_tokens, output_tokens, uncached_input_tokens FROM v_llm_calls"
    ).fetchone() == (1200, 1024, 7, 176)


def test_interleaved_conversations_without_ids_are_separated_by_prefix_chaining(tmp_path, con):
    paris = weather_conversation("Weather in Paris, Lyon, Nice?", ["Paris", "Lyon", "Nice"])
    oslo = weather_conversation("Weather in Oslo and Bergen?", ["Oslo", "Bergen"])
    interleaved = []
    for i in range(max(len(paris.records), len(oslo.records))):
        interleaved += [r[i] for r in (paris.records, oslo.records) if i < len(r)]
    write_jsonl(tmp_path / "mixed.jsonl", interleaved)

    ingest_paths(con, [tmp_path])

    rows = con.execute(
        "SELECT t.trace_id, list(c.call_id ORDER BY c.seq) FROM traces t JOIN llm_calls c USING (trace_id) "
        "GROUP BY 1 ORDER BY len(list(c.call_id)) DESC"
    ).fetchall()
    assert [r[1] for r in rows] == [
        [r["response"]["id"] for r in paris.records],
        [r["response"]["id"] for r in oslo.records],
    ]


def test_two_requests_continuing_the_same_call_form_a_branch(tmp_path, con):
    loop = OpenAILoop("sys", "Pick a flight to Rome", tools=[BOOK_TOOL])
    loop.call(content="I found F1 and F2. Which one?")
    loop.user("F1 please")
    first = OpenAILoop.__new__(OpenAILoop)
    first.__dict__.update({**loop.__dict__, "messages": list(loop.messages), "records": []})
    first.call(tool_calls=[openai_tool_call("call_f1", "book_flight", {"flight_id": "F1"})])
    # The user edits their reply and the client re-sends from the same point: a branch.
    loop.messages[-1] = {"role": "user", "content": "F2 actually"}
    loop.call(tool_calls=[openai_tool_call("call_f2", "book_flight", {"flight_id": "F2"})])
    records = [loop.records[0], first.records[0], loop.records[1]]
    write_jsonl(tmp_path / "branch.jsonl", records)

    ingest_paths(con, [tmp_path])

    traces = con.execute("SELECT trace_id, parent_trace_id FROM traces ORDER BY source_line").fetchall()
    assert len(traces) == 2
    root, branch = traces
    assert root[1] is None and branch[1] == root[0]
    per_trace = dict(con.execute("SELECT trace_id, count(*) FROM llm_calls GROUP BY 1").fetchall())
    assert per_trace == {root[0]: 2, branch[0]: 1}  # every API call counted once
    # The branch holds the whole conversation the model saw, shared prefix included.
    assert con.execute("SELECT count(*) FROM messages WHERE trace_id = ?", [branch[0]]).fetchone()[0] == 5


def test_explicit_session_ids_keep_identical_conversations_apart(tmp_path, con):
    a = weather_conversation("Weather in Paris?", ["Paris"], session="sess-a")
    b = weather_conversation("Weather in Paris?", ["Paris"], session="sess-b")
    write_jsonl(tmp_path / "log.jsonl", [a.records[0], b.records[0], a.records[1], b.records[1]])
    ingest_paths(con, [tmp_path])
    rows = con.execute(
        "SELECT trace_id, (SELECT count(*) FROM llm_calls c WHERE c.trace_id = t.trace_id) "
        "FROM traces t ORDER BY 1"
    ).fetchall()
    assert rows == [("sess-a", 2), ("sess-b", 2)]
    # The same tool call id in two conversations is made unique, and stays linked to its result.
    ids = con.execute("SELECT trace_id, tool_call_id FROM tool_calls ORDER BY trace_id").fetchall()
    assert len({i[1] for i in ids}) == 2
    linked = con.execute(
        "SELECT count(*) FROM messages m JOIN tool_calls t ON t.tool_call_id = m.tool_call_id "
        "AND t.trace_id = m.trace_id WHERE m.role = 'tool'"
    ).fetchone()[0]
    assert linked == 2


def test_legacy_function_call_records(tmp_path, con):
    record = {
        "request": {
            "model": "gpt-3.5-turbo-0613",
            "messages": [
                {"role": "user", "content": "weather in Paris then Rome"},
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"role": "function", "name": "get_weather", "content": "sun"},
            ],
            "functions": [WEATHER_TOOL["function"]],
        },
        "response": {
            "id": "chatcmpl-legacy",
            "created": 1700000000,
            "model": "gpt-3.5-turbo-0613",
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "function_call": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                    },
                    "finish_reason": "function_call",
                }
            ],
            "usage": {"prompt_tokens": 80, "completion_tokens": 10},
        },
    }
    write_jsonl(tmp_path / "legacy.jsonl", [record])
    ingest_paths(con, [tmp_path])
    tools = con.execute(
        "SELECT tool_call_id, name, arguments->>'city', result, call_id FROM tool_calls ORDER BY seq"
    ).fetchall()
    assert [(t[1], t[2], t[3]) for t in tools] == [
        ("get_weather", "Paris", "sun"),
        ("get_weather", "Rome", None),
    ]
    assert tools[0][4] is None  # emitted before the log began: no observed LLM call
    assert tools[1][4] == "chatcmpl-legacy"
    linked = con.execute("SELECT m.tool_call_id FROM messages m WHERE role = 'tool'").fetchone()[0]
    assert linked == tools[0][0]


def test_anthropic_log_blocks_thinking_errors_and_token_semantics(tmp_path, con):
    tools = [
        {
            "name": "read_file",
            "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ]
    loop = AnthropicLoop("You are a coding agent.", "Fix the bug in app.py", tools=tools)
    thought = loop.call(
        [
            {"type": "thinking", "thinking": "Read both files first.", "signature": "x"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "app.py"}},
            {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "util.py"}},
        ],
        input_tokens=20,
        cache_write=3000,
        output_tokens=90,
    )
    # as a recorded claude-sonnet-4-6 response with thinking counts it (in ../shared/data/otel)
    thought["response"]["usage"]["output_tokens_details"] = {"thinking_tokens": 28}
    loop.result("toolu_1", [{"type": "text", "text": "def main(): ..."}])
    loop.result("toolu_2", "No such file: util.py", is_error=True)
    loop.call(
        [{"type": "text", "text": "util.py is missing."}], input_tokens=150, cache_read=3000, output_tokens=12
    )
    write_jsonl(tmp_path / "anthropic.jsonl.gz", loop.records, compress=True)

    report = ingest_paths(con, [tmp_path])

    assert report.files[0].format == "anthropic-messages"
    calls = con.execute(
        "SELECT input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens, "
        "provider FROM llm_calls ORDER BY seq"
    ).fetchall()
    assert calls == [(3020, 0, 3000, 90, 28, "anthropic"), (3150, 3000, 0, 12, None, "anthropic")]
    tool_rows = con.execute("SELECT tool_call_id, result, is_error FROM tool_calls ORDER BY seq").fetchall()
    assert tool_rows == [("toolu_1", "def main(): ...", False), ("toolu_2", "No such file: util.py", True)]
    first = con.execute(
        "SELECT content, reasoning FROM messages WHERE role = 'assistant' ORDER BY seq"
    ).fetchone()
    assert first == ("Reading.", "Read both files first.")
    assert (
        con.execute("SELECT content FROM messages WHERE seq = 0").fetchone()[0] == "You are a coding agent."
    )
    assert (
        con.execute("SELECT parameters->>'$.properties.path.type' FROM tool_defs").fetchone()[0] == "string"
    )


def test_a_gateway_log_mixing_providers_ingests_whole(tmp_path, con):
    oa = weather_conversation("Weather in Paris?", ["Paris"])
    an = AnthropicLoop("sys", "hello")
    an.call([{"type": "text", "text": "hi"}])
    write_jsonl(tmp_path / "gateway.jsonl", [oa.records[0], an.records[0], oa.records[1]])
    report = ingest_paths(con, [tmp_path])
    assert report.files[0].rejected == 0
    assert dict(con.execute("SELECT source_format, count(*) FROM traces GROUP BY 1").fetchall()) == {
        "openai-chat": 1,
        "anthropic-messages": 1,
    }


def test_unusable_records_are_rejected_with_line_and_reason(tmp_path, con):
    ok = weather_conversation("Weather in Paris?", ["Paris"])
    lines = [
        json.dumps(ok.records[0]),
        '{"request": {"model": "gpt-4o", "messages": [',
        json.dumps({"request": {"model": "gpt-4o", "messages": []}, "error": {"message": "rate limited"}}),
        json.dumps({"hello": "world"}),
        json.dumps(ok.records[1]),
    ]
    (tmp_path / "log.jsonl").write_text("\n".join(lines) + "\n")

    report = ingest_paths(con, [tmp_path])

    rejects = con.execute("SELECT line, error, raw FROM rejects ORDER BY line").fetchall()
    assert [r[0] for r in rejects] == [2, 3, 4]
    assert "invalid JSON" in rejects[0][1]
    assert "without a response" in rejects[1][1] and "rate limited" in rejects[1][1]
    assert "not an API log record" in rejects[2][1]
    assert rejects[2][2] == lines[3]  # the raw record is kept
    assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == 2
    source = con.execute("SELECT records, ingested, rejected FROM sources").fetchone()
    assert source == (5, 2, 3)
    assert report.totals()["rejected"] == 3


def test_garbage_in_optional_fields_does_not_lose_the_record(tmp_path, con):
    loop = OpenAILoop("sys", "hi")
    loop.call(content="hello")
    loop.records[0]["request"]["tools"] = 7  # a logger wrote a count where the list belongs
    loop.records[0]["request"]["functions"] = {"not": "a list"}
    write_jsonl(tmp_path / "log.jsonl", loop.records)
    report = ingest_paths(con, [tmp_path])
    assert report.files[0].rejected == 0
    assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == 1


def test_fallback_ids_are_checked_against_the_store_too(tmp_path, con):
    """A source id taken in the store moves to its fallback; a fallback the store also holds is
    numbered further rather than colliding."""
    from traceforge.ingest.writer import _unique

    chosen = _unique({"a": "x", "b": "y"}, {"a": "x@1", "b": "y@1"}, in_store={"x", "x@1"})
    assert chosen == {"a": "x@1~2", "b": "y"}


def test_a_log_of_failed_calls_is_read_as_a_log_with_each_failure_rejected(tmp_path, con):
    failed = [
        {
            "request": {"model": "gpt-4o", "messages": [{"role": "user", "content": f"q{i}"}]},
            "error": {"type": "rate_limit_error", "message": "429 Too Many Requests"},
        }
        for i in range(3)
    ]
    write_jsonl(tmp_path / "outage.jsonl", failed)
    report = ingest_paths(con, [tmp_path])
    assert report.files[0].status == "new" and report.files[0].format == "openai-chat"
    reasons = [r[0] for r in con.execute("SELECT error FROM rejects ORDER BY line").fetchall()]
    assert len(reasons) == 3 and all("429 Too Many Requests" in r for r in reasons)
