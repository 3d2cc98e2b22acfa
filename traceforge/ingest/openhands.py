"""OpenHands event streams: actions and the observations they caused.

Two shapes are read, both detected from content:
- a trajectory file: a JSON array of events (what OpenHands writes with `save_trajectory_path`, and
  what its replay tests keep under `tests/runtime/trajs/`); the file is one trace;
- evaluation output (`output.jsonl`): one JSON object per line with the run's events under `history`
  beside `instance_id`, `metrics` and `test_result`; each line is one trace.

Mapping. An agent action with `tool_call_metadata` is one tool call (`tool_call_id`, `function_name`);
its `model_response` is the LiteLLM response that asked for it, so each distinct response id is one
LLM call (parallel calls of one response share it), with the response's message, finish reason and
usage (cache fields included). An observation answers the tool call named by its own metadata or,
failing that, by the action its `cause` points to. User messages become user messages, agent
messages (no tool call) an assistant turn of their own, `system` actions the system prompt and tool
definitions. Agent actions without metadata (agents that parse actions from text) become a tool call
named after the action, without an id. Observations that answer no tool call (errors, user commands)
become user messages, as OpenHands itself shows them to the model.

Skipped by rule and counted by kind: every event whose source is `environment`, null observations,
agent-state changes, and loop bookkeeping actions (recall, condensation, pause...). OpenHands writes
local wall-clock time without a zone; where responses carry `created` (UTC epoch seconds) the
recorder's UTC offset is inferred from it and the times corrected, else they are read as UTC.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from traceforge.ingest import openai_chat
from traceforge.ingest.conversation import assemble
from traceforge.ingest.providers import provider_of
from traceforge.ingest.sources import Record
from traceforge.ingest.values import (
    as_float,
    as_id,
    as_int,
    as_list,
    as_str,
    dig,
    duration_ms,
    parse_time,
    text_of,
    to_json,
)
from traceforge.model import LlmCall, Message, ParseResult, Reject, ToolDef, Trace

FORMAT = "openhands"
AGENT = "openhands"
SOURCES = {"agent", "user", "environment"}
# Actions that run the agent loop rather than record a model's output.
LOOP_ACTIONS = {
    "null",
    "pause",
    "resume",
    "stop",
    "change_agent_state",
    "recall",
    "condensation",
    "condensation_request",
    "loop_recovery",
}
# Observations that carry nothing the model reads: no-ops, state changes, and recalled workspace
# context (rendered by OpenHands' own prompt templates, which the stream does not hold).
STATE_OBSERVATIONS = {"null", "agent_state_changed", "recall"}
# Action arguments that describe the action's handling, not the model's call.
ACTION_BOOKKEEPING = {
    "thought",
    "blocking",
    "hidden",
    "confirmation_state",
    "is_input",
    "impl_source",
    "translated_ipython_code",
    "security_risk",
    "wait_for_response",
    "image_urls",
}
QUARTER_HOUR = 900.0
MAX_UTC_OFFSET = 14 * 3600.0
MAX_LATENCY_S = 86_400.0  # a response latency beyond a day is a broken record, not a measurement


def is_event(value: Any) -> bool:
    """An OpenHands event: an action or observation with a known source."""
    return (
        isinstance(value, dict)
        and ("action" in value or "observation" in value)
        and as_str(value.get("source")) in SOURCES
    )


def sniff(sample: list[Record]) -> float:
    for record in sample:
        value = record.value
        if is_event(value) and ("timestamp" in value or "id" in value):
            return 0.95
        history = value.get("history") if isinstance(value, dict) else None
        if isinstance(history, list) and any(is_event(e) for e in history[:20]):
            return 0.95
    return 0.0


def hands_out(sample: list[Record]) -> bool:
    """Whether `stream` hands a file's traces out as it reads it (detect.py's protocol): evaluation
    output does, a run a line; a trajectory, whose events are one trace, is held to its end."""
    return not any(is_event(record.value) for record in sample)


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    result.traces.extend(stream(records, source_path, result))
    return result


def stream(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None = None,
) -> Iterator[Trace]:
    """`parse`'s traces one by one: a line of evaluation output as soon as it is read, so that a big
    `output.jsonl` (a benchmark run's every instance) is not held whole (`traceforge.ingest.parts`);
    a trajectory's events, one trace, at the end of the file. Read once: `on_first_pass` is not
    called."""
    events: list[tuple[int, dict]] = []
    stem = Path(source_path).stem
    for record in records:
        result.records += 1
        value = record.value
        if is_event(value):
            events.append((record.line, value))
        elif isinstance(value, dict) and isinstance(value.get("history"), list):
            yield _evaluation_trace(record, value, stem)
        else:
            result.rejects.append(
                Reject(
                    record.line,
                    "not an OpenHands event (an object with `action` or `observation` and a `source` of "
                    "agent, user or environment) nor an evaluation record with a `history` list",
                    record.raw or to_json(value),
                )
            )
    if events:
        builder = _StreamBuilder(skip=result.skip)
        for _, event in events:
            builder.add(event)
        trace = builder.finish(f"{AGENT}/{stem}", events[0][0])
        if trace is not None:
            yield trace


def _evaluation_trace(record: Record, value: dict, stem: str) -> Trace:
    """One line of evaluation output: the events under `history`; what is skipped inside it is
    counted in the trace's attributes (the file's record is the line, not the event)."""
    skipped: Counter[str] = Counter()
    builder = _StreamBuilder(skip=lambda kind: skipped.update([kind]))
    for event in value["history"]:
        if is_event(event):
            builder.add(event)
        else:
            skipped["not an event"] += 1
    instance = as_id(value.get("instance_id"))
    source_id = f"{AGENT}/{instance}" if instance else f"{AGENT}/{stem}/{record.line}"
    trace = builder.finish(source_id, record.line) or Trace(FORMAT, source_id, record.line, workload=AGENT)
    if skipped:
        trace.attributes["skipped_events"] = dict(skipped)
    if instance:
        trace.attributes["instance_id"] = instance
    resolved = dig(value, "test_result", "report", "resolved")
    if isinstance(resolved, bool):
        trace.outcome = "success" if resolved else "failure"
    cost = as_float(dig(value, "metrics", "accumulated_cost"))
    if cost is not None:
        trace.attributes["accumulated_cost_usd"] = cost
    if value.get("error"):
        trace.attributes["error"] = str(value["error"])
        if trace.outcome == "unknown":
            trace.outcome = "failure"
    model = as_str(dig(value, "metadata", "llm_config", "model"))
    for call in trace.llm_calls:
        if call.model is None and model:
            call.model, call.provider = model, provider_of(model)
    agent_class = as_str(dig(value, "metadata", "agent_class"))
    if agent_class:
        trace.agent = agent_class
        trace.workload = f"{AGENT}/{agent_class}"
    return trace


def event_time(value: Any) -> tuple[datetime | None, bool]:
    """(time, naive): naive ISO text (OpenHands writes local time without a zone) is read as UTC and
    flagged so the caller can correct it."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None, False
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=UTC), True
        return parsed.astimezone(UTC), False
    return parse_time(value), False


