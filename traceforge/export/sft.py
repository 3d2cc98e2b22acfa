"""SFT rows: whole conversations in TRL's conversational format, or OpenAI fine-tuning JSONL.

TRL (`SFTTrainer`, language-modeling type) reads `messages` and `tools`:

    {"messages": [{"role": "user", "content": "Weather in Paris?", ...},
                  {"role": "assistant", "content": None,
                   "tool_calls": [{"id": "call_1", "type": "function",
                                   "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "20C"},
                  {"role": "assistant", "content": "It is 20C."}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}],
     "trace_id": ..., "context": 0, "workload": ..., "model": ..., "outcome": ..., "num_tool_calls": 1}

Tool calls and tool schemas are stored with the `datasets` `Json()` feature type (datasets >= 4.7),
so calls whose arguments have different keys are not padded with nulls, which a struct column would
do. OpenAI's format has arguments as JSON strings, `tool_call_id` on results, and no reasoning.
"""

from __future__ import annotations

import json
from typing import Any

from datasets import Features, Json, List, Value

from traceforge.export.source import Conversation

MESSAGE_FEATURE = {
    "role": Value("string"),
    "content": Value("string"),
    "tool_calls": List(Json()),
    "tool_call_id": Value("string"),
    "name": Value("string"),
    "reasoning_content": Value("string"),
}
MESSAGES = List(MESSAGE_FEATURE)
TOOLS = List(Json())
METADATA = {
    "trace_id": Value("string"),
    "context": Value("int32"),  # a compacted trace's rows: one per context (export.source)
    "workload": Value("string"),
    "model": Value("string"),
    "outcome": Value("string"),
}
FEATURES = Features({"messages": MESSAGES, "tools": TOOLS, **METADATA, "num_tool_calls": Value("int32")})


def metadata(conversation: Conversation) -> dict[str, Any]:
    return {
        "trace_id": conversation.published_trace_id or conversation.trace_id,
        "context": conversation.context,
        "workload": conversation.published_workload or conversation.workload,
        "model": conversation.model,
        "outcome": conversation.outcome,
    }


def row(conversation: Conversation) -> dict[str, Any]:
    """One TRL conversational row (see the module docstring)."""
    return {
        "messages": conversation.messages,
        "tools": conversation.tools,
        **metadata(conversation),
        "num_tool_calls": conversation.tool_call_count,
    }


def openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as OpenAI's chat fine-tuning format wants it: arguments as JSON strings, results
    linked by `tool_call_id`, no reasoning."""
    out: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if message["tool_calls"]:
        out["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False),
                },
            }
            for call in message["tool_calls"]
        ]
    if message["role"] == "tool":
        out["tool_call_id"] = message["tool_call_id"]
    return out


def openai_row(conversation: Conversation, parallel_tool_calls: bool | None = None) -> dict[str, Any]:
    """One line of an OpenAI fine-tuning file. `parallel_tool_calls` is written when given."""
    out: dict[str, Any] = {
        "messages": [openai_message(m) for m in conversation.messages],
        "tools": conversation.tools,
    }
    if parallel_tool_calls is not None:
        out["parallel_tool_calls"] = parallel_tool_calls
    return out
