"""Per-request API logs: one record per LLM call, as proxies and gateways (LiteLLM, Helicone-style
exporters, home-made middleware) write them, for OpenAI Chat Completions and Anthropic Messages.

A record holds the request (model, messages, tools) and the response, either side by side
(`{"request": ..., "response": ...}`, optionally each under `body`) or flat (the request's fields at
the top level with the response under `response`). Provider is decided per record, so a gateway
log that mixes providers ingests whole. Records are grouped into conversations by an explicit
conversation / session / trace id where they carry one, and by prefix chaining
(`traceforge.ingest.grouping`) within and without such ids.
"""

from __future__ import annotations

import array
import hashlib
import itertools
import json
import marshal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from traceforge.ingest import grouping, transcript
from traceforge.ingest.conversation import assemble, default_workload
from traceforge.ingest.sources import Record, SourceError
from traceforge.ingest.stream import FILE_CHANGED, read_twice
from traceforge.ingest.values import (
    add_ms,
    as_float,
    as_id,
    as_str,
    dig,
    duration_ms,
    first,
    parse_time,
)
from traceforge.model import LlmCall, Message, ParseResult, Reject, ToolDef, Trace, stable_id

REQUEST_PATHS = (("request", "body"), ("request",), ("body",), ())
RESPONSE_PATHS = (("response", "body"), ("response",), ("output",), ("completion",))
CONVERSATION_ID_PATHS = (
    "conversation_id",
    "session_id",
    "trace_id",
    "thread_id",
    "metadata.conversation_id",
    "metadata.session_id",
    "metadata.trace_id",
    "metadata.thread_id",
    "request.metadata.conversation_id",
    "request.metadata.session_id",
    "request.metadata.trace_id",
    "metadata.headers.x-session-id",
)
WORKLOAD_PATHS = (
    "workload",
    "metadata.workload",
    "request.metadata.workload",
    "app",
    "metadata.app",
    "application",
    "metadata.application",
    "project",
    "metadata.project",
    "service",
    "metadata.service",
    "metadata.tags.workload",
)
AGENT_PATHS = ("agent", "agent_name", "metadata.agent", "metadata.agent_name", "request.metadata.agent")
START_PATHS = ("start_time", "startTime", "started_at", "request_time", "timestamp", "created_at")
END_PATHS = ("end_time", "endTime", "ended_at", "completed_at", "response_time")
FIRST_TOKEN_PATHS = ("completion_start_time", "completionStartTime", "first_token_time")
COST_PATHS = ("cost_usd", "response_cost", "cost", "total_cost", "metadata.cost_usd")
LOG_SAMPLE = 50  # records looked at to tell a per-request log from transcripts


def unwrap(value: Any) -> tuple[dict | None, dict | None, dict]:
    """(request, response, record) of a per-request log record; request is None when the record
    does not hold a chat request (a `messages` list)."""
    if not isinstance(value, dict):
        return None, None, {}
    request = None
    for path in REQUEST_PATHS:
        candidate = dig(value, *path) if path else value
        if isinstance(candidate, dict) and isinstance(candidate.get("messages"), list):
            request = candidate
            break
    response = None
    for path in RESPONSE_PATHS:
        candidate = dig(value, *path)
        if isinstance(candidate, dict):
            response = candidate
            break
    if response is None and request is value and isinstance(value.get("choices"), list):
        response = value
    return request, response, value


def is_log(records: list[Record]) -> bool:
    """Per-request log records (rather than transcripts): a request beside a response, or a request
    wrapped under `request` / `body` (a logged call that failed before any response)."""
    return any(is_log_record(record.value) for record in records[:LOG_SAMPLE])


def is_log_record(value: Any) -> bool:
    request, response, _ = unwrap(value)
    return request is not None and (response is not None or request is not value)


def parse_or_transcript(records: Iterable[Record], source_path: str, fmt: str) -> ParseResult:
    """Parse a file of the OpenAI or Anthropic family: per-request logs or transcripts. Only the
    first records are looked at to tell which; the rest are read as they come."""
    records = iter(records)
    head = list(itertools.islice(records, LOG_SAMPLE))
    everything = itertools.chain(head, records)
    if is_log(head):
        return parse(everything, source_path)
    return transcript.parse(everything, source_path, provider_module(fmt))


