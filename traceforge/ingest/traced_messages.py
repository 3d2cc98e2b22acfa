"""Canonical messages from what tracing platforms record as an LLM call's input and output.

Langfuse observations and LangSmith runs keep a model call's input and output as the instrumented
framework handed them over, so one export mixes several message shapes:
- OpenAI chat messages (`role`, `content`, `tool_calls` with `function.arguments` as JSON text);
- LangChain messages serialized by `dumpd`: `{"lc": 1, "type": "constructor", "id": [...,
  "AIMessage"], "kwargs": {...}}`, dumped by `model_dump`: `{"type": "ai", "content": ...}`, or by
  `message_to_dict`: `{"type": "ai", "data": {...}}`; their `tool_calls` are `{"id", "name", "args"}`;
- Anthropic content blocks (`tool_use`, `tool_result`, `thinking`) inside any of those;
- OpenAI Responses items (`function_call`, `function_call_output` ...);
- and the wrappers around them: LangSmith's `{"messages": [[...]]}` batches and `{"generations":
  [[...]]}` results, OpenAI `choices`, Anthropic message objects, bare strings.

`request_of(value)` and `response_of(value)` turn a call's recorded input and output into canonical
messages; everything they cannot read as a message becomes text, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traceforge.ingest import anthropic_messages, openai_chat, openai_responses
from traceforge.ingest.values import as_id, as_int, as_str, dig, json_text, parse_json
from traceforge.model import Message, ToolDef

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
ROLE_ALIASES = {"human": "user", "ai": "assistant", "model": "assistant", "bot": "assistant"}
# LangChain message classes (the last element of a serialized message's `id`) and `type` values.
LC_CLASS_ROLES = {
    "HumanMessage": "user",
    "AIMessage": "assistant",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "FunctionMessage": "function",
}
LC_TYPE_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "developer": "developer",
    "tool": "tool",
    "function": "function",
    "chat": None,  # ChatMessage: the role is in the message
}
ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "server_tool_use", "redacted_thinking"}


@dataclass
class Converted:
    """What one recorded input or output gave."""

    messages: list[Message] = field(default_factory=list)
    errors: dict[int, bool] = field(default_factory=dict)  # tool results' own error flags, by index
    tool_defs: list[ToolDef] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None  # the usage object found inside an output, as recorded
    model: str | None = None


def message_fields(raw: Any) -> dict[str, Any] | None:
    """An OpenAI-style message dict (role, content, OpenAI-form `tool_calls`, tool_call_id, name,
    status) from any supported message shape, or None when `raw` is not a message.

    >>> fields = message_fields({"lc": 1, "type": "constructor", "id": ["langchain", "AIMessage"],
    ...     "kwargs": {"content": "", "tool_calls": [{"id": "c1", "name": "f", "args": {"x": 1}}]}})
    >>> fields["role"], fields["tool_calls"]
    ('assistant', [{'id': 'c1', 'function': {'name': 'f', 'arguments': {'x': 1}}}])
    """
    if isinstance(raw, list | tuple) and len(raw) == 2 and all(isinstance(v, str) for v in raw):
        raw = {"role": raw[0], "content": raw[1]}  # LangGraph's ("user", "text") shorthand
    if not isinstance(raw, dict):
        return None
    if (
        raw.get("lc") == 1
        and raw.get("type") == "constructor"
        and isinstance(raw.get("id"), list)
        and raw["id"]
    ):
        fields = raw.get("kwargs") if isinstance(raw.get("kwargs"), dict) else {}
        class_name = str(raw["id"][-1]).removesuffix("Chunk")
        role = LC_CLASS_ROLES.get(class_name) or (fields.get("role") if class_name == "ChatMessage" else None)
    elif isinstance(raw.get("data"), dict) and as_str(raw.get("type")) in LC_TYPE_ROLES:
        fields = raw["data"]
        role = LC_TYPE_ROLES[raw["type"]] or fields.get("role")
    elif isinstance(raw.get("role"), str):
        fields = raw
        role = raw["role"]
    elif (
        isinstance(raw.get("type"), str) and raw["type"].lower().removesuffix("messagechunk") in LC_TYPE_ROLES
    ):
        fields = raw
        role = LC_TYPE_ROLES[raw["type"].lower().removesuffix("messagechunk")] or raw.get("role")
    else:
        return None
    role = ROLE_ALIASES.get(role, role) if isinstance(role, str) else None
    if role not in ROLES:
        return None
    out: dict[str, Any] = {"role": role, "content": fields.get("content")}
    calls = fields.get("tool_calls") or dig(fields, "additional_kwargs", "tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [_openai_call(c) for c in calls if isinstance(c, dict)]
    legacy = fields.get("function_call") or dig(fields, "additional_kwargs", "function_call")
    if isinstance(legacy, dict):
        out["function_call"] = legacy
    for key in ("tool_call_id", "name", "status", "is_error", "reasoning_content"):
        if fields.get(key) is not None:
            out[key] = fields[key]
    return out


def _openai_call(call: dict) -> dict:
    """A tool call in OpenAI's shape from LangChain's `{"id", "name", "args"}` or OpenAI's own."""
    if isinstance(call.get("function"), dict):
        return call
    arguments = call.get("args", call.get("arguments", call.get("input")))
    return {"id": call.get("id"), "function": {"name": call.get("name"), "arguments": arguments}}