class _StreamBuilder:
    """Walks one event stream in order and collects the trace's messages, LLM calls and timings."""

    def __init__(self, skip: Callable[[str], None]) -> None:
        self.skip = skip
        self.messages: list[Message] = []
        self.errors: dict[int, bool] = {}
        self.calls: list[LlmCall] = []
        self.tool_defs: list[ToolDef] = []
        self.by_response: dict[str, Message] = {}  # response key -> the assistant message it wrote
        self.open_group: tuple[str, int] | None = None  # response key without a response id, calls left
        self.action_calls: dict[int, tuple[str | None, str]] = {}  # action id -> (tool_call_id, name)
        self.started: dict[str, datetime] = {}  # tool_call_id -> action time
        self.ended: dict[str, datetime] = {}  # tool_call_id -> observation time
        self.unnamed_times: list[list[datetime | None]] = []  # [start, end] of calls without ids, in order
        self.unnamed_by_action: dict[int, int] = {}
        self.latency: dict[str, float] = {}  # response id -> seconds (from llm_metrics)
        self.accumulated_cost: float | None = None
        self.previous_time: datetime | None = None
        self.first_time: datetime | None = None
        self.naive = False
        self.clock_skews: list[float] = []  # model_response.created minus the naive event time
        self.agent_state: str | None = None
        self.finish_args: dict | None = None
        self.agent_class: str | None = None
        self.version: str | None = None
        self.used = 0

    # -- events -------------------------------------------------------------------------------

    def add(self, event: dict) -> None:
        time, naive = event_time(event.get("timestamp"))
        self.naive = self.naive or naive
        self._metrics(event.get("llm_metrics"))
        if "action" in event:
            self._action(event, time)
        else:
            self._observation(event, time)
        if time is not None:
            self.previous_time = time
            self.first_time = self.first_time or time

    def _action(self, event: dict, time: datetime | None) -> None:
        kind = str(event.get("action"))
        source = event.get("source")
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if kind == "change_agent_state":
            self.agent_state = as_str(args.get("agent_state")) or self.agent_state
        if source == "environment":
            self.skip(f"environment:{kind}")
            return
        if kind in LOOP_ACTIONS:
            self.skip(f"action:{kind}")
            return
        self.used += 1
        if kind == "system":
            self._system(event, args)
            return
        metadata = event.get("tool_call_metadata")
        if source != "agent" and not isinstance(metadata, dict):
            content = args.get("content") if kind == "message" else None
            self.messages.append(
                Message(role="user", content=as_str(content) or as_str(event.get("message")))
            )
            return
        if kind == "finish":
            self.finish_args = args
        if isinstance(metadata, dict):
            self._tool_action(event, kind, args, metadata, time)
        elif kind == "message":
            self._new_call(None, time, Message(role="assistant", content=as_str(args.get("content"))))
        else:
            self._unnamed_tool_action(event, kind, args, time)

    def _system(self, event: dict, args: dict) -> None:
        content = as_str(args.get("content")) or as_str(event.get("message"))
        self.messages.append(Message(role="system", content=content))
        self.tool_defs.extend(openai_chat.tool_defs({"tools": as_list(args.get("tools"))}))
        self.agent_class = as_str(args.get("agent_class")) or self.agent_class
        self.version = as_str(args.get("openhands_version")) or self.version

    def _new_call(self, response: dict | None, time: datetime | None, message: Message) -> None:
        call = LlmCall(ended_at=time, started_at=self.previous_time)
        if response is not None:
            call.model = as_str(response.get("model"))
            call.source_id = as_id(response.get("id"))
            openai_chat.apply_usage(call, response.get("usage"))
            created = as_int(response.get("created"))
            if created and time is not None:
                self.clock_skews.append(created - time.timestamp())
        call.provider = provider_of(call.model)
        message.call_index = len(self.calls)
        self.calls.append(call)
        self.messages.append(message)

    def _tool_action(self, event: dict, kind: str, args: dict, metadata: dict, time: datetime | None) -> None:
        response = (
            metadata.get("model_response") if isinstance(metadata.get("model_response"), dict) else None
        )
        tool_call_id = as_id(metadata.get("tool_call_id"))
        name = as_str(metadata.get("function_name")) or kind
        key = self._response_key(response, metadata)
        message = self.by_response.get(key)
        if message is None:
            message, finish_reason = (
                openai_chat.response_message(response) if response is not None else (None, None)
            )
            if message is None:
                message = Message(role="assistant", content=as_str(args.get("thought")) or None)
            self._new_call(response, time, message)
            self.calls[-1].finish_reason = finish_reason
            self.by_response[key] = message
        calls = message.tool_calls or []
        if not any(tool_call_id and c.get("id") == tool_call_id for c in calls):
            calls.append({"id": tool_call_id, "name": name, "arguments": _arguments(args)})
            message.tool_calls = calls
        action_id = as_int(event.get("id"))
        if action_id is not None:
            self.action_calls[action_id] = (tool_call_id, name)
        if tool_call_id and time is not None:
            self.started.setdefault(tool_call_id, time)

    def _response_key(self, response: dict | None, metadata: dict) -> str:
        """The LLM response an action came from: its id, or for actions saved without their response,
        a group of `total_calls_in_response` consecutive actions."""
        response_id = as_id(response.get("id")) if response else None
        if response_id:
            return response_id
        if self.open_group is not None and self.open_group[1] > 0:
            key, left = self.open_group
            self.open_group = (key, left - 1)
            return key
        total = as_int(metadata.get("total_calls_in_response")) or 1
        key = f"#group-{len(self.calls)}"
        self.open_group = (key, total - 1)
        return key

    def _unnamed_tool_action(self, event: dict, kind: str, args: dict, time: datetime | None) -> None:
        message = Message(
            role="assistant",
            content=as_str(args.get("thought")) or None,
            tool_calls=[{"id": None, "name": kind, "arguments": _arguments(args)}],
        )
        self._new_call(None, time, message)
        action_id = as_int(event.get("id"))
        if action_id is not None:
            self.action_calls[action_id] = (None, kind)
            self.unnamed_by_action[action_id] = len(self.unnamed_times)
        self.unnamed_times.append([time, None])

    def _observation(self, event: dict, time: datetime | None) -> None:
        kind = str(event.get("observation"))
        extras = event.get("extras") if isinstance(event.get("extras"), dict) else {}
        if kind == "agent_state_changed":
            self.agent_state = as_str(extras.get("agent_state")) or self.agent_state
        if event.get("source") == "environment":
            self.skip(f"environment:{kind}")
            return
        if kind in STATE_OBSERVATIONS:
            self.skip(f"observation:{kind}")
            return
        metadata = (
            event.get("tool_call_metadata") if isinstance(event.get("tool_call_metadata"), dict) else {}
        )
        cause = as_int(event.get("cause"))
        linked = self.action_calls.get(cause) if cause is not None else None
        tool_call_id = as_id(metadata.get("tool_call_id")) or (linked[0] if linked else None)
        text = _observation_text(event, extras)
        if tool_call_id is None and linked is None:
            if not text:
                self.skip(f"observation:{kind}")
                return
            self.used += 1
            self.messages.append(Message(role="user", content=text))
            return
        self.used += 1
        name = as_str(metadata.get("function_name")) or (linked[1] if linked else kind)
        error = _error_flag(kind, extras)
        if error is not None:
            self.errors[len(self.messages)] = error
        self.messages.append(Message(role="tool", content=text, tool_call_id=tool_call_id, name=name))
        if tool_call_id and time is not None:
            self.ended.setdefault(tool_call_id, time)
        elif cause in self.unnamed_by_action:
            self.unnamed_times[self.unnamed_by_action[cause]][1] = time

    def _metrics(self, metrics: Any) -> None:
        if not isinstance(metrics, dict):
            return
        latencies = metrics.get("response_latencies")
        for latency in latencies if isinstance(latencies, list) else []:
            response_id = as_id(dig(latency, "response_id"))
            seconds = as_float(dig(latency, "latency"))
            if response_id and seconds is not None and 0 <= seconds <= MAX_LATENCY_S:
                self.latency[response_id] = seconds
        cost = as_float(metrics.get("accumulated_cost"))
        if cost is not None:
            self.accumulated_cost = max(cost, self.accumulated_cost or 0.0)

    # -- the trace ----------------------------------------------------------------------------

    def finish(self, source_id: str, line: int) -> Trace | None:
        if not self.used:
            return None
        trace = Trace(source_format=FORMAT, source_id=source_id, source_line=line)
        trace.agent = self.agent_class or AGENT
        trace.workload = f"{AGENT}/{self.agent_class}" if self.agent_class else AGENT
        trace.llm_calls = self.calls
        trace.tool_defs = self.tool_defs
        assemble(trace, self.messages, result_errors=self.errors)
        self._timings(trace)
        shift = self._clock_shift(trace)
        if shift:
            _shift_times(trace, shift)
        trace.outcome = self._outcome()
        if self.agent_state:
            trace.attributes["final_agent_state"] = self.agent_state
        if self.accumulated_cost is not None:
            trace.attributes["accumulated_cost_usd"] = self.accumulated_cost
        if self.version:
            trace.attributes["openhands_version"] = self.version
        return trace

    def _timings(self, trace: Trace) -> None:
        unnamed = iter(self.unnamed_times)
        for tool in trace.tool_calls:
            if tool.source_id:
                tool.started_at = self.started.get(tool.source_id)
                tool.ended_at = self.ended.get(tool.source_id)
            else:
                tool.started_at, tool.ended_at = next(unnamed, [None, None])
            tool.duration_ms = duration_ms(tool.started_at, tool.ended_at)
        for call in trace.llm_calls:
            seconds = self.latency.get(call.source_id or "")
            if seconds is not None and call.ended_at is not None:
                call.started_at = call.ended_at - timedelta(seconds=seconds)
            call.duration_ms = duration_ms(call.started_at, call.ended_at)
        times = [t for c in trace.llm_calls for t in (c.started_at, c.ended_at) if t]
        times += [t for c in trace.tool_calls for t in (c.started_at, c.ended_at) if t]
        trace.started_at = min([*times, self.first_time] if self.first_time else times, default=None)
        trace.ended_at = max([*times, self.previous_time] if self.previous_time else times, default=None)

    def _clock_shift(self, trace: Trace) -> timedelta | None:
        """The correction from naive local event times to UTC, from the responses' `created`."""
        if not self.naive:
            return None
        quarters = Counter(round(skew / QUARTER_HOUR) * QUARTER_HOUR for skew in self.clock_skews)
        if not quarters:
            trace.attributes["timestamps"] = "naive local time, read as UTC"
            return None
        offset = quarters.most_common(1)[0][0]
        if abs(offset) > MAX_UTC_OFFSET:
            trace.attributes["timestamps"] = "naive local time, read as UTC"
            return None
        trace.attributes["recorded_utc_offset_hours"] = -offset / 3600
        return timedelta(seconds=offset) if offset else None

    def _outcome(self) -> str:
        completed = str((self.finish_args or {}).get("task_completed", "")).lower()
        if completed == "true":
            return "success"
        if completed == "false" or self.agent_state == "error":
            return "failure"
        return "unknown"