def hands_out(sample: list[Record]) -> bool:
    """Whether `stream_or_transcript` hands a file's traces out as it reads it (detect.py's
    protocol): a log's as their conversations end, transcripts' a record at a time, but not a file
    of bare messages, one conversation held to its end."""
    return is_log(sample[:LOG_SAMPLE]) or not transcript.one_conversation(sample)


def stream_or_transcript(
    records: Iterable[Record],
    source_path: str,
    fmt: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None = None,
) -> Iterator[Trace]:
    """`parse_or_transcript`'s traces one by one (`stream`, `transcript.traces`)."""
    records = iter(records)
    head = list(itertools.islice(records, LOG_SAMPLE))
    everything = itertools.chain(head, records)
    if is_log(head):
        return stream(everything, source_path, result, on_first_pass)
    return transcript.traces(everything, source_path, provider_module(fmt), result)


def provider_module(fmt: str) -> ModuleType:
    from traceforge.ingest import anthropic_messages, openai_chat

    return anthropic_messages if fmt == anthropic_messages.FORMAT else openai_chat


def _provider_for(request: dict, response: dict) -> ModuleType | None:
    from traceforge.ingest import anthropic_messages, openai_chat

    if openai_chat.is_response(response):
        return openai_chat
    if anthropic_messages.is_response(response):
        return anthropic_messages
    return None


@dataclass
class Exchange:
    """One logged API call, converted."""

    line: int
    source_format: str  # the format of the trace it becomes part of
    request: list[Message]
    errors: dict[int, bool]
    response: list[Message]
    call: LlmCall
    tool_defs: list[ToolDef]
    key: str | None
    workload: str | None
    agent: str | None
    prefixes: list[bytes] = field(default_factory=list)
    state: bytes = b""
    hashed: bool = False  # `prefixes` and `state` are set (`hash_chain`)
    request_length: int = 0  # messages in the request
    opens_mid_conversation: bool = False  # the request holds an assistant turn
    # Where the request is converted only if needed (per-request logs): its messages' keys now,
    # the messages and their error flags from `convert_request()` for a conversation's last request.
    request_keys: list[str] | None = None
    convert_request: Callable[[], tuple[list[Message], dict[int, bool]]] | None = None

    def materialize(self) -> None:
        """Convert a request held back by `convert_request`."""
        if self.convert_request is not None:
            self.request, self.errors = self.convert_request()
            self.convert_request = None


def message_key(message: Message) -> str:
    """What identifies a message when a client re-sends it: role, text, calls and result ids.
    Reasoning is left out (clients often strip it when re-sending), and empty content equals none."""
    calls = [[c.get("id"), c.get("name"), c.get("arguments")] for c in message.tool_calls or []]
    return _KEY_ENCODER.encode([message.role, message.content or "", calls, message.tool_call_id])


# One encoder for every key (json.dumps with options builds a new one per call).
_KEY_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)


def _convert(provider: ModuleType, raw_messages: list, system: Any) -> tuple[list[Message], dict[int, bool]]:
    if provider.FORMAT == "anthropic-messages":
        return provider.convert_messages(raw_messages, system)
    return provider.convert_messages(raw_messages)


# How much of the messages' keys `RequestKeys` remembers (about twice as many bytes in memory).
KNOWN_KEY_CHARS = 64 << 20


class RequestKeys:
    """The `message_key`s of a logged request's messages, converting each distinct message once.

    A log re-sends the whole conversation with every call, so the same messages are met again and
    again; converting a message depends on nothing but the message, so its keys are remembered by
    a digest of the message as logged (`_MARSHAL_VERSION`). (The messages themselves are converted
    only for the last request of each conversation, the one its trace is built from.)
    """

    def __init__(self) -> None:
        self.known: dict[bytes, tuple[str, ...]] = {}
        self.held = 0  # characters of the keys remembered

    def of(self, provider: ModuleType, raw_messages: list, system: Any) -> list[str]:
        keys = [message_key(m) for m in _convert(provider, [], system)[0]] if system else []
        for raw in raw_messages:
            if not isinstance(raw, dict):
                continue
            try:
                digest = hashlib.blake2b(marshal.dumps(raw, _MARSHAL_VERSION), digest_size=16).digest()
            except ValueError:  # not a plain JSON value
                keys.extend(message_key(m) for m in _convert(provider, [raw], None)[0])
                continue
            found = self.known.get(digest)
            if found is None:
                found = self.known[digest] = tuple(message_key(m) for m in _convert(provider, [raw], None)[0])
                self.held += sum(map(len, found))
                if self.held > KNOWN_KEY_CHARS:  # a conversation re-sends its recent messages: forget
                    self.known, self.held = {digest: found}, sum(map(len, found))  # the rest: not held
            keys.extend(found)
        return keys


