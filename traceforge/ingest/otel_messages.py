"""The messages an LLM span saw and produced, from whichever convention recorded them.

Message content reaches span attributes in many shapes, all handled by one part-by-part converter
(`add_message`): OTel GenAI `parts` (`text`, `tool_call`, `tool_call_response`, `reasoning`),
OpenAI chat messages (`content`, `tool_calls[].function`, `tool_call_id`), Anthropic content blocks
(`tool_use`, `tool_result`, `thinking`), Vercel AI SDK parts (`tool-call`, `tool-result`), and the
flattened forms OpenInference (`llm.input_messages.N.message.*`) and OpenLLMetry
(`gen_ai.prompt.N.*`) write, once unflattened by `indexed`.

Where a span carries its messages is tried in an order that depends on its dialect (the attributes
that dialect writes first), then every other place, so a span that mixes conventions still yields
its conversation. The first place that gives any message wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traceforge.ingest.otel_wire import Span
from traceforge.ingest.values import as_id, as_list, as_str, json_text, parse_arguments, parse_json, text_of
from traceforge.model import Message

DETAILS_EVENT = "gen_ai.client.inference.operation.details"
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
ROLE_ALIASES = {
    "human": "user",
    "ai": "assistant",
    "model": "assistant",
    "function": "tool",
    "ipython": "tool",
}
CALL_PARTS = {"tool_call", "tool-call", "tool_use", "server_tool_use", "function_call"}
RESULT_PARTS = {"tool_call_response", "tool-result", "tool_result", "function_call_output", "tool_response"}
REASONING_PARTS = {"reasoning", "thinking"}
TEXT_PARTS = {"text", "input_text", "output_text"}
PART_TYPES = (
    CALL_PARTS | RESULT_PARTS | REASONING_PARTS | TEXT_PARTS | {"image", "image_url", "file", "document"}
)


@dataclass
class Messages:
    """Canonical messages, and the source's own error flags on tool results by message index."""

    items: list[Message] = field(default_factory=list)
    errors: dict[int, bool] = field(default_factory=dict)

    def add(self, message: Message, error: bool | None = None) -> None:
        if error is not None:
            self.errors[len(self.items)] = error
        self.items.append(message)

    def extend(self, other: Messages) -> None:
        offset = len(self.items)
        self.items.extend(other.items)
        self.errors.update({offset + i: flag for i, flag in other.errors.items()})


# ---------------------------------------------------------------- one message, any shape


def add_message(raw: Any, out: Messages, default_role: str | None = None) -> None:
    """Append the canonical message(s) of one source message: a tool result becomes a `tool`
    message; a user message holding tool results becomes those tool messages, then its text."""
    if not isinstance(raw, dict):
        if isinstance(raw, str) and default_role:
            out.add(Message(role=default_role, content=raw))
        return
    role = (as_str(raw.get("role")) or default_role or "").lower()
    role = ROLE_ALIASES.get(role, role)
    if not role:
        return
    texts, thoughts, calls, results = _parts(raw, role)
    if role == "tool":
        if results:
            for part in results:
                _add_result(part, out)
            return
        error = raw.get("is_error", raw.get("isError"))
        out.add(
            Message(
                role="tool",
                content=_joined(texts),
                tool_call_id=as_id(raw.get("tool_call_id") or raw.get("toolCallId") or raw.get("id")),
                name=as_str(raw.get("name")),
            ),
            error if isinstance(error, bool) else None,
        )
        return
    if role == "assistant":
        out.add(
            Message(
                role="assistant",
                content=_joined(texts),
                tool_calls=calls or None,
                reasoning=_joined(thoughts),
            )
        )
        for part in results:  # server-side tool results returned in the assistant's own content
            _add_result(part, out)
        return
    for part in results:
        _add_result(part, out)
    text = _joined(texts)
    if text is not None or not results:
        out.add(Message(role=role, content=text))


def _parts(raw: dict, role: str) -> tuple[list[str], list[str], list[dict], list[dict]]:
    """(texts, reasoning texts, tool calls, tool result parts) of a source message."""
    parts = raw.get("parts")
    content = raw.get("content")
    if not isinstance(parts, list):
        if isinstance(content, list):
            parts = content
        elif isinstance(raw.get("contents"), list):  # OpenInference message.contents.N.message_content
            parts = [p.get("message_content", p) if isinstance(p, dict) else p for p in raw["contents"]]
        elif isinstance(content, str):
            parts = (None if role == "tool" else _json_parts(content)) or [content]
        elif content is not None:
            parts = [json_text(content)]
        else:
            parts = []
    texts, thoughts, calls, results = [], [], [], []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            continue
        kind = (as_str(part.get("type")) or "text").lower()
        if kind in CALL_PARTS:
            calls.append(tool_call(part))
        elif kind in RESULT_PARTS:
            results.append(part)
        elif kind in REASONING_PARTS:
            text = as_str(part.get("content") or part.get("text") or part.get("thinking"))
            if text:
                thoughts.append(text)
        else:
            text = part.get("text", part.get("content"))
            if isinstance(text, str):
                texts.append(text)
    for raw_call in as_list(raw.get("tool_calls")):
        if isinstance(raw_call, dict):
            calls.append(tool_call(raw_call))
    if isinstance(raw.get("function_call"), dict):
        calls.append(tool_call({"function": raw["function_call"]}))
    reasoning = raw.get("reasoning_content") or raw.get("reasoning")
    if isinstance(reasoning, str):
        thoughts.append(reasoning)
    return texts, thoughts, calls, results


