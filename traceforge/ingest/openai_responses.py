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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from traceforge.ingest import api_log, grouping
from traceforge.ingest.sources import Record, SourceError
from traceforge.ingest.stream import FILE_CHANGED, HeldWhole, read_twice
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


REPEATS_KEPT = 64  # distinct instructions, and tool sets of the same names, `Repeats` keeps


class Repeats:
    """What every request of a log sends again, kept once: the instructions and the tool
    definitions, most of a Responses log's bytes. Held per record, they would take several times
    the file in memory; a few dozen of the latest distinct ones are kept."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.tools: dict[tuple, list[tuple[list, list[ToolDef]]]] = {}

    def text(self, value: str | None) -> str | None:
        if not value:
            return value
        if len(self.texts) >= REPEATS_KEPT and value not in self.texts:
            self.texts.clear()
        return self.texts.setdefault(value, value)

    def tool_defs(self, tools: Any) -> list[ToolDef]:
        """`tool_defs(tools)`, the same definitions for the same tools."""
        if not isinstance(tools, list):
            return tool_defs(tools)
        names = tuple(as_str(tool.get("name")) if isinstance(tool, dict) else None for tool in tools)
        met = self.tools.setdefault(names, [])
        for raw, defs in met:
            if raw == tools:
                return list(defs)
        if len(self.tools) > REPEATS_KEPT:
            self.tools = {names: met}
        defs = tool_defs(tools)
        met.append((tools, defs))
        del met[:-REPEATS_KEPT]
        return list(defs)


def logged(record: Record, known: dict[str, dict] | None, repeats: Repeats | None = None) -> Logged | Reject:
    """A record's call, converted (`known`: the output items met so far, by id, which its own are
    added to; None where no record references an item; `repeats`: the instructions and tool
    definitions met so far), or why it cannot be used."""
    repeats = repeats or Repeats()
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
    for item in response["output"] if known is not None else ():
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
        tool_defs=repeats.tool_defs(request.get("tools", response.get("tools"))),
        key=_conversation_id(request, response) or as_id(_first_of(sources, api_log.CONVERSATION_ID_PATHS)),
        workload=as_str(_first_of(sources, api_log.WORKLOAD_PATHS)),
        agent=as_str(_first_of(sources, api_log.AGENT_PATHS)),
    )
    return Logged(
        line=record.line,
        response_id=as_id(response.get("id")),
        previous_id=as_id(request.get("previous_response_id")) or as_id(response.get("previous_response_id")),
        conversation_id=_conversation_id(request, response),
        instructions=repeats.text(text_of(instructions)),
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
    repeats = Repeats()
    once = api_log.LoggedOnce()
    for record in records:
        result.records += 1
        converted = logged(record, known, repeats)
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
    history: dict[str, Said] = {}  # response id -> what its conversation had said, and its answer
    threads: dict[str, Said] = {}  # conversation id -> its items so far
    systems = Systems()
    unresolved: dict[int, str] = {}  # id(call) -> its previous response id, not among the records
    for item in ordered:
        before = continued(item.previous_id, item.conversation_id, history, threads)
        if item.previous_id and before is None:
            unresolved[id(item.exchange.call)] = item.previous_id
        said = Said(before, [*item.input, *item.output])
        _hash(item, said, systems)
        _give_request(item, said)
        if item.response_id:
            history[item.response_id] = said
        if item.conversation_id:
            threads[item.conversation_id] = said
    logged_input = {id(item.exchange.call): item.input_logged for item in ordered}
    traces = api_log.build_traces([item.exchange for item in ordered], rejoinable=True)
    for trace in traces:
        _describe(trace, logged_input, unresolved)
    return traces


Continued = TypeVar("Continued")


def continued(
    previous_id: str | None,
    conversation_id: str | None,
    history: dict[str, Continued],
    threads: dict[str, Continued],
) -> Continued | None:
    """What a call continues, from what each response (`history`, by response id) and each
    conversation (`threads`, by conversation id) holds so far: the response its
    `previous_response_id` names, else its conversation's latest call, else nothing (it starts a
    conversation, or continues a response not among the records). The one rule `traces_of`, `plan`
    and the second pass all follow, so that they agree."""
    if previous_id:
        return history.get(previous_id)
    return threads.get(conversation_id) if conversation_id else None


def _describe(trace: Trace, logged_input: dict[int, bool], unresolved: dict[int, str]) -> None:
    """Note on a trace (by id(call)) its calls whose records lacked their input, and the previous
    responses its calls continue that are not among the records; those calls also keep that id in
    their `request_prefixes`."""
    missing_input = sum(1 for call in trace.llm_calls if not logged_input[id(call)])
    if missing_input:
        trace.attributes["records_without_input"] = missing_input
    previous = []
    for call in trace.llm_calls:
        if id(call) in unresolved:
            previous.append(unresolved[id(call)])
            call.request_prefixes = [*(call.request_prefixes or []), unresolved[id(call)]]
    if previous:
        trace.attributes["previous_response_not_in_file"] = previous


class Said:
    """What one call added to its conversation (its input items and its output), after what the
    call it continues had (`before`): a conversation is the chain of these back to its first call.

    A call continuing a previous response sends only its new items, so holding each call's whole
    conversation would take memory growing with the square of a conversation's length; this holds
    each item once. Its messages stay as converted (a trace is given copies, which it rewrites), and
    the prefix hashes of its messages are kept for the digest they continue from (the instructions'
    hash, the same along a conversation), so that a conversation is hashed once, not per call.
    """

    __slots__ = ("before", "count", "digests", "has_assistant", "messages", "own", "start")

    def __init__(self, before: Said | None, messages: list[Message]) -> None:
        self.before = before
        self.messages: list[Message] | None = messages  # None once let go (`plan`: the hashes are kept)
        self.own = len(messages)
        self.count = self.own + (before.count if before else 0)  # messages up to here
        self.has_assistant = bool(before and before.has_assistant) or any(
            m.role == "assistant" for m in messages
        )
        self.start = b""  # the digest `digests` continue from
        self.digests = b""  # 16 bytes per message: the rolling prefix hash after it

    def parts(self) -> list[Said]:
        """This and every part before it, the first first."""
        found, part = [], self
        while part is not None:
            found.append(part)
            part = part.before
        return found[::-1]

    def conversation(self) -> list[Message]:
        """Every message up to here, as converted (a trace must be given copies: it rewrites them)."""
        return [m for part in self.parts() for m in part.messages or ()]

    def prefix_hashes(self, start: bytes) -> list[bytes] | None:
        """The rolling hashes after each message up to here, continuing from `start` (as
        `grouping.message_hashes` gives them); None where a part whose messages were let go would
        have to be hashed from another start (the instructions changed along the conversation)."""
        hashes: list[bytes] = []
        digest = start
        for part in self.parts():
            if part.start != digest or len(part.digests) != 16 * part.own:
                if part.messages is None:
                    return None
                keys = [api_log.message_key(m) for m in part.messages]
                part.start, part.digests = digest, b"".join(grouping.message_hashes(keys, start=digest))
            hashes.extend(part.digests[k : k + 16] for k in range(0, len(part.digests), 16))
            if part.digests:
                digest = part.digests[-16:]
        return hashes


class Systems:
    """The prefix hashes of each distinct `instructions` text's system message, made once (for the
    latest few dozen texts, as `Repeats` keeps them)."""

    def __init__(self) -> None:
        self.known: dict[str | None, list[bytes]] = {}

    def hashes(self, instructions: str | None) -> list[bytes]:
        found = self.known.get(instructions)
        if found is None:
            if len(self.known) >= REPEATS_KEPT:
                self.known.clear()
            system = [Message(role="system", content=instructions)] if instructions else []
            keys = [api_log.message_key(m) for m in system]
            found = self.known[instructions] = grouping.message_hashes(keys)
        return found


def _hash(item: Logged, said: Said, systems: Systems) -> bool:
    """Set the hashes that chain `item`'s call (`api_log.hash_chain`'s, from its request: the
    instructions, what came before, its input); False where they cannot be made (`prefix_hashes`)."""
    system = systems.hashes(item.instructions)
    hashes = said.prefix_hashes(system[-1] if system else grouping.EMPTY)
    if hashes is None:
        return False
    exchange = item.exchange
    exchange.prefixes = system + hashes[: len(hashes) - len(item.output)]
    exchange.state = hashes[-1]
    exchange.request_length = len(system) + said.count - len(item.output)
    before = said.before
    exchange.opens_mid_conversation = bool(before and before.has_assistant) or any(
        m.role == "assistant" for m in item.input
    )
    exchange.hashed = True
    return True


def _give_request(item: Logged, said: Said) -> None:
    """Give `item`'s exchange copies of its response and, converted only if its trace is built from
    it, of its request."""
    exchange = item.exchange
    exchange.response = copy.deepcopy(item.output)

    def request() -> tuple[list[Message], dict[int, bool]]:
        messages = said.conversation()
        return item.system() + copy.deepcopy(messages[: len(messages) - len(item.output)]), {}

    exchange.request, exchange.convert_request = [], request


def stream(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None = None,
) -> Iterator[Trace]:
    """`parse`'s traces one by one, each as soon as its conversation's last call is read, so that a
    big log is not held whole (`traceforge.ingest.parts`).

    A first pass (`plan`) orders the calls as `parse` does and chains them, keeping their hashes,
    not their items; the second converts `records` again and builds each conversation's trace at its
    last call, holding what a response said only while a later call can still continue it. Calls
    logged out of order wait for the calls made before them. Where the first pass cannot stand for
    `parse` (an item referenced by id, instructions changed along a conversation, a call that
    continues a response made after it), the file is parsed whole.
    """
    return read_twice(records, source_path, result, on_first_pass, parse, plan, _as_planned)


@dataclass(slots=True)
class _Planned:
    """A call as the first pass keeps it: what orders and chains it, and what it continues."""

    line: int
    started: datetime | None
    key: str | None  # its conversation id, as `api_log.Exchange.key`
    response_id: str | None
    previous_id: str | None
    conversation_id: str | None
    before: _Planned | None  # the call it continues, met before it in the file
    said: Said  # its messages let go, their hashes kept
    system: list[bytes]  # its instructions' prefix hashes
    outputs: int  # messages its response added
    state: bytes
    request_length: int
    opens_mid_conversation: bool

    def prefixes(self) -> list[bytes]:
        """Its request's prefix hashes, made again from the hashes its parts keep."""
        hashes = self.said.prefix_hashes(self.system[-1] if self.system else grouping.EMPTY) or []
        return self.system + hashes[: len(hashes) - self.outputs]