# A raw message is digested in marshal's form: three times faster than its JSON (which took 8% of
# an ingest's CPU). Version 2 writes no back-references, so equal messages give equal bytes
# whichever objects the JSON decoder shared; different values (1, 1.0, true) give different bytes.
_MARSHAL_VERSION = 2


def exchange_of(record: Record, keys: RequestKeys | None) -> Exchange | Reject:
    """A log record's call, converted, or why it cannot be used; without its request's message keys
    where `keys` is None (a call whose chaining is known already: `stream`)."""
    request, response, value = unwrap(record.value)
    if request is None:
        return Reject(record.line, "not an API log record: no request with a `messages` list", record.raw)
    if response is None:
        error = first(value, "error", "response.error", "status_code")
        reason = f" (the call failed: {json.dumps(error)[:200]})" if error is not None else ""
        return Reject(record.line, f"request without a response{reason}", record.raw)
    provider = _provider_for(request, response)
    if provider is None:
        return Reject(
            record.line,
            "response is neither an OpenAI chat completion (`choices`) nor an Anthropic message "
            "(`content` blocks)",
            record.raw,
        )
    call, added = provider.call_from_response(request, response)
    if not added:
        return Reject(record.line, "response has no message (no choices[0].message)", record.raw)
    call.source_line = record.line
    apply_timing(call, value, response)
    key = as_id(first(value, *CONVERSATION_ID_PATHS))
    raw_messages, system = request["messages"], request.get("system")
    return Exchange(
        line=record.line,
        source_format=provider.FORMAT,
        request=[],
        errors={},
        request_keys=keys.of(provider, raw_messages, system) if keys is not None else None,
        convert_request=lambda: _convert(provider, raw_messages, system),
        response=added,
        call=call,
        tool_defs=provider.tool_defs(request),
        key=key,
        workload=as_str(first(value, *WORKLOAD_PATHS)),
        agent=as_str(first(value, *AGENT_PATHS)),
    )


def apply_timing(call: LlmCall, value: dict, response: dict) -> None:
    """Set the call's times, time to first token and cost from a log record and its response."""
    call.started_at = (
        parse_time(first(value, *START_PATHS))
        or parse_time(response.get("created"))
        or parse_time(response.get("created_at"))
    )
    call.ended_at = parse_time(first(value, *END_PATHS))
    latency = as_float(first(value, "latency_ms", "duration_ms", "metadata.latency_ms"))
    if call.ended_at is None and call.started_at is not None and latency is not None:
        call.ended_at = add_ms(call.started_at, latency)
    call.duration_ms = duration_ms(call.started_at, call.ended_at) if call.ended_at else latency
    first_token = parse_time(first(value, *FIRST_TOKEN_PATHS))
    call.ttft_ms = (
        duration_ms(call.started_at, first_token)
        if first_token
        else as_float(first(value, "ttft_ms", "time_to_first_token_ms"))
    )
    cost = as_float(first(value, *COST_PATHS))
    if cost is not None:
        call.cost_usd = cost


DUPLICATE = "duplicate record"  # the same response logged again (a shipper's retry)


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    conversations = Conversations(rejoinable=True)
    for exchange in _exchanges(records, result):
        conversations.add(exchange)
    result.traces.extend(conversations.traces())
    return result


def stream(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None = None,
) -> Iterator[Trace]:
    """`parse`'s traces one by one, each as soon as its conversation's last call is read, so that a
    big log is not held whole (`traceforge.ingest.parts`).

    A later request can continue any conversation, so where each ends is only known at the end of
    the file: a first pass chains its requests without keeping them (`plan`, `stream.read_twice`);
    `records` are then converted without being hashed or chained again. A trace that branched off
    another comes after it, as in `parse`; others come in the order their conversations end."""
    return read_twice(records, source_path, result, on_first_pass, parse, plan, _as_planned)


def _as_planned(records: Iterable[Record], found: LogPlan, result: ParseResult) -> Iterator[Trace]:
    conversations = Conversations(rejoinable=True, plan=found)
    for record in records:
        result.records += 1
        converted = exchange_of(record, None)
        if isinstance(converted, Reject):
            result.rejects.append(converted)
        elif conversations.add_planned(converted):
            yield from conversations.ended()
        else:
            result.skip(DUPLICATE)
    conversations.check_planned()


