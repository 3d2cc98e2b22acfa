"""Turning a conversation (canonical messages) into a trace's tool calls, and naming its workload.

Every adapter that sees a conversation (API logs, transcripts, framework logs) ends here, so the
rules for linking results to calls live in one place:
- a result names its call by id (`tool_call_id`), the usual case;
- the legacy `function_call` / `role: function` form has no ids: a result answers the earliest
  unanswered call of the same name, else the earliest unanswered call;
- a result whose call is not in the conversation stays a message and is counted in the trace's
  attributes (`orphan_results`), never invented into a call.
"""

from __future__ import annotations

import json
import re
from typing import Any

from traceforge.ingest.values import parse_json
from traceforge.model import Message, ToolCall, Trace, stable_id

_ERROR_TEXT = re.compile(
    r"^\s*(error\b|exception\b|traceback \(most recent call last\)|\w*error:|failed\b)",
    re.IGNORECASE,
)


def looks_like_error(result: str | None) -> bool:
    """A tool result that reports failure: a JSON object with a non-empty `error`, or text that
    opens with Error / Exception / Traceback. Deliberately narrow: a result that merely mentions an
    error somewhere is not one."""
    if not result:
        return False
    text = result.lstrip()
    if text.startswith("{"):
        if '"error"' not in text and '"status"' not in text and "\\u" not in text:
            return False  # neither key can be in it (not even escaped): not worth parsing (5% of an ingest)
        try:
            value = parse_json(text)
        except ValueError:
            value = None
        if isinstance(value, dict):
            error = value.get("error")
            if error not in (None, "", False, {}, []):
                return True
            return str(value.get("status", "")).lower() in ("error", "failed", "failure")
    return bool(_ERROR_TEXT.match(text))


def assemble(trace: Trace, messages: list[Message], *, result_errors: dict[int, bool] | None = None) -> None:
    """Set `trace.messages` and build `trace.tool_calls` from the assistant messages' tool calls.

    `result_errors` maps a message index to the source's own error flag for that tool result
    (Anthropic `is_error`, tau2 `error`); without one the result text is checked with
    `looks_like_error`. Tool call ids in the messages are rewritten to each call's `local_id`
    (the source id, or a synthesized one for sources without ids), which the writer maps to the
    stored ids.
    """
    result_errors = result_errors or {}
    calls: list[ToolCall] = []
    pending: list[ToolCall] = []
    by_id: dict[str, ToolCall] = {}
    orphans = 0
    for index, message in enumerate(messages):
        if message.tool_calls:
            for raw_call in message.tool_calls:
                call = ToolCall(
                    name=raw_call.get("name") or "(unnamed)",
                    arguments=raw_call.get("arguments"),
                    source_id=raw_call.get("id"),
                    call_index=message.call_index,
                    requestor=raw_call.get("requestor")
                    or ("user" if message.role == "user" else "assistant"),
                )
                call.local_id = _unique_local_id(call.source_id, len(calls), by_id)
                raw_call["id"] = call.local_id
                by_id[call.local_id] = call
                calls.append(call)
                pending.append(call)
        if message.role == "tool":
            call = _match_result(message, pending, by_id)
            if call is None:
                orphans += 1
                continue
            pending.remove(call)
            message.tool_call_id = call.local_id
            message.name = message.name or call.name
            call.result = message.content
            flag = result_errors.get(index)
            call.is_error = flag if flag is not None else looks_like_error(message.content)
    trace.messages = messages
    trace.tool_calls = calls
    if orphans:
        trace.attributes["orphan_results"] = orphans


def _unique_local_id(source_id: str | None, seq: int, taken: dict[str, ToolCall]) -> str:
    if source_id and source_id not in taken:
        return source_id
    base = f"{source_id}#{seq}" if source_id else f"#{seq}"
    return base


def _match_result(message: Message, pending: list[ToolCall], by_id: dict[str, ToolCall]) -> ToolCall | None:
    if message.tool_call_id:
        call = by_id.get(message.tool_call_id)
        if call is not None and call in pending:
            return call
        # Ids reused within a conversation (some frameworks number calls per turn): the
        # earliest unanswered call carrying that source id.
        for candidate in pending:
            if candidate.source_id == message.tool_call_id:
                return candidate
        return None
    same_name = [c for c in pending if message.name and c.name == message.name]
    if same_name:
        return same_name[0]
    return pending[0] if pending else None


def system_prompt(messages: list[Message]) -> str:
    return "\n".join(m.content or "" for m in messages if m.role in ("system", "developer"))


def default_workload(trace: Trace) -> str:
    """The workload a trace belongs to when the source names none: a fingerprint of its system
    prompt and tool set, so runs of the same agent group together (`fp-` and 8 hex digits)."""
    tools = sorted({d.name for d in trace.tool_defs} or {c.name for c in trace.tool_calls})
    prompt = system_prompt(trace.messages).strip()
    return "fp-" + stable_id(prompt, tools, length=8)


def text_arguments(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
