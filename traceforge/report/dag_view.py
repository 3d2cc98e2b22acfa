"""Showing dependency DAGs: one trace's observed schedule beside its parallel one (text, Mermaid,
DOT, JSON), and the summary of a whole analysis."""

from __future__ import annotations

import json
from typing import Any

import networkx as nx
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceforge.analysis.dag import Schedule
from traceforge.analysis.deps import Call, leaves
from traceforge.report.terminal import human, label_note, plural, print_table, workload_labels

ARGUMENT_CHARS = 48
USER_MESSAGE_ROW = Text("-- user message --", style="dim")
EDGE_STYLE_DOT = {
    "explicit": "bold",
    "data": "solid",
    "state": "dashed",
    "control": "dotted",
    "derived": 'dotted, color="gray40"',
}


def call_label(call: Call, with_arguments: bool = True) -> str:
    """`#3 get_order(order_id=W-1043)`: the call's number in the trace, its tool and arguments."""
    label = f"#{call.index + 1} {call.name}"
    if not with_arguments:
        return label
    return f"{label}({argument_summary(call.arguments)})"


def argument_summary(arguments: Any, limit: int = ARGUMENT_CHARS) -> str:
    """The arguments on one line of at most `limit` characters; a long path keeps its end, where
    the file is named, rather than the folders every call of a project shares.

    >>> argument_summary({"file_path": "/home/dev/projects/shop/lib/web/live/cart_live.ex", "limit": 200})
    'file_path=…/lib/web/live/cart_live.ex, limit=200'
    """
    parts = []
    for path, leaf in leaves(arguments):
        text = json.dumps(leaf, ensure_ascii=False) if not isinstance(leaf, str) else " ".join(leaf.split())
        parts.append((f"{path}=" if path else "", text))
    shown = ""
    for index, (name, value) in enumerate(parts):
        start = f"{shown}, {name}" if shown else name
        if _is_path(value) and len(start) + len(value) > limit:  # its end would be cut: keep the end
            rest = sum(len(", ") + len(n) + len(v) for n, v in parts[index + 1 :])
            value = _path_end(value, max(limit - len(start) - rest, PATH_END_CHARS))
        shown = start + value
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


PATH_END_CHARS = 16  # the least of a path's end kept: a file name at least


def _is_path(text: str) -> bool:
    """A file path or glob (not a URL, whose host comes first, nor text with spaces)."""
    return "/" in text.strip("/") and "://" not in text and not any(c.isspace() for c in text)


def _path_end(path: str, room: int) -> str:
    """`…/` and as many of the path's last parts as fit in `room` characters (the last whole)."""
    *folders, kept = path.rstrip("/").split("/")
    for folder in reversed(folders):
        if len(folder) + len(kept) + 3 > room:
            break
        kept = f"{folder}/{kept}"
    return kept if kept == path else f"…/{kept}"


def reduced_edges(schedule: Schedule) -> list[tuple[int, int, dict[str, Any]]]:
    """The dependency edges between calls that no longer path implies (transitive reduction), with
    their kind, confidence and evidence; an edge across a user message is implied by the message."""
    graph = schedule.graph
    reduction = nx.transitive_reduction(graph)
    edges = [
        (src, dst, graph.edges[src, dst])
        for src, dst in reduction.edges
        if isinstance(src, int) and isinstance(dst, int)
    ]
    return sorted(edges, key=lambda e: (e[1], e[0]))


def _segments(schedule: Schedule) -> list[tuple[int, list[list[int]], list[list[int]]]]:
    """Per user turn: its observed turns and its parallel turns, as call indices."""
    trace = schedule.trace
    out: dict[int, tuple[list[list[int]], list[list[int]]]] = {}
    for turn in trace.turns:
        segment = trace.calls[turn.calls[0]].segment
        out.setdefault(segment, ([], []))[0].append(turn.calls)
    for generation in schedule.generations:
        segment = trace.calls[generation[0]].segment
        out.setdefault(segment, ([], []))[1].append(generation)
    return [(segment, observed, parallel) for segment, (observed, parallel) in sorted(out.items())]