@dataclass
class LogPlan:
    """What a first pass over a log learns (`plan`), so that the second neither hashes nor chains:
    per call kept, in order, its line, its conversation, its state after the response (16 bytes
    each) and how many messages its request held; the prefix hashes of the requests that open a
    conversation mid-way; and each conversation's last call."""

    chains: list[grouping.Chain]
    lines: array.array = field(default_factory=lambda: array.array("q"))
    chain_of: array.array = field(default_factory=lambda: array.array("q"))
    states: bytearray = field(default_factory=bytearray)
    request_lengths: array.array = field(default_factory=lambda: array.array("q"))
    opening_prefixes: dict[int, list[bytes]] = field(default_factory=dict)
    ends: list[int] = field(default_factory=list)


def plan(records: Iterable[Record]) -> LogPlan:
    """A log's `LogPlan`: its calls chained as `Conversations` chains them, holding a few dozen
    bytes per call, none of their content."""
    planner = Planner()
    scratch = ParseResult()
    for exchange in _exchanges(records, scratch):
        scratch.rejects.clear()
        hash_chain(exchange)
        planner.add(
            exchange.line,
            exchange.key,
            exchange.prefixes,
            exchange.state,
            exchange.request_length,
            exchange.opens_mid_conversation,
        )
    return planner.finish()


class Planner:
    """A `LogPlan` built one call at a time, in the order the calls were made, from what chains
    each (`Exchange.prefixes`, `state`, `request_length`, `opens_mid_conversation`, as `hash_chain`
    sets them), none of its content."""

    def __init__(self) -> None:
        self.chainer = grouping.Chainer()
        self.plan = LogPlan(self.chainer.chains)

    def add(
        self,
        line: int,
        key: str | None,
        prefixes: list[bytes],
        state: bytes,
        request_length: int,
        opens_mid_conversation: bool,
    ) -> None:
        found, chainer = self.plan, self.chainer
        chain = chainer.add(prefixes, state, key)
        item = len(found.lines)
        if chain == len(found.ends):
            found.ends.append(item)
            if chainer.chains[chain].parent is None and opens_mid_conversation:
                found.opening_prefixes[item] = prefixes
        else:
            found.ends[chain] = item
        found.lines.append(line)
        found.chain_of.append(chain)
        found.states += state
        found.request_lengths.append(request_length)

    def finish(self) -> LogPlan:
        for chain in self.chainer.chains:
            chain.items = []  # the chainer's, not needed past it
        return self.plan


def _exchanges(records: Iterable[Record], result: ParseResult) -> Iterator[Exchange]:
    """The log's calls, converted, but for the records rejected and the responses logged again
    (counted into `result`)."""
    keys = RequestKeys()
    logged = LoggedOnce()
    for record in records:
        result.records += 1
        converted = exchange_of(record, keys)
        if isinstance(converted, Reject):
            result.rejects.append(converted)
        elif logged.again(converted):
            result.skip(DUPLICATE)
        else:
            yield converted


class LoggedOnce:
    """Tells a response logged again from a new call. Log shippers deliver at least once, so a
    record can reach a log twice. A second record of the same response (its response id, model and
    start, in the same conversation), after the same request (the same conversation after it), is
    that: counted once. A record without a response id is always a call of its own (an identical
    re-sample is a real call)."""

    def __init__(self) -> None:
        self.seen: set[tuple] = set()

    def again(self, exchange: Exchange, by_content: bool = True) -> bool:
        """Whether `exchange` was seen before; `by_content=False` where its request is not known
        yet (a Responses call continuing a previous response): the response id alone, which the
        API makes unique."""
        call = exchange.call
        if call.source_id is None:
            return False
        key: tuple = (exchange.key, call.source_id, call.model, call.started_at)
        if by_content:
            hash_chain(exchange)
            key += (exchange.state,)
        if key in self.seen:
            return True
        self.seen.add(key)
        return False


def build_traces(exchanges: list[Exchange], shape: str = "api-log", rejoinable: bool = False) -> list[Trace]:
    """Group converted API calls into conversations, one trace each.

    `exchanges` are taken in the order they happened (a continuation comes after the call it
    continues). Conversations are told apart by the exchanges' `key` (an explicit conversation id)
    and by prefix chaining (`traceforge.ingest.grouping`). An exchange whose response added no message
    (a call that failed) is an LLM call of its conversation without a message of its own. Traces get
    `attributes["shape"] = shape`. The exchanges are consumed: their requests and tool definitions
    become the traces'. `rejoinable`: see `Conversations`.
    """
    conversations = Conversations(shape, rejoinable)
    for exchange in exchanges:
        conversations.add(exchange)
    return conversations.traces()


