"""Claude Code session logs: `~/.claude/projects/<project>/<session>.jsonl` and its subagents'
`<session>/subagents/agent-<agentId>.jsonl`.

Every line is one event with `type`, `uuid`, `parentUuid`, `sessionId` and `timestamp`:
- `assistant` lines hold ONE content block each (text, thinking, tool_use); the lines of one API
  response share `message.id`. They are grouped back into one assistant message and one LLM call,
  whose usage is counted once (from the line with the largest `output_tokens`: newer versions write
  the final usage on some lines and the opening usage on others). A message none of whose lines
  carries the final usage keeps the opening one: its input and cache counts are complete, its
  output count is not (`output_tokens_partial`). Parallel tool_use blocks become one turn.
- `user` lines hold the user's text or `tool_result` blocks, linked to their call by `tool_use_id`
  (`is_error` kept).
- every other line (`progress`, `system`, `file-history-snapshot`, `queue-operation`, `summary`,
  and assistant lines Claude Code wrote itself, model `<synthetic>`) is skipped and counted by kind.

Threading: `parentUuid` forms a tree. The conversation is the path from the root to the last user or
assistant line written (what `claude --resume` continues), plus the lines that belong to it without
lying on that path: the other lines of its API messages and the results of its tool calls (parallel
tool results hang off the tool_use line, not off each other). User and assistant lines left over
are abandoned branches (a rewound or edited prompt): each becomes a child trace of the trace it
forks from, so the LLM calls they cost are not lost. A compaction boundary (`system` line with
`subtype: compact_boundary`) continues the conversation it compacted.

Subagent files (`isSidechain: true`, `agentId`) become child traces: id `<sessionId>/agent-<agentId>`,
`parent_source_id` the session. Their Task (or Agent) tool call is only named in the parent file
(`agent_progress` lines with `parentToolUseID`, or the result's `toolUseResult.agentId`); it is read
from the session file beside the `subagents/` folder when that file exists. `agent-acompact-*`
files are compaction side-chains, marked `kind: compaction`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from traceforge.ingest import anthropic_messages
from traceforge.ingest.conversation import assemble, default_workload
from traceforge.ingest.sources import Record, SourceError, load
from traceforge.ingest.values import as_float, as_id, as_int, as_str, dig, duration_ms, parse_json, parse_time
from traceforge.model import LlmCall, Message, ParseResult, Reject, Trace

FORMAT = "claude-code"
AGENT = "claude-code"
MESSAGE_TYPES = ("user", "assistant")
SYNTHETIC_MODEL = "<synthetic>"
# An ordinary subagent's id is "a" and hex digits; side-chains Claude Code runs for itself name their
# purpose: "acompact-e1f845" summarises the conversation for a compaction.
_SIDE_CHAIN_ID = re.compile(r"^a([a-z][a-z_]*)-[0-9a-f]+$")


@dataclass
class _Line:
    number: int
    value: dict[str, Any]
    uuid: str | None
    parent: str | None
    time: datetime | None

    @property
    def kind(self) -> str:
        return self.value["type"]

    @property
    def message(self) -> dict[str, Any]:
        return self.value.get("message") or {}

    def blocks(self) -> list[dict[str, Any]]:
        content = self.message.get("content")
        return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


@dataclass
class _Group:
    """The lines of one agent in a file: the session itself (agent_id None) or one subagent."""

    agent_id: str | None
    lines: list[_Line] = field(default_factory=list)
    messages: list[_Line] = field(default_factory=list)  # user and assistant lines to ingest
    boundaries: list[_Line] = field(default_factory=list)  # compaction boundaries
    last_message_uuid: str | None = None


def sniff(sample: list[Record]) -> float:
    """Claude Code lines carry `sessionId`, `type`, `uuid` and `parentUuid` together; no API log does."""
    best = 0.0
    for record in sample:
        value = record.value
        if not isinstance(value, dict):
            continue
        kind = value.get("type")
        if (
            isinstance(value.get("sessionId"), str)
            and isinstance(kind, str)
            and "uuid" in value
            and "parentUuid" in value
        ):
            return 0.95
        if (kind == "summary" and "leafUuid" in value) or (
            kind == "file-history-snapshot" and "snapshot" in value and "messageId" in value
        ):
            best = 0.8
    return best


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    nodes: dict[str, _Line] = {}
    groups: dict[str | None, _Group] = {}
    for record in records:
        result.records += 1
        value = record.value
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            result.rejects.append(
                Reject(
                    record.line,
                    "not a Claude Code line: expected a JSON object with a string `type` "
                    "(user, assistant, progress, system...)",
                    record.raw,
                )
            )
            continue
        group = groups.setdefault(as_id(value.get("agentId")), _Group(as_id(value.get("agentId"))))
        line = _Line(
            record.line,
            value,
            as_id(value.get("uuid")),
            as_id(value.get("parentUuid")),
            parse_time(value.get("timestamp")),
        )
        kind = line.kind
        if kind == "system" and value.get("subtype") == "compact_boundary" and line.parent is None:
            # The boundary starts a new root; `logicalParentUuid` names what it compacted, and when
            # that line was not written, the last message before the boundary stands in for it.
            logical = as_id(value.get("logicalParentUuid"))
            line.parent = logical if logical in nodes else group.last_message_uuid
            group.boundaries.append(line)
        if line.uuid:
            nodes.setdefault(line.uuid, line)
        group.lines.append(line)
        if kind not in MESSAGE_TYPES:
            result.skip(kind)
        elif not isinstance(value.get("message"), dict):
            result.rejects.append(
                Reject(record.line, f"a `{kind}` line without a `message` object", record.raw)
            )
        elif kind == "assistant" and (
            value.get("isApiErrorMessage") is True or line.message.get("model") == SYNTHETIC_MODEL
        ):
            result.skip("assistant-synthetic")  # written by Claude Code itself, not by the model
        else:
            group.messages.append(line)
            group.last_message_uuid = line.uuid or group.last_message_uuid
    links = subagent_links(line.value for g in groups.values() for line in g.lines)
    for group in groups.values():
        if group.messages:
            result.traces.extend(_group_traces(group, nodes, links, source_path, result))
    return result


def _group_traces(
    group: _Group,
    nodes: dict[str, _Line],
    links: dict[str, dict[str, Any]],
    source_path: str,
    result: ParseResult,
) -> list[Trace]:
    """The traces of one agent's lines: its conversation, then its abandoned branches. A branch
    without an assistant line (a prompt left unanswered, or context lines whose parent lies in
    another file) made no LLM call: its lines are skipped as `user-off-branch`."""
    session = _session_id(group, source_path)
    base = session if group.agent_id is None else f"{session}/agent-{group.agent_id}"
    branches = split_branches(group.messages, nodes)
    for branch in branches[1:]:
        if not any(line.kind == "assistant" for line in branch):
            result.skip("user-off-branch", len(branch))
    branches = branches[:1] + [b for b in branches[1:] if any(line.kind == "assistant" for line in b)]
    owner = {line.number: index for index, branch in enumerate(branches) for line in branch}
    off_main = {line.number for line in group.messages} - {line.number for line in branches[0]}
    source_ids: list[str] = []
    traces = []
    for index, branch in enumerate(branches):
        if index == 0:
            source_id = base
            attributes = _main_attributes(group, session, links, source_path)
            parent = None if group.agent_id is None else session
            span = [line.time for line in group.lines if line.time and line.number not in off_main]
        else:
            source_id = f"{base}/branch-{(branch[0].uuid or str(branch[0].number))[:8]}"
            fork = _fork_point(branch[0], nodes, owner)
            parent = source_ids[owner[fork.number]] if fork else base
            attributes = {
                "kind": "branch",
                "session_id": session,
                "forked_from_uuid": fork.uuid if fork else None,
                "forked_from_line": fork.number if fork else None,
            }
            span = [line.time for line in branch if line.time]
        source_ids.append(source_id)
        trace = Trace(
            source_format=FORMAT,
            source_id=source_id,
            source_line=branch[0].number if branch else None,
            workload=as_str(_first_value(_values(group.lines), "cwd")),
            agent=AGENT,
            attributes=attributes,
            parent_source_id=parent,
            started_at=min(span) if span else None,
            ended_at=max(span) if span else None,
        )
        seq_of_line = _conversation(trace, branch, nodes)
        if index == 0 and group.boundaries:
            trace.attributes["compactions"] = [_compaction(b, seq_of_line) for b in group.boundaries]
        trace.workload = trace.workload or default_workload(trace)
        traces.append(trace)
    return traces


def split_branches(messages: list[_Line], nodes: dict[str, _Line]) -> list[list[_Line]]:
    """The conversation first, then each abandoned branch, as lists of lines in file order.

    The conversation ends at the last message line; it is that line's ancestors plus the lines that
    belong to them off the path (other lines of the same API messages, results of their tool
    calls). The same rule is applied to what is left until every line has a branch. Lines without
    a `uuid` cannot be threaded and stay in the conversation.
    """
    remaining = {line.number: line for line in messages if line.uuid}
    unthreaded = [line for line in messages if not line.uuid]
    branches: list[list[_Line]] = []
    while remaining:
        leaf = remaining[max(remaining)]
        path = _ancestors(leaf, nodes)
        members = {n for n in remaining if n in path}
        message_ids = {_message_key(remaining[n]) for n in members if remaining[n].kind == "assistant"}
        members |= {
            n
            for n, line in remaining.items()
            if line.kind == "assistant" and _message_key(line) in message_ids
        }
        tool_ids = {
            as_id(b.get("id"))
            for n in members
            for b in remaining[n].blocks()
            if remaining[n].kind == "assistant" and b.get("type") == "tool_use"
        }
        uuids = {remaining[n].uuid for n in members}
        members |= {n for n, line in remaining.items() if _answers(line, tool_ids, uuids)}
        branches.append([remaining.pop(n) for n in sorted(members)])
    if unthreaded:
        if not branches:
            branches.append([])
        branches[0] = sorted(branches[0] + unthreaded, key=lambda line: line.number)
    return branches


def _ancestors(line: _Line, nodes: dict[str, _Line]) -> set[int]:
    seen: set[int] = set()
    current: _Line | None = line
    while current is not None and current.number not in seen:
        seen.add(current.number)
        current = nodes.get(current.parent) if current.parent else None
    return seen


def _fork_point(first: _Line, nodes: dict[str, _Line], owner: dict[int, int]) -> _Line | None:
    """The nearest ancestor of a branch's first line that belongs to an earlier branch."""
    branch = owner[first.number]
    seen: set[int] = set()
    current = nodes.get(first.parent) if first.parent else None
    while current is not None and current.number not in seen:
        seen.add(current.number)
        if owner.get(current.number, branch) < branch:
            return current
        current = nodes.get(current.parent) if current.parent else None
    return None


