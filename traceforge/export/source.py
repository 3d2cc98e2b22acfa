"""Conversations read from the store, in the message shape every dataset export writes.

A message is a dict with the keys of TRL's conversational format (transformers chat templates):

    {"role": "system" | "developer" | "user" | "assistant" | "tool",
     "content": str | None,
     "tool_calls": [{"id": str, "type": "function",
                     "function": {"name": str, "arguments": dict}}] | None,
     "tool_call_id": str | None,      # on tool messages: the call answered
     "name": str | None,              # on tool messages: the tool's name
     "reasoning_content": str | None} # thinking text, where the provider returned it

Arguments stay objects (templates expect dicts; OpenAI files get them as JSON strings on the way
out), each call keeps its stored id, and the results of an assistant turn follow it in call order.
A conversation that cannot be written that way (a call without a result, arguments that are not a
JSON object...) has a `problem` and is left out by the caller, counted by reason. Tool calls a user
made (a simulated user acting on their own device) are not the agent's: they are removed.

A trace whose context the agent compacted (`traces.attributes.compactions`, from Claude Code) can be
read as one conversation per context: the messages up to the first compaction, then from each
compaction's summary to the next. Each is what the model saw and answered in one context; the whole
trace is not (the model never saw the history and the summary together).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import duckdb
import polars as pl

from traceforge import store
from traceforge.analysis.batches import cut, trace_spans
from traceforge.analysis.prefix_cache import DEFAULT_CHARS_PER_TOKEN

MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")


@dataclass
class Conversation:
    """One trace as a training conversation, with what selection and the dataset card need."""

    trace_id: str
    workload: str | None
    outcome: str
    model: str | None  # the model of most of the trace's LLM calls
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # JSON schemas: {"type": "function", "function": {...}}
    inferred_tools: list[str] = field(default_factory=list)  # called, but no definition recorded
    removed_user_calls: list[str] = field(default_factory=list)  # the user's own tool calls, removed
    unanswered_user_messages: int = 0  # user messages after the last assistant turn, trimmed
    # largest input + output of one LLM call, where usage was reported (an output logged only as a
    # lower bound counts at least its message's text at 4 characters a token)
    peak_tokens: int | None = None
    problem: str | None = None  # why it cannot be a training example, if it cannot
    # The trace id and workload as published in rows, where redaction changed them (a session id
    # that is an email address); `trace_id` itself stays the store's key.
    published_trace_id: str | None = None
    published_workload: str | None = None
    # Which context of the trace (see the module docstring), and how many it was read as: 0 and 1
    # unless the trace was read by context and compacted.
    context: int = 0
    contexts: int = 1
    # What the export's redaction replaced in it, occurrences per kind (see `export.redact`).
    redactions: dict[str, int] = field(default_factory=dict)
    # Its text and tool schemas in characters, once prepared for an export (`selection.text_chars`):
    # what --max-chars limits, and roughly the bytes of a row made of it.
    chars: int = 0

    @property
    def call_ids(self) -> set[str]:
        return {call["id"] for call in _calls(self.messages)}

    def with_messages(self, messages: list[dict[str, Any]]) -> Conversation:
        return replace(self, messages=messages)

    @property
    def tool_call_count(self) -> int:
        return sum(len(m["tool_calls"] or []) for m in self.messages)


def trim_unanswered(conversation: Conversation) -> Conversation:
    """The conversation without the user messages after its last assistant turn, counted in
    `unanswered_user_messages`. Nothing answered them, so they teach a model nothing, and in a
    simulated conversation they are the simulator's control words (tau2-bench's user ends with
    `###STOP###` or `###TRANSFER###`), which a model trained on whole sequences would learn to say.

    >>> c = Conversation("t", None, "unknown", None, [message("user", "hi"), message("assistant", "hello"),
    ...                  message("user", "bye ###STOP###")], [])
    >>> trimmed = trim_unanswered(c)
    >>> [m["role"] for m in trimmed.messages], trimmed.unanswered_user_messages
    (['user', 'assistant'], 1)
    """
    messages = conversation.messages
    end = len(messages)
    while end and messages[end - 1]["role"] == "user":
        end -= 1
    if end == len(messages) or not any(m["role"] == "assistant" for m in messages[:end]):
        return conversation
    return replace(conversation, messages=messages[:end], unanswered_user_messages=len(messages) - end)


def message(role: str, content: str | None = None, **fields: Any) -> dict[str, Any]:
    """A message dict with every key present (absent ones None), as the dataset features expect."""
    out = dict.fromkeys(MESSAGE_KEYS)
    out["role"] = role
    out["content"] = content
    out.update(fields)
    return out


@dataclass
class TraceRows:
    """A trace's rows as the store holds them, what `trace_conversations` makes its conversations
    of (in whichever process does it)."""

    trace_id: str
    workload: str | None
    outcome: str | None
    model: str | None  # the model of most of its LLM calls
    compactions: list[int | None] | None  # `store.COMPACTION_STARTS_SQL`
    sizes: list[tuple]  # per LLM call with usage: (seq of its first message, input + output tokens)
    messages: list[tuple]  # (seq, role, content, tool_calls, tool_call_id, name, reasoning)
    defs: list[tuple]  # tool definitions: (name, description, parameters)


# Messages and tool definitions are read (and sorted) a chunk of traces at a time: traces consecutive
# in the export's order, with at most this many messages (one trace may have more) and traces.
CHUNK_MESSAGES = 20_000
CHUNK_TRACES = 2_000
# A chunk's rows are read from at most this many stretches of row ids per table.
CHUNK_RANGES = 64
# The tables read a chunk at a time: the big ones. The memory DuckDB needs to sort them whole grows
# with the store (the benchmark's 4x store's messages needed over 384 MB; docs/performance.md).
CHUNKED_TABLES = ("messages", "tool_defs")


def iter_trace_rows(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> Iterator[TraceRows]:
    """The rows of `trace_ids`, a trace at a time, in that order (`trace_conversations` makes
    them conversations).

    Read as they are used, in time and memory that grow no faster than the store: the traces' own
    rows and their calls' sizes (narrow) come from two queries sorted by the traces' positions in
    `trace_ids` and fetched a block at a time; their messages and tool definitions a chunk of
    traces at a time, each chunk's query kept to the stretches of row ids its traces' rows lie in
    (the ingest writes a trace's rows together), so the store is read about once. Views (a store
    attached to a Parquet lake) have no row ids: there each chunk's query reads the whole table.
    """
    if not trace_ids:
        return
    order = pl.DataFrame(
        {"trace_id": trace_ids, "position": range(len(trace_ids))},
        schema={"trace_id": pl.Utf8, "position": pl.Int64},
    )
    cursors = [con.cursor() for _ in range(3)]
    try:
        for cursor in cursors:
            cursor.register("_tf_export_order", order)
        traces, sizes = (
            _PositionGroups(cursor.execute(query, params))
            for cursor, (query, params) in zip(cursors[:2], _STREAMED_QUERIES, strict=True)
        )
        chunked = cursors[2]
        spans = _Spans(chunked, trace_ids)
        for first, last in spans.chunks():
            messages = _chunk_rows(chunked, "messages", spans, first, last)
            defs = _chunk_rows(chunked, "tool_defs", spans, first, last)
            for position in range(first, last + 1):
                head = traces.take(position)
                if not head:
                    continue  # not in the store
                (trace_id, workload, outcome, model, compactions), *_ = head
                yield TraceRows(
                    trace_id,
                    workload,
                    outcome,
                    model,
                    compactions,
                    sizes.take(position),
                    messages.get(position, []),
                    defs.get(position, []),
                )
    finally:
        for cursor in cursors:
            cursor.close()


class _Spans:
    """Per position in the export, its trace's messages, and the lowest and highest row id of its
    rows in each of `CHUNKED_TABLES` (`batches.trace_spans`; none for views, which have none)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> None:
        found = trace_spans(con, CHUNKED_TABLES, "trace_id IN (SELECT trace_id FROM _tf_export_order)")
        position_of = {trace_id: position for position, trace_id in enumerate(trace_ids)}
        self.positions = len(trace_ids)
        self.messages = {position_of[row[0]]: row[1] for row in found.rows}
        self.rowids: dict[str, dict[int, tuple[int, int]]] | None = None
        if found.tables is not None:
            self.rowids = {
                table: {
                    position_of[row[0]]: (row[2 + 2 * k], row[3 + 2 * k])
                    for row in found.rows
                    if row[2 + 2 * k] is not None
                }
                for k, table in enumerate(found.tables)
            }

    def chunks(self) -> Iterator[tuple[int, int]]:
        """(first, last) position of each chunk of consecutive traces."""
        for chunk in cut(
            range(self.positions), lambda p: self.messages.get(p, 0), CHUNK_TRACES, CHUNK_MESSAGES
        ):
            yield chunk[0], chunk[-1]