def _json_parts(text: str) -> list | None:
    """Content that is itself a JSON list of typed parts (OpenLLMetry writes Anthropic content blocks
    into `gen_ai.prompt.N.content` that way)."""
    if not text.startswith("["):
        return None
    try:
        value = parse_json(text)
    except ValueError:
        return None
    if (
        isinstance(value, list)
        and value
        and all(isinstance(p, dict) and p.get("type") in PART_TYPES for p in value)
    ):
        return value
    return None


def tool_call(raw: dict) -> dict[str, Any]:
    """A canonical tool call {"id", "name", "arguments"} from any convention's call shape."""
    if isinstance(raw.get("tool_call"), dict):  # OpenInference: tool_calls.K.tool_call.*
        raw = raw["tool_call"]
    function = raw.get("function") if isinstance(raw.get("function"), dict) else raw
    if "arguments" in function:
        arguments = function["arguments"]
    elif "input" in raw:
        arguments = raw["input"]
    else:
        arguments = raw.get("args")
    return {
        "id": as_id(raw.get("id") or raw.get("toolCallId") or raw.get("call_id")),
        "name": as_str(function.get("name") or raw.get("toolName")) or "(unnamed)",
        "arguments": parse_arguments(arguments) if arguments is not None else {},
    }


def _add_result(part: dict, out: Messages) -> None:
    value = None
    for key in ("response", "result", "output", "content"):
        if key in part:
            value = part[key]
            break
    error = part.get("is_error", part.get("isError"))
    if isinstance(value, dict) and isinstance(value.get("type"), str) and "value" in value:
        # Vercel AI SDK 5+: {"type": "text" | "json" | "error-text" | "error-json", "value": ...}
        if value["type"].startswith("error"):
            error = True
        value = value["value"]
    text = text_of(value) if isinstance(value, list) else None
    out.add(
        Message(
            role="tool",
            content=text if text is not None else json_text(value),
            tool_call_id=as_id(part.get("id") or part.get("toolCallId") or part.get("tool_use_id")),
            name=as_str(part.get("name") or part.get("toolName")),
        ),
        error if isinstance(error, bool) else None,
    )


def _joined(texts: list[str]) -> str | None:
    return "\n".join(texts) if texts else None


# ---------------------------------------------------------------- flattened attributes


def indexed(attributes: dict[str, Any], prefix: str) -> list[Any]:
    """Flattened indexed attributes as a list of nested objects.

    >>> indexed({"p.0.role": "user", "p.0.tool_calls.1.name": "b", "p.0.tool_calls.0.name": "a"}, "p")
    [{'role': 'user', 'tool_calls': [{'name': 'a'}, {'name': 'b'}]}]
    """
    root: dict[str, Any] = {}
    start = prefix + "."
    for key, value in attributes.items():
        if not key.startswith(start):
            continue
        steps = key[len(start) :].split(".")
        if not steps[0].isdigit():
            continue
        node = root
        for step in steps[:-1]:
            node = node.setdefault(step, {})
            if not isinstance(node, dict):
                break
        else:
            if not isinstance(node.get(steps[-1]), dict):
                node[steps[-1]] = value
    listed = _listify(root)
    return listed if isinstance(listed, list) else []


def _listify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(key.isdigit() for key in node):
        return [_listify(node[key]) for key in sorted(node, key=int)]
    return {key: _listify(value) for key, value in node.items()}


def _json(value: Any) -> Any:
    """A structured attribute value, or the JSON text it was recorded as (None when neither)."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("[", "{"):
            try:
                return parse_json(text)
            except ValueError:
                return None
        return None
    return value


def _from_list(value: Any, default_role: str | None = None) -> Messages:
    out = Messages()
    parsed = _json(value)
    if isinstance(parsed, dict) and isinstance(parsed.get("messages"), list):
        parsed = parsed["messages"]
    if isinstance(parsed, list):
        for raw in parsed:
            add_message(raw, out, default_role)
    return out


def _event(span: Span, name: str) -> dict[str, Any] | None:
    for event in span.events:
        if event.name == name:
            return event.attributes
    return None


def _event_body(attributes: dict[str, Any]) -> dict[str, Any]:
    """A message event's body: dotted keys nested (`message.content`), JSON-text objects parsed."""
    body: dict[str, Any] = {}
    for key, value in attributes.items():
        if key.startswith("message.") and not isinstance(attributes.get("message"), dict | str):
            body.setdefault("message", {})[key[len("message.") :]] = value
        else:
            parsed = _json(value) if key in ("message", "tool_calls") else None
            body[key] = parsed if parsed is not None else value
    return body