def hash_chain(exchange: Exchange) -> None:
    """Set the exchange's request-prefix hashes and its state after the response (once)."""
    if exchange.hashed:
        return
    keys = exchange.request_keys
    if keys is None:
        keys = [message_key(m) for m in exchange.request]
    exchange.request_keys = None
    exchange.request_length = len(keys)
    exchange.opens_mid_conversation = any(key.startswith(_ASSISTANT_KEY) for key in keys)
    exchange.prefixes, exchange.state = chain_hashes(keys, exchange.response)
    exchange.hashed = True


def chain_hashes(request_keys: list[str], response: list[Message]) -> tuple[list[bytes], bytes]:
    """The hashes of a request's message prefixes (from its messages' `message_key`s) and of the
    conversation after the response: a later request holding the latter continues this call."""
    prefixes = grouping.message_hashes(request_keys)
    start = prefixes[-1] if prefixes else None
    added = grouping.message_hashes([message_key(m) for m in response], start=start)
    return prefixes, added[-1] if added else start or grouping.message_hashes([""])[-1]


_ASSISTANT_KEY = '["assistant",'


class Conversations:
    """Exchanges grouped into conversations as they come (see `build_traces`), holding per
    conversation only what its trace needs: each exchange's call and response, the number of
    messages its request held, the latest exchange's request, and the tool definitions. A log's
    requests re-send the whole conversation each time, so keeping every request would take memory
    growing with the square of a conversation's length; this keeps it linear.

    Given a `plan` (`plan`: the log's chaining, from a first pass over it), exchanges are added as
    it chained them (`add_planned`), and a conversation's trace is built as soon as its last exchange
    is added; `ended` hands it out. What is held is then the conversations still going on, not the
    log. Otherwise `traces` builds them all at the end.
    """

    def __init__(self, shape: str = "api-log", rejoinable: bool = False, plan: LogPlan | None = None) -> None:
        self.shape = shape
        # Keep on each call what finds its conversation's parts in other files (`ingest.log_joins`):
        # its `chain_state`, and an opening call's `request_prefixes`.
        self.rejoinable = rejoinable
        self.plan = plan
        self.chainer = grouping.Chainer()
        self.chains = plan.chains if plan is not None else self.chainer.chains
        # Per conversation, until its trace is built (then None): its exchanges, the number of
        # messages each request held, and the tool definitions.
        self.exchanges: list[list[Exchange] | None] = []
        self.request_lengths: list[list[int]] = []
        self.tool_defs: list[dict[str, ToolDef]] = []
        self.source_ids: list[str] = []
        self.key_counts: dict[str, int] = {}
        self.lines = array.array("q")  # per exchange, in the order added
        self.built: list[Trace] = []  # traces built and not handed out yet
        self.waiting: dict[int, list[int]] = {}  # conversation -> its ended branches, built after it

    def add(self, exchange: Exchange) -> None:
        hash_chain(exchange)
        prefixes, exchange.prefixes = exchange.prefixes, []
        self._place(exchange, self.chainer.add(prefixes, exchange.state, exchange.key), prefixes)

    def add_planned(self, exchange: Exchange) -> bool:
        """Add the plan's next exchange, with the state, request length and conversation the plan
        holds for it; False for an exchange before it, which the plan left out (a response logged
        again). Raises SourceError where the file no longer holds what the plan read."""
        plan, item = self.plan, len(self.lines)
        if item < len(plan.lines) and exchange.line < plan.lines[item]:
            return False
        if item >= len(plan.lines) or exchange.line != plan.lines[item]:
            raise SourceError(FILE_CHANGED)
        exchange.state = bytes(plan.states[16 * item : 16 * item + 16])
        exchange.request_length = plan.request_lengths[item]
        prefixes = plan.opening_prefixes.pop(item, [])
        exchange.opens_mid_conversation = bool(prefixes)
        exchange.hashed, exchange.request_keys = True, None
        self._place(exchange, plan.chain_of[item], prefixes)
        if item == plan.ends[plan.chain_of[item]]:
            self._end(plan.chain_of[item])
        return True

    def check_planned(self) -> None:
        """Raise SourceError unless every exchange of the plan was added."""
        if len(self.lines) != len(self.plan.lines):
            raise SourceError(FILE_CHANGED)

    def _place(self, exchange: Exchange, chain: int, prefixes: list[bytes]) -> None:
        """Add an exchange to the conversation `chain` (a new one: the next number)."""
        self.lines.append(exchange.line)
        if self.rejoinable:
            exchange.call.chain_state = exchange.state.hex()
            opens = chain == len(self.exchanges) and self.chains[chain].parent is None
            if opens and exchange.opens_mid_conversation:
                exchange.call.request_prefixes = [digest.hex() for digest in prefixes]
        if chain == len(self.exchanges):
            self._open(chain, exchange)
        held = self.exchanges[chain]
        if held:
            superseded = held[-1]  # the new request holds its request again
            superseded.request, superseded.convert_request = [], None
        held.append(exchange)
        self.request_lengths[chain].append(exchange.request_length)
        for definition in exchange.tool_defs:
            self.tool_defs[chain][definition.name] = definition
        exchange.tool_defs = []

    def _open(self, chain: int, exchange: Exchange) -> None:
        """A new conversation, named by its explicit id (numbered when a log holds it again) or by
        its first exchange."""
        key = self.chains[chain].key
        if key is not None:
            n = self.key_counts[key] = self.key_counts.get(key, 0) + 1
            self.source_ids.append(key if n == 1 else f"{key}/{n}")
        else:
            self.source_ids.append("conv-" + stable_id(exchange.state.hex(), exchange.line))
        self.exchanges.append([])
        self.request_lengths.append([])
        self.tool_defs.append({})

    def _end(self, chain: int) -> None:
        """Build an ended conversation's trace, after the conversation it branched off (whose
        tool calls it re-sends: they keep their ids in the first trace written), and then those of
        its branches that have ended."""
        parent = self.chains[chain].parent
        if parent is not None and self.exchanges[parent] is not None:
            self.waiting.setdefault(parent, []).append(chain)
            return
        self.built.append(self._build(chain))
        for branch in self.waiting.pop(chain, []):
            self._end(branch)

    def _build(self, index: int) -> Trace:
        chain = self.chains[index]
        exchanges = self.exchanges[index]
        exchanges[-1].materialize()
        trace = _trace(
            chain,
            exchanges,
            self.request_lengths[index],
            list(self.tool_defs[index].values()),
            self.source_ids[index],
            self.shape,
        )
        if chain.parent is not None:
            trace.parent_source_id = self.source_ids[chain.parent]
            trace.attributes["branched_from_line"] = self.lines[chain.branch_item]
        self.exchanges[index], self.request_lengths[index], self.tool_defs[index] = None, [], {}
        return trace

    def ended(self) -> Iterator[Trace]:
        """The traces of the conversations that have ended since last asked (given a `plan`)."""
        built, self.built = self.built, []
        return iter(built)

    def traces(self) -> list[Trace]:
        """The traces of every conversation not built yet, in the order they began."""
        return [self._build(index) for index, held in enumerate(self.exchanges) if held is not None]