_CHUNK_QUERIES = {
    "messages": "SELECT o.position, seq, role, content, tool_calls, tool_call_id, name, reasoning "
    "FROM messages t JOIN _tf_export_order o USING (trace_id) WHERE {where} ORDER BY o.position, seq",
    "tool_defs": "SELECT o.position, name, description, parameters "
    "FROM tool_defs t JOIN _tf_export_order o USING (trace_id) WHERE {where} ORDER BY o.position, name",
}


def _chunk_rows(
    con: duckdb.DuckDBPyConnection, table: str, spans: _Spans, first: int, last: int
) -> dict[int, list[tuple]]:
    """A chunk's rows of `table` per position, each trace's in order."""
    where, params = "o.position BETWEEN ? AND ?", [first, last]
    if spans.rowids is not None:
        bounds = spans.rowids[table]
        held = [bounds[p] for p in range(first, last + 1) if p in bounds]
        if not held:
            return {}
        stretches = covering_ranges(held, CHUNK_RANGES)
        where += " AND (" + " OR ".join("t.rowid BETWEEN ? AND ?" for _ in stretches) + ")"
        params += [bound for stretch in stretches for bound in stretch]
    rows: dict[int, list[tuple]] = {}
    for position, *row in con.execute(_CHUNK_QUERIES[table].format(where=where), params).fetchall():
        rows.setdefault(position, []).append(tuple(row))
    return rows


