"""ToolBench answer files: `{answer_generation: {...}, tree: {...}, win, forward_args, ...}`.

ToolBench searches for an answer with a depth-first search over model turns (DFSDT); the `tree`
holds every explored branch and `answer_generation.train_messages` the path that was kept, as
cumulative prefixes of one conversation (each prefix ends with one model turn, and the next prefix
repeats it). The trace is that chosen path, taken once: the longest prefix is the conversation and
each assistant message in it one LLM call. The explored tree is summarised in the attributes (nodes,
leaves, branch points, widest branching, pruned nodes, depth), not ingested branch by branch.

Tool calls are the legacy `function_call` / `role: function` form without ids: a result answers the
earliest unanswered call of the same name (see `traceforge.ingest.conversation`). Tool definitions
come from `answer_generation.function`.

What is lost: the files name no model and no times, and give usage only for the whole search
(`query_count` model queries and `total_tokens` over every branch), so LLM calls keep
`usage_reported` false and the totals go to the attributes.

Invalid answers (`valid_data: false`; their `train_messages` are absent or empty) still cost a
search: each becomes a trace with outcome `failure` holding the query and the tool definitions, with
no LLM or tool calls, so failure rates and the totals stay countable. Valid answers succeed when
`finish_type` is `give_answer` and fail when the model gave up (`give_up`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traceforge.ingest import openai_chat
from traceforge.ingest.conversation import assemble
from traceforge.ingest.sources import Record
from traceforge.ingest.values import as_int, as_list, as_str, to_json
from traceforge.model import LlmCall, Message, ParseResult, Reject, ToolDef, Trace

FORMAT = "toolbench"
WORKLOAD = "toolbench"
ANSWER_KEYS = ("train_messages", "function", "query", "finish_type", "valid_data")


def sniff(sample: list[Record]) -> float:
    for record in sample:
        answer = record.value.get("answer_generation") if isinstance(record.value, dict) else None
        if isinstance(answer, dict) and sum(k in answer for k in ANSWER_KEYS) >= 3:
            return 0.95
    return 0.0


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    records = list(records)
    path = Path(source_path)
    base = f"{WORKLOAD}/{path.parent.name}/{path.stem}" if path.parent.name else f"{WORKLOAD}/{path.stem}"
    for record in records:
        result.records += 1
        value = record.value
        answer = value.get("answer_generation") if isinstance(value, dict) else None
        if not isinstance(answer, dict):
            result.rejects.append(
                Reject(
                    record.line,
                    "not a ToolBench answer: no `answer_generation` object",
                    record.raw or to_json(value),
                )
            )
            continue
        source_id = base if len(records) == 1 else f"{base}/{record.line}"
        result.traces.append(_trace(value, answer, source_id, record.line))
    return result


def chosen_path(train_messages: Any) -> tuple[list, bool]:
    """The kept conversation (the longest prefix) and whether the prefixes really were cumulative."""
    prefixes = [p for p in as_list(train_messages) if isinstance(p, list)]
    if not prefixes:
        return [], True
    longest = max(prefixes, key=len)
    cumulative = all(longest[: len(p)] == p for p in prefixes)
    return longest, cumulative


def _trace(value: dict, answer: dict, source_id: str, line: int) -> Trace:
    trace = Trace(
        source_format=FORMAT, source_id=source_id, source_line=line, workload=WORKLOAD, agent=WORKLOAD
    )
    conversation, cumulative = chosen_path(answer.get("train_messages"))
    if conversation:
        messages, errors = openai_chat.convert_messages(conversation)
    else:
        query = as_str(answer.get("query"))
        messages, errors = ([Message(role="user", content=query)] if query else []), {}
    for message in messages:
        if message.role == "assistant":
            message.call_index = len(trace.llm_calls)
            trace.llm_calls.append(LlmCall())
    trace.tool_defs = _tool_defs(answer.get("function"))
    assemble(trace, messages, result_errors=errors)
    valid = answer.get("valid_data")
    finish_type = as_str(answer.get("finish_type"))
    if valid is False or not conversation:
        trace.outcome = "failure"
    elif finish_type == "give_answer":
        trace.outcome = "success"
    elif finish_type == "give_up":
        trace.outcome = "failure"
    attributes = {
        "valid_data": valid if isinstance(valid, bool) else None,
        "finish_type": finish_type,
        "query_count": as_int(answer.get("query_count")),
        "total_tokens": as_int(answer.get("total_tokens")),
        "win": value.get("win") if isinstance(value.get("win"), bool) else None,
        "forward_args": value.get("forward_args") if isinstance(value.get("forward_args"), dict) else None,
        "tree": tree_summary(value.get("tree")),
    }
    if not cumulative:
        attributes["train_messages_not_cumulative"] = True
    trace.attributes.update({k: v for k, v in attributes.items() if v is not None})
    return trace


def _tool_defs(functions: Any) -> list[ToolDef]:
    return openai_chat.tool_defs({"functions": functions if isinstance(functions, list) else []})


def tree_summary(tree: Any) -> dict | None:
    """The shape of the explored search tree: ToolBench's own `size` and `max_length`, and counted
    nodes, leaves, branch points (nodes with more than one child), the widest branching, pruned
    nodes and depth.

    >>> tree_summary({"size": 3, "tree": {"children": [{"children": []}, {"children": [], "pruned": True}]}})
    {'size': 3, 'nodes': 3, 'leaves': 2, 'branch_points': 1, 'max_children': 2, 'pruned': 1, 'depth': 1}
    """
    if not isinstance(tree, dict) or not isinstance(tree.get("tree"), dict):
        return None
    summary = {"size": as_int(tree.get("size")), "max_length": as_int(tree.get("max_length"))}
    nodes = leaves = branch_points = max_children = pruned = depth = 0
    stack = [(tree["tree"], 0)]
    while stack:
        node, level = stack.pop()
        children = [c for c in as_list(node.get("children")) if isinstance(c, dict)]
        nodes += 1
        depth = max(depth, level)
        leaves += not children
        branch_points += len(children) > 1
        max_children = max(max_children, len(children))
        pruned += bool(node.get("pruned"))
        stack.extend((child, level + 1) for child in children)
    summary.update(
        nodes=nodes,
        leaves=leaves,
        branch_points=branch_points,
        max_children=max_children,
        pruned=pruned,
        depth=depth,
    )
    return {k: v for k, v in summary.items() if v is not None}
