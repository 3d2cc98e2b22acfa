"""Rendering results in the terminal with rich: readable at 80 columns, plain when piped."""

from __future__ import annotations

import os
import shlex
import sys
from collections import Counter
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from traceforge.analysis.summary import cached_text, ratio_text
from traceforge.ingest import FileReport, IngestReport
from traceforge.ingest.forget import ForgetReport


def human(n: float | int | None) -> str:
    """1234567 -> '1.2M'; smaller numbers in three significant figures at most (a percentile of
    token counts is 249, not 249.40).

    >>> human(1234567), human(999.6), human(249.4), human(13.2), human(9.5), human(42), human(0.125)
    ('1.2M', '1000', '249', '13.2', '9.5', '42', '0.125')
    """
    if n is None:
        return "-"
    n = float(n)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= limit:
            return f"{n / limit:.1f}{suffix}"
    return f"{n:.0f}" if n == int(n) or abs(n) >= 100 else f"{n:.3g}"


def plural(n: int, word: str) -> str:
    """plural(1, 'file') -> '1 file'; plural(3, 'file') -> '3 files'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def display_path(path: str) -> str:
    """A path as a user would type it here: relative to the working folder where that is shorter
    (`logs/a.jsonl`, `../shared/data/b.json`), else as it is (`/var/log/agent/c.jsonl`).

    The store keeps files' absolute paths; this is how they are shown.
    """
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return relative if len(relative) <= len(path) else path


def workload_labels(names: Iterable[str | None]) -> dict[str, str]:
    """How tables show workloads: a path (Claude Code's workload is its project's folder) by its
    last folders, as few as tell it apart from the other paths; other names as they are. A table
    column of `/home/dev/projects/coding-agent` folds over three lines at 80 columns.

    >>> workload_labels(["/home/dev/shop", "/srv/a/api", "/srv/b/api", "support"])
    {'/home/dev/shop': '…/shop', '/srv/a/api': '…/a/api', '/srv/b/api': '…/b/api', 'support': 'support'}
    """
    labels = {name: name for name in names if name}
    paths = {name: PurePosixPath(name).parts[1:] for name in labels if name.startswith(("/", "~/"))}
    for last in range(1, max(map(len, paths.values()), default=0) + 1):
        tails = Counter(parts[-last:] for parts in paths.values())
        for name, parts in list(paths.items()):
            if tails[parts[-last:]] == 1 or last >= len(parts):
                shown = "…/" + "/".join(parts[-last:])
                if len(shown) < len(name):
                    labels[name] = shown
                del paths[name]
    return labels


def label_note(console: Console, labels: dict[str, str]) -> None:
    """Says what `…/` means, where a table shortened a workload's name (`workload_labels`)."""
    if any(label != name for name, label in labels.items()):
        console.print("(…/NAME: a workload by its last folders; the JSON output holds the whole path)")


def render_big_file(
    console: Console, path: Path, size: int, compressed: bool, why: str | None = None
) -> None:
    """What to do about a big file whose traces are held until it is all read (`ingest.big_files`;
    or, `why`, found so once its adapter has read it a first time): split it. The parts give the
    same traces, since traces spread over files are joined."""
    shown = display_path(str(path))
    quoted = shlex.quote(shown)  # the command is pasted into a shell: a path with spaces stays one
    split = f"split -C 64m -d --additional-suffix=.jsonl {'- ' if compressed else ''}"
    command = f"zcat {quoted} | {split}parts/part-" if compressed else f"{split}{quoted} parts/part-"
    held = f"Its first reading found {why}, so its traces" if why else "Its traces"
    console.print(
        NOTE,
        f"{shown} holds {human(size)}B of data. {held} are all held in memory "
        f"until the whole file is read, which can take more than its size. If it is JSON Lines, split "
        f"it into files of about 64 MB and ingest those instead, to bound memory and use every core "
        f"(mkdir parts && {command}): the traces spread over the parts are joined, so the store holds "
        "the same traces.",
    )


def render_unfinished(console: Console, paths: list[str]) -> None:
    """The files an earlier run stopped writing in parts (`ingest.parts.unfinished_files`)."""
    for path in paths:
        todo = (
            "ingest it again to finish it"
            if os.path.exists(path)
            else f"it is gone: put it back and ingest it again, or `traceforge forget {shlex.quote(path)}`"
        )
        console.print(
            WARNING,
            f"{display_path(path)}: an earlier run stopped while writing this file, "
            f"and the store holds only part of it; {todo}",
        )


