"""OpenAI Chat Completions: per-request logs (request + response per record, as proxies and gateways
write them) and transcripts (a conversation's `messages` list, as eval harnesses save them).

Handles `tool_calls` with string arguments, parallel tool calls, `role: tool` results, the legacy
`function_call` / `role: function` form, content given as a list of parts, and usage with
`prompt_tokens_details.cached_tokens` (part of `prompt_tokens`, as the canonical model wants).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from traceforge.ingest import api_log, transcript
from traceforge.ingest.sources import Record
from traceforge.ingest.values import (
    as_float,
    as_id,
    as_int,
    as_list,
    as_str,
    dig,
    first,
    parse_arguments,
    text_of,
)
from traceforge.model import LlmCall, Message, ParseResult, ToolDef, Trace

FORMAT = "openai-chat"
PROVIDER = "openai"
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def convert_messages(raw_messages: Iterable[Any]) -> tuple[list[Message], dict[int, bool]]:
    """Canonical messages from OpenAI chat messages; also the source's error flags on tool results
    (by message index), where it gives them."""
    messages: list[Message] = []
    errors: dict[int, bool] = {}
    for raw in raw_messages:
        if not isinstance(raw, dict):
            continue
        message = convert_message(raw)
        if message is None:
            continue
        flag = raw.get("is_error", raw.get("error"))
        if message.role == "tool" and isinstance(flag, bool):
            errors[len(messages)] = flag
        messages.append(message)
    return messages, errors


def convert_message(raw: dict[str, Any]) -> Message | None:
    role = as_str(raw.get("role"))
    if role not in ROLES:
        return None
    content = text_of(raw.get("content"))
    if role == "function":
        return Message(role="tool", content=content, name=as_str(raw.get("name")))
    if role == "tool":
        return Message(
            role="tool",
            content=content,
            tool_call_id=as_id(raw.get("tool_call_id")) or as_id(raw.get("id")),
            name=as_str(raw.get("name")),
        )
    message = Message(role=role, content=content)
    listed = raw.get("tool_calls")
    calls = [_tool_call(c) for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    legacy = raw.get("function_call")
    if isinstance(legacy, dict):
        calls.append(_tool_call({"function": legacy}))
    if calls:
        message.tool_calls = calls
    reasoning = raw.get("reasoning_content") or raw.get("reasoning")
    if isinstance(reasoning, str):
        message.reasoning = reasoning
    return message


def _tool_call(raw: dict[str, Any]) -> dict[str, Any]:
    # The wire form nests name/arguments under `function`; some harnesses (tau2) flatten them.
    function = raw.get("function") if isinstance(raw.get("function"), dict) else raw
    call = {
        "id": as_id(raw.get("id")),
        "name": as_str(function.get("name")) or "(unnamed)",
        "arguments": parse_arguments(function.get("arguments")),
    }
    requestor = as_str(raw.get("requestor"))
    if requestor:
        call["requestor"] = requestor
    return call


def tool_defs(request: dict[str, Any]) -> list[ToolDef]:
    defs = []
    for tool in as_list(request.get("tools")):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name"):
            defs.append(
                ToolDef(
                    name=str(function["name"]),
                    description=as_str(function.get("description")),
                    parameters=function.get("parameters"),
                    annotations=function.get("annotations") or tool.get("annotations"),
                )
            )
    for function in as_list(request.get("functions")):
        if isinstance(function, dict) and function.get("name"):
            defs.append(
                ToolDef(
                    name=str(function["name"]),
                    description=as_str(function.get("description")),
                    parameters=function.get("parameters"),
                )
            )
    return defs


def is_response(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("choices"), list)


def response_message(response: dict[str, Any]) -> tuple[Message | None, str | None]:
    """The assistant message of the first choice, and its finish reason."""
    choice = dig(response, "choices", 0)
    if not isinstance(choice, dict):
        return None, None
    raw = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    message = convert_message({"role": "assistant", **raw})
    return message, as_str(choice.get("finish_reason"))


def apply_usage(call: LlmCall, usage: Any) -> None:
    """Fill token counts from an OpenAI `usage` object (also the LiteLLM variant with Anthropic-style
    cache fields). Leaves `usage_reported` false when there is no usable count."""
    if not isinstance(usage, dict):
        return
    prompt = as_int(usage.get("prompt_tokens", usage.get("input_tokens")))
    completion = as_int(usage.get("completion_tokens", usage.get("output_tokens")))
    if prompt is None and completion is None:
        return
    call.usage_reported = True
    call.input_tokens = prompt
    call.output_tokens = completion
    # `first` keeps a reported 0 (no cache hit) apart from an absent field.
    call.cache_read_tokens = as_int(
        first(
            usage,
            "prompt_tokens_details.cached_tokens",
            "input_tokens_details.cached_tokens",
            "cache_read_input_tokens",
        )
    )
    call.cache_write_tokens = as_int(
        first(usage, "cache_creation_input_tokens", "prompt_tokens_details.cache_creation_tokens")
    )
    call.reasoning_tokens = as_int(
        first(usage, "completion_tokens_details.reasoning_tokens", "output_tokens_details.reasoning_tokens")
    )
    cost = as_float(usage.get("cost"))
    if cost is not None:
        call.cost_usd = cost


def call_from_response(request: dict[str, Any], response: dict[str, Any]) -> tuple[LlmCall, list[Message]]:
    """The LLM call a response records, and the messages it added to the conversation."""
    message, finish_reason = response_message(response)
    call = LlmCall(
        model=as_str(response.get("model")) or as_str(request.get("model")),
        provider=PROVIDER,
        source_id=as_id(response.get("id")),
        finish_reason=finish_reason,
    )
    apply_usage(call, response.get("usage"))
    return call, [message] if message is not None else []


def sniff(sample: list[Record]) -> float:
    """How sure we are that these records are OpenAI Chat Completions logs or transcripts."""
    best = 0.0
    for record in sample:
        value = record.value
        request, response, _ = api_log.unwrap(value)
        if request is not None and is_response(response):
            best = max(best, 0.95)
            continue
        if api_log.is_log_record(value) and response is None:
            best = max(best, 0.55)  # a logged chat request whose call failed: the generic reading
            continue
        messages = transcript.find_messages(value)
        if messages is None and isinstance(value, dict) and as_str(value.get("role")) in ROLES:
            messages = [value]
        if messages:
            best = max(best, _transcript_score(messages))
    return best


def _transcript_score(messages: list[Any]) -> float:
    dicts = [m for m in messages if isinstance(m, dict)]
    if not dicts or not all(m.get("role") in ROLES for m in dicts):
        return 0.0
    for m in dicts:
        if m.get("tool_calls") or m.get("function_call") or m.get("role") in ("tool", "function"):
            return 0.9
        if isinstance(m.get("content"), list) and any(
            isinstance(p, dict) and p.get("type") in ("tool_use", "tool_result") for p in m["content"]
        ):
            return 0.0  # Anthropic content blocks
    return 0.6  # plain text messages: OpenAI's shape unless something says otherwise


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
