"""Hand-written API records in the shapes providers and gateways really produce, for tests.

`AgentLoop` plays an agent against a scripted model: each `call()` records one API request (the whole
conversation so far) and its response, exactly as a logging gateway would, so per-request logs are
built the way production builds them rather than by copying expected output.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

T0 = 1_790_000_000  # 2026-09-21, seconds


def openai_tool_call(call_id: str | None, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


class OpenAILoop:
    """An OpenAI Chat Completions conversation, logged one record per API call."""

    def __init__(
        self,
        system: str,
        user: str,
        *,
        session: str | None = None,
        tools: list | None = None,
        model: str = "gpt-4o-2024-08-06",
        workload: str | None = None,
        t0: int = T0,
    ) -> None:
        self.messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        self.session, self.tools, self.model, self.workload = session, tools or [], model, workload
        self.records: list[dict] = []
        self.clock = t0

    def call(
        self,
        *,
        content: str | None = None,
        tool_calls: list[dict] | None = None,
        prompt_tokens: int = 100,
        completion_tokens: int = 20,
        cached: int = 0,
        finish_reason: str | None = None,
    ) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        record = {
            "request": {
                "model": "gpt-4o",
                "messages": json.loads(json.dumps(self.messages)),
                "tools": self.tools,
            },
            "response": {
                "id": f"chatcmpl-{len(self.records)}-{zlib.crc32(self.messages[1]['content'].encode())}",
                "object": "chat.completion",
                "created": self.clock,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
            },
            "start_time": self.clock,
            "end_time": self.clock + 1.5,
        }
        if self.session or self.workload:
            record["metadata"] = {
                k: v for k, v in (("session_id", self.session), ("workload", self.workload)) if v
            }
        self.records.append(record)
        self.messages.append(message)
        self.clock += 3
        return record

    def result(self, call_id: str, content: str, name: str | None = None) -> None:
        self.messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": content, **({"name": name} if name else {})}
        )

    def user(self, content: str) -> None:
        self.messages.append({"role": "user", "content": content})


class AnthropicLoop:
    """An Anthropic Messages conversation, logged one record per API call."""

    def __init__(
        self,
        system: str,
        user: str,
        *,
        tools: list | None = None,
        model: str = "claude-sonnet-4-5-20250929",
        t0: int = T0,
    ) -> None:
        self.system, self.tools, self.model = system, tools or [], model
        self.messages: list[dict] = [{"role": "user", "content": user}]
        self.records: list[dict] = []
        self.clock = t0
        self.pending_results: list[dict] = []

    def call(
        self,
        blocks: list[dict],
        *,
        input_tokens: int = 50,
        cache_read: int = 0,
        cache_write: int = 0,
        output_tokens: int = 30,
    ) -> dict:
        if self.pending_results:
            self.messages.append({"role": "user", "content": self.pending_results})
            self.pending_results = []
        record = {
            "request": {
                "model": self.model,
                "system": self.system,
                "max_tokens": 1024,
                "messages": json.loads(json.dumps(self.messages)),
                "tools": self.tools,
            },
            "response": {
                "id": f"msg_{len(self.records):04d}{zlib.crc32(json.dumps(self.messages[0]).encode())}",
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": blocks,
                "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn",
                "usage": {
                    "input_tokens": input_tokens,
                    "cache_read_input_tokens": cache_read,
                    "cache_creation_input_tokens": cache_write,
                    "output_tokens": output_tokens,
                },
            },
            "timestamp": f"2026-09-21T10:00:{len(self.records) * 5:02d}Z",
        }
        self.records.append(record)
        self.messages.append({"role": "assistant", "content": blocks})
        return record

    def result(self, tool_use_id: str, content: Any, is_error: bool = False) -> None:
        self.pending_results.append(
            {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}
        )


def write_jsonl(path: Path, records: list[Any], *, compress: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
BOOK_TOOL = {
    "type": "function",
    "function": {
        "name": "book_flight",
        "description": "Book a flight by id",
        "parameters": {"type": "object", "properties": {"flight_id": {"type": "string"}}},
    },
}