def render_forget(console: Console, report: ForgetReport) -> None:
    removed = report.removed
    fewer = [
        plural(removed["traces"], "trace"),
        plural(removed["llm_calls"], "LLM call"),
        plural(removed["tool_calls"], "tool call"),
    ]
    if removed["rejects"]:
        fewer.append(plural(removed["rejects"], "rejected record"))
    verb = "Would forget" if report.dry_run else "Forgot"
    console.print(f"{verb} {plural(len(report.forgotten), 'file')}: {', '.join(fewer)} fewer in the store.")
    _list_paths(console, report.forgotten)
    if report.read_again:
        verb = "Would read again" if report.dry_run else "Read again"
        console.print(
            f"{verb} {plural(len(report.read_again), 'file')}, which shared traces, content or ids with them:"
        )
        _list_paths(console, report.read_again)
    still = [path for path in report.forgotten if os.path.exists(path)]
    if len(still) == 1:
        console.print(
            f"{display_path(still[0])} is still there: the next `ingest` or `analyze` of its folder "
            "reads it again; move or delete it to keep it out."
        )
    elif still:
        console.print(
            f"{len(still)} of the files are still there: the next `ingest` or `analyze` of their "
            "folders reads them again; move or delete them to keep them out."
        )
    if report.dry_run:
        console.print("Nothing changed (--dry-run).")
    else:
        console.print(
            "Run `traceforge analyze` again: the workload tables and reports still count what went, "
            "and datasets exported before still hold it."
        )


def _list_paths(console: Console, paths: list[str]) -> None:
    for path in paths[:FILES_LISTED]:
        console.print(f"  {display_path(path)}")
    if len(paths) > FILES_LISTED:
        console.print(f"  ... and {len(paths) - FILES_LISTED} more")


# Past this many new or changed files, they are listed a line per folder and format rather than a
# line each: a folder of Claude Code sessions holds thousands of files. `ingest -v` lists each.
FILES_LISTED = 20
# The consoles read no markup (`cli.options.stdout`): a value from a trace such as `[/tmp]` or
# `[prod]` prints as it is. Styled words are Text.
NOTE = Text("note:", style="yellow")
WARNING = Text("warning:", style="yellow")
ERROR = Text("error:", style="red")


def render_ingest(console: Console, report: IngestReport, verbose: bool = False) -> None:
    totals = report.totals()
    for problem in report.problems:
        console.print(ERROR, problem)
    render_unfinished(console, report.unfinished)
    for file in report.files:
        if file.status == "failed":
            console.print(ERROR, f"{display_path(file.path)}: {file.message}")
    read = [f for f in report.files if f.status in ("new", "changed")]
    if len(read) > FILES_LISTED and not verbose:
        _render_folders(console, read)
    else:
        for file in report.files:
            if file.status != "failed" and (verbose or file.status in ("new", "changed")):
                detail = _read_detail([file]) if file.status in ("new", "changed") else (file.message or "")
                console.print(f"{file.status:>9} {display_path(file.path)}  {detail}")
    parts: list[str | Text] = [
        f"{totals['files_new']} new",
        f"{totals['files_changed']} changed",
        f"{totals['files_unchanged']} unchanged",
    ]
    if totals["files_duplicate"]:
        parts.append(f"{totals['files_duplicate']} duplicate")
    if totals["files_failed"]:
        parts.append(Text(f"{totals['files_failed']} failed", style="red"))
    console.print(
        Text.assemble(
            f"Ingested {plural(len(report.files), 'file')} (",
            Text(", ").join(Text(part) if isinstance(part, str) else part for part in parts),
            f"): {plural(totals['traces'], 'trace')}, {plural(totals['llm_calls'], 'LLM call')}, "
            f"{plural(totals['tool_calls'], 'tool call')}",
            _rejected(totals["rejected"]),
            f", {totals['skipped']} skipped by rule" if totals["skipped"] else "",
            ".",
        )
    )
    if report.joined:
        held = report.after_joins
        console.print(
            f"Joined {plural(len(report.joined), 'trace')} whose parts lay in several files (a rotated "
            "log or export, a paged export, a traces table exported apart): each is one trace, "
            "`attributes.source_paths` its files"
            + (
                f"; the store now holds {plural(held['traces'], 'trace')}, "
                f"{plural(held['llm_calls'], 'LLM call')}, {plural(held['tool_calls'], 'tool call')} "
                "of these files."
                if held
                else "."
            )
        )
    for trace_id, reason in report.left_apart.items():
        console.print(WARNING, f"trace {trace_id} is spread over several files, kept in parts: {reason}")
    if totals["files_unchanged"] and not (totals["files_new"] or totals["files_changed"]):
        console.print("Nothing new: every file was ingested before with the same content.")


