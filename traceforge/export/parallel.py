"""The parallel-call rewrite: a conversation re-laid so that independent tool calls go out together.

Input: a conversation (results already in call order, see `source`) and its dependency edges from
the store's `tool_deps` table (src must run before dst). Each run of assistant and tool messages
between two other messages (user, system) is a segment; calls never leave their segment. Within a
segment, the calls' DAG is laid out by `networkx.topological_generations`: one assistant message
with every call of a generation (in recorded order), then their results in call order, then the
next generation. Recorded results are reused unchanged (valid because the calls did not depend on
each other), as is everything after the segment's last result (the final answer).

Assistant text and reasoning written between calls: text the model wrote before call C could draw
on every result it had read by then, so it is kept only where all those results still come before
it, on the first new turn holding one of its calls; otherwise it is dropped and counted.

`check` verifies a rewrite independently of how it was built, before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import networkx as nx
from datasets import Features, Value

from traceforge import store
from traceforge.export import sft
from traceforge.export.source import Conversation, message

FEATURES = Features(
    {
        "messages": sft.MESSAGES,
        "tools": sft.TOOLS,
        **sft.METADATA,
        "num_tool_calls": Value("int32"),
        "original_turns": Value("int32"),
        "parallel_turns": Value("int32"),
        "turns_saved": Value("int32"),
        "thoughts_dropped": Value("int32"),
    }
)


class DependencyError(ValueError):
    """Dependency edges that contradict the recorded conversation (a cycle, a call that depends on a
    later one, a call id the trace does not have)."""


class RewriteCheckError(AssertionError):
    """A rewrite that breaks an invariant: a call or result lost or repeated, a call before one it
    depends on, a result not right after its call's turn, or a message outside the segments changed."""


@dataclass
class SegmentRewrite:
    """One segment's new layout."""

    start: int  # index in the original messages of the segment's first message
    original_turns: list[int]  # indices (original messages) of its assistant turns with calls
    turns: list[dict[str, Any]]  # the new assistant messages, one per generation
    thoughts_dropped: int = 0

    @property
    def turns_saved(self) -> int:
        return len(self.original_turns) - len(self.turns)


@dataclass
class Rewrite:
    messages: list[dict[str, Any]]
    segments: list[SegmentRewrite] = field(default_factory=list)  # only those that changed
    original_turns: int = 0  # assistant turns with calls, whole conversation
    parallel_turns: int = 0

    @property
    def turns_saved(self) -> int:
        return self.original_turns - self.parallel_turns

    @property
    def thoughts_dropped(self) -> int:
        return sum(s.thoughts_dropped for s in self.segments)


def load_deps(
    con: duckdb.DuckDBPyConnection, trace_ids: list[str]
) -> tuple[dict[str, list[tuple[str, str]]], set[str]]:
    """Dependency edges per trace from `tool_deps`, and the traces the dependency analysis covered.

    A trace counts as analysed when it has a `trace_dag` row (the DAG analysis writes one for every
    trace with tool calls) or any `tool_deps` row. A trace with several calls and neither was never
    analysed: exporting it would claim every call independent, so callers leave it out.

    A resumed session's copies of earlier calls (`tool_calls.copy_of`) are not in its own analysis:
    they have the edges of the calls they copy, so its copied part is re-laid as the original is.
    """
    with store.registered_ids(con, "_tf_dep_ids", trace_ids):
        rows = con.execute(
            """
            SELECT trace_id, src_tool_call_id, dst_tool_call_id
            FROM tool_deps JOIN _tf_dep_ids USING (trace_id)
            UNION ALL
            SELECT s.trace_id, s.tool_call_id, d.tool_call_id
            FROM tool_deps e
            JOIN tool_calls s ON s.copy_of = e.src_tool_call_id
            JOIN tool_calls d ON d.copy_of = e.dst_tool_call_id AND d.trace_id = s.trace_id
            JOIN _tf_dep_ids ON _tf_dep_ids.trace_id = s.trace_id
            """
        ).fetchall()
        dag_rows = con.execute("SELECT trace_id FROM trace_dag JOIN _tf_dep_ids USING (trace_id)").fetchall()
    deps: dict[str, list[tuple[str, str]]] = {}
    for trace_id, src, dst in rows:
        deps.setdefault(trace_id, []).append((src, dst))
    return deps, set(deps) | {row[0] for row in dag_rows}