def _answers(line: _Line, tool_ids: set[Any], uuids: set[str | None]) -> bool:
    """A user line of tool results answering calls of the branch."""
    if line.kind != "user":
        return False
    results = [b for b in line.blocks() if b.get("type") == "tool_result"]
    if not results:
        return False
    source = as_id(line.value.get("sourceToolAssistantUUID"))
    return (source is not None and source in uuids) or all(
        as_id(b.get("tool_use_id")) in tool_ids for b in results
    )


def _message_key(line: _Line) -> str:
    return as_id(line.message.get("id")) or as_id(line.value.get("requestId")) or f"line-{line.number}"


def _conversation(trace: Trace, lines: list[_Line], nodes: dict[str, _Line]) -> dict[int, int]:
    """Fill the trace's messages, LLM calls and tool calls from its lines; returns each line's
    message index."""
    by_message: dict[str, list[_Line]] = {}
    for line in lines:
        if line.kind == "assistant":
            by_message.setdefault(_message_key(line), []).append(line)
    messages: list[Message] = []
    errors: dict[int, bool] = {}
    used_at: dict[str, datetime | None] = {}
    answered_at: dict[str, datetime | None] = {}
    seq_of_line: dict[int, int] = {}
    for line in lines:
        seq_of_line[line.number] = len(messages)
        if line.kind == "assistant":
            key = _message_key(line)
            group = by_message.pop(key, None)
            if group is None:
                continue  # a later line of a message already written
            assistant, server_results = anthropic_messages.convert_assistant(_merged_content(group))
            assistant.call_index = len(trace.llm_calls)
            trace.llm_calls.append(_llm_call(group, key, nodes))
            messages.append(assistant)
            messages.extend(server_results)
            for part in group:
                for block in part.blocks():
                    if block.get("type") in ("tool_use", "server_tool_use") and as_id(block.get("id")):
                        used_at.setdefault(as_id(block.get("id")), part.time)
        else:
            converted, flags = anthropic_messages.convert_messages(
                [{"role": "user", "content": line.message.get("content")}]
            )
            errors.update({len(messages) + i: flag for i, flag in flags.items()})
            messages.extend(converted)
            for block in line.blocks():
                if block.get("type") == "tool_result" and as_id(block.get("tool_use_id")):
                    answered_at.setdefault(as_id(block.get("tool_use_id")), line.time)
    assemble(trace, messages, result_errors=errors)
    for call in trace.tool_calls:
        call.started_at = used_at.get(call.source_id) if call.source_id else None
        call.ended_at = answered_at.get(call.source_id) if call.source_id else None
        call.duration_ms = duration_ms(call.started_at, call.ended_at)
    return seq_of_line