def render_text(console: Console, schedule: Schedule, workload: str | None = None) -> None:
    """The observed schedule beside the parallel one, the dependencies and what the change saves."""
    trace = schedule.trace
    calls = trace.calls
    console.print(
        Text.assemble(
            "trace ",
            (trace.trace_id, "bold"),
            f"  workload {workload}" if workload else "",
            f"  mode {schedule.mode}",
        )
    )
    console.print(
        f"{plural(len(calls), 'tool call')} in {plural(schedule.observed_turns, 'turn')} "
        f"-> {plural(schedule.min_turns, 'turn')} ({schedule.turns_saved} saved); "
        f"{plural(schedule.parallel_turns, 'turn')} already parallel"
        + (
            f"; {plural(trace.user_tool_calls, 'call')} by the user not scheduled"
            if trace.user_tool_calls
            else ""
        )
    )
    timing = {
        "measured": "measured durations",
        "partial": "measured durations where the trace has them, defaults elsewhere",
        "default": "default durations",
    }[schedule.timing]
    speedup = schedule.observed_ms / schedule.parallel_ms if schedule.parallel_ms else 1.0
    console.print(
        f"latency {schedule.observed_ms / 1000:.1f} s -> {schedule.parallel_ms / 1000:.1f} s "
        f"({speedup:.2f}x; {timing})"
    )
    console.print(
        f"tokens saved {human(schedule.tokens_saved)} after an ideal prefix cache "
        f"({human(schedule.input_tokens_saved)} re-sent by the removed turns"
        + ("; estimated from text" if schedule.tokens_estimated else "")
        + ")"
    )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("turn", justify="right")
    table.add_column("observed")
    table.add_column("parallel")
    number = 0
    for position, (_, observed, parallel) in enumerate(_segments(schedule)):
        if position:
            table.add_row("", USER_MESSAGE_ROW, USER_MESSAGE_ROW)
        for row in range(max(len(observed), len(parallel))):
            number += 1
            left = "\n".join(call_label(calls[c]) for c in observed[row]) if row < len(observed) else ""
            right = (
                "\n".join(call_label(calls[c], False) for c in parallel[row]) if row < len(parallel) else ""
            )
            table.add_row(str(number), left, right)
    print_table(console, table)
    edges = reduced_edges(schedule)
    if edges:
        console.print(f"dependencies ({plural(len(edges), 'edge')} after transitive reduction):")
        for src, dst, data in edges:
            console.print(
                f"  {call_label(calls[src], False)} -> {call_label(calls[dst], False)}  "
                f"{data['kind']} {data['confidence']:.2f}  {data['evidence']}",
                highlight=False,
            )
    else:
        console.print("no dependencies between calls of one user turn")
    if schedule.critical_path:
        console.print(
            "critical path: " + " -> ".join(call_label(calls[c], False) for c in schedule.critical_path),
            highlight=False,
        )


def render_mermaid(schedule: Schedule) -> str:
    """A Mermaid flowchart: one box per parallel turn, edges labelled with their kind."""
    calls = schedule.trace.calls
    lines = ["flowchart TD"]
    previous_segment = None
    for level, generation in enumerate(schedule.generations):
        segment = calls[generation[0]].segment
        title = f"parallel turn {level + 1}"
        if previous_segment is not None and segment != previous_segment:
            title += " (after a user message)"
        previous_segment = segment
        lines.append(f'  subgraph T{level + 1}["{title}"]')
        for index in generation:
            call = calls[index]
            label = "<br/>".join(_mermaid_text(part) for part in _label_lines(call))
            lines.append(f'    c{index}["{label}"]')
        lines.append("  end")
    for src, dst, data in reduced_edges(schedule):
        arrow = "-.->" if data["kind"] in ("control", "derived") else "-->"
        lines.append(f"  c{src} {arrow}|{data['kind']}| c{dst}")
    return "\n".join(lines) + "\n"