def _has_anthropic_blocks(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(b, dict) and as_str(b.get("type")) in ANTHROPIC_BLOCKS for b in content
    )


def _batch(value: list) -> list:
    """LangSmith records a chat model's input as a batch of message lists (`[[...]]`): its first."""
    if value and all(isinstance(v, list) for v in value) and not message_fields(value[0]):
        return value[0]
    return value


def convert_messages(raw_messages: Any) -> Converted:
    """Canonical messages from a list of messages of any supported shape (items that are not
    messages are left out)."""
    raw_messages = _batch(raw_messages) if isinstance(raw_messages, list) else [raw_messages]
    if openai_responses.is_items(raw_messages):
        return Converted(messages=openai_responses.convert_items(raw_messages))
    out = Converted()
    for raw in raw_messages:
        fields = message_fields(raw)
        if fields is None:
            continue
        for message, flag in _convert_one(fields):
            if flag is not None:
                out.errors[len(out.messages)] = flag
            out.messages.append(message)
    return out


def _convert_one(fields: dict[str, Any]) -> list[tuple[Message, bool | None]]:
    role, content = fields["role"], fields.get("content")
    flag = _error_flag(fields)
    if _has_anthropic_blocks(content) and role in ("user", "assistant"):
        converted, errors = anthropic_messages.convert_messages([{"role": role, "content": content}])
        if role == "assistant" and converted:
            _merge_calls(converted[0], fields)
        return [(m, errors.get(i)) for i, m in enumerate(converted)]
    message = openai_chat.convert_message(fields)
    if message is None:
        return []
    return [(message, flag if message.role == "tool" else None)]


def _merge_calls(message: Message, fields: dict[str, Any]) -> None:
    """Add the tool calls listed beside the content blocks that the blocks do not already hold
    (LangChain keeps both `tool_use` blocks and `tool_calls` for the same calls)."""
    listed = openai_chat.convert_message({"role": "assistant", "tool_calls": fields.get("tool_calls") or []})
    have = {c.get("id") for c in message.tool_calls or []}
    extra = [c for c in (listed.tool_calls or []) if c.get("id") not in have] if listed else []
    if extra:
        message.tool_calls = [*(message.tool_calls or []), *extra]


def _error_flag(fields: dict[str, Any]) -> bool | None:
    if isinstance(fields.get("is_error"), bool):
        return fields["is_error"]
    status = as_str(fields.get("status"))
    if status in ("error", "success"):
        return status == "error"
    return None


