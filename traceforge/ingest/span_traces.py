"""Traces from span-shaped exports: the LLM-call spans and tool-execution spans of trace trees.

Observability platforms (Langfuse observations, LangSmith runs) record every model call and every
tool execution as a span of a trace tree. An adapter turns the spans it recognises into `LlmSpan`s
(the call, with the messages it received and added) and `ToolSpan`s (a measured tool execution) and
hands them here:
- the LLM spans of a trace, in the order they started, are chained into conversations by prefix
  (`api_log.build_traces`, keyed by the trace id): the trace keeps its id; a second conversation in
  the same trace (a sub-agent with its own prompt) becomes a child trace `<id>/2` of it;
- LLM spans that recorded neither input nor output are LLM calls of the trace's first conversation
  with no message of their own;
- each tool span is joined to the tool call it executed: by tool call id where the span names one,
  else to the earliest unanswered call of the same name requested by the latest LLM call that
  started before it, looking first among LLM calls under the tool span's parent, then under each
  ancestor in turn (so a sub-agent's tool finds the sub-agent's call). The call gets the span's
  measured times, and its result and error where the conversation did not hold them;
- a tool span that matches no requested call is a tool call of its own, attributed by the same
  parentage-and-time rule to the LLM call that preceded it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from traceforge.ingest import api_log
from traceforge.ingest.conversation import default_workload
from traceforge.ingest.values import duration_ms
from traceforge.model import LlmCall, Message, ParseResult, ToolCall, ToolDef, Trace

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class LlmSpan:
    span_id: str
    trace_key: str
    parent_id: str | None
    line: int
    call: LlmCall
    request: list[Message] = field(default_factory=list)
    errors: dict[int, bool] = field(default_factory=dict)
    response: list[Message] = field(default_factory=list)
    tool_defs: list[ToolDef] = field(default_factory=list)
    order: str = ""  # breaks ties between equal start times (LangSmith's dotted_order)


@dataclass
class ToolSpan:
    span_id: str
    trace_key: str
    parent_id: str | None
    line: int
    name: str
    arguments: Any = None
    result: str | None = None
    is_error: bool = False
    started_at: datetime | None = None
    ended_at: datetime | None = None
    tool_call_id: str | None = None
    order: str = ""


@dataclass
class TraceInfo:
    """What the trace-level record (or the root span) says about a trace."""

    workload: str | None = None
    agent: str | None = None
    outcome: str = "unknown"
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attributes: dict[str, Any] = field(default_factory=dict)


_Item = TypeVar("_Item")


def first_of_each(
    items: list[_Item], key: Callable[[_Item], str], result: ParseResult, kind: str
) -> list[_Item]:
    """The first of the items sharing a `key` (an observation or run exported twice: pages that
    overlap, one trace in two exports); each other is counted in `result` as skipped `kind`.

    >>> first_of_each(["a1", "b1", "a2"], lambda item: item[0], ParseResult(), "duplicate")
    ['a1', 'b1']
    """
    seen: set[str] = set()
    unique = []
    for item in items:
        if key(item) in seen:
            result.skip(kind)
            continue
        seen.add(key(item))
        unique.append(item)
    return unique


def _position(start: datetime | None, order: str, line: int) -> tuple:
    return (start or EPOCH, order, line)


def build_traces(
    llm_spans: list[LlmSpan],
    tool_spans: list[ToolSpan],
    parents: dict[str, str | None],
    infos: dict[str, TraceInfo],
    source_format: str,
    shape: str,
) -> list[Trace]:
    """Canonical traces from the LLM and tool spans of one file.

    `parents` maps every span id of the file (whatever its kind) to its parent's id, so that
    parentage can be followed through spans that are not LLM calls or tools; `infos` holds what is
    known of each trace key. Returns the traces in the order their first LLM call started.
    """
    llm_spans = sorted(llm_spans, key=lambda s: _position(s.call.started_at, s.order, s.line))
    with_messages = [s for s in llm_spans if s.request or s.response]
    exchanges = [_exchange(s, infos.get(s.trace_key) or TraceInfo(), source_format) for s in with_messages]
    traces = api_log.build_traces(exchanges, shape=shape)
    by_key: dict[str, list[Trace]] = {}
    for trace in traces:
        by_key.setdefault(trace.attributes["conversation_id"], []).append(trace)
    for span in llm_spans:
        if not (span.request or span.response):
            _add_silent_call(by_key, span, _bare_trace(span.trace_key, source_format, shape))
    for span in tool_spans:
        by_key.setdefault(span.trace_key, [_bare_trace(span.trace_key, source_format, shape)])
    joiner = _Joiner(llm_spans, parents, by_key)
    for span in sorted(tool_spans, key=lambda s: _position(s.started_at, s.order, s.line)):
        joiner.join(span)
    ordered = []
    for key, key_traces in by_key.items():
        info = infos.get(key) or TraceInfo()
        for n, trace in enumerate(key_traces):
            if n and trace.parent_source_id is None:
                trace.parent_source_id = key_traces[0].source_id
            _finish(trace, info, joiner.added.get(id(trace), set()))
            ordered.append(trace)
    return ordered


def _exchange(span: LlmSpan, info: TraceInfo, source_format: str) -> api_log.Exchange:
    return api_log.Exchange(
        line=span.line,
        source_format=source_format,
        request=span.request,
        errors=span.errors,
        response=span.response,
        call=span.call,
        tool_defs=span.tool_defs,
        key=span.trace_key,
        workload=info.workload,
        agent=info.agent,
    )


def _bare_trace(key: str, source_format: str, shape: str) -> Trace:
    """A trace for a key whose spans hold no conversation (only silent LLM calls, or only tools)."""
    return Trace(
        source_format=source_format, source_id=key, attributes={"shape": shape, "conversation_id": key}
    )


def _add_silent_call(by_key: dict[str, list[Trace]], span: LlmSpan, bare: Trace) -> None:
    """Add an LLM call that recorded no messages to its trace's first conversation, in time order."""
    trace = by_key.setdefault(span.trace_key, [bare])[0]
    calls = [*trace.llm_calls, span.call]
    calls.sort(key=lambda c: _position(c.started_at, "", c.source_line or 0))
    new_index = {id(c): i for i, c in enumerate(calls)}
    old = trace.llm_calls
    for item in [*trace.messages, *trace.tool_calls]:
        if item.call_index is not None:
            item.call_index = new_index[id(old[item.call_index])]
    trace.llm_calls = calls
    trace.attributes["calls_without_messages"] = trace.attributes.get("calls_without_messages", 0) + 1