def _merged_content(lines: list[_Line]) -> list[Any]:
    """The content blocks of one API message, from all its lines, each tool_use once."""
    blocks: list[Any] = []
    seen_tools: set[str] = set()
    for line in lines:
        content = line.message.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
            continue
        for block in content if isinstance(content, list) else []:
            tool_id = as_id(block.get("id")) if isinstance(block, dict) else None
            if tool_id and block.get("type") in ("tool_use", "server_tool_use"):
                if tool_id in seen_tools:
                    continue
                seen_tools.add(tool_id)
            blocks.append(block)
    return blocks


def _llm_call(lines: list[_Line], key: str, nodes: dict[str, _Line]) -> LlmCall:
    """One API call from the lines of its response.

    It starts when the line it answers was written (the user message or the last tool result: the
    request went out then) and ends with its last line (its last content block).
    """
    final = max(lines, key=lambda line: as_int(dig(line.message, "usage", "output_tokens")) or -1)
    stop_reasons = [as_str(line.message.get("stop_reason")) for line in lines]
    call = LlmCall(
        model=as_str(_first_value((line.message for line in lines), "model")),
        provider=anthropic_messages.PROVIDER,
        source_id=None if key.startswith("line-") else key,
        finish_reason=next((r for r in reversed(stop_reasons) if r), None),
        source_line=lines[0].number,
    )
    anthropic_messages.apply_usage(call, final.message.get("usage"))
    call.output_tokens_partial = not _has_final_usage(lines)
    call.response_key = _response_key(lines)
    cost = as_float(final.value.get("costUSD"))  # written by early Claude Code versions
    if cost is not None:
        call.cost_usd = cost
    times = [line.time for line in lines if line.time]
    sent = _request_time(lines[0], nodes)
    if times:
        call.started_at = min([sent, *times]) if sent else min(times)
        call.ended_at = max(times)
    call.duration_ms = duration_ms(call.started_at, call.ended_at)
    return call