def tool_defs(tools: Any) -> list[ToolDef]:
    """Tool definitions from a `tools` / `functions` list in OpenAI (nested or flat), Anthropic
    (`input_schema`) or Responses form."""
    defs = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = as_str(spec.get("name"))
        if name:
            defs.append(
                ToolDef(
                    name=name,
                    description=as_str(spec.get("description")),
                    parameters=spec.get("parameters", spec.get("input_schema")),
                )
            )
    return defs


def _text_message(role: str, value: Any) -> Message:
    return Message(role=role, content=value if isinstance(value, str) else json_text(value))


def request_of(value: Any) -> Converted:
    """The messages an LLM call received, from its recorded input: a message list (or batch), a
    `{"messages": [...], "tools": [...]}` object (with Anthropic's `system`), a Responses request, a
    prompt string or `{"prompts": [...]}`; any other value becomes one user message holding it."""
    if value is None:
        return Converted()
    if isinstance(value, str):
        return Converted(messages=[Message(role="user", content=value)])
    if isinstance(value, list):
        return convert_messages(value)
    if not isinstance(value, dict):
        return Converted(messages=[_text_message("user", value)])
    if isinstance(value.get("messages"), list):
        out = convert_messages(value["messages"])
        system = anthropic_messages.system_messages(value.get("system")) if value.get("system") else []
        if system:
            out.messages[:0] = system
            out.errors = {i + len(system): flag for i, flag in out.errors.items()}
        out.tool_defs = tool_defs(value.get("tools") or value.get("functions"))
        return out
    if "input" in value and ("instructions" in value or openai_responses.is_items(value.get("input"))):
        messages = openai_responses.convert_items(value.get("input"))
        if value.get("instructions"):
            messages.insert(0, _text_message("system", value["instructions"]))
        return Converted(messages=messages, tool_defs=openai_responses.tool_defs(value.get("tools")))
    prompts = value.get("prompts", value.get("prompt"))
    if isinstance(prompts, list | str):
        texts = prompts if isinstance(prompts, list) else [prompts]
        return Converted(messages=[_text_message("user", p) for p in texts])
    fields = message_fields(value)
    if fields is not None:
        return convert_messages([value])
    return Converted(messages=[_text_message("user", value)])


def response_of(value: Any) -> Converted:
    """The messages an LLM call added, from its recorded output, with the finish reason, usage
    object and model name found in it: LangChain `generations`, an OpenAI chat completion, a
    Responses object or its output items, an Anthropic message, a message (or list of them), a
    `{"messages": [...]}` / `{"output": ...}` wrapper, or text."""
    if value is None:
        return Converted()
    if isinstance(value, str):
        return Converted(messages=[Message(role="assistant", content=value)] if value else [])
    if isinstance(value, list):
        return convert_messages(value)
    if not isinstance(value, dict):
        return Converted(messages=[_text_message("assistant", value)])
    if isinstance(value.get("generations"), list):
        return _generations(value)
    if openai_chat.is_response(value):
        message, finish = openai_chat.response_message(value)
        return Converted(
            messages=[message] if message else [],
            finish_reason=finish,
            usage=value.get("usage"),
            model=as_str(value.get("model")),
        )
    if openai_responses.is_response(value):
        return Converted(
            messages=openai_responses.convert_items(value["output"]),
            finish_reason=openai_responses.finish_reason(value),
            usage=value.get("usage"),
            model=as_str(value.get("model")),
        )
    if anthropic_messages.is_response(value):
        message, results = anthropic_messages.convert_assistant(value.get("content"))
        return Converted(
            messages=[message, *results],
            finish_reason=as_str(value.get("stop_reason")),
            usage=value.get("usage"),
            model=as_str(value.get("model")),
        )
    if isinstance(value.get("messages"), list):
        return convert_messages(value["messages"])
    fields = message_fields(value)
    if fields is not None:
        out = convert_messages([value])
        out.finish_reason = _finish_reason(value)
        out.usage = _usage_metadata(value)
        return out
    if "output" in value and len(value) <= 2:
        return response_of(value["output"])
    return Converted(messages=[_text_message("assistant", value)])


