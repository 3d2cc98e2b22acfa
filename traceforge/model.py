"""The canonical trace model every ingest adapter produces.

Adapters turn source records into `Trace` objects; `traceforge.ingest.writer` gives them their final
ids and writes them to the store's tables (`traces`, `llm_calls`, `tool_calls`, `messages`,
`tool_defs`). Token semantics follow OpenTelemetry: `input_tokens` includes cached tokens, and
`cache_read_tokens` / `cache_write_tokens` are parts of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Message:
    """One message of the conversation as the model saw it (OpenAI-style roles)."""

    role: str  # system | user | assistant | tool
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # [{"id", "name", "arguments": object}]
    tool_call_id: str | None = None  # on role=tool: the call this result answers
    name: str | None = None  # on role=tool: the tool's name
    reasoning: str | None = None  # thinking / reasoning text the provider returned
    call_index: int | None = None  # on role=assistant: index into Trace.llm_calls that produced it


@dataclass
class LlmCall:
    model: str | None = None
    provider: str | None = None
    source_id: str | None = None  # the provider's response id, or the span id
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration_ms: float | None = None
    ttft_ms: float | None = None
    input_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    usage_reported: bool = False
    output_tokens_partial: bool = False  # output_tokens is a lower bound (only the opening usage logged)
    cost_usd: float | None = None
    finish_reason: str | None = None
    source_line: int | None = None
    # Where one API response can be logged in more than one trace (a resumed Claude Code session
    # copies the conversation it resumes), the key that identifies it across them.
    response_key: str | None = None
    # Per-request logs (`ingest.api_log`): the conversation's hash after this call's response, and,
    # on a call that opens its trace mid-conversation, its request's prefix hashes, by which a trace
    # continued in another file (a rotated log) is found; and the file `source_line` is a line of,
    # where it is not the trace's (a trace joined from several files).
    chain_state: str | None = None
    request_prefixes: list[str] | None = None
    source_line_path: str | None = None


@dataclass
class ToolCall:
    name: str
    arguments: Any = None  # parsed JSON object where the source gave valid JSON, else the raw string
    source_id: str | None = None  # the source's own tool call id
    call_index: int | None = None  # index into Trace.llm_calls of the LLM call that emitted it
    result: str | None = None
    is_error: bool = False
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration_ms: float | None = None
    requestor: str = "assistant"
    local_id: str = ""  # unique within the trace; messages refer to the call by it


@dataclass
class ToolDef:
    name: str
    description: str | None = None
    parameters: Any = None
    annotations: Any = None  # MCP tool annotations (readOnlyHint, destructiveHint, ...) where given


@dataclass
class Trace:
    """One agent run: its LLM calls, tool calls, messages and tool definitions, in order."""

    source_format: str
    source_id: str  # the source's own trace/conversation/session id, or a content-derived one
    source_line: int | None = None
    workload: str | None = None
    agent: str | None = None
    outcome: str = "unknown"  # success | failure | unknown
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    parent_source_id: str | None = None  # a parent trace's source_id (subagents, branches)
    llm_calls: list[LlmCall] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    tool_defs: list[ToolDef] = field(default_factory=list)


@dataclass
class Reject:
    """A record that could not be used, kept with where it came from and why."""

    line: int | None
    error: str
    raw: str | None = None


@dataclass
class ParseResult:
    """What one adapter made of one source file."""

    traces: list[Trace] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    records: int = 0  # records read from the file
    skipped: dict[str, int] = field(default_factory=dict)  # records skipped by rule, by kind
    described: list[str] = field(default_factory=list)  # ids of traces described here, their data elsewhere
    # Why an adapter that hands a big file's traces out as it reads them parsed this one whole
    # instead, holding its traces until it was read (`stream.HeldWhole`); set before it parses it.
    held_whole: str | None = None

    def skip(self, kind: str, n: int = 1) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + n

    def drain_into(self, result: ParseResult) -> Iterator[Trace]:
        """This result's counts, rejects and descriptions added to `result`, then its traces handed
        out one by one and let go of: what an adapter without a `stream` gives a file written in
        parts (`traceforge.ingest.parts`)."""
        result.records += self.records
        result.rejects.extend(self.rejects)
        for kind, n in self.skipped.items():
            result.skip(kind, n)
        result.described.extend(self.described)
        self.traces.reverse()
        while self.traces:
            yield self.traces.pop()


def stable_id(*parts: Any, length: int = 16) -> str:
    """A short hex digest of `parts`: the same input always gives the same id.

    >>> stable_id("a.jsonl", 3) == stable_id("a.jsonl", 3)
    True
    """
    text = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=length // 2).hexdigest()
