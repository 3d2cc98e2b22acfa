"""Rendering results in the terminal with rich: readable at 80 columns, plain when piped."""

from __future__ import annotations

import os
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from traceforge.ingest import IngestReport


def human(n: float | int | None) -> str:
    """1234567 -> '1.2M'; small numbers as they are."""
    if n is None:
        return "-"
    n = float(n)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= limit:
            return f"{n / limit:.1f}{suffix}"
    return f"{n:.0f}" if n == int(n) else f"{n:.2f}"


def plural(n: int, word: str) -> str:
    """plural(1, 'file') -> '1 file'; plural(3, 'file') -> '3 files'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def display_path(path: str) -> str:
    """A path relative to the working folder where it lies under it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if relative.startswith("..") else relative


def render_ingest(console: Console, report: IngestReport, verbose: bool = False) -> None:
    totals = report.totals()
    for problem in report.problems:
        console.print(f"[red]error:[/] {problem}")
    for file in report.files:
        if file.status == "failed":
            console.print(f"[red]error:[/] {display_path(file.path)}: {file.message}")
        elif verbose or file.status in ("new", "changed"):
            detail = (
                (
                    f"{file.format}: {file.traces} traces, {file.llm_calls} LLM calls, "
                    f"{file.tool_calls} tool calls"
                    + (f", [yellow]{file.rejected} rejected[/]" if file.rejected else "")
                    + (f", {sum(file.skipped.values())} skipped" if file.skipped else "")
                )
                if file.status in ("new", "changed")
                else (file.message or "")
            )
            console.print(f"{file.status:>9} {display_path(file.path)}  {detail}")
    parts = [
        f"{totals['files_new']} new",
        f"{totals['files_changed']} changed",
        f"{totals['files_unchanged']} unchanged",
    ]
    if totals["files_duplicate"]:
        parts.append(f"{totals['files_duplicate']} duplicate")
    if totals["files_failed"]:
        parts.append(f"[red]{totals['files_failed']} failed[/]")
    console.print(
        f"Ingested {plural(len(report.files), 'file')} ({', '.join(parts)}): "
        f"{plural(totals['traces'], 'trace')}, {plural(totals['llm_calls'], 'LLM call')}, "
        f"{plural(totals['tool_calls'], 'tool call')}"
        + (f", [yellow]{totals['rejected']} rejected[/]" if totals["rejected"] else "")
        + (f", {totals['skipped']} skipped by rule" if totals["skipped"] else "")
        + "."
    )
    if totals["files_unchanged"] and not (totals["files_new"] or totals["files_changed"]):
        console.print("Nothing new: every file was ingested before with the same content.")


def render_summary(console: Console, summary: dict[str, Any], db: str) -> None:
    t = summary["totals"]
    cached = t["cache_read_tokens"] / t["input_tokens"] if t["input_tokens"] else 0.0
    console.print()
    console.print(
        f"[bold]{display_path(db)}[/]: {plural(t['traces'], 'trace')} in "
        f"{plural(t['workloads'], 'workload')}, {plural(t['llm_calls'], 'LLM call')}, "
        f"{plural(t['tool_calls'], 'tool call')}; tokens in "
        f"{human(t['input_tokens'])} ({cached:.0%} cached), out {human(t['output_tokens'])}"
    )
    if t["calls_without_usage"]:
        console.print(
            f"{t['calls_without_usage']} LLM calls came without token counts (transcripts): "
            "their tokens are not in these sums."
        )
    table = Table(
        title="Usage by workload and model",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
        pad_edge=False,
    )
    table.add_column("workload", overflow="fold", min_width=10)
    table.add_column("model", overflow="fold", min_width=16)
    for column in ("traces", "calls", "tools", "in", "cached", "out"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in summary["by_workload_model"]:
        table.add_row(
            row["workload"],
            row["model"],
            str(row["traces"]),
            str(row["llm_calls"]),
            str(row["tool_calls"]),
            human(row["input_tokens"]) if row["llm_calls"] > row["calls_without_usage"] else "-",
            human(row["cache_read_tokens"]) if row["llm_calls"] > row["calls_without_usage"] else "-",
            human(row["output_tokens"]) if row["llm_calls"] > row["calls_without_usage"] else "-",
        )
    console.print(table, soft_wrap=False)  # a table fits the terminal width
    if t["rejects"]:
        console.print(f"[yellow]{t['rejects']} rejected records[/] (kept in the `rejects` table):")
        for reason in summary["reject_reasons"]:
            where = display_path(reason["example_file"])
            line = f":{reason['example_line']}" if reason["example_line"] is not None else ""
            console.print(f"  {reason['count']:>5} × {reason['reason']}  (e.g. {where}{line})")
        console.print(
            f"  See them all: traceforge sql --db {display_path(db)} "
            '"SELECT source_path, line, error FROM rejects"'
        )
    else:
        console.print("No rejected records.")
