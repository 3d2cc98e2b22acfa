"""Hand-written traces for the dependency tests: OpenAI chat transcripts written to a folder and read
by the real ingest, and readers of the schedules inferred from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traceforge.analysis import dag
from traceforge.analysis.dag import trace_schedule
from traceforge.ingest import ingest_paths

NEUTRAL = {"status": "ok"}


def call(call_id: str, name: str, args: dict[str, Any], result: Any) -> tuple:
    return (call_id, name, args, result)


def turn(*calls: tuple, text: str | None = None) -> dict[str, Any]:
    return {"calls": calls, "text": text}


def transcript(trace_id: str, *items: Any, tools: list[dict] | None = None) -> dict[str, Any]:
    """A conversation: strings are user messages, `turn(...)` items assistant turns with results."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    for item in items:
        if isinstance(item, str):
            messages.append({"role": "user", "content": item})
            continue
        messages.append(
            {
                "role": "assistant",
                "content": item["text"],
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for cid, name, args, _ in item["calls"]
                ],
            }
        )
        for cid, _, _, result in item["calls"]:
            content = result if isinstance(result, str) else json.dumps(result)
            messages.append({"role": "tool", "tool_call_id": cid, "content": content})
    messages.append({"role": "assistant", "content": "Done."})
    record: dict[str, Any] = {"id": trace_id, "messages": messages}
    if tools is not None:
        record["tools"] = tools
    return record


def load(con, tmp_path: Path, *records: dict[str, Any]) -> None:
    path = tmp_path / f"traces-{len(list(tmp_path.iterdir()))}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = ingest_paths(con, [path])
    assert report.totals()["rejected"] == 0, report.files


def edges(schedule: dag.Schedule) -> set[tuple[str, str, str]]:
    calls = schedule.trace.calls
    return {(calls[e.src].tool_call_id, calls[e.dst].tool_call_id, e.kind) for e in schedule.edges}


def pairs(schedule: dag.Schedule) -> set[tuple[str, str]]:
    return {(src, dst) for src, dst, _ in edges(schedule)}


def levels(schedule: dag.Schedule) -> dict[str, int]:
    return {c.tool_call_id: schedule.levels[c.index] for c in schedule.trace.calls}


def both(con, trace_id: str) -> tuple[dag.Schedule, dag.Schedule]:
    return trace_schedule(con, trace_id, "conservative"), trace_schedule(con, trace_id, "loose")
