"""OpenTelemetry traces: OTLP/JSON exports, ReadableSpan JSON, and bare GenAI span attribute maps.

One trace per OTel trace id (spans of one trace may be spread over many lines of a collector file
export). Within a trace:
- LLM spans (by the dialect rules of `otel_dialects.classify`) become `llm_calls`, in start order.
  An LLM span that contains another LLM span (a framework's wrapper around the client library's
  span) is skipped, so one model call is never counted twice.
- The conversation is the one the last LLM span saw: its input messages plus its output. Assistant
  messages in that history are matched to the earlier LLM calls whose outputs they are (by tool call
  ids, then text, then position when the counts agree).
- Tool-execution spans become `tool_calls` with their measured start, end and duration. Each joins
  the call the model requested by tool call id; without an id, by name among the calls requested by
  the LLM call that preceded it under the nearest common parent (tool spans are usually siblings of
  the LLM spans, not children), then by time order. A tool span that matches no requested call is
  kept as a tool call of that LLM call.
- Every other span (agent and chain wrappers, HTTP, DB, embeddings) is skipped by rule and counted
  by kind in `ParseResult.skipped`.

Records are counted per span (and per OTLP log record), so a file's `records` equals its ingested
plus rejected plus skipped spans.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from traceforge.ingest.conversation import assemble, default_workload, looks_like_error
from traceforge.ingest.otel_dialects import (
    LLM,
    TOOL,
    agent_name,
    classify,
    conversation_id,
    dialect,
    llm_call,
    service_name,
    tool_defs,
    tool_span,
    workflow_name,
)
from traceforge.ingest.otel_messages import Messages, input_messages, output_messages
from traceforge.ingest.otel_wire import EPOCH, STATUS_ERROR, STATUS_OK, Batch, LogEvent, Span, read, shape_of
from traceforge.ingest.sources import Record, SourceError
from traceforge.ingest.stream import FILE_CHANGED, last_lines, read_twice
from traceforge.ingest.values import duration_ms
from traceforge.model import Message, ParseResult, ToolCall, Trace

FORMAT = "otlp"
SHAPE_SCORES = {"otlp": 0.95, "otlp-other": 0.9, "span": 0.9, "spans": 0.9, "attributes": 0.8}


def sniff(sample: list[Record]) -> float:
    """How sure we are that these records are OpenTelemetry spans in one of the shapes read here."""
    return max((SHAPE_SCORES.get(shape_of(r.value) or "", 0.0) for r in sample), default=0.0)


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    by_trace, log_events = spans_of(records, result=result)
    attach_log_events(by_trace, log_events, result)
    for trace_id, spans in by_trace.items():
        trace = build_trace(trace_id, spans, result)
        if trace is not None:
            result.traces.append(trace)
    return result


def stream(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None = None,
) -> Iterator[Trace]:
    """`parse`'s traces one by one, each as soon as the last record holding one of its spans (or a
    log record naming one) is read, so that a big export is not held whole
    (`traceforge.ingest.parts`). A trace's spans can come anywhere in an export, so a first pass
    finds that record (`stream.read_twice`); traces then come in the order they end."""
    learn = functools.partial(last_lines, trace_ids=_trace_ids)
    return read_twice(records, source_path, result, on_first_pass, parse, learn, _as_they_end)


def _trace_ids(record: Record) -> list[str]:
    batch = read(record)
    return [item.trace_id for item in (*batch.spans, *batch.log_events)]


def _as_they_end(records: Iterable[Record], last: dict[str, int], result: ParseResult) -> Iterator[Trace]:
    spans: dict[str, list[Span]] = {}
    events: dict[str, list[LogEvent]] = {}
    for record in records:
        batch = read(record)
        _count(batch, result)
        for span in batch.spans:
            spans.setdefault(span.trace_id, []).append(span)
        for event in batch.log_events:
            events.setdefault(event.trace_id, []).append(event)
        named = dict.fromkeys(item.trace_id for item in (*batch.spans, *batch.log_events))
        for trace_id in (trace_id for trace_id in named if last.get(trace_id) == record.line):
            ended = {trace_id: spans.pop(trace_id)} if trace_id in spans else {}
            attach_log_events(ended, events.pop(trace_id, []), result)
            trace = build_trace(trace_id, ended[trace_id], result) if ended else None
            if trace is not None:
                yield trace
    if spans or events:
        raise SourceError(FILE_CHANGED)


def spans_of(
    records: Iterable[Record], trace_ids: set[str] | None = None, result: ParseResult | None = None
) -> tuple[dict[str, list[Span]], list[LogEvent]]:
    """The spans of `records` by trace id, and the log records that name a span; only those of
    `trace_ids` when given (what `traceforge.ingest.joins` reads again of each file a trace is
    spread over). `result`, when given, counts the records, rejects and skips."""
    by_trace: dict[str, list[Span]] = {}
    log_events: list[LogEvent] = []
    for record in records:
        batch = read(record)
        if result is not None:
            _count(batch, result)
        for span in batch.spans:
            if trace_ids is None or span.trace_id in trace_ids:
                by_trace.setdefault(span.trace_id, []).append(span)
        log_events.extend(e for e in batch.log_events if trace_ids is None or e.trace_id in trace_ids)
    return by_trace, log_events


def _count(batch: Batch, result: ParseResult) -> None:
    result.records += batch.units
    result.rejects.extend(batch.rejects)
    for kind, n in batch.skipped.items():
        result.skip(kind, n)


def attach_log_events(by_trace: dict[str, list[Span]], events: list[LogEvent], result: ParseResult) -> None:
    """Each log record as an event of the span it names (counted as skipped where that span is
    not among `by_trace`'s)."""
    spans = {(s.trace_id, s.span_id): s for trace in by_trace.values() for s in trace}
    for log_event in events:
        span = spans.get((log_event.trace_id, log_event.span_id))
        if span is None:
            result.skip("log record whose span is not in this file")
        else:
            span.events.append(log_event.event)


def start_key(span: Span) -> tuple[bool, datetime, int]:
    """Spans in the order they started (those without a start time last, then by line)."""
    return (span.start is None, span.start or EPOCH, span.line)


def build_trace(trace_id: str, spans: list[Span], result: ParseResult) -> Trace | None:
    """The canonical trace of one OTel trace's spans, or None when none of them is an LLM call or a
    tool execution (they are then all counted as skipped)."""
    spans = _without_duplicates(spans, result)
    by_id = {s.span_id: s for s in spans}
    roles = {s.span_id: classify(s) for s in spans}
    for span in spans:
        if roles[span.span_id] == LLM:
            for ancestor in _ancestors(span, by_id):
                if roles[ancestor] == LLM:
                    roles[ancestor] = "llm wrapper"
    skipped: dict[str, int] = {}
    for span in spans:
        if roles[span.span_id] not in (LLM, TOOL):
            kind = f"{roles[span.span_id]} span"
            skipped[kind] = skipped.get(kind, 0) + 1
            result.skip(kind)
    llm_spans = sorted((s for s in spans if roles[s.span_id] == LLM), key=start_key)
    tool_spans = sorted((s for s in spans if roles[s.span_id] == TOOL), key=start_key)
    if not llm_spans and not tool_spans:
        return None

    trace = Trace(source_format=FORMAT, source_id=trace_id, source_line=min(s.line for s in spans))
    dialects = {s.span_id: dialect(s) for s in llm_spans + tool_spans}
    trace.llm_calls = [llm_call(s, dialects[s.span_id]) for s in llm_spans]
    inputs = [input_messages(s, dialects[s.span_id]) for s in llm_spans]
    outputs = [output_messages(s, dialects[s.span_id]) for s in llm_spans]
    conversation = _conversation(inputs, outputs)
    assemble(trace, conversation.items, result_errors=conversation.errors)
    _add_unrecorded_requests(trace, outputs)
    span_only = _join_tool_spans(trace, tool_spans, llm_spans, by_id)
    trace.tool_calls.sort(key=lambda c: _tool_order(c, span_only))

    for span in llm_spans:
        trace.tool_defs.extend(tool_defs(span))
    defined = {d.name for d in trace.tool_defs}
    for span in tool_spans:
        definition = tool_span(span).definition
        if definition is not None and definition.name not in defined:
            defined.add(definition.name)
            trace.tool_defs.append(definition)
    _describe(trace, spans, sorted(spans, key=start_key), dialects, skipped)
    return trace


def _without_duplicates(spans: list[Span], result: ParseResult) -> list[Span]:
    seen: set[str] = set()
    unique = []
    for span in spans:
        if span.span_id in seen:
            result.skip("duplicate span")
            continue
        seen.add(span.span_id)
        unique.append(span)
    return unique


def _ancestors(span: Span, by_id: dict[str, Span]) -> list[str]:
    """Span ids from the parent up to the root (stopping at a parent not in the trace, or a cycle)."""
    chain: list[str] = []
    parent = span.parent_id
    while parent in by_id and parent not in chain and parent != span.span_id:
        chain.append(parent)
        parent = by_id[parent].parent_id
    return chain


# ---------------------------------------------------------------- the conversation


def _conversation(inputs: list[Messages], outputs: list[Messages]) -> Messages:
    """The last LLM call's input plus its output, with each assistant message marked with the LLM
    call that produced it where that call is in the trace."""
    chosen = next((i for i in range(len(inputs) - 1, -1, -1) if inputs[i].items), None)
    conversation = Messages()
    if chosen is None:
        chosen = next((i for i in range(len(outputs) - 1, -1, -1) if outputs[i].items), None)
        if chosen is None:
            return conversation
    else:
        conversation.extend(inputs[chosen])
    history = [m for m in conversation.items if m.role == "assistant"]
    pointer = 0
    for message in history:
        for index in range(pointer, chosen):
            if _same_reply(message, outputs[index]):
                message.call_index = index
                pointer = index + 1
                break
    if all(m.call_index is None for m in history) and len(history) == chosen:
        for index, message in enumerate(history):
            message.call_index = index
    for message in outputs[chosen].items:
        if message.role == "assistant":
            message.call_index = chosen
    conversation.extend(outputs[chosen])
    return conversation


def _same_reply(message: Message, output: Messages) -> bool:
    reply = next((m for m in output.items if m.role == "assistant"), None)
    if reply is None:
        return False
    ids = {c.get("id") for c in message.tool_calls or []} - {None}
    reply_ids = {c.get("id") for c in reply.tool_calls or []} - {None}
    if ids and reply_ids:
        return ids == reply_ids
    names = [c.get("name") for c in message.tool_calls or []]
    reply_names = [c.get("name") for c in reply.tool_calls or []]
    text, reply_text = (message.content or "").strip(), (reply.content or "").strip()
    return names == reply_names and text == reply_text and bool(text or names)


def _local_id(source_id: str | None, trace: Trace) -> str:
    taken = {c.local_id for c in trace.tool_calls}
    candidate = source_id or f"#{len(trace.tool_calls)}"
    n = len(trace.tool_calls)
    while candidate in taken:
        candidate = f"{source_id or ''}#{n}"
        n += 1
    return candidate


def _add_unrecorded_requests(trace: Trace, outputs: list[Messages]) -> None:
    """Tool calls requested by LLM calls whose replies are not in the conversation (another agent's
    thread in the same trace): kept as calls of their LLM call, so none is lost."""
    in_conversation = {m.call_index for m in trace.messages if m.call_index is not None}
    present = {c.source_id for c in trace.tool_calls if c.source_id}
    for index, output in enumerate(outputs):
        if index in in_conversation:
            continue
        for message in output.items:
            for raw in message.tool_calls or []:
                if raw.get("id") and raw["id"] in present:
                    continue
                call = ToolCall(
                    name=raw.get("name") or "(unnamed)",
                    arguments=raw.get("arguments"),
                    source_id=raw.get("id"),
                    call_index=index,
                )
                call.local_id = _local_id(call.source_id, trace)
                trace.tool_calls.append(call)


# ---------------------------------------------------------------- tool spans


def _join_tool_spans(
    trace: Trace, tool_spans: list[Span], llm_spans: list[Span], by_id: dict[str, Span]
) -> set[int]:
    """Give each tool span's timing and result to the call it executed; returns the ids (`id()`) of
    the calls that only a tool span recorded."""
    llm_ancestors = [set(_ancestors(s, by_id)) for s in llm_spans]
    llm_index = {s.span_id: i for i, s in enumerate(llm_spans)}
    matched: set[int] = set()
    span_only: set[int] = set()
    for span in tool_spans:
        info = tool_span(span)
        requester = _requester(span, llm_spans, llm_index, llm_ancestors, by_id)
        call = None
        if info.call_id:
            call = next(
                (c for c in trace.tool_calls if c.source_id == info.call_id and id(c) not in matched), None
            )
        if call is None:
            call = next(
                (
                    c
                    for c in trace.tool_calls
                    if id(c) not in matched
                    and c.name == info.name
                    and c.call_index == requester
                    and not (info.call_id and c.source_id)
                ),
                None,
            )
        if call is None:
            call = ToolCall(
                name=info.name, arguments=info.arguments, source_id=info.call_id, call_index=requester
            )
            call.local_id = _local_id(info.call_id, trace)
            call.result = info.result
            call.is_error = info.error if info.error is not None else looks_like_error(info.result)
            trace.tool_calls.append(call)
            span_only.add(id(call))
        else:
            if call.arguments in (None, {}) and info.arguments is not None:
                call.arguments = info.arguments
            if call.result is None:
                call.result = info.result
            call.is_error = call.is_error or bool(info.error)
        matched.add(id(call))
        call.started_at, call.ended_at = span.start, span.end
        call.duration_ms = duration_ms(span.start, span.end)
    return span_only


def _requester(
    span: Span,
    llm_spans: list[Span],
    llm_index: dict[str, int],
    llm_ancestors: list[set[str]],
    by_id: dict[str, Span],
) -> int | None:
    """The LLM call that asked for this tool execution: an LLM span above it; else the latest LLM span
    started before it under the nearest common parent; else the latest started before it at all."""
    ancestors = _ancestors(span, by_id)
    for ancestor in ancestors:
        if ancestor in llm_index:
            return llm_index[ancestor]
    if span.start is None:
        return None
    started = [i for i, s in enumerate(llm_spans) if s.start is not None and s.start <= span.start]
    if not started:
        return None
    for ancestor in ancestors:
        under = [i for i in started if ancestor in llm_ancestors[i]]
        if under:
            return max(under)
    return max(started)


def _tool_order(call: ToolCall, span_only: set[int]) -> tuple[int, int, float]:
    """Calls in the order their LLM call emitted them; calls only a tool span recorded after those,
    by start time."""
    position = call.call_index if call.call_index is not None else -1
    if id(call) in span_only:
        return (position, 1, call.started_at.timestamp() if call.started_at else 0.0)
    return (position, 0, 0.0)


# ---------------------------------------------------------------- trace metadata


def _describe(
    trace: Trace, spans: list[Span], in_order: list[Span], dialects: dict[str, str], skipped: dict[str, int]
) -> None:
    starts = [s.start for s in spans if s.start]
    ends = [s.end for s in spans if s.end]
    trace.started_at = min(starts) if starts else None
    trace.ended_at = max(ends) if ends else None
    service = next((n for n in map(service_name, in_order) if n), None)
    workflow = next((n for n in map(workflow_name, in_order) if n), None)
    trace.agent = next((n for n in map(agent_name, in_order) if n), None)
    trace.workload = service or trace.agent or workflow or default_workload(trace)
    trace.outcome = _outcome(spans)
    attributes = {
        "service": service,
        "workflow": workflow,
        "conversation_id": next((n for n in map(conversation_id, in_order) if n), None),
        "dialects": sorted(set(dialects.values())),
        "scopes": sorted({s.scope for s in spans if s.scope}),
        "spans": len(spans),
        "skipped_spans": skipped or None,
    }
    trace.attributes.update({k: v for k, v in attributes.items() if v not in (None, [])})


def _outcome(spans: list[Span]) -> str:
    """failure when a root or agent span ended in error, success when one ended OK, else unknown."""
    ids = {s.span_id for s in spans}
    deciding = [s for s in spans if s.parent_id not in ids or classify(s) == "agent"]
    if any(s.status == STATUS_ERROR for s in deciding):
        return "failure"
    if any(s.status == STATUS_OK for s in deciding):
        return "success"
    return "unknown"