def _read_detail(files: list[FileReport]) -> Text:
    """What read files of one format gave, summed."""
    skipped = sum(sum(f.skipped.values()) for f in files)
    return Text.assemble(
        f"{files[0].format}: {sum(f.traces for f in files)} traces, "
        f"{sum(f.llm_calls for f in files)} LLM calls, {sum(f.tool_calls for f in files)} tool calls",
        _rejected(sum(f.rejected for f in files)),
        f", {skipped} skipped" if skipped else "",
    )


def _rejected(count: int) -> Text:
    """`, N rejected` in yellow, or nothing."""
    return Text(f", {count} rejected", style="yellow") if count else Text()


def _render_folders(console: Console, read: list[FileReport]) -> None:
    """The files read, a line per status, folder and format, in the order the folders came; folders
    taken together with the folders in them where that keeps the lines to `FILES_LISTED` (a Claude
    Code session's subagents have a folder of their own)."""
    folders = [Path(os.path.dirname(file.path)).parts for file in read]
    top = len(Path(os.path.commonpath([os.path.join(*parts) for parts in folders])).parts)
    for depth in range(max(map(len, folders)), top - 1, -1):
        groups: dict[tuple[str, tuple[str, ...], str | None], list[tuple[FileReport, tuple[str, ...]]]] = {}
        for file, parts in zip(read, folders, strict=True):
            groups.setdefault((file.status, parts[:depth], file.format), []).append((file, parts))
        if len(groups) <= FILES_LISTED:
            break
    for (status, folder, _format), members in groups.items():
        files = [file for file, _ in members]
        deeper = " and the folders in it" if any(len(parts) > len(folder) for _, parts in members) else ""
        shown = os.path.join(display_path(os.path.join(*folder)), "")
        console.print(f"{status:>9} {plural(len(files), 'file')} in {shown}{deeper}  {_read_detail(files)}")
    query = "SELECT path, format, traces, rejected FROM sources"
    console.print(
        f"({len(read)} files read, a line per folder; the store's `sources` table holds a row per "
        f'file: traceforge sql "{query}")'
    )