def covering_ranges(ranges: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """At most `limit` ranges covering `ranges` (inclusive bounds): overlapping and adjacent ones
    joined, then those with the smallest gaps between them, so that as little as can be is added.

    >>> covering_ranges([(10, 20), (0, 5), (21, 30), (100, 110)], 2)
    [(0, 30), (100, 110)]
    >>> covering_ranges([(10, 20), (0, 5), (21, 30), (100, 110)], 1)
    [(0, 110)]
    """
    merged: list[list[int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    if len(merged) <= limit:
        return [(low, high) for low, high in merged]
    # gap k lies between merged[k] and merged[k + 1]: the widest `limit - 1` stay open
    widest = sorted(range(len(merged) - 1), key=lambda k: merged[k + 1][0] - merged[k][1], reverse=True)
    out, start = [], 0
    for k in sorted(widest[: limit - 1]):
        out.append((merged[start][0], merged[k][1]))
        start = k + 1
    out.append((merged[start][0], merged[-1][1]))
    return out


# The traces' own rows and their LLM calls' sizes, each ordered by the trace's position in the
# export (`_tf_export_order`), its first column.
_STREAMED_QUERIES = (
    (
        f"""
        SELECT o.position, t.trace_id, t.workload, t.outcome, c.model, {store.COMPACTION_STARTS_SQL}
        FROM traces t
        JOIN _tf_export_order o USING (trace_id)
        LEFT JOIN (
            SELECT trace_id, mode(model) AS model FROM llm_calls JOIN _tf_export_order USING (trace_id)
            GROUP BY trace_id
        ) c USING (trace_id)
        ORDER BY o.position
        """,
        [],
    ),
    # Each call's input + output where usage was reported, with the seq of its first message
    # (which context it ran in); a partial output count's stand-in: its message's text in rough
    # tokens.
    (
        """
        SELECT o.position, m.first_seq,
               c.input_tokens + CASE WHEN c.output_tokens_partial
                                     THEN greatest(coalesce(c.output_tokens, 0), m.text_tokens)
                                     ELSE coalesce(c.output_tokens, 0) END
        FROM llm_calls c JOIN _tf_export_order o USING (trace_id)
        LEFT JOIN (
            SELECT trace_id, call_id, min(seq) AS first_seq,
                   sum(length(coalesce(content, '')) + length(coalesce(reasoning, ''))
                       + length(coalesce(tool_calls::VARCHAR, ''))) // ? AS text_tokens
            FROM messages JOIN _tf_export_order USING (trace_id)
            WHERE role = 'assistant' AND call_id IS NOT NULL
            GROUP BY trace_id, call_id
        ) m USING (trace_id, call_id)
        WHERE c.usage_reported
        ORDER BY o.position
        """,
        [int(DEFAULT_CHARS_PER_TOKEN)],
    ),
)


class _PositionGroups:
    """The rows of a query ordered by its first column (a trace's position), fetched in blocks:
    `take` a position's rows (none if it has none), positions in ascending order, while reading
    several such queries side by side."""

    BLOCK_ROWS = 2048

    def __init__(self, result: duckdb.DuckDBPyConnection) -> None:
        self._groups = self._read(result)
        self._head = next(self._groups, None)

    def _read(self, result: duckdb.DuckDBPyConnection) -> Iterator[tuple[int, list[tuple]]]:
        current, rows = None, []
        while block := result.fetchmany(self.BLOCK_ROWS):
            for position, *row in block:
                if position != current:
                    if rows:
                        yield current, rows
                    current, rows = position, []
                rows.append(tuple(row))
        if rows:
            yield current, rows

    def take(self, position: int) -> list[tuple]:
        """The rows of `position`: positions must be asked in ascending order."""
        while self._head is not None and self._head[0] < position:
            self._head = next(self._groups, None)
        if self._head is None or self._head[0] != position:
            return []
        rows, self._head = self._head[1], next(self._groups, None)
        return rows


def trace_conversations(rows: TraceRows, by_context: bool = False) -> list[Conversation]:
    """A trace's conversation, checked and normalised, or with `by_context` one per context its
    compactions began.

    >>> rows = next(iter_trace_rows(con, ["c1"]))                      # doctest: +SKIP
    >>> trace_conversations(rows)[0].messages[2]["tool_calls"][0]["function"]  # doctest: +SKIP
    {'name': 'get_weather', 'arguments': {'city': 'Paris'}}
    """
    starts = store.context_starts(rows.compactions) if by_context else []
    peaks: dict[int, int] = {}
    for first_seq, tokens in rows.sizes:
        if tokens is not None:
            context = store.context_of(starts, first_seq) if first_seq is not None else 0
            peaks[context] = max(peaks.get(context, 0), int(tokens))
    rows_of_context: dict[int, list[tuple]] = {}
    for seq, *message_row in rows.messages:
        rows_of_context.setdefault(store.context_of(starts, seq), []).append(tuple(message_row))
    conversations = []
    contexts = sorted(rows_of_context) or [0]
    for context in contexts:
        conversation = Conversation(
            trace_id=rows.trace_id,
            workload=rows.workload,
            outcome=rows.outcome or "unknown",
            model=rows.model,
            messages=[],
            tools=[],
            peak_tokens=peaks.get(context),
            context=context,
            contexts=len(contexts),
        )
        conversation.messages, conversation.removed_user_calls, conversation.problem = _messages(
            rows_of_context.get(context, [])
        )
        conversation.tools, conversation.inferred_tools = _tools(rows.defs, conversation.messages)
        conversations.append(conversation)
    return conversations


def _messages(rows: list[tuple]) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """Store rows to message dicts, results put in call order; the ids of the user-side calls
    removed; and the first problem found.

    Tool calls on a user message are the user's own actions (tau2's simulated user toggling their
    phone), which the agent never saw: they and their results are removed, keeping the user's text.
    """
    user_calls = {
        call["id"]
        for role, _, calls_json, *_ in rows
        if role != "assistant" and calls_json
        for call in json.loads(calls_json)
    }
    out: list[dict[str, Any]] = []
    problem = None
    for role, content, calls_json, tool_call_id, name, reasoning in rows:
        if role == "tool" and tool_call_id in user_calls:
            continue
        calls = None
        if calls_json and role == "assistant":
            calls = []
            for call in json.loads(calls_json):
                arguments = call.get("arguments")
                if arguments is None:
                    arguments = {}
                if not isinstance(arguments, dict):
                    problem = problem or "arguments_not_an_object"
                calls.append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {"name": call.get("name"), "arguments": arguments},
                    }
                )
        elif calls_json and not content:
            continue
        out.append(
            message(
                role,
                content,
                tool_calls=calls,
                tool_call_id=tool_call_id if role == "tool" else None,
                name=name if role == "tool" else None,
                reasoning_content=reasoning,
            )
        )
    messages, problem = _results_in_call_order(out, problem)
    return messages, sorted(user_calls), problem


def _results_in_call_order(
    messages: list[dict[str, Any]], problem: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """Each assistant turn's results right after it, in the order of its calls.

    The results of a turn are the run of tool messages that follows it; a run that is not exactly
    the turn's calls (a call without a result, a result for another turn) is a problem.
    """
    out: list[dict[str, Any]] = []
    index = 0
    while index < len(messages):
        current = messages[index]
        index += 1
        if current["role"] == "tool":
            problem = problem or "result_without_call"
            out.append(current)
            continue
        out.append(current)
        if not current["tool_calls"]:
            continue
        run_end = index
        while run_end < len(messages) and messages[run_end]["role"] == "tool":
            run_end += 1
        results = messages[index:run_end]
        index = run_end
        order = [call["id"] for call in current["tool_calls"]]
        by_call = {r["tool_call_id"]: r for r in results}
        if len(by_call) != len(results) or set(by_call) != set(order) or len(set(order)) != len(order):
            problem = problem or (
                "unanswered_tool_call" if len(results) < len(order) else "result_without_call"
            )
            out.extend(results)
            continue
        out.extend(by_call[call_id] for call_id in order)
    if problem is None and not any(m["role"] == "assistant" for m in out):
        problem = "no_assistant_message"
    return out, problem


def _tools(defs: list[tuple], messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The recorded tool definitions as JSON schemas, plus a minimal schema for each tool that was
    called without a recorded definition (a chat template lists only the tools it is given)."""
    tools = []
    for name, description, parameters in defs:
        function: dict[str, Any] = {"name": name}
        if description:
            function["description"] = description
        schema = json.loads(parameters) if parameters else None
        function["parameters"] = schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
        tools.append({"type": "function", "function": function})
    known = {name for name, *_ in defs}
    inferred: dict[str, dict[str, Any]] = {}
    for call in _calls(messages):
        name = call["function"]["name"]
        if name in known:
            continue
        properties = inferred.setdefault(name, {})
        arguments = call["function"]["arguments"]
        if isinstance(arguments, dict):
            for key, value in arguments.items():
                properties.setdefault(key, {"type": json_type(value)})
    for name, properties in inferred.items():
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": "(no definition recorded; parameters inferred from the calls)",
                    "parameters": {"type": "object", "properties": properties},
                },
            }
        )
    return tools, list(inferred)


def _calls(messages: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for m in messages:
        yield from m["tool_calls"] or []


def json_type(value: Any) -> str:
    """The JSON Schema type name of a JSON value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"


def conversation_text(messages: Iterable[dict[str, Any]], roles: tuple[str, ...] | None = None) -> str:
    """The text of messages (contents, call names and arguments, reasoning), for dedup and length.

    `roles` limits it to messages of those roles.
    """
    parts = []
    for m in messages:
        if roles is not None and m["role"] not in roles:
            continue
        parts.append(m["role"])
        for key in ("content", "reasoning_content"):
            if m[key]:
                parts.append(m[key])
        for call in m["tool_calls"] or []:
            parts.append(call["function"]["name"])
            parts.append(json.dumps(call["function"]["arguments"], sort_keys=True, ensure_ascii=False))
    return "\n".join(parts)