@dataclass
class ResponsesPlan:
    """What `plan` learns: the `api_log.LogPlan` of the calls in the order they were made; the
    previous responses not among the records, by call (its place in that order); and how long each
    response and each conversation id must be held (the place of the last call continuing it)."""

    log: api_log.LogPlan
    unresolved: dict[int, str] = field(default_factory=dict)
    response_until: dict[str, int] = field(default_factory=dict)
    thread_until: dict[str, int] = field(default_factory=dict)


# Why a Responses API log's first pass cannot stand for the whole file (`plan`).
ITEM_REFERENCED = "a request naming an earlier item by id (item_reference)"
INSTRUCTIONS_CHANGED = "instructions that change along a conversation"
CONTINUES_A_LATER_CALL = "a call that continues a response made after it (a clock gone wrong?)"


def plan(records: Iterable[Record]) -> ResponsesPlan | HeldWhole:
    """A log's `ResponsesPlan`, or why its traces cannot be built as they end (see `stream`).

    The calls are hashed in the file's order, each continuing the call met before it that `parse`
    would find; then chained in the order `parse` takes them, where each must continue the same
    call again.
    """
    once = api_log.LoggedOnce()
    systems = Systems()
    repeats = Repeats()
    history: dict[str, _Planned] = {}
    threads: dict[str, _Planned] = {}
    kept: list[_Planned] = []
    for record in records:
        if _references_items(record.value):
            return HeldWhole(ITEM_REFERENCED)
        item = logged(record, None, repeats)
        if isinstance(item, Reject) or once.again(item.exchange, by_content=False):
            continue
        before = continued(item.previous_id, item.conversation_id, history, threads)
        said = Said(before.said if before else None, [*item.input, *item.output])
        if not _hash(item, said, systems):
            return HeldWhole(INSTRUCTIONS_CHANGED)
        said.messages = None
        exchange = item.exchange
        planned = _Planned(
            line=item.line,
            started=exchange.call.started_at,
            key=exchange.key,
            response_id=item.response_id,
            previous_id=item.previous_id,
            conversation_id=item.conversation_id,
            before=before,
            said=said,
            system=systems.hashes(item.instructions),
            outputs=len(item.output),
            state=exchange.state,
            request_length=exchange.request_length,
            opens_mid_conversation=exchange.opens_mid_conversation,
        )
        kept.append(planned)
        if item.response_id:
            history[item.response_id] = planned
        if item.conversation_id:
            threads[item.conversation_id] = planned
    return _chained(kept)


