"""OpenAI Responses API logs.

The fixtures under tests/fixtures/openai_responses/ are hand-written in the documented shapes, field by
field: the response object (`object: "response"`, `output` items `reasoning` / `function_call` /
`message` / `web_search_call` / `file_search_call`, `usage.input_tokens_details.cached_tokens`,
`usage.output_tokens_details.reasoning_tokens`) and the request (`instructions`, `input` as a string or
items, flat function `tools`, `previous_response_id`, `store`) follow the API reference
(https://platform.openai.com/docs/api-reference/responses/create and .../responses/object) and the
conversation-state guide (https://platform.openai.com/docs/guides/conversation-state): a request that
names `previous_response_id` sends only the new items; a stateless one (`store: false`) re-sends every
item, reasoning included. batch_output.jsonl follows the Batch API's output file
(https://platform.openai.com/docs/guides/batch: `{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error"}`). Every expected count below is computed from the raw files with
plain json, not taken from the adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_ingest import ingest_cli

from traceforge import store
from traceforge.ingest import (
    anthropic_messages,
    detect,
    ingest_paths,
    langfuse,
    langsmith,
    openai_chat,
    openai_responses,
)
from traceforge.ingest.sources import Record, load, read_records

FIXTURES = Path(__file__).parent / "fixtures" / "openai_responses"
GATEWAY = FIXTURES / "gateway.jsonl"
BATCH = FIXTURES / "batch_output.jsonl"


def raw_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def response_of(record: dict) -> dict | None:
    """The response object of a raw record, as the fixture nests it."""
    response = record.get("response")
    if isinstance(response, dict) and isinstance(response.get("body"), dict):
        response = response["body"]
    return response if isinstance(response, dict) and response.get("object") == "response" else None


def conversations(records: list[dict]) -> list[list[dict]]:
    """Group raw records into conversations: by previous_response_id, or (stateless) by re-sent
    function_call items whose call_id an earlier response emitted."""
    group_of: dict[str, int] = {}  # response id or call id -> group
    groups: list[list[dict]] = []
    for record in records:
        response = response_of(record)
        if response is None:
            continue
        request = record.get("request") or {}
        items = request.get("input") if isinstance(request.get("input"), list) else []
        links = [request.get("previous_response_id")] + [i.get("call_id") for i in items if i.get("type")]
        group = next((group_of[link] for link in links if link in group_of), None)
        if group is None:
            group = len(groups)
            groups.append([])
        groups[group].append(record)
        group_of[response["id"]] = group
        for item in response["output"]:
            if item.get("call_id"):
                group_of[item["call_id"]] = group
    return groups


def table(con, sql: str, *params) -> list[tuple]:
    return con.execute(sql, list(params)).fetchall()


def test_gateway_log_ingests_through_the_cli_with_counts_from_the_raw_file(runner, db_path):
    records = raw_lines(GATEWAY)
    responses = [r for r in map(response_of, records) if r is not None]
    function_calls = [i for r in responses for i in r["output"] if i["type"] == "function_call"]

    report = ingest_cli(runner, [GATEWAY], db_path)
    con = store.connect(db_path)

    assert report["files"][0]["format"] == "openai-responses"
    totals = report["totals"]
    assert totals["records"] == len(records)
    assert totals["rejected"] == len(records) - len(responses)
    assert totals["llm_calls"] == len(responses)
    assert totals["tool_calls"] == len(function_calls)
    assert totals["traces"] == len(conversations(records))
    sums = table(
        con,
        "SELECT sum(input_tokens), sum(cache_read_tokens), sum(output_tokens), sum(reasoning_tokens), "
        "bool_and(usage_reported) FROM llm_calls",
    )[0]
    assert sums == (
        sum(r["usage"]["input_tokens"] for r in responses),
        sum(r["usage"]["input_tokens_details"]["cached_tokens"] for r in responses),
        sum(r["usage"]["output_tokens"] for r in responses),
        sum(r["usage"]["output_tokens_details"]["reasoning_tokens"] for r in responses),
        True,
    )
    rejected = table(con, "SELECT line, error FROM rejects")
    assert [line for line, _ in rejected] == [n for n, r in enumerate(records, 1) if response_of(r) is None]
    assert "rate_limit_exceeded" in rejected[0][1]


def test_previous_response_chain_rebuilds_the_conversation_the_model_saw(con):
    records = raw_lines(GATEWAY)
    chain = next(g for g in conversations(records) if len(g) > 2)
    expected_roles = ["system"]
    for record in chain:
        items = record["request"]["input"]
        if isinstance(items, str):
            expected_roles.append("user")
        else:
            expected_roles += ["tool" if i["type"] == "function_call_output" else i["role"] for i in items]
        expected_roles.append("assistant")
    emitted_by = {
        item["call_id"]: response_of(r)["id"]
        for r in chain
        for item in response_of(r)["output"]
        if item["type"] == "function_call"
    }
    failed = {
        i["call_id"]
        for r in chain
        if isinstance(r["request"]["input"], list)
        for i in r["request"]["input"]
        if i["type"] == "function_call_output" and "error" in json.loads(i["output"])
    }

    ingest_paths(con, [GATEWAY])

    trace_id = table(con, "SELECT trace_id FROM llm_calls WHERE call_id = ?", response_of(chain[0])["id"])[0][
        0
    ]
    roles = [r for (r,) in table(con, "SELECT role FROM messages WHERE trace_id = ? ORDER BY seq", trace_id)]
    assert roles == expected_roles
    calls = table(
        con,
        "SELECT tool_call_id, call_id, is_error FROM tool_calls WHERE trace_id = ? ORDER BY seq",
        trace_id,
    )
    assert {tool_id: call for tool_id, call, _ in calls} == emitted_by
    assert {tool_id for tool_id, _, error in calls if error} == failed
    # the two searches of the first response were requested together: same LLM call
    first_response = response_of(chain[0])["id"]
    assert sum(1 for _, call, _ in calls if call == first_response) == 2
    workload, agent = table(con, "SELECT workload, agent FROM traces WHERE trace_id = ?", trace_id)[0]
    assert (workload, agent) == (
        chain[0]["request"]["metadata"]["workload"],
        chain[0]["request"]["metadata"]["agent"],
    )
    ttft = table(con, "SELECT ttft_ms, duration_ms FROM llm_calls WHERE call_id = ?", first_response)[0]
    assert ttft == (chain[0]["ttft_ms"], 4210.0)


def test_stateless_requests_that_resend_every_item_form_one_conversation(con):
    records = raw_lines(GATEWAY)
    stateless = [r for r in records if response_of(r) and r["request"].get("store") is False]
    ingest_paths(con, [GATEWAY])
    ids = [response_of(r)["id"] for r in stateless]
    traces = table(con, "SELECT DISTINCT trace_id FROM llm_calls WHERE call_id IN (SELECT unnest(?))", ids)
    assert len(traces) == 1
    (trace_id,) = traces[0]
    resent_calls = {
        i["call_id"] for i in stateless[-1]["request"]["input"] if i.get("type") == "function_call"
    }
    stored = table(
        con, "SELECT tool_call_id, result IS NOT NULL FROM tool_calls WHERE trace_id = ?", trace_id
    )
    assert stored == [(call, True) for call in resent_calls]
    reasoning = table(
        con, "SELECT reasoning FROM messages WHERE trace_id = ? AND role = 'assistant' ORDER BY seq", trace_id
    )
    assert reasoning[0][0] == stateless[0]["response"]["output"][0]["summary"][0]["text"]


def test_batch_output_responses_without_their_input_still_count(runner, db_path):
    records = raw_lines(BATCH)
    bodies = [r for r in map(response_of, records) if r is not None]
    hosted = [i for b in bodies for i in b["output"] if i["type"].endswith("_call")]

    report = ingest_cli(runner, [BATCH], db_path)
    con = store.connect(db_path)

    assert report["files"][0]["format"] == "openai-responses"
    assert report["totals"]["llm_calls"] == len(bodies)
    assert report["totals"]["rejected"] == len(records) - len(bodies)
    tools = table(con, "SELECT tool_call_id, name, result FROM tool_calls ORDER BY tool_call_id")
    assert [t[0] for t in tools] == sorted(i["id"] for i in hosted)
    assert {t[1] for t in tools} == {i["type"].removesuffix("_call") for i in hosted}
    file_search = next(i for i in hosted if i["type"] == "file_search_call")
    assert json.loads(next(t[2] for t in tools if t[0] == file_search["id"])) == file_search["results"]
    attributes = [json.loads(a) for (a,) in table(con, "SELECT attributes FROM traces")]
    assert all(a["records_without_input"] == 1 for a in attributes)
    systems = table(con, "SELECT content FROM messages WHERE role = 'system' ORDER BY content")
    assert [s for (s,) in systems] == sorted(b["instructions"] for b in bodies)
    assert "batch_expired" in table(con, "SELECT error FROM rejects")[0][0]


def test_detection_claims_responses_logs_and_nothing_else():
    for path in (GATEWAY, BATCH):
        records = list(read_records(load(path), []))
        assert detect.detect(records) is openai_responses
        for other in (openai_chat, anthropic_messages, langfuse, langsmith):
            assert other.sniff(records) < detect.THRESHOLD, (path.name, other.FORMAT)
    chat_log = {
        "request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        "response": {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"message": {"role": "assistant", "content": "hello"}}],
        },
    }
    assert openai_responses.sniff([Record(1, chat_log)]) == 0.0


def test_a_call_that_changes_instructions_mid_chain_is_a_consistent_trace_of_its_own(tmp_path, con):
    records = raw_lines(GATEWAY)
    chain = next(g for g in conversations(records) if len(g) > 2)
    changed = chain[2]  # the third call of the chain
    changed["request"]["instructions"] = "You are a terse travel assistant."
    path = tmp_path / "changed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))

    ingest_paths(con, [path])

    owner = dict(table(con, "SELECT call_id, trace_id FROM llm_calls"))
    chain_ids = [response_of(r)["id"] for r in chain]
    # the changed call stands alone; the calls after it, back on the old instructions, continue
    # the original conversation (with the changed call's output as history)
    others = {owner[i] for n, i in enumerate(chain_ids) if n != 2}
    assert len(others) == 1 and owner[chain_ids[2]] not in others
    # every message and tool call names an LLM call of its own trace
    strays = table(
        con,
        "SELECT count(*) FROM (SELECT trace_id, call_id FROM messages UNION ALL SELECT trace_id, call_id "
        "FROM tool_calls) m LEFT JOIN llm_calls c USING (trace_id, call_id) "
        "WHERE m.call_id IS NOT NULL AND c.call_id IS NULL",
    )
    assert strays == [(0,)]
    system = table(con, "SELECT content FROM messages WHERE trace_id = ? AND seq = 0", owner[chain_ids[2]])
    assert system == [(changed["request"]["instructions"],)]
    # it opens its trace mid-conversation: it keeps a hash per message of its request, by which a
    # later file's calls continuing it would be found (`ingest.log_joins`)
    prefixes, answered_at = table(
        con,
        "SELECT c.request_prefixes, min(m.seq) FROM llm_calls c JOIN messages m USING (trace_id, call_id) "
        "WHERE c.call_id = ? GROUP BY ALL",
        chain_ids[2],
    )[0]
    assert len(prefixes) == answered_at > 2


def test_what_every_request_sends_again_is_kept_once():
    """The instructions and tool definitions a log re-sends with every call are held once, not per
    record (most of a Responses log's bytes); different ones stay apart."""
    records = raw_lines(GATEWAY)
    chain = next(g for g in conversations(records) if len(g) > 2)
    repeats = openai_responses.Repeats()
    logged = [
        openai_responses.logged(Record(n, json.loads(json.dumps(r))), {}, repeats)
        for n, r in enumerate(chain, start=1)
    ]
    first, *later = logged
    assert all(item.instructions is first.instructions for item in later)
    assert all(
        [id(d) for d in item.exchange.tool_defs] == [id(d) for d in first.exchange.tool_defs]
        for item in later
    )
    other = json.loads(json.dumps(chain[0]))
    other["request"]["instructions"] += " Be brief."
    other["request"]["tools"][0]["description"] += " (cached)"
    changed = openai_responses.logged(Record(9, other), {}, repeats)
    assert changed.instructions == other["request"]["instructions"]
    assert changed.exchange.tool_defs[0].description == other["request"]["tools"][0]["description"]
    assert changed.exchange.tool_defs[0] is not first.exchange.tool_defs[0]
