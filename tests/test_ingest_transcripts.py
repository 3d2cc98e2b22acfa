"""Transcripts: conversations saved as messages lists, in each container shape."""

from __future__ import annotations

import json

import pytest
from builders import write_jsonl

from traceforge.ingest import ingest_paths
from traceforge.ingest.conversation import looks_like_error

OPENAI_CONVERSATION = [
    {"role": "system", "content": "# Airline agent policy"},
    {"role": "user", "content": "Cancel reservation ABC123"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_reservation", "arguments": '{"reservation_id": "ABC123"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "get_reservation", "content": '{"status": "booked"}'},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "cancel_reservation", "arguments": '{"reservation_id": "ABC123"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_2",
        "name": "cancel_reservation",
        "content": "Error: not refundable",
    },
    {"role": "assistant", "content": "It cannot be refunded."},
]


def test_json_array_of_conversations_with_metadata(tmp_path, con):
    runs = [
        {"task_id": 7, "trial": 0, "reward": 1.0, "model": "gpt-4o", "messages": OPENAI_CONVERSATION},
        {"task_id": 7, "trial": 1, "reward": 0.0, "model": "gpt-4o", "messages": OPENAI_CONVERSATION[:4]},
    ]
    (tmp_path / "runs.json").write_text(json.dumps(runs, indent=2))

    ingest_paths(con, [tmp_path])

    traces = con.execute(
        "SELECT outcome, source_line, attributes->>'shape' FROM traces ORDER BY source_line"
    ).fetchall()
    assert traces == [("success", 1, "transcript"), ("failure", 2, "transcript")]
    calls = con.execute(
        "SELECT count(*), bool_or(usage_reported), any_value(model) FROM llm_calls"
    ).fetchone()
    assert calls == (4, False, "gpt-4o")  # one call per assistant message, tokens not reported
    errors = con.execute(
        "SELECT name, is_error FROM tool_calls WHERE result IS NOT NULL ORDER BY trace_id, seq"
    ).fetchall()
    assert ("cancel_reservation", True) in errors and ("get_reservation", False) in errors


def test_single_json_document_and_jsonl_give_the_same_conversation(tmp_path, con):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "conv.json").write_text(
        json.dumps({"id": "conv-42", "messages": OPENAI_CONVERSATION})
    )
    write_jsonl(
        tmp_path / "lines" / "convs.jsonl", [{"conversation_id": "conv-43", "messages": OPENAI_CONVERSATION}]
    )
    ingest_paths(con, [tmp_path])
    shapes = con.execute("SELECT trace_id, count(*) FROM messages GROUP BY 1 ORDER BY 1").fetchall()
    assert shapes == [("conv-42", 7), ("conv-43", 7)]


def test_bare_message_list_is_one_conversation(tmp_path, con):
    write_jsonl(tmp_path / "messages.jsonl", OPENAI_CONVERSATION)
    report = ingest_paths(con, [tmp_path])
    assert report.files[0].traces == 1
    assert con.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == 2
    assert con.execute("SELECT count(*) FROM rejects").fetchone()[0] == 0


def test_anthropic_transcripts_with_system_and_blocks(tmp_path, con):
    conversation = {
        "id": "run-1",
        "model": "claude-opus-4-1",
        "system": "You are a careful SRE agent.",
        "tools": [{"name": "kubectl", "description": "Run kubectl", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Why is checkout down?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking pods and events."},
                    {"type": "tool_use", "id": "toolu_a", "name": "kubectl", "input": {"args": "get pods"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "kubectl", "input": {"args": "get events"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_b",
                        "content": [{"type": "text", "text": "OOMKilled"}],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_a",
                        "content": "checkout-7d 0/1 CrashLoopBackOff",
                    },
                    {"type": "text", "text": "Also check memory limits."},
                ],
            },
            {"role": "assistant", "content": "The pod is OOMKilled; raise its memory limit."},
        ],
    }
    write_jsonl(tmp_path / "sre.jsonl", [conversation])
    report = ingest_paths(con, [tmp_path])
    assert report.files[0].format == "anthropic-messages"
    roles = [r[0] for r in con.execute("SELECT role FROM messages ORDER BY seq").fetchall()]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    tools = con.execute(
        "SELECT tool_call_id, call_id IS NOT NULL, result FROM tool_calls ORDER BY seq"
    ).fetchall()
    assert tools == [("toolu_a", True, "checkout-7d 0/1 CrashLoopBackOff"), ("toolu_b", True, "OOMKilled")]
    assert con.execute("SELECT name FROM tool_defs").fetchall() == [("kubectl",)]


def test_result_for_a_call_that_does_not_exist_is_kept_and_counted(tmp_path, con):
    messages = [
        *OPENAI_CONVERSATION[:2],
        {"role": "tool", "tool_call_id": "call_ghost", "content": "orphan"},
        OPENAI_CONVERSATION[-1],
    ]
    (tmp_path / "orphan.json").write_text(json.dumps({"messages": messages}))
    ingest_paths(con, [tmp_path])
    assert con.execute("SELECT attributes->>'orphan_results' FROM traces").fetchone()[0] == "1"
    assert con.execute("SELECT content FROM messages WHERE role = 'tool'").fetchone()[0] == "orphan"
    assert con.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        ('{"error": "not found"}', True),
        ('{"\\u0065rror": "not found"}', True),  # the key escaped: still `error` once read
        ('{"status": "FAILED", "id": 3}', True),
        ('{"error": null, "rows": []}', False),
        ('{"rows": ["error: one of them"]}', False),  # mentions an error, does not report one
        ('{"st\\u0061tus": "ok"}', False),
        ("{not json", False),
        ("Error: reservation not found", True),
    ],
)
def test_a_tool_result_reports_failure_only_through_its_keys_or_its_first_words(result, failed):
    assert looks_like_error(result) is failed