class _Joiner:
    """Joins tool spans to the tool calls the conversation holds (see the module docstring)."""

    def __init__(
        self, llm_spans: list[LlmSpan], parents: dict[str, str | None], by_key: dict[str, list[Trace]]
    ):
        self.parents = parents
        self.by_key = by_key
        self.llm_by_key: dict[str, list[LlmSpan]] = {}
        for span in llm_spans:
            self.llm_by_key.setdefault(span.trace_key, []).append(span)
        self.ancestry = {s.span_id: set(self.ancestors(s.span_id)) for s in llm_spans}
        self.location: dict[int, tuple[Trace, int]] = {}  # id(LlmCall) -> (trace, call index)
        for traces in by_key.values():
            for trace in traces:
                for index, call in enumerate(trace.llm_calls):
                    self.location[id(call)] = (trace, index)
        self.matched: set[int] = set()  # id(ToolCall) already given a span
        self.added: dict[int, set[int]] = {}  # id(Trace) -> ids of ToolCalls made from spans

    def ancestors(self, span_id: str | None) -> list[str]:
        out: list[str] = []
        current = self.parents.get(span_id) if span_id else None
        while current and current not in out:
            out.append(current)
            current = self.parents.get(current)
        return out

    def join(self, span: ToolSpan) -> None:
        traces = self.by_key[span.trace_key]
        call = self._by_id(span, traces) or self._by_parentage(span, name=span.name)
        if call is None:
            call = self._new_call(span, traces)
        self.matched.add(id(call))
        call.started_at, call.ended_at = span.started_at, span.ended_at
        call.duration_ms = duration_ms(span.started_at, span.ended_at)
        if call.result is None:
            call.result = span.result
        call.is_error = call.is_error or span.is_error

    def _by_id(self, span: ToolSpan, traces: list[Trace]) -> ToolCall | None:
        if not span.tool_call_id:
            return None
        return next(
            (
                c
                for t in traces
                for c in t.tool_calls
                if c.source_id == span.tool_call_id and id(c) not in self.matched
            ),
            None,
        )

    def _preceding(self, span: ToolSpan) -> list[list[LlmSpan]]:
        """LLM spans that started before the tool span, latest first, grouped by the nearest
        ancestor of the tool span they descend from (nearest group first), then the rest."""
        position = _position(span.started_at, span.order, span.line)
        before = [
            s
            for s in self.llm_by_key.get(span.trace_key, [])
            if _position(s.call.started_at, s.order, s.line) <= position
        ]
        before.reverse()
        groups = [
            [s for s in before if ancestor in self.ancestry[s.span_id]]
            for ancestor in self.ancestors(span.span_id)
        ]
        return [g for g in groups if g] + [before]

    def _by_parentage(self, span: ToolSpan, name: str) -> ToolCall | None:
        for group in self._preceding(span):
            for llm in group:
                trace, index = self.location.get(id(llm.call), (None, None))
                if trace is None:
                    continue
                for call in trace.tool_calls:
                    if call.call_index == index and call.name == name and id(call) not in self.matched:
                        return call
        return None

    def _new_call(self, span: ToolSpan, traces: list[Trace]) -> ToolCall:
        requester = next((group[0] for group in self._preceding(span) if group), None)
        trace, index = (
            self.location.get(id(requester.call), (traces[0], None)) if requester else (traces[0], None)
        )
        call = ToolCall(
            name=span.name,
            arguments=span.arguments,
            source_id=span.tool_call_id,
            call_index=index,
        )
        taken = {c.local_id for c in trace.tool_calls}
        call.local_id = (
            span.tool_call_id
            if span.tool_call_id and span.tool_call_id not in taken
            else f"span:{span.span_id}"
        )
        trace.tool_calls.append(call)
        self.added.setdefault(id(trace), set()).add(id(call))
        return call


def _finish(trace: Trace, info: TraceInfo, added: set[int]) -> None:
    """Order the tool calls, set the trace's format-independent fields from `info`, and its times."""
    position = {id(c): i for i, c in enumerate(trace.tool_calls)}
    trace.tool_calls.sort(
        key=lambda c: (
            c.call_index if c.call_index is not None else len(trace.llm_calls),
            id(c) in added,
            position[id(c)],
        )
    )
    if added:
        trace.attributes["tool_spans_without_call"] = len(added)
    trace.attributes.update(info.attributes)
    trace.outcome = info.outcome
    if info.agent:
        trace.agent = info.agent
    if info.workload:
        trace.workload = info.workload
    elif not trace.workload:
        trace.workload = trace.agent or default_workload(trace)
    times = [
        t
        for item in [*trace.llm_calls, *trace.tool_calls]
        for t in (item.started_at, item.ended_at)
        if t is not None
    ]
    starts = [t for t in (info.started_at, *times) if t is not None]
    ends = [t for t in (info.ended_at, *times) if t is not None]
    trace.started_at = min(starts) if starts else None
    trace.ended_at = max(ends) if ends else None