def _trace(
    chain: grouping.Chain,
    exchanges: list[Exchange],
    request_lengths: list[int],
    tool_defs: list[ToolDef],
    source_id: str,
    shape: str,
) -> Trace:
    final = exchanges[-1]
    conversation = list(final.request) + list(final.response)
    for k, exchange in enumerate(exchanges):
        position = request_lengths[k]
        conversation[position : position + len(exchange.response)] = exchange.response
        if exchange.response:
            conversation[position].call_index = k
    formats = {e.source_format for e in exchanges}
    trace = Trace(
        source_format=formats.pop() if len(formats) == 1 else "mixed",
        source_id=source_id,
        source_line=exchanges[0].line,
        workload=next((e.workload for e in exchanges if e.workload), None),
        agent=next((e.agent for e in exchanges if e.agent), None),
        attributes={"shape": shape, "records": len(exchanges)},
    )
    if chain.key is not None:
        trace.attributes["conversation_id"] = chain.key
    trace.llm_calls = [e.call for e in exchanges]
    trace.tool_defs = tool_defs
    assemble(trace, conversation, result_errors=final.errors)
    starts = [c.started_at for c in trace.llm_calls if c.started_at]
    ends = [c.ended_at or c.started_at for c in trace.llm_calls if c.ended_at or c.started_at]
    trace.started_at = min(starts) if starts else None
    trace.ended_at = max(ends) if ends else None
    trace.workload = trace.workload or trace.agent or default_workload(trace)
    return trace
