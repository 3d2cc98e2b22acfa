"""Rendering dataset exports and pushes in the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from traceforge.export.card import DROP_REASONS, LEFT_OUT_REASONS
from traceforge.export.hub import PushResult
from traceforge.export.pipeline import ExportReport
from traceforge.export.selection import Unmatched, when
from traceforge.report.terminal import display_path, plural

UNMATCHED_SHOWN = 8  # values of a filter that matched nothing listed, most traces first


def _reasons(console: Console, title: str, counts: dict[str, int], names: dict[str, str]) -> None:
    if not counts:
        return
    console.print(f"{title} ({sum(counts.values())}):")
    for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        console.print(f"  {n:>6}  {names.get(reason, reason)}")


def render_export(console: Console, report: ExportReport) -> None:
    rows = ", ".join(f"{split} {n}" for split, n in report.rows.items()) or "no rows"
    contexts = (
        f" ({report.later_contexts} of them later contexts of compacted sessions: a row per context)"
        if report.later_contexts
        else ""
    )
    out = display_path(str(report.out))
    wrote = (
        f"wrote {rows} to {out}/{report.config}/"
        if report.total_rows
        else f"wrote no rows: {out}/ left as it was"
    )
    matched = f"{report.matched} traces matched, {report.selected} usable{contexts}"
    console.print(Text.assemble((report.kind, "bold"), f": {matched}; {wrote}"))
    _reasons(console, "Dropped whole, never truncated", report.dropped, DROP_REASONS)
    _reasons(console, "Left out of this export", report.left_out, LEFT_OUT_REASONS)
    if report.user_tool_calls_removed:
        console.print(f"Removed {report.user_tool_calls_removed} tool calls the user made (not the agent's).")
    if report.unanswered_user_messages_trimmed:
        console.print(
            f"Trimmed {report.unanswered_user_messages_trimmed} user messages nothing answered "
            "(after the last assistant turn)."
        )
    if report.turns:
        turns = report.turns
        console.print(
            f"Tool-calling turns: {turns['original']} recorded -> {turns['parallel']} parallel "
            f"({turns['saved']} LLM round trips saved); "
            f"{turns['thoughts_dropped']} interleaved texts dropped."
        )
    if not report.total_rows:
        return
    if report.redaction["enabled"]:
        counts = report.redaction["counts"]
        if counts:
            detail = ", ".join(
                f"{kind} {n}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            )
            console.print(
                f"Redacted {sum(counts.values())} values in {report.redaction['traces']} traces: {detail}."
            )
        else:
            console.print("Redaction: on; nothing found to redact.")
    else:
        off = "Redaction is OFF (--no-redact): secrets and personal data were kept."
        console.print(Text(off, style="yellow"))
    console.print(f"Dataset card: {display_path(str(report.out / 'README.md'))}")


def render_push(console: Console, result: PushResult) -> None:
    visibility = Text("private") if result.private else Text("public", style="yellow")
    verb = "created" if result.created else "updated"
    console.print(
        Text.assemble(f"Pushed {len(result.files)} files to {result.url} (", visibility, f"; repo {verb}).")
    )
    console.print(f"Commit: {result.commit_url}")


def render_unmatched(console: Console, unmatched: list[Unmatched], shown: int = UNMATCHED_SHOWN) -> None:
    """A line per filter that alone matched no trace, with what the store holds instead (the
    `shown` values with most traces, and how many more)."""
    for found in unmatched:
        if found.noun != "starts":
            listed = ", ".join(f"{value} ({plural(n, 'trace')})" for value, n in found.held[:shown])
            more = f" and {len(found.held) - shown} more" if len(found.held) > shown else ""
            line = f"the store's {found.noun}: {listed or 'none'}{more}"
        elif found.first and found.last:
            line = f"the store's traces started from {when(found.first)} to {when(found.last)}"
        else:
            line = "the store's traces started at no recorded time"
        console.print(f"{found.given} matches no trace; {line}", highlight=False)