def _response_key(lines: list[_Line]) -> str | None:
    """`message.id` and `requestId` together: a session resumed with `claude --resume` is a new
    file that starts with a copy of the conversation it resumes, these ids included, so the same
    response is logged in both files (the store counts it once: `llm_calls.copy_of`). Without a
    request id a message id alone is not trusted across sessions (gateways have reused them)."""
    message_id = as_id(lines[0].message.get("id"))
    request_id = next(filter(None, (as_id(line.value.get("requestId")) for line in lines)), None)
    return f"{message_id}/{request_id}" if message_id and request_id else None


def _has_final_usage(lines: list[_Line]) -> bool:
    """Whether a line of the message carries the final usage (a stop_reason, or the fields Claude
    Code writes with the final counts). Otherwise only the usage sent when the stream opened was
    logged: its input and cache counts are complete, its `output_tokens` (1 to ~30) is not."""
    return any(
        line.message.get("stop_reason")
        or (isinstance(line.message.get("usage"), dict) and "iterations" in line.message["usage"])
        for line in lines
    )


def _request_time(first: _Line, nodes: dict[str, _Line]) -> datetime | None:
    seen: set[int] = set()
    current = nodes.get(first.parent) if first.parent else None
    while current is not None and current.number not in seen:
        if current.time:
            return current.time
        seen.add(current.number)
        current = nodes.get(current.parent) if current.parent else None
    return None


def _compaction(boundary: _Line, seq_of_line: dict[int, int]) -> dict[str, Any]:
    after = [seq for number, seq in seq_of_line.items() if number > boundary.number]
    return {
        "line": boundary.number,
        "trigger": as_str(dig(boundary.value, "compactMetadata", "trigger")),
        "pre_tokens": as_int(dig(boundary.value, "compactMetadata", "preTokens")),
        "message_seq": min(after) if after else None,  # the first message the model saw after it
    }


def _first_value(values: Iterable[dict[str, Any]], key: str) -> Any:
    return next((value[key] for value in values if value.get(key) is not None), None)


def _values(lines: Iterable[_Line]) -> Iterable[dict[str, Any]]:
    return (line.value for line in lines)


def _session_id(group: _Group, source_path: str) -> str:
    for line in reversed(group.messages):
        session = as_id(line.value.get("sessionId"))
        if session:
            return session
    path = Path(source_path)
    if path.parent.name == "subagents":
        return path.parent.parent.name
    return path.name.split(".")[0]