def _label_lines(call: Call) -> list[str]:
    arguments = argument_summary(call.arguments)
    return [call_label(call, False), arguments] if arguments else [call_label(call, False)]


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def render_dot(schedule: Schedule) -> str:
    """A Graphviz digraph: one cluster per parallel turn, edges styled by kind."""
    calls = schedule.trace.calls
    lines = [
        f"digraph {json.dumps(schedule.trace.trace_id, ensure_ascii=False)} {{",
        "  rankdir=TB;",
        '  node [shape=box, fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    for level, generation in enumerate(schedule.generations):
        lines.append(f"  subgraph cluster_{level + 1} {{")
        lines.append(f'    label="parallel turn {level + 1}"; style=rounded;')
        for index in generation:
            call = calls[index]
            label = "\n".join(_label_lines(call))
            lines.append(f"    c{index} [label={json.dumps(label, ensure_ascii=False)}];")
        lines.append("  }")
    for src, dst, data in reduced_edges(schedule):
        style = EDGE_STYLE_DOT.get(data["kind"], "solid")
        lines.append(f"  c{src} -> c{dst} [label={json.dumps(data['kind'])}, style={style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    """The schedule as plain data: calls with their observed and parallel turn, edges, totals."""
    calls = schedule.trace.calls
    return {
        "trace_id": schedule.trace.trace_id,
        "mode": schedule.mode,
        "tool_calls": len(calls),
        "observed_turns": schedule.observed_turns,
        "min_turns": schedule.min_turns,
        "turns_saved": schedule.turns_saved,
        "parallel_turns": schedule.parallel_turns,
        "observed_ms": schedule.observed_ms,
        "parallel_ms": schedule.parallel_ms,
        "timing": schedule.timing,
        "tokens_saved": schedule.tokens_saved,
        "input_tokens_saved": schedule.input_tokens_saved,
        "tokens_estimated": schedule.tokens_estimated,
        "calls": [
            {
                "tool_call_id": c.tool_call_id,
                "name": c.name,
                "effect": c.effect.effect if c.effect else None,
                "segment": c.segment,
                "observed_turn": c.turn,
                "parallel_turn": schedule.levels[c.index],
            }
            for c in calls
        ],
        "edges": [
            {
                "src": calls[e.src].tool_call_id,
                "dst": calls[e.dst].tool_call_id,
                "kind": e.kind,
                "confidence": e.confidence,
                "evidence": e.evidence,
            }
            for e in schedule.edges
        ],
        "critical_path": [calls[i].tool_call_id for i in schedule.critical_path],
    }


def render_summary(console: Console, summary: dict[str, Any]) -> None:
    """The analysis of a whole store: turns saved overall, per workload, per tool pair, per trace."""
    if not summary["traces"]:
        console.print("no traces with tool calls: nothing to analyse")
        return
    observed, minimum = summary["observed_turns"], summary["min_turns"]
    share = summary["turns_saved"] / observed if observed else 0.0
    console.print(
        Text.assemble(
            (plural(summary["traces"], "trace"), "bold"),
            f", {plural(summary['tool_calls'], 'tool call')} in "
            f"{plural(observed, 'tool-calling turn')}: a parallel-calling model needs {minimum} "
            f"({summary['turns_saved']} saved, {share:.0%}; {summary['mode']} mode)",
        )
    )
    console.print(
        f"  bounds: {summary['min_turns_conservative']} turns (conservative) to "
        f"{summary['min_turns_loose']} (loose); {summary['traces_with_savings']} traces could save turns; "
        f"{summary['parallel_turns']} turns were already parallel"
    )
    if summary["parallel_ms"]:
        console.print(
            f"  latency {summary['observed_ms'] / 1000:,.1f} s -> {summary['parallel_ms'] / 1000:,.1f} s "
            f"({summary['observed_ms'] / summary['parallel_ms']:.2f}x; measured in "
            f"{summary['traces_timing_measured']} traces, defaults elsewhere)"
        )
    console.print(
        f"  tokens saved {human(summary['tokens_saved'])} after an ideal prefix cache "
        f"({human(summary['input_tokens_saved'])} re-sent)"
        + (
            f"; estimated from text in {summary['traces_tokens_estimated']} traces"
            if summary["traces_tokens_estimated"]
            else ""
        )
    )
    kinds = ", ".join(f"{kind} {n}" for kind, n in summary["edges_by_kind"].items())
    console.print(f"  dependency edges: {kinds or 'none'}")
    labels = workload_labels(row["workload"] for row in summary["by_workload"] + summary["top_traces"])
    if summary["by_workload"]:
        table = Table(title="by workload", box=box.SIMPLE_HEAD, title_justify="left")
        for column in ("workload", "traces", "turns", "min", "saved", "speedup", "tokens saved"):
            table.add_column(column, justify="left" if column == "workload" else "right")
        for row in summary["by_workload"]:
            table.add_row(
                str(labels.get(row["workload"], row["workload"])),
                str(row["traces"]),
                str(row["observed_turns"]),
                str(row["min_turns"]),
                f"{row['turns_saved']} ({(row['turns_saved_share'] or 0):.0%})",
                f"{row['speedup']:.2f}x" if row["speedup"] else "-",
                human(row["tokens_saved"]),
            )
        print_table(console, table)
    if summary["tool_pairs"]:
        table = Table(
            title="tools called in consecutive turns that did not need each other",
            box=box.SIMPLE_HEAD,
            title_justify="left",
        )
        for column in ("first", "then", "independent", "of pairs", "traces"):
            table.add_column(column, justify="left" if column in ("first", "then") else "right")
        for row in summary["tool_pairs"]:
            table.add_row(
                row["first_tool"],
                row["then_tool"],
                str(row["independent_pairs"]),
                str(row["sequential_pairs"]),
                str(row["traces"]),
            )
        print_table(console, table)
    top = summary["top_traces"]
    if top:
        table = Table(title="traces with most turns to save", box=box.SIMPLE_HEAD, title_justify="left")
        for column in ("trace", "workload", "calls", "turns", "min", "saved"):
            table.add_column(column, justify="left" if column in ("trace", "workload") else "right")
        for row in top:
            table.add_row(
                row["trace_id"],
                str(labels.get(row["workload"], row["workload"])),
                str(row["tool_calls"]),
                str(row["observed_turns"]),
                str(row["min_turns"]),
                str(row["turns_saved"]),
            )
        print_table(console, table)
        console.print(f"see one: traceforge dag {top[0]['trace_id']}")
    label_note(console, labels)