# ---------------------------------------------------------------- input messages


def _input_genai(span: Span) -> Messages:
    return _from_list(span.attributes.get("gen_ai.input.messages"))


def _input_details(span: Span) -> Messages:
    details = _event(span, DETAILS_EVENT) or {}
    return _from_list(details.get("gen_ai.input.messages"))


def _input_openinference(span: Span) -> Messages:
    out = Messages()
    for item in indexed(span.attributes, "llm.input_messages"):
        add_message(item.get("message", item) if isinstance(item, dict) else item, out)
    return out


def _input_indexed_prompt(span: Span) -> Messages:
    out = Messages()
    for item in indexed(span.attributes, "gen_ai.prompt"):
        add_message(item, out, "user")
    return out


def _input_prompt_json(span: Span) -> Messages:
    return _from_list(span.attributes.get("gen_ai.prompt"), "user")


def _input_events(span: Span) -> Messages:
    out = Messages()
    for event in span.events:
        role = MESSAGE_EVENTS.get(event.name)
        if role is not None:
            body = _event_body(event.attributes)
            add_message({**body, "role": body.get("role") or role}, out)
        elif event.name == "gen_ai.content.prompt":
            out.extend(_from_list(event.attributes.get("gen_ai.prompt"), "user"))
    return out


def _input_vercel(span: Span) -> Messages:
    return _from_list(span.attributes.get("ai.prompt.messages"))


def _input_value(span: Span) -> Messages:
    value = span.attributes.get("input.value")
    out = _from_list(value)
    if not out.items and isinstance(value, str) and value.strip() and _json(value) is None:
        out.add(Message(role="user", content=value))
    return out


INPUT_SOURCES: dict[str, Callable[[Span], Messages]] = {
    "gen_ai.input.messages": _input_genai,
    "details event": _input_details,
    "llm.input_messages": _input_openinference,
    "gen_ai.prompt.N": _input_indexed_prompt,
    "gen_ai.prompt": _input_prompt_json,
    "message events": _input_events,
    "ai.prompt.messages": _input_vercel,
    "input.value": _input_value,
}
# Which places each dialect writes first; every other place is tried after these.
PREFERRED = {
    "otel-genai": ("gen_ai.input.messages", "details event", "gen_ai.output.messages"),
    "otel-genai-deprecated": ("message events", "gen_ai.prompt", "gen_ai.prompt.N", "gen_ai.completion"),
    "openinference": ("llm.input_messages", "input.value", "llm.output_messages", "output.value"),
    "openllmetry": ("gen_ai.prompt.N", "gen_ai.prompt", "gen_ai.completion.N", "gen_ai.completion"),
    "vercel-ai": ("ai.prompt.messages", "ai.response"),
}


def _ordered(sources: dict[str, Callable], dialect: str) -> list[Callable]:
    first = [name for name in PREFERRED.get(dialect, ()) if name in sources]
    return [sources[name] for name in first] + [f for name, f in sources.items() if name not in first]


def input_messages(span: Span, dialect: str) -> Messages:
    """The messages the model was sent, system instructions first."""
    found = Messages()
    for source in _ordered(INPUT_SOURCES, dialect):
        found = source(span)
        if found.items:
            break
    system = _system_instructions(span)
    if system and not any(m.role in ("system", "developer") for m in found.items):
        with_system = Messages()
        with_system.add(Message(role="system", content=system))
        with_system.extend(found)
        return with_system
    return found


def _system_instructions(span: Span) -> str | None:
    value = span.attributes.get("gen_ai.system_instructions")
    if value is None:
        value = (_event(span, DETAILS_EVENT) or {}).get("gen_ai.system_instructions")
    parsed = _json(value)
    if isinstance(parsed, list):
        texts = [
            p if isinstance(p, str) else as_str(p.get("content") or p.get("text"))
            for p in parsed
            if isinstance(p, str | dict)
        ]
        return _joined([t for t in texts if t])
    return as_str(value) if parsed is None else None


# ---------------------------------------------------------------- output messages


def _first_choice(value: Any) -> Messages:
    out = Messages()
    parsed = _json(value)
    if isinstance(parsed, list) and parsed:
        add_message(parsed[0], out, "assistant")
    elif isinstance(parsed, dict):
        out.extend(response_messages(parsed))
    return out