def _generations(value: dict) -> Converted:
    """A LangChain `LLMResult`: the first generation's message (or text), its finish reason, and the
    token usage from the message's `usage_metadata` or the result's `llm_output.token_usage`."""
    generation = value["generations"]
    while isinstance(generation, list) and generation:
        generation = generation[0]
    out = Converted(model=as_str(dig(value, "llm_output", "model_name")))
    if not isinstance(generation, dict):
        return out
    message = generation.get("message")
    if message_fields(message) is not None:
        out.messages = convert_messages([message]).messages
        out.usage = _usage_metadata(message)
    elif as_str(generation.get("text")):
        out.messages = [Message(role="assistant", content=generation["text"])]
    out.finish_reason = as_str(dig(generation, "generation_info", "finish_reason")) or _finish_reason(message)
    out.usage = out.usage or dig(value, "llm_output", "token_usage") or dig(value, "llm_output", "usage")
    out.model = out.model or as_str(dig(_lc_fields(message), "response_metadata", "model_name"))
    return out


def _lc_fields(message: Any) -> dict:
    if not isinstance(message, dict):
        return {}
    if isinstance(message.get("kwargs"), dict):
        return message["kwargs"]
    if isinstance(message.get("data"), dict):
        return message["data"]
    return message


def _finish_reason(message: Any) -> str | None:
    metadata = _lc_fields(message).get("response_metadata")
    if not isinstance(metadata, dict):
        return None
    return as_str(metadata.get("finish_reason")) or as_str(metadata.get("stop_reason"))


def _usage_metadata(message: Any) -> dict | None:
    usage = _lc_fields(message).get("usage_metadata")
    return usage if isinstance(usage, dict) else None


def usage_counts(usage: Any) -> dict[str, int | None] | None:
    """Canonical counts (input including cached, cache read / write, output, reasoning) from a
    usage object recorded inside an output: LangChain `usage_metadata`, OpenAI chat or Responses
    `usage`, or Anthropic `usage` (whose `input_tokens` excludes the cache, so it is added back).
    None when it holds no count."""
    if not isinstance(usage, dict):
        return None
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        uncached = as_int(usage.get("input_tokens"))
        read = as_int(usage.get("cache_read_input_tokens")) or 0
        write = as_int(usage.get("cache_creation_input_tokens")) or 0
        return {
            "input": None if uncached is None else uncached + read + write,
            "cache_read": read,
            "cache_write": write,
            "output": as_int(usage.get("output_tokens")),
            "reasoning": None,
        }
    counts = {
        "input": as_int(_first_present(usage, "input_tokens", "prompt_tokens")),
        "cache_read": as_int(
            _first_present(
                usage,
                ("input_token_details", "cache_read"),
                ("prompt_tokens_details", "cached_tokens"),
                ("input_tokens_details", "cached_tokens"),
            )
        ),
        "cache_write": as_int(_first_present(usage, ("input_token_details", "cache_creation"))),
        "output": as_int(_first_present(usage, "output_tokens", "completion_tokens")),
        "reasoning": as_int(
            _first_present(
                usage,
                ("output_token_details", "reasoning"),
                ("completion_tokens_details", "reasoning_tokens"),
                ("output_tokens_details", "reasoning_tokens"),
            )
        ),
    }
    return counts if counts["input"] is not None or counts["output"] is not None else None


def _first_present(value: dict, *paths: str | tuple[str, ...]) -> Any:
    for path in paths:
        found = dig(value, *(path if isinstance(path, tuple) else (path,)))
        if found is not None:
            return found
    return None


def decode_json_text(value: Any) -> Any:
    """A value that an export wrote as JSON text (CSV cells, ClickHouse string columns), parsed;
    other values, and text that is not a JSON object, array or string, as they are."""
    if isinstance(value, str) and value[:1] in ("{", "[", '"'):
        try:
            return parse_json(value)
        except ValueError:
            return value
    return value


def call_id_of(value: Any) -> str | None:
    """The tool call id a tool execution's recorded output names (a LangChain ToolMessage)."""
    fields = message_fields(value)
    return as_id(fields.get("tool_call_id")) if fields else None