def segments(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(start, end) of each maximal run of assistant and tool messages.

    >>> roles = ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    >>> segments([message(r) for r in roles])
    [(2, 5), (6, 7)]
    """
    out, start = [], None
    for index, m in enumerate(messages):
        inside = m["role"] in ("assistant", "tool")
        if inside and start is None:
            start = index
        elif not inside and start is not None:
            out.append((start, index))
            start = None
    if start is not None:
        out.append((start, len(messages)))
    return out


def rewrite(messages: list[dict[str, Any]], deps: Iterable[tuple[str, str]]) -> Rewrite:
    """The conversation with each segment's calls laid out by DAG generations.

    Raises DependencyError when the edges contradict the conversation. Segments with nothing to
    gain (or with assistant text between calls that is not part of a call turn) stay as recorded.
    """
    position = _call_positions(messages)
    graph = nx.DiGraph()
    graph.add_nodes_from(position)
    for src, dst in deps:
        if src not in position or dst not in position:
            missing = src if src not in position else dst
            raise DependencyError(f"tool_deps names call {missing!r}, which this trace does not have")
        if position[src] >= position[dst]:
            # Calls made in one assistant message were issued before either result existed.
            raise DependencyError(
                f"call {dst!r} is recorded to depend on {src!r}, which did not come before it"
            )
        graph.add_edge(src, dst)
    if not nx.is_directed_acyclic_graph(graph):
        raise DependencyError("the dependencies form a cycle")

    out: list[dict[str, Any]] = []
    result = Rewrite(messages=out)
    done = 0
    for start, end in segments(messages):
        out.extend(messages[done:start])
        done = end
        segment = messages[start:end]
        new, layout = _segment(segment, start, graph, position)
        turns = sum(1 for m in segment if m["tool_calls"])
        result.original_turns += turns
        result.parallel_turns += len(layout.turns) if layout else turns
        if layout:
            result.segments.append(layout)
        out.extend(new)
    out.extend(messages[done:])
    return result


def _call_positions(messages: list[dict[str, Any]]) -> dict[str, int]:
    """Call id -> index of the assistant message that made it."""
    return {call["id"]: index for index, m in enumerate(messages) for call in m["tool_calls"] or []}


def _segment(
    segment: list[dict[str, Any]], start: int, graph: nx.DiGraph, position: dict[str, int]
) -> tuple[list[dict[str, Any]], SegmentRewrite | None]:
    last_result = max((i for i, m in enumerate(segment) if m["role"] == "tool"), default=-1)
    body, tail = segment[: last_result + 1], segment[last_result + 1 :]
    if any(m["role"] == "assistant" and not m["tool_calls"] for m in body):
        return segment, None
    turns = [i for i, m in enumerate(body) if m["tool_calls"]]
    calls = [call for i in turns for call in body[i]["tool_calls"]]
    order = {call["id"]: n for n, call in enumerate(calls)}
    results = {m["tool_call_id"]: m for m in body if m["role"] == "tool"}
    sub = graph.subgraph(order)
    generations = [sorted(g, key=order.__getitem__) for g in nx.topological_generations(sub)]
    if len(generations) >= len(turns):
        return segment, None
    generation_of = {call_id: g for g, ids in enumerate(generations) for call_id in ids}
    by_id = {call["id"]: call for call in calls}

    # Text of turn i is safe on generation g when every call made before turn i is in an earlier one.
    texts: dict[int, list[dict[str, Any]]] = {}
    dropped = 0
    seen_before: list[str] = []
    for i in turns:
        turn = body[i]
        first = min(generation_of[c["id"]] for c in turn["tool_calls"])
        if turn["content"] or turn["reasoning_content"]:
            if all(generation_of[c] < first for c in seen_before):
                texts.setdefault(first, []).append(turn)
            else:
                dropped += 1
        seen_before.extend(c["id"] for c in turn["tool_calls"])

    new_turns, new_body = [], []
    for g, ids in enumerate(generations):
        sources = texts.get(g, [])
        turn = message(
            "assistant",
            _joined(m["content"] for m in sources),
            tool_calls=[by_id[i] for i in ids],
            reasoning_content=_joined(m["reasoning_content"] for m in sources),
        )
        new_turns.append(turn)
        new_body.append(turn)
        new_body.extend(results[i] for i in ids)
    layout = SegmentRewrite(start, [start + i for i in turns], new_turns, dropped)
    return new_body + tail, layout


def _joined(parts: Iterable[str | None]) -> str | None:
    texts = [p for p in parts if p]
    return "\n\n".join(texts) if texts else None


def check(
    original: list[dict[str, Any]], rewritten: list[dict[str, Any]], deps: Iterable[tuple[str, str]]
) -> None:
    """Raise RewriteCheckError unless `rewritten` is a valid re-laying of `original`.

    Checked: the messages outside the segments are unchanged and in place; each segment keeps its
    calls (same ids, names and arguments) and results (same text) exactly once; every result sits
    in the run of tool messages right after the assistant message holding its call, in call order;
    every call comes in a later assistant message than each call it depends on.
    """
    original_segments, new_segments = segments(original), segments(rewritten)
    if len(original_segments) != len(new_segments):
        raise RewriteCheckError("the number of segments changed")
    done_old = done_new = 0
    for (s_old, e_old), (s_new, e_new) in zip(original_segments, new_segments, strict=True):
        if original[done_old:s_old] != rewritten[done_new:s_new]:
            raise RewriteCheckError(f"messages before the segment at {s_old} changed")
        _check_segment(original[s_old:e_old], rewritten[s_new:e_new])
        done_old, done_new = e_old, e_new
    if original[done_old:] != rewritten[done_new:]:
        raise RewriteCheckError("messages after the last segment changed")
    turn_of: dict[str, int] = {}
    for index, m in enumerate(rewritten):
        for call in m["tool_calls"] or []:
            if call["id"] in turn_of:
                raise RewriteCheckError(f"call {call['id']!r} appears twice")
            turn_of[call["id"]] = index
    for src, dst in deps:
        if turn_of[src] >= turn_of[dst]:
            raise RewriteCheckError(f"call {dst!r} is not after {src!r}, which it depends on")


def _check_segment(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    def calls(segment):
        return sorted(
            (c["id"], c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
            for m in segment
            for c in m["tool_calls"] or []
        )

    def results(segment):
        return sorted((m["tool_call_id"], m["name"], m["content"]) for m in segment if m["role"] == "tool")

    if calls(old) != calls(new):
        raise RewriteCheckError("a segment's calls changed, were lost or repeated")
    if results(old) != results(new):
        raise RewriteCheckError("a segment's results changed, were lost or repeated")
    index = 0
    while index < len(new):
        m = new[index]
        index += 1
        if m["role"] == "tool":
            raise RewriteCheckError(f"result for {m['tool_call_id']!r} does not follow its call's turn")
        expected = [c["id"] for c in m["tool_calls"] or []]
        answered = [r["tool_call_id"] for r in new[index : index + len(expected)]]
        if answered != expected or any(r["role"] != "tool" for r in new[index : index + len(expected)]):
            raise RewriteCheckError(
                f"the results after turn {index - 1} are not its calls' results in call order"
            )
        index += len(expected)
    old_tail = old[max((i for i, m in enumerate(old) if m["role"] == "tool"), default=-1) + 1 :]
    if old_tail and new[-len(old_tail) :] != old_tail:
        raise RewriteCheckError("the final answer changed")


@dataclass
class Outcome:
    """What became of one conversation in the parallel export."""

    rewrite: Rewrite | None = None
    left_out: str | None = None  # not_analysed | nothing_to_gain | inconsistent_deps | failed_check


def rewrite_conversation(conversation: Conversation, deps: list[tuple[str, str]], analysed: bool) -> Outcome:
    """Rewrite and check one conversation, or say why it is left out of the parallel export."""
    if conversation.tool_call_count < 2:
        return Outcome(left_out="nothing_to_gain")
    if not analysed:
        return Outcome(left_out="not_analysed")
    try:
        result = rewrite(conversation.messages, deps)
    except DependencyError:
        return Outcome(left_out="inconsistent_deps")
    if result.turns_saved <= 0:
        return Outcome(left_out="nothing_to_gain")
    try:
        check(conversation.messages, result.messages, deps)
    except RewriteCheckError:
        return Outcome(left_out="failed_check")
    return Outcome(rewrite=result)


def row(conversation: Conversation, result: Rewrite) -> dict[str, Any]:
    """A TRL conversational row of the rewritten conversation, with the turns it saves."""
    return {
        "messages": result.messages,
        "tools": conversation.tools,
        **sft.metadata(conversation),
        "num_tool_calls": conversation.tool_call_count,
        "original_turns": result.original_turns,
        "parallel_turns": result.parallel_turns,
        "turns_saved": result.turns_saved,
        "thoughts_dropped": result.thoughts_dropped,
    }


def openai_row(conversation: Conversation, result: Rewrite) -> dict[str, Any]:
    return sft.openai_row(conversation.with_messages(result.messages), parallel_tool_calls=True)