def render_summary(
    console: Console, summary: dict[str, Any], db: str, labels: dict[str, str] | None = None
) -> None:
    t = summary["totals"]
    if labels is None:
        labels = workload_labels(row["workload"] for row in summary["by_workload_model"])
    cached = cached_text(t)
    console.print()
    console.print(
        Text.assemble(
            (display_path(db), "bold"),
            f": {plural(t['traces'], 'trace')} in "
            f"{plural(t['workloads'], 'workload')}, {plural(t['llm_calls'], 'LLM call')}, "
            f"{plural(t['tool_calls'], 'tool call')}; tokens in "
            f"{human(t['input_tokens'])} ({cached}), out {human(t['output_tokens'])}",
        )
    )
    if t["calls_without_usage"]:
        console.print(
            f"{t['calls_without_usage']} LLM calls came without token counts (transcripts): "
            "their tokens are not in these sums."
        )
    if t["calls_output_partial"]:
        console.print(
            f"{t['calls_output_partial']} LLM calls logged only a lower bound of their output tokens "
            "(Claude Code streams): `out` undercounts; the profile estimates their output from the text."
        )
    if t["calls_copied"]:
        console.print(
            f"{t['calls_copied']} LLM calls were logged again by resumed sessions (a copy of the "
            "conversation they resume): counted once, in the session that made them."
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
        cached = row["cache_read_tokens"]
        table.add_row(
            labels.get(row["workload"], row["workload"]),
            row["model"],
            str(row["traces"]),
            str(row["llm_calls"]),
            str(row["tool_calls"]),
            human(row["input_tokens"]) if row["llm_calls"] > row["calls_without_usage"] else "-",
            human(cached) if cached is not None and row["llm_calls"] > row["calls_without_usage"] else "-",
            human(row["output_tokens"]) if row["llm_calls"] > row["calls_without_usage"] else "-",
        )
    print_table(console, table)
    label_note(console, labels)
    if t["rejects"]:
        rejected = Text(f"{t['rejects']} rejected records", style="yellow")
        console.print(rejected, "(kept in the `rejects` table):")
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


def _section(console: Console, title: str) -> None:
    console.print()
    console.print(Text(title, style="bold underline"))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def print_table(console: Console, table: Table) -> None:
    """Print a table within the terminal's width, never cutting a cell: where its padding alone
    makes it wider than the terminal (an 80-column terminal, dated model ids), or where even folded
    it would not fit, it goes without. A terminal too narrow for its longest words even then gets
    the table at the width they need, and its lines wrap: cut to the width, `53.6k` would read `53`
    and the last columns would go."""
    unbounded = console.options.update_width(sys.maxsize)
    widths = Measurement.get(console, unbounded, table)
    if widths.maximum > console.width:
        padding, table.padding = table.padding, (0, 0, 0, 0)
        tight = Measurement.get(console, unbounded, table)
        if tight.maximum > console.width >= widths.minimum:
            table.padding = padding  # folding fits either way: keep the gaps
        else:
            widths = tight
    if widths.minimum > console.width:
        table.width = widths.minimum  # a table set wider than the console is laid out at its width
    console.print(table, soft_wrap=False, crop=False)


QUERY_TEXT_WIDTH = 40  # a text value longer than this is cut, marked `…`, as in DuckDB's shell
QUERY_TEXT_MIN = 8  # how narrow a text column may get before columns are left out


def render_query_result(
    console: Console, columns: list[str], rows: list[tuple], width: int, total: int | None = None
) -> None:
    """A query's result as a table, as DuckDB's shell shows one: a line per row (a line break in
    a value shown as `\\n`), long text cut, marked `…`, and where the columns do not fit `width`
    (the terminal's), those in the middle left out (named below the table), never a number cut.
    Piped, the console is as wide as any table needs (`cli.options.PIPED_WIDTH`): every column.
    `total` rows in the result, where `rows` are only its first and last half (`query.run_query`):
    a row of `·` stands between them, and the count below the table."""
    cells = [[_cell_text(v) for v in row] for row in rows]
    numeric = [
        any(isinstance(row[i], int | float | Decimal) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(columns))
    ]
    longest = [max([cell_len(name)] + [cell_len(row[i]) for row in cells]) for i, name in enumerate(columns)]
    # the narrowest a column can be: a number and its header whole, text a few characters and `…`
    least = [n if number else min(n, QUERY_TEXT_MIN) for n, number in zip(longest, numeric, strict=True)]
    shown = list(range(len(columns)))
    while len(shown) > 2 and 1 + sum(least[i] + 3 for i in shown) > width:
        del shown[len(shown) // 2]  # 3 a column: a rule and 2 spaces
    wanted = {i: longest[i] if numeric[i] else min(longest[i], QUERY_TEXT_WIDTH) for i in shown}
    # the text columns share what the numbers leave, the narrowest served first
    room = width - 1 - 3 * len(shown) - sum(wanted[i] for i in shown if numeric[i])
    texts = sorted((i for i in shown if not numeric[i]), key=wanted.get)
    for served, i in enumerate(texts):
        wanted[i] = max(min(wanted[i], room // (len(texts) - served)), least[i])
        room -= wanted[i]
    table = Table()
    for i in shown:
        justify = "right" if numeric[i] else "left"
        table.add_column(columns[i], justify=justify, width=wanted[i], no_wrap=True, overflow="ellipsis")
    cut = total is not None and total > len(rows)
    if cut:
        cells.insert(len(cells) // 2, ["·"] * len(columns))
    for row in cells:
        table.add_row(*(row[i] for i in shown))
    table.width = 1 + sum(wanted[i] + 3 for i in shown)  # set, as wide as that even past the console's
    console.print(table, soft_wrap=False, crop=False)
    if cut:
        console.print(
            f"{total:,} rows ({len(rows)} shown: the first and last {len(rows) // 2}; "
            "--csv or --json prints every row)"
        )
    left_out = [columns[i] for i in range(len(columns)) if i not in shown]
    if left_out:
        console.print(
            f"({len(left_out)} of {len(columns)} columns left out to fit the terminal: "
            f"{', '.join(left_out)}; --csv or --json prints every column)"
        )


def _cell_text(value: Any) -> str:
    """A value as DuckDB's shell shows it: NULL, true and false, and on one line."""
    if value is None:
        return "NULL"
    return _one_line(sql_text(value))


def sql_text(value: Any) -> str:
    """A value as SQL and DuckDB's shell write it: a boolean `true` or `false`, not Python's `True`.

    >>> sql_text(True), sql_text(1.5)
    ('true', '1.5')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_LINE_BREAKS = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def _one_line(text: str) -> str:
    r"""A value on one line, its breaks written as DuckDB's shell writes them.

    >>> _one_line("line1\nline2\tend")
    'line1\\nline2\\tend'
    """
    return text.translate(_LINE_BREAKS)


def _table(*columns: tuple[str, str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1), pad_edge=False)
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")
    return table


def render_report(console: Console, summary: dict[str, Any], db: str) -> None:
    """The whole analysis: store at a glance, spend, parallel opportunities, inference needs, and
    what to post-train first."""
    store_view = {k: summary[k] for k in ("totals", "by_workload_model", "reject_reasons")}
    labels = workload_labels(
        [row["workload"] for row in summary["by_workload_model"]]
        + [row["workload"] for row in summary["spend"]["workloads"]]
        + [row["workload"] for row in summary["parallel"].get("top_traces") or []]
        + [row["workload"] for row in summary["inference"]]
    )
    render_summary(console, store_view, db, labels)
    _render_spend(console, summary["spend"], labels)
    _render_parallel(console, summary["parallel"], labels)
    _render_inference(console, summary["inference"], labels)
    _render_recommendations(console, summary["recommendations"])
    outputs = summary.get("outputs") or {}
    if outputs:
        _section(console, "Outputs")
        for name, path in outputs.items():
            console.print(f"  {name:<8} {display_path(path)}")


def _render_spend(console: Console, spend: dict[str, Any], labels: dict[str, str]) -> None:
    _section(console, "Where spend goes")
    basis = "cost" if spend["basis"] == "cost_usd" else "tokens"
    table = _table(
        ("#", "right"),
        ("workload", "left"),
        ("traces", "right"),
        ("cost", "right"),
        ("share", "right"),
        ("cum.", "right"),
    )
    for w in spend["workloads"][:15]:
        cost = w.get("cost_usd")
        table.add_row(
            str(w["rank"]),
            labels.get(w["workload"], w["workload"]),
            str(w["traces"]),
            f"${cost:,.2f}" if cost is not None else "-",
            _pct(w["share"]),
            _pct(w["cumulative_share"]),
        )
    print_table(console, table)
    if len(spend["workloads"]) > 15:
        console.print(f"  ... {len(spend['workloads']) - 15} more in summary.json")
    top = spend.get("top_80_percent") or []
    console.print(f"{plural(len(top), 'workload')} carry 80% of {basis}: {', '.join(map(str, top))}.")
    law = spend.get("power_law") or {}
    if law.get("alpha") is not None:
        console.print(
            f"Power law: exponent {law['alpha']:.2f} (R² {law['r_squared']:.2f}, rank-size fit over "
            f"{plural(law['n'], 'workload')})" + (f": {POOR_FIT_NOTE}." if law.get("poor_fit") else ".")
        )
    if spend.get("unpriced_models"):
        console.print(
            Text("No price for:", style="yellow"),
            f"{unpriced_text(spend['unpriced_models'])} (pass --prices FILE; "
            "their calls are left out of the cost).",
        )


# After a power law fitted with `poor_fit` (traceforge.analysis.workloads.POOR_FIT_R_SQUARED).
POOR_FIT_NOTE = "a poor fit, so the shares above say more than the exponent"


def unpriced_text(models: list[dict[str, Any]]) -> str:
    """'gpt-4-0613 (4 calls), (no model) (28 calls)': the models the price table lacks."""
    return ", ".join(f"{m['model']} ({plural(m['calls'], 'call')})" for m in models)


def _render_parallel(console: Console, parallel: dict[str, Any], labels: dict[str, str]) -> None:
    _section(console, "What parallel tool calls would save")
    if not parallel.get("traces"):
        console.print("No trace has tool calls.")
        return
    observed, saved = parallel["observed_turns"], parallel["turns_saved"]
    seconds = (parallel["observed_ms"] - parallel["parallel_ms"]) / 1000
    console.print(
        f"{saved} of {observed} tool-calling turns ({saved / observed if observed else 0:.0%}) were "
        f"independent calls made one after another, in {parallel['traces_with_savings']} of "
        f"{plural(parallel['traces'], 'trace')} ({parallel['mode']} mode). A parallel-calling model "
        f"would save ~{seconds:,.1f} s and {human(parallel['tokens_saved'])} re-sent input tokens."
    )
    pairs = parallel.get("tool_pairs") or []
    if pairs:
        table = _table(("first", "left"), ("then", "left"), ("independent", "right"), ("in seq.", "right"))
        for pair in pairs[:5]:
            table.add_row(
                pair["first_tool"],
                pair["then_tool"],
                str(pair["independent_pairs"]),
                str(pair["sequential_pairs"]),
            )
        console.print("Tool pairs made in sequence without needing each other:")
        print_table(console, table)
    top = parallel.get("top_traces") or []
    if top:
        table = _table(
            ("trace", "left"),
            ("workload", "left"),
            ("turns", "right"),
            ("needed", "right"),
            ("saved", "right"),
        )
        for trace in top[:5]:
            table.add_row(
                trace["trace_id"],
                labels.get(trace["workload"]) or "-",
                str(trace["observed_turns"]),
                str(trace["min_turns"]),
                str(trace["turns_saved"]),
            )
        console.print("Traces with most to save (see one with `traceforge dag TRACE_ID`):")
        print_table(console, table)


def _render_inference(console: Console, rows: list[dict[str, Any]], labels: dict[str, str]) -> None:
    _section(console, "What each workload needs of inference")
    if not rows:
        console.print("No LLM calls.")
        return
    table = _table(
        ("workload", "left"),
        ("P:D", "right"),
        ("cached", "right"),
        ("sim. hit", "right"),
        ("in p50", "right"),
        ("out p50", "right"),
        ("gap p90", "right"),
        ("plan", "left"),
    )
    for r in rows:
        plan = r["deployment"]
        gap = r["tool_gap_ms"]["p90"]
        table.add_row(
            labels.get(r["workload"], r["workload"]),
            ratio_text(r["prefill_decode_ratio"]) if r["prefill_decode_ratio"] else "-",
            _pct(r["reported_cache_hit_ratio"]),
            _pct(r["simulated_cache_hit_ratio"]),
            human(r["input_length"]["p50"]),
            human(r["output_length"]["p50"]),
            f"{gap / 1000:.1f}s" if gap is not None else "-",
            _plan(plan),
        )
    print_table(console, table)
    console.print(
        "P:D is uncached input per output token; 'cached' is what the provider's cache served "
        "('-' where the source reports no cache counts), "
        "'sim. hit' what an unlimited prefix cache would. Plans are for the observed rate on the "
        "default GPU profile: `traceforge profile --target-rps N` for yours."
    )


def _plan(plan: dict[str, Any]) -> str:
    """'agg 1P:1D' or 'disagg 3P:2D': the serving mode and the prefill and decode instances."""
    if not plan.get("mode"):
        return "-"
    mode = "disagg" if plan["mode"] == "disaggregated" else "agg"
    return f"{mode} {plan['prefill_instances']}P:{plan['decode_instances']}D"


def _render_recommendations(console: Console, picks: list[dict[str, Any]]) -> None:
    _section(console, "What to post-train first")
    if not picks:
        console.print("No workload has spend to rank yet.")
        return
    for number, pick in enumerate(picks, start=1):
        console.print(Text.assemble(f"{number}. ", (pick["workload"], "bold")))
        for reason in pick["reasons"]:
            console.print(f"   - {reason}")