def _output_genai(span: Span) -> Messages:
    return _first_choice(span.attributes.get("gen_ai.output.messages"))


def _output_details(span: Span) -> Messages:
    return _first_choice((_event(span, DETAILS_EVENT) or {}).get("gen_ai.output.messages"))


def _output_openinference(span: Span) -> Messages:
    items = indexed(span.attributes, "llm.output_messages")
    out = Messages()
    if items:
        first = items[0]
        add_message(first.get("message", first) if isinstance(first, dict) else first, out, "assistant")
    return out


def _output_indexed_completion(span: Span) -> Messages:
    items = indexed(span.attributes, "gen_ai.completion")
    out = Messages()
    if items:
        add_message(items[0], out, "assistant")
    return out


def _output_completion_json(span: Span) -> Messages:
    return _first_choice(span.attributes.get("gen_ai.completion"))


def _output_events(span: Span) -> Messages:
    out = Messages()
    for event in span.events:
        if event.name == "gen_ai.choice":
            body = _event_body(event.attributes)
            message = body.get("message") if isinstance(body.get("message"), dict) else body
            add_message({**message, "role": message.get("role") or "assistant"}, out)
            break
        if event.name == "gen_ai.content.completion":
            out = _first_choice(event.attributes.get("gen_ai.completion"))
            break
    return out


def _output_vercel(span: Span) -> Messages:
    attributes = span.attributes
    text = as_str(attributes.get("ai.response.text"))
    if text is None and attributes.get("ai.response.object") is not None:
        text = json_text(attributes["ai.response.object"])
    raw_calls = _json(attributes.get("ai.response.toolCalls"))
    calls = [tool_call(c) for c in raw_calls if isinstance(c, dict)] if isinstance(raw_calls, list) else []
    reasoning = as_str(attributes.get("ai.response.reasoning") or attributes.get("ai.response.reasoningText"))
    out = Messages()
    if text is not None or calls or reasoning:
        out.add(Message(role="assistant", content=text, tool_calls=calls or None, reasoning=reasoning))
    return out


def _output_value(span: Span) -> Messages:
    value = span.attributes.get("output.value")
    parsed = _json(value)
    if isinstance(parsed, dict):
        return response_messages(parsed)
    out = Messages()
    if isinstance(parsed, list):
        add_message(parsed[0] if parsed else None, out, "assistant")
    elif isinstance(value, str) and value.strip():
        out.add(Message(role="assistant", content=value))
    return out


OUTPUT_SOURCES: dict[str, Callable[[Span], Messages]] = {
    "gen_ai.output.messages": _output_genai,
    "details event": _output_details,
    "llm.output_messages": _output_openinference,
    "gen_ai.completion.N": _output_indexed_completion,
    "gen_ai.completion": _output_completion_json,
    "message events": _output_events,
    "ai.response": _output_vercel,
    "output.value": _output_value,
}


def output_messages(span: Span, dialect: str) -> Messages:
    """The model's reply (the first choice where it returned several)."""
    for source in _ordered(OUTPUT_SOURCES, dialect):
        found = source(span)
        if found.items:
            return found
    return Messages()


def response_messages(response: dict[str, Any]) -> Messages:
    """The assistant message of a provider response recorded whole (OpenAI chat or Responses,
    Anthropic Messages), or of a `{"text": ...}` summary."""
    out = Messages()
    choices = response.get("choices")
    if isinstance(choices, list):
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        add_message({**message, "role": "assistant"}, out)
    elif isinstance(response.get("output"), list):
        parts = []
        for item in response["output"]:
            if isinstance(item, dict) and item.get("type") == "message":
                parts.extend(p for p in as_list(item.get("content")) if isinstance(p, dict))
            elif isinstance(item, dict):
                parts.append(item)
        add_message({"role": "assistant", "content": parts}, out)
    elif isinstance(response.get("content"), list | str) and response.get("role", "assistant") == "assistant":
        add_message({**response, "role": "assistant"}, out)
    elif isinstance(response.get("message"), dict):
        add_message(response["message"], out, "assistant")
    elif isinstance(response.get("text"), str):
        out.add(Message(role="assistant", content=response["text"]))
    return out


def finish_reason_of(value: Any) -> str | None:
    """A finish reason from a recorded response or output message list."""
    parsed = _json(value)
    if isinstance(parsed, list) and parsed and isinstance(parsed[0], dict):
        parsed = parsed[0]
    if not isinstance(parsed, dict):
        return None
    choice = parsed.get("choices")[0] if isinstance(parsed.get("choices"), list) and parsed["choices"] else {}
    for candidate in (parsed, choice if isinstance(choice, dict) else {}):
        reason = as_str(candidate.get("finish_reason") or candidate.get("stop_reason"))
        if reason:
            return reason
    return None