def _references_items(value: object) -> bool:
    """Whether a record's input names an earlier item by id (`item_reference`)."""
    request, _ = unwrap(value)
    items = request.get("input") if request else None
    return isinstance(items, list) and any(
        isinstance(item, dict) and item.get("type") == "item_reference" for item in items
    )


def _chained(kept: list[_Planned]) -> ResponsesPlan | HeldWhole:
    """The plan of the first pass's calls, taken in `parse`'s order (`_order`), unless a call
    would continue another call there than in the file's order."""
    ordered = kept
    if all(planned.started for planned in kept):
        ordered = sorted(kept, key=lambda planned: (planned.started or datetime.min, planned.line))
    planner = api_log.Planner()
    found = ResponsesPlan(planner.plan)
    history: dict[str, _Planned] = {}
    threads: dict[str, _Planned] = {}
    for index, planned in enumerate(ordered):
        before = continued(planned.previous_id, planned.conversation_id, history, threads)
        if planned.previous_id and before is None:
            found.unresolved[index] = planned.previous_id
        elif planned.previous_id:
            found.response_until[planned.previous_id] = index
        if before is not planned.before:
            return HeldWhole(CONTINUES_A_LATER_CALL)
        planner.add(
            planned.line,
            planned.key,
            planned.prefixes(),
            planned.state,
            planned.request_length,
            planned.opens_mid_conversation,
        )
        if planned.response_id:
            history[planned.response_id] = planned
        if planned.conversation_id:
            threads[planned.conversation_id] = planned
            found.thread_until[planned.conversation_id] = index
    found.log = planner.finish()
    return found


