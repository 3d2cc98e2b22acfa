"""Transcripts: a conversation's messages saved without the API calls around them.

Eval harnesses and agent frameworks save conversations as `{"messages": [...], ...}` (or under
`conversation`, `traj`, `history`, `chat`, `dialog`), one per JSON file, in a JSON array, or one per
JSON Lines line; a bare list of messages (a JSON array, or one message per line) is one
conversation. Each assistant message is one LLM call. Its token counts are marked not reported,
unless the message carries its own `usage` (some harnesses record it per message).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

from traceforge.ingest.conversation import assemble, default_workload
from traceforge.ingest.sources import Record
from traceforge.ingest.values import as_float, as_id, as_str, first, parse_time
from traceforge.model import LlmCall, ParseResult, Reject, Trace, stable_id

MESSAGE_KEYS = ("messages", "conversation", "traj", "history", "chat", "dialog", "dialogue")
ID_PATHS = (
    "id",
    "conversation_id",
    "session_id",
    "trace_id",
    "thread_id",
    "metadata.id",
    "metadata.conversation_id",
    "metadata.session_id",
)
MODEL_PATHS = ("model", "metadata.model", "info.model", "agent_info.llm")
WORKLOAD_PATHS = (
    "workload",
    "metadata.workload",
    "app",
    "project",
    "metadata.project",
    "metadata.app",
    "task_name",
    "domain",
    "metadata.domain",
)
AGENT_PATHS = ("agent", "agent_name", "metadata.agent", "metadata.agent_name")
ROLE_NAMES = {"system", "developer", "user", "assistant", "tool", "function"}


def find_messages(value: Any) -> list | None:
    """The messages list of a transcript record, or None."""
    if isinstance(value, list) and value and all(_is_message(m) for m in value):
        return value
    if isinstance(value, dict):
        for key in MESSAGE_KEYS:
            candidate = value.get(key)
            if isinstance(candidate, list) and candidate and all(_is_message(m) for m in candidate[:20]):
                return candidate
    return None


def one_conversation(sample: list[Record]) -> bool:
    """Whether a file's first records are bare messages: the file is then one conversation, whose
    trace `traces` can only hand out at the file's end."""
    return all(_is_message(record.value) for record in sample)


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str) and value["role"] in ROLE_NAMES


def outcome_of(value: Any) -> str:
    """success / failure / unknown from the usual result fields (reward, success, outcome...)."""
    for path in ("outcome", "status", "result", "metadata.outcome"):
        text = as_str(first(value, path))
        if text and text.lower() in ("success", "succeeded", "pass", "passed", "resolved", "ok"):
            return "success"
        if text and text.lower() in ("failure", "failed", "fail", "error", "unresolved"):
            return "failure"
    success = first(value, "success", "resolved", "metadata.success")
    if isinstance(success, bool):
        return "success" if success else "failure"
    reward = as_float(first(value, "reward", "score", "reward_info.reward", "metadata.reward"))
    if reward is not None:
        return "success" if reward > 0 else "failure"
    return "unknown"


def parse(records: Iterable[Record], source_path: str, provider: ModuleType) -> ParseResult:
    """Transcripts of one provider family (`provider` is the openai_chat or anthropic_messages module)."""
    result = ParseResult()
    result.traces.extend(traces(records, source_path, provider, result))
    return result


def traces(
    records: Iterable[Record], source_path: str, provider: ModuleType, result: ParseResult
) -> Iterator[Trace]:
    """`parse`'s traces one at a time, each as soon as its record is read, with the records counted
    and rejected into `result` as they come: a big file of transcripts need not be held whole
    (`traceforge.ingest.parts`)."""
    records = iter(records)
    leading: list[Record] = []  # records that are bare messages, up to the first that is not
    for record in records:
        leading.append(record)
        if not _is_message(record.value):
            break
    else:
        if leading:
            # One message per record: the whole file is one conversation.
            result.records += len(leading)
            yield _trace(
                [r.value for r in leading],
                {},
                provider,
                leading[0].line,
                "conv-" + stable_id(source_path.rsplit("/", 1)[-1], leading[0].raw or leading[0].value),
            )
        return
    for record in itertools.chain(leading, records):
        result.records += 1
        messages = find_messages(record.value)
        if messages is None:
            result.rejects.append(
                Reject(
                    record.line,
                    "not a transcript: no list of role/content messages under " + ", ".join(MESSAGE_KEYS),
                    record.raw,
                )
            )
            continue
        meta = record.value if isinstance(record.value, dict) else {}
        source_id = as_id(first(meta, *ID_PATHS))
        trial = as_id(meta.get("trial"))
        if source_id and trial is not None:
            source_id = f"{source_id}/trial-{trial}"
        if not source_id:
            source_id = "conv-" + stable_id(record.line, messages[:3])
        yield _trace(messages, meta, provider, record.line, source_id)


def _trace(raw_messages: list, meta: dict, provider: ModuleType, line: int, source_id: str) -> Trace:
    if provider.FORMAT == "anthropic-messages":
        messages, errors = provider.convert_messages(raw_messages, meta.get("system"))
    else:
        messages, errors = provider.convert_messages(raw_messages)
    model = as_str(first(meta, *MODEL_PATHS))
    trace = Trace(
        source_format=provider.FORMAT,
        source_id=source_id,
        source_line=line,
        workload=as_str(first(meta, *WORKLOAD_PATHS)),
        agent=as_str(first(meta, *AGENT_PATHS)),
        outcome=outcome_of(meta),
        attributes={"shape": "transcript"},
    )
    raw_assistants = [m for m in raw_messages if isinstance(m, dict) and m.get("role") == "assistant"]
    for message, raw in zip((m for m in messages if m.role == "assistant"), raw_assistants, strict=False):
        message.call_index = len(trace.llm_calls)
        trace.llm_calls.append(_call_for(raw, model, provider))
    trace.tool_defs = provider.tool_defs(meta) if isinstance(meta, dict) else []
    assemble(trace, messages, result_errors=errors)
    times = [c.started_at for c in trace.llm_calls if c.started_at]
    trace.started_at = parse_time(first(meta, "start_time", "started_at", "timestamp")) or (
        min(times) if times else None
    )
    trace.ended_at = parse_time(first(meta, "end_time", "ended_at")) or (max(times) if times else None)
    trace.workload = trace.workload or trace.agent or default_workload(trace)
    return trace


def _call_for(raw: dict, model: str | None, provider: ModuleType) -> LlmCall:
    call = LlmCall(model=as_str(raw.get("model")) or model, provider=provider.PROVIDER)
    provider.apply_usage(call, raw.get("usage"))
    call.started_at = parse_time(first(raw, "timestamp", "created_at", "created"))
    cost = as_float(raw.get("cost"))
    if cost is not None:
        call.cost_usd = cost
    return call
