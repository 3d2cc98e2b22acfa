"""OpenAI Responses API: per-request logs (the request and the `response` object per record).

A record holds the request (`model`, `instructions`, `input` as a string or a list of items, `tools`,
`previous_response_id`, `conversation`) and the response (`object: "response"`, `output` items,
`usage`), side by side (`{"request": ..., "response": ...}`, optionally each under `body`, as the Batch
API writes them), flat (the request's fields at the top level and the response under `response`), or
the response object alone (as `responses.retrieve` returns it: it echoes `instructions`, `tools` and
`previous_response_id`, but not the input).

Items become canonical messages: `message` items by role (`input_text` / `output_text` parts), the
assistant-side items of one turn (`reasoning`, `message`, `function_call`, `custom_tool_call`,
`computer_call`, `local_shell_call`) merge into one assistant message whose tool calls carry the
items' `call_id`, and the `*_call_output` items become tool messages answering them. Server-side
tools (`web_search_call`, `file_search_call`, `code_interpreter_call`, `mcp_call` ...) become tool calls
of the assistant message with their results as tool messages after it. `usage.input_tokens` includes
`input_tokens_details.cached_tokens`, as the canonical model wants.

Conversations: a request naming `previous_response_id` (or a `conversation`) sends only the new
items; the conversation the model saw is rebuilt from the response it continues (its input and
output), and records are then grouped by prefix chaining (`api_log.build_traces`), which also keeps
records with different conversation ids apart.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from traceforge.ingest import api_log
from traceforge.ingest.sources import Record
from traceforge.ingest.values import as_id, as_int, as_str, dig, first, json_text, parse_arguments, text_of
from traceforge.model import LlmCall, Message, ParseResult, Reject, ToolDef, Trace

FORMAT = "openai-responses"
PROVIDER = "openai"

REQUEST_PATHS = (("request", "body"), ("request",), ("body",))
RESPONSE_PATHS = (("response", "body"), ("response",))
# Client-executed calls: the model asks, the client runs the tool and sends a `*_output` item back.
CLIENT_CALLS = {
    "function_call": None,  # None: the item's own `name`
    "custom_tool_call": None,
    "computer_call": "computer",
    "local_shell_call": "local_shell",
    "shell_call": "shell",
    "apply_patch_call": "apply_patch",
}
CALL_OUTPUT_SUFFIX = "_call_output"
# Server-executed calls (run by OpenAI inside the same response): the call and its result in one item.
HOSTED_CALL_SUFFIX = "_call"


def is_response(value: Any) -> bool:
    """A Responses API response object."""
    return (
        isinstance(value, dict)
        and value.get("object") == "response"
        and isinstance(value.get("output"), list)
    )


def is_items(value: Any) -> bool:
    """A list of Responses items (as `input` or `output` holds them), recognised by item types."""
    if not isinstance(value, list):
        return False
    return any(
        isinstance(v, dict) and isinstance(v.get("type"), str) and _item_kind(v["type"]) != "other"
        for v in value
    )


def _is_request(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("object") != "response"
        and "messages" not in value
        and ("input" in value or "previous_response_id" in value or "conversation" in value)
    )


def unwrap(value: Any) -> tuple[dict | None, dict | None]:
    """(request, response) of a log record; either is None where the record lacks it."""
    if not isinstance(value, dict):
        return None, None
    request = next((dig(value, *p) for p in REQUEST_PATHS if _is_request(dig(value, *p))), None)
    response = next((dig(value, *p) for p in RESPONSE_PATHS if is_response(dig(value, *p))), None)
    if response is None and is_response(value):
        response = value
    if request is None and _is_request(value):
        request = value
    return request, response


def _item_kind(item_type: str) -> str:
    if item_type in CLIENT_CALLS:
        return "client-call"
    if item_type.endswith(CALL_OUTPUT_SUFFIX):
        return "call-output"
    if item_type.endswith(HOSTED_CALL_SUFFIX):
        return "hosted-call"
    if item_type in ("message", "reasoning", "item_reference"):
        return item_type
    return "other"


def convert_items(items: Any, known: dict[str, dict] | None = None) -> list[Message]:
    """Canonical messages from Responses items (a string is one user message).

    `known` maps item ids to items seen in earlier outputs, so that `item_reference` items resolve.
    Consecutive assistant-side items merge into one assistant message.

    >>> [m.role for m in convert_items([{"role": "user", "content": "hi"},
    ...     {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ...     {"type": "function_call_output", "call_id": "c1", "output": "ok"}])]
    ['user', 'assistant', 'tool']
    """
    if isinstance(items, str):
        return [Message(role="user", content=items)]
    if not isinstance(items, list):
        return []
    builder = _TurnBuilder()
    for item in items:
        if isinstance(item, dict) and item.get("type") == "item_reference":
            item = (known or {}).get(as_str(item.get("id")) or "")
        if isinstance(item, dict):
            builder.add(item)
    return builder.finish()


@dataclass
class _TurnBuilder:
    messages: list[Message] = field(default_factory=list)
    assistant: Message | None = None  # the assistant message of the turn being read
    hosted_results: list[Message] = field(default_factory=list)

    def add(self, item: dict) -> None:
        kind = _item_kind(item["type"]) if isinstance(item.get("type"), str) else "message"
        if kind == "message":
            role = as_str(item.get("role")) or "user"
            if role == "assistant":
                self._append_text(text_of(item.get("content")))
            else:
                self._close()
                self.messages.append(Message(role=role, content=text_of(item.get("content"))))
        elif kind == "reasoning":
            text = text_of(item.get("summary")) or text_of(item.get("content"))
            turn = self._turn()
            if text:
                turn.reasoning = f"{turn.reasoning}\n{text}" if turn.reasoning else text
        elif kind == "client-call":
            self._call(item, as_id(item.get("call_id")) or as_id(item.get("id")))
        elif kind == "hosted-call":
            self._hosted(item)
        elif kind == "call-output":
            self._close()
            output = item.get("output")
            self.messages.append(
                Message(
                    role="tool",
                    content=text_of(output) if isinstance(output, list) else json_text(output),
                    tool_call_id=as_id(item.get("call_id")),
                )
            )

    def _turn(self) -> Message:
        if self.assistant is None:
            self.assistant = Message(role="assistant")
            self.messages.append(self.assistant)
        return self.assistant

    def _append_text(self, text: str | None) -> None:
        turn = self._turn()
        if text:
            turn.content = f"{turn.content}\n{text}" if turn.content else text

    def _call(self, item: dict, call_id: str | None) -> dict:
        kind = item["type"]
        name = CLIENT_CALLS.get(kind) or as_str(item.get("name")) or kind.removesuffix("_call")
        if kind == "function_call":
            arguments = parse_arguments(item.get("arguments"))
        elif kind == "custom_tool_call":
            arguments = item.get("input")
        else:
            arguments = item.get("action") if item.get("action") is not None else item.get("arguments")
        call = {"id": call_id, "name": name, "arguments": arguments if arguments is not None else {}}
        turn = self._turn()
        turn.tool_calls = [*(turn.tool_calls or []), call]
        return call

    def _hosted(self, item: dict) -> None:
        kind = item["type"]
        call_id = as_id(item.get("id"))
        if kind == "mcp_call":
            arguments: Any = parse_arguments(item.get("arguments"))
            name = as_str(item.get("name")) or "mcp"
            result = item.get("error") if item.get("error") else item.get("output")
        else:
            name = kind.removesuffix(HOSTED_CALL_SUFFIX)
            arguments = {
                k: item[k] for k in ("action", "queries", "code", "container_id") if item.get(k) is not None
            }
            result = next((item[k] for k in ("results", "outputs") if item.get(k) is not None), None)
        turn = self._turn()
        turn.tool_calls = [*(turn.tool_calls or []), {"id": call_id, "name": name, "arguments": arguments}]
        if result is not None:
            self.hosted_results.append(Message(role="tool", content=json_text(result), tool_call_id=call_id))

    def _close(self) -> None:
        self.assistant = None
        self.messages.extend(self.hosted_results)
        self.hosted_results = []

    def finish(self) -> list[Message]:
        self._close()
        return self.messages


def finish_reason(response: dict) -> str | None:
    """The response's `status`, or for an incomplete response the reason (`max_output_tokens`...)."""
    reason = as_str(dig(response, "incomplete_details", "reason"))
    return reason or as_str(response.get("status"))


def tool_defs(tools: Any) -> list[ToolDef]:
    """Tool definitions from a Responses `tools` list: function and custom tools by name, built-in
    tools (web_search, file_search, mcp ...) by their type."""
    defs = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = as_str(function.get("name")) or as_str(tool.get("type"))
        if name:
            defs.append(
                ToolDef(
                    name=name,
                    description=as_str(function.get("description")),
                    parameters=function.get("parameters", tool.get("format")),
                )
            )
    return defs


def call_from_response(request: dict, response: dict) -> LlmCall:
    call = LlmCall(
        model=as_str(response.get("model")) or as_str(request.get("model")),
        provider=PROVIDER,
        source_id=as_id(response.get("id")),
        finish_reason=finish_reason(response),
    )
    apply_usage(call, response.get("usage"))
    return call


def apply_usage(call: LlmCall, usage: Any) -> None:
    """Token counts from a Responses `usage` object: `input_tokens` already includes
    `input_tokens_details.cached_tokens`, `output_tokens` includes the reasoning tokens."""
    if not isinstance(usage, dict):
        return
    call.input_tokens = as_int(usage.get("input_tokens"))
    call.output_tokens = as_int(usage.get("output_tokens"))
    call.usage_reported = call.input_tokens is not None or call.output_tokens is not None
    call.cache_read_tokens = as_int(dig(usage, "input_tokens_details", "cached_tokens"))
    call.reasoning_tokens = as_int(dig(usage, "output_tokens_details", "reasoning_tokens"))


@dataclass
class Logged:
    """One record, converted, before its conversation is known."""

    line: int
    response_id: str | None
    previous_id: str | None
    conversation_id: str | None
    instructions: str | None
    input: list[Message]
    input_logged: bool
    output: list[Message]
    exchange: api_log.Exchange

    def system(self) -> list[Message]:
        """The system message its `instructions` make, if any: its request's first message."""
        return [Message(role="system", content=self.instructions)] if self.instructions else []


def _conversation_id(request: dict, response: dict) -> str | None:
    for value in (request.get("conversation"), response.get("conversation")):
        found = as_id(value.get("id")) if isinstance(value, dict) else as_id(value)
        if found:
            return found
    return None


def logged(record: Record, known: dict[str, dict]) -> Logged | Reject:
    """A record's call, converted (`known`: the output items met so far, by id), or why it cannot
    be used."""
    request, response = unwrap(record.value)
    value = record.value if isinstance(record.value, dict) else {}
    if response is None:
        error = first(value, "response.error", "response.body.error", "error")
        if error is not None:
            return Reject(
                record.line, f"the call failed, no response object: {json_text(error)[:300]}", record.raw
            )
        if request is not None:
            return Reject(record.line, "request without a response object", record.raw)
        return Reject(
            record.line,
            "not a Responses API log record: no request with `input` and no response object "
            '(`"object": "response"`)',
            record.raw,
        )
    request = request or {}
    output = convert_items(response["output"], known)
    for item in response["output"]:
        if isinstance(item, dict) and as_id(item.get("id")):
            known[item["id"]] = item
    if not output:
        error = response.get("error") or response.get("incomplete_details")
        reason = f": {json_text(error)[:200]}" if error else ""
        return Reject(
            record.line, f"response has no output items (status {response.get('status')}{reason})", record.raw
        )
    call = call_from_response(request, response)
    call.source_line = record.line
    api_log.apply_timing(call, value, response)
    instructions = request.get("instructions", response.get("instructions"))
    sources = (value, {"metadata": request.get("metadata")}, {"metadata": response.get("metadata")})
    exchange = api_log.Exchange(
        line=record.line,
        source_format=FORMAT,
        request=[],
        errors={},
        response=output,
        call=call,
        tool_defs=tool_defs(request.get("tools", response.get("tools"))),
        key=_conversation_id(request, response) or as_id(_first_of(sources, api_log.CONVERSATION_ID_PATHS)),
        workload=as_str(_first_of(sources, api_log.WORKLOAD_PATHS)),
        agent=as_str(_first_of(sources, api_log.AGENT_PATHS)),
    )
    return Logged(
        line=record.line,
        response_id=as_id(response.get("id")),
        previous_id=as_id(request.get("previous_response_id")) or as_id(response.get("previous_response_id")),
        conversation_id=_conversation_id(request, response),
        instructions=text_of(instructions),
        input=convert_items(request.get("input"), known),
        input_logged="input" in request,
        output=output,
        exchange=exchange,
    )


def _first_of(sources: Iterable[dict], paths: tuple[str, ...]) -> Any:
    return next((found for found in (first(v, *paths) for v in sources) if found is not None), None)


def _order(items: list[Logged]) -> list[Logged]:
    """The records in the order the calls were made (the log order where a time is missing)."""
    if all(item.exchange.call.started_at for item in items):
        return sorted(items, key=lambda item: (item.exchange.call.started_at or datetime.min, item.line))
    return items


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    items: list[Logged] = []
    known: dict[str, dict] = {}
    once = api_log.LoggedOnce()
    for record in records:
        result.records += 1
        converted = logged(record, known)
        if isinstance(converted, Reject):
            result.rejects.append(converted)
        elif once.again(converted.exchange, by_content=False):
            result.skip(api_log.DUPLICATE)
        else:
            items.append(converted)
    result.traces.extend(traces_of(_order(items)))
    return result


def traces_of(ordered: list[Logged]) -> list[Trace]:
    """The conversations of converted records, taken in the order the calls were made (one file's,
    or several files' records read again by `ingest.log_joins`).

    Calls keep what finds their conversation's parts in other files (`ingest.log_joins`), as for
    other per-request logs; a call whose `previous_response_id` is not among the records also keeps
    that id in its `request_prefixes`: the call it continues is the one with that `call_id`.
    """
    history: dict[str, list[Message]] = {}  # response id -> the items the model had seen, and answered
    threads: dict[str, list[Message]] = {}  # conversation id -> its items so far
    unresolved: dict[int, str] = {}  # id(item) -> its previous response id, not among the records
    for item in ordered:
        prior: list[Message] = []
        if item.previous_id:
            if item.previous_id in history:
                prior = history[item.previous_id]
            else:
                unresolved[id(item)] = item.previous_id
        elif item.conversation_id:
            prior = threads.get(item.conversation_id, [])
        # Copies: a conversation's traces each own their messages (assemble rewrites them).
        seen = [*copy.deepcopy(prior), *item.input]
        item.exchange.request = item.system() + seen
        if item.response_id:
            history[item.response_id] = [*seen, *item.output]
        if item.conversation_id:
            threads[item.conversation_id] = [*seen, *item.output]
    by_call = {id(item.exchange.call): item for item in ordered}
    traces = api_log.build_traces([item.exchange for item in ordered], rejoinable=True)
    for item in ordered:
        if id(item) in unresolved:
            call = item.exchange.call
            call.request_prefixes = [*(call.request_prefixes or []), unresolved[id(item)]]
    for trace in traces:
        items = [by_call[id(call)] for call in trace.llm_calls]
        missing_input = sum(1 for item in items if not item.input_logged)
        if missing_input:
            trace.attributes["records_without_input"] = missing_input
        previous = [unresolved[id(item)] for item in items if id(item) in unresolved]
        if previous:
            trace.attributes["previous_response_not_in_file"] = previous
    return traces


def sniff(sample: list[Record]) -> float:
    """Responses API logs: a record holding a response object (`"object": "response"`)."""
    best = 0.0
    for record in sample:
        request, response = unwrap(record.value)
        if response is not None:
            best = max(best, 0.95 if request is not None else 0.9)
    return best