def _as_planned(records: Iterable[Record], found: ResponsesPlan, result: ParseResult) -> Iterator[Trace]:
    """The second pass: the calls converted again, taken in the plan's order (a call read before
    its turn waits for it), each conversation's trace built at its last call."""
    conversations = api_log.Conversations(rejoinable=True, plan=found.log)
    lines = found.log.lines
    once = api_log.LoggedOnce()
    repeats = Repeats()
    early: dict[int, Logged] = {}  # line -> a call read before its turn
    history: dict[str, Said] = {}
    threads: dict[str, Said] = {}
    logged_input: dict[int, bool] = {}  # id(call) -> whether its record held its input, until built
    unresolved: dict[int, str] = {}  # id(call) -> its previous response id, not among the records
    index = 0
    for record in records:
        result.records += 1
        converted = logged(record, None, repeats)
        if isinstance(converted, Reject):
            result.rejects.append(converted)
            continue
        if once.again(converted.exchange, by_content=False):
            result.skip(api_log.DUPLICATE)
            continue
        early[converted.line] = converted
        while index < len(lines) and lines[index] in early:
            item = early.pop(lines[index])
            said = Said(
                continued(item.previous_id, item.conversation_id, history, threads),
                [*item.input, *item.output],
            )
            _give_request(item, said)
            call = item.exchange.call
            logged_input[id(call)] = item.input_logged
            if index in found.unresolved:
                unresolved[id(call)] = found.unresolved[index]
            conversations.add_planned(item.exchange)
            _remember(item, said, index, found, history, threads)
            index += 1
            for trace in conversations.ended():
                _describe(trace, logged_input, unresolved)
                for done in trace.llm_calls:
                    logged_input.pop(id(done))
                    unresolved.pop(id(done), None)
                yield trace
    if early or index < len(lines):
        raise SourceError(FILE_CHANGED)
    conversations.check_planned()


def _remember(
    item: Logged,
    said: Said,
    index: int,
    found: ResponsesPlan,
    history: dict[str, Said],
    threads: dict[str, Said],
) -> None:
    """Hold what `item` said while a later call continues it, and let go of what it was the last to
    continue."""
    if item.previous_id and found.response_until.get(item.previous_id) == index:
        history.pop(item.previous_id, None)
    if item.response_id and found.response_until.get(item.response_id, -1) > index:
        history[item.response_id] = said
    if item.conversation_id:
        if found.thread_until.get(item.conversation_id, -1) > index:
            threads[item.conversation_id] = said
        else:
            threads.pop(item.conversation_id, None)


def sniff(sample: list[Record]) -> float:
    """Responses API logs: a record holding a response object (`"object": "response"`)."""
    best = 0.0
    for record in sample:
        request, response = unwrap(record.value)
        if response is not None:
            best = max(best, 0.95 if request is not None else 0.9)
    return best