def agent_kind(agent_id: str) -> str:
    """ "subagent" for a Task/Agent subagent, else the side-chain's purpose ("compact" -> "compaction").

    >>> agent_kind("a2898e3"), agent_kind("acompact-e1f845")
    ('subagent', 'compaction')
    """
    match = _SIDE_CHAIN_ID.match(agent_id)
    if not match:
        return "subagent"
    return "compaction" if match.group(1) == "compact" else match.group(1)


def _main_attributes(
    group: _Group, session: str, links: dict[str, dict[str, Any]], source_path: str
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "session_id": session,
        "cwd": as_str(_first_value(_values(group.lines), "cwd")),
        "git_branch": as_str(_first_value(_values(group.lines), "gitBranch")),
        "claude_code_version": as_str(_first_value(_values(reversed(group.lines)), "version")),
    }
    sessions = sorted({s for line in group.messages if (s := as_id(line.value.get("sessionId")))})
    if len(sessions) > 1:
        attributes["session_ids"] = sessions
    if group.agent_id is None:
        attributes["kind"] = "session"
        if links:
            attributes["subagents"] = {
                agent: {**link, "trace_id": f"{session}/agent-{agent}"} for agent, link in links.items()
            }
        return attributes
    kind = agent_kind(group.agent_id)
    attributes.update(kind=kind, agent_id=group.agent_id)
    if kind == "compaction":
        own = {line.uuid for line in group.lines}
        outside = [line.parent for line in group.messages if line.parent and line.parent not in own]
        attributes["compacted_after_uuid"] = outside[-1] if outside else None  # the last line compacted
        return attributes
    link = links.get(group.agent_id) or _links_beside(source_path, session).get(group.agent_id)
    if link:
        attributes["parent_tool_call_id"] = link["tool_call_id"]
        attributes["parent_link"] = link["link"]
    else:
        attributes["parent_link"] = "not found: no agent_progress line or Task result names this agent"
    return attributes


def subagent_links(values: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """agentId -> the tool call that started it, from a session's lines.

    The `agent_progress` lines name it (`data.agentId`, `parentToolUseID`); so does the Task result
    (`toolUseResult.agentId` on the user line holding the tool_result), which adds the run's status,
    duration and tool count.
    """
    links: dict[str, dict[str, Any]] = {}
    for value in values:
        if not isinstance(value, dict):
            continue
        data = value.get("data")
        if (
            value.get("type") == "progress"
            and isinstance(data, dict)
            and data.get("type") == "agent_progress"
        ):
            agent, tool = as_id(data.get("agentId")), as_id(value.get("parentToolUseID"))
            if agent and tool:
                links.setdefault(agent, {"tool_call_id": tool, "link": "agent_progress"})
        summary = value.get("toolUseResult")
        if value.get("type") == "user" and isinstance(summary, dict) and as_id(summary.get("agentId")):
            content = dig(value, "message", "content")
            tools = [
                as_id(b.get("tool_use_id"))
                for b in (content if isinstance(content, list) else [])
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
            if not tools or not tools[0]:
                continue
            link = links.setdefault(
                as_id(summary["agentId"]), {"tool_call_id": tools[0], "link": "tool_result"}
            )
            link.update(
                status=as_str(summary.get("status")),
                total_duration_ms=as_float(summary.get("totalDurationMs")),
                total_tool_uses=as_int(summary.get("totalToolUseCount")),
            )
    return links


def _links_beside(source_path: str, session: str) -> dict[str, dict[str, Any]]:
    """Subagent links from the session file next to a `subagents/` folder, when it is there."""
    path = Path(source_path)
    if path.parent.name != "subagents":
        return {}
    project = path.parent.parent.parent
    for stem in dict.fromkeys((session, path.parent.parent.name)):
        for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
            candidate = project / name
            if candidate.is_file():
                stat = candidate.stat()
                return _links_in_file(str(candidate), stat.st_mtime_ns, stat.st_size)
    return {}


@functools.lru_cache(maxsize=8)
def _links_in_file(path: str, mtime_ns: int, size: int) -> dict[str, dict[str, Any]]:
    """Cached per file version (mtime and size are part of the key): a session with many subagents
    is read once."""
    try:
        data = load(Path(path)).data
    except SourceError:
        return {}
    values = []
    for raw in data.splitlines():
        if b'"agentId"' not in raw:
            continue  # only progress lines and Task results name agents
        try:
            values.append(parse_json(raw.decode("utf-8")))
        except ValueError:
            continue
    return subagent_links(values)