def _arguments(args: dict) -> dict:
    return {k: v for k, v in args.items() if k not in ACTION_BOOKKEEPING}


def _observation_text(event: dict, extras: dict) -> str | None:
    """What the observation told the model: its content, with the command's prefix and suffix (the
    exit-code note) where OpenHands adds them; the event's message when there is no content."""
    content = text_of(event.get("content")) or ""
    metadata = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else {}
    text = (as_str(metadata.get("prefix")) or "") + content + (as_str(metadata.get("suffix")) or "")
    if text:
        return text
    message = event.get("message")
    return as_str(message) if message else None


def _error_flag(kind: str, extras: dict) -> bool | None:
    """The source's own word on failure: an error observation, or a command's exit code (-1 means
    still running after the timeout, not a failure)."""
    if kind == "error":
        return True
    exit_code = dig(extras, "metadata", "exit_code")
    if isinstance(exit_code, int) and not isinstance(exit_code, bool):
        return exit_code > 0
    return None


def _shift_times(trace: Trace, shift: timedelta) -> None:
    for item in [*trace.llm_calls, *trace.tool_calls]:
        if item.started_at:
            item.started_at += shift
        if item.ended_at:
            item.ended_at += shift
    if trace.started_at:
        trace.started_at += shift
    if trace.ended_at:
        trace.ended_at += shift
