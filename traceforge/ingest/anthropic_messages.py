"""Anthropic Messages API: per-request logs and transcripts.

Content blocks `text`, `thinking`, `tool_use` and `tool_result` become canonical messages: a user
message's `tool_result` blocks become `tool` messages (in block order, before any text the user
added), `thinking` becomes the assistant message's reasoning, and server-side tool blocks
(`server_tool_use` with its `*_tool_result`) become a tool call with its result. Anthropic's
`input_tokens` excludes cached tokens; the canonical `input_tokens` adds
`cache_read_input_tokens` and `cache_creation_input_tokens` back in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from traceforge.ingest import api_log, transcript
from traceforge.ingest.sources import Record
from traceforge.ingest.values import as_float, as_id, as_int, as_list, as_str, dig, json_text, text_of
from traceforge.model import LlmCall, Message, ParseResult, ToolDef, Trace

FORMAT = "anthropic-messages"
PROVIDER = "anthropic"


def system_messages(system: Any) -> list[Message]:
    text = text_of(system)
    return [Message(role="system", content=text)] if text else []


def convert_messages(
    raw_messages: Iterable[Any], system: Any = None
) -> tuple[list[Message], dict[int, bool]]:
    """Canonical messages (and the tool results' `is_error` flags by index) from Anthropic ones."""
    messages = system_messages(system)
    errors: dict[int, bool] = {}
    for raw in raw_messages:
        if not isinstance(raw, dict):
            continue
        role = raw.get("role")
        content = raw.get("content")
        if role == "system":
            messages.extend(system_messages(content))
        elif role == "user":
            messages.extend(_user_messages(content, errors, len(messages)))
        elif role == "assistant":
            assistant, results = convert_assistant(content)
            messages.append(assistant)
            messages.extend(results)
    return messages, errors


def _user_messages(content: Any, errors: dict[int, bool], offset: int) -> list[Message]:
    if not isinstance(content, list):
        return [Message(role="user", content=text_of(content))]
    out: list[Message] = []
    texts = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            if isinstance(block.get("is_error"), bool):
                errors[offset + len(out)] = block["is_error"]
            out.append(
                Message(
                    role="tool",
                    content=_result_text(block.get("content")),
                    tool_call_id=as_id(block.get("tool_use_id")),
                )
            )
        elif isinstance(block, dict) and block.get("type") == "text":
            texts.append(as_str(block.get("text")) or "")
        elif isinstance(block, str):
            texts.append(block)
    if texts:
        out.append(Message(role="user", content="\n".join(texts)))
    return out


def _result_text(content: Any) -> str | None:
    if isinstance(content, list):
        text = text_of(content)
        return text if text is not None else json_text(content)
    return json_text(content)


def convert_assistant(content: Any) -> tuple[Message, list[Message]]:
    """An assistant message from content blocks, plus tool messages for server-side tool results."""
    if not isinstance(content, list):
        return Message(role="assistant", content=text_of(content)), []
    texts, thoughts, calls, results = [], [], [], []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(as_str(block.get("text")) or "")
        elif kind == "thinking":
            thoughts.append(as_str(block.get("thinking")) or "")
        elif kind in ("tool_use", "server_tool_use"):
            arguments = block.get("input")
            calls.append(
                {
                    "id": as_id(block.get("id")),
                    "name": as_str(block.get("name")) or "(unnamed)",
                    "arguments": arguments if arguments is not None else {},
                }
            )
        elif isinstance(kind, str) and kind.endswith("_tool_result"):
            results.append(
                Message(
                    role="tool",
                    content=_result_text(block.get("content")),
                    tool_call_id=as_id(block.get("tool_use_id")),
                )
            )
    message = Message(
        role="assistant",
        content="\n".join(texts) if texts else None,
        tool_calls=calls or None,
        reasoning="\n".join(thoughts) if thoughts else None,
    )
    return message, results


def tool_defs(request: dict[str, Any]) -> list[ToolDef]:
    defs = []
    for tool in as_list(request.get("tools")):
        if isinstance(tool, dict) and tool.get("name"):
            defs.append(
                ToolDef(
                    name=str(tool["name"]),
                    description=as_str(tool.get("description")),
                    parameters=tool.get("input_schema"),
                    annotations=tool.get("annotations"),
                )
            )
    return defs


def is_response(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("content"), list)
        and (value.get("type") == "message" or "stop_reason" in value)
    )


def apply_usage(call: LlmCall, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    uncached = as_int(usage.get("input_tokens"))
    output = as_int(usage.get("output_tokens"))
    if uncached is None and output is None:
        return
    read = as_int(usage.get("cache_read_input_tokens")) or 0
    write = as_int(usage.get("cache_creation_input_tokens")) or 0
    call.usage_reported = True
    call.input_tokens = (uncached or 0) + read + write
    call.cache_read_tokens = read
    call.cache_write_tokens = write
    call.output_tokens = output
    # part of output_tokens, as OpenAI's reasoning_tokens (seen in recorded responses of 2026)
    call.reasoning_tokens = as_int(dig(usage, "output_tokens_details", "thinking_tokens"))
    cost = as_float(usage.get("cost"))
    if cost is not None:
        call.cost_usd = cost


def call_from_response(request: dict[str, Any], response: dict[str, Any]) -> tuple[LlmCall, list[Message]]:
    """The LLM call a response records, and the messages it added to the conversation (the
    assistant message, then any server-side tool results)."""
    message, results = convert_assistant(response.get("content"))
    call = LlmCall(
        model=as_str(response.get("model")) or as_str(request.get("model")),
        provider=PROVIDER,
        source_id=as_id(response.get("id")),
        finish_reason=as_str(response.get("stop_reason")),
    )
    apply_usage(call, response.get("usage"))
    return call, [message, *results]


def sniff(sample: list[Record]) -> float:
    best = 0.0
    for record in sample:
        value = record.value
        request, response, _ = api_log.unwrap(value)
        if request is not None and is_response(response):
            best = max(best, 0.95)
            continue
        messages = transcript.find_messages(value)
        if messages is None and isinstance(value, dict) and value.get("role") in ("user", "assistant"):
            messages = [value]
        if messages and _uses_blocks(messages):
            best = max(best, 0.9)
        elif (
            messages
            and isinstance(value, dict)
            and "system" in value
            and all(isinstance(m, dict) and m.get("role") in ("user", "assistant") for m in messages)
        ):
            best = max(best, 0.7)  # top-level `system`: the Messages API's shape
    return best


def _uses_blocks(messages: list[Any]) -> bool:
    for m in messages:
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            for block in m["content"]:
                if isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result", "thinking"):
                    return True
    return False


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    return api_log.parse_or_transcript(records, source_path, FORMAT)


hands_out = api_log.hands_out  # detect.py's protocol: a file of bare messages is held


def stream(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None = None,
) -> Iterator[Trace]:
    """A file's traces one by one: transcripts' (`transcript.traces`) or a log's (`api_log.stream`)."""
    return api_log.stream_or_transcript(records, source_path, FORMAT, result, on_first_pass)
