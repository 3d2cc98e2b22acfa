"""An export from start to end: select, redact, build rows, write the folder.

>>> from traceforge import store
>>> from traceforge.export.pipeline import ExportOptions, export
>>> con = store.connect("traceforge.duckdb", read_only=True)                 # doctest: +SKIP
>>> report = export(con, ExportOptions(kind="sft", out=Path("data")))       # doctest: +SKIP
>>> report.rows                                                             # doctest: +SKIP
{'train': 412, 'test': 47}
"""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import datasets
import duckdb

from traceforge import __version__
from traceforge.export import folder, parallel, preference, sft
from traceforge.export.redact import redact
from traceforge.export.selection import Criteria, Selection, select
from traceforge.export.source import Conversation, trim_unanswered

KINDS = ("sft", "parallel", "preference", "rl")
FORMATS = ("hf", "openai")


class ExportError(ValueError):
    """An export that cannot be made as asked, with what to do."""


@dataclass
class ExportOptions:
    kind: str
    out: Path
    criteria: Criteria = field(default_factory=Criteria)
    fmt: str = "hf"  # hf: parquet + card; openai: OpenAI fine-tuning JSONL
    redact: bool = True
    license: str | None = None
    max_shard_bytes: int = folder.DEFAULT_MAX_SHARD_BYTES
    command: str | None = None  # the command line, for the card

    @property
    def config(self) -> str:
        return self.kind if self.fmt == "hf" else f"{self.kind}-{self.fmt}"


@dataclass
class ExportReport:
    """What an export wrote and what it left out, by reason."""

    kind: str
    config: str
    out: Path
    matched: int
    selected: int  # conversations: a compacted trace read by context gives one per context
    dropped: dict[str, int]
    left_out: dict[str, int]
    rows: dict[str, int]
    redaction: dict[str, Any]
    turns: dict[str, int] | None
    files: list[str]
    user_tool_calls_removed: int = 0
    unanswered_user_messages_trimmed: int = 0
    later_contexts: int = 0  # of `selected`: contexts after a compaction (see export.source)

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "config": self.config,
            "out": str(self.out),
            "matched": self.matched,
            "selected": self.selected,
            "dropped": self.dropped,
            "left_out": self.left_out,
            "rows": self.rows,
            "redaction": self.redaction,
            "turns": self.turns,
            "user_tool_calls_removed": self.user_tool_calls_removed,
            "unanswered_user_messages_trimmed": self.unanswered_user_messages_trimmed,
            "later_contexts": self.later_contexts,
            "files": self.files,
        }


def export(con: duckdb.DuckDBPyConnection, options: ExportOptions) -> ExportReport:
    """Write one export (a config of the folder `options.out`) and return what it did."""
    if options.kind not in KINDS:
        raise ExportError(f"unknown export {options.kind!r}; choose one of {', '.join(KINDS)}")
    if options.fmt not in FORMATS:
        raise ExportError(f"unknown format {options.fmt!r}; choose one of {', '.join(FORMATS)}")
    if options.fmt == "openai" and options.kind == "rl":
        raise ExportError("OpenAI's fine-tuning formats have no prompt-only RL rows; use --format hf for rl")
    folder.prepare(options.out)

    counts_of: dict[tuple[str, int], Counter] = {}
    # An RL row is a task: the session's first prompt and what the whole session did. The other
    # kinds train on what the model saw, so a compacted session gives a row per context; the rows
    # that hold whole conversations end at the last assistant turn.
    by_context = options.kind != "rl"

    def prepare(conversation: Conversation) -> Conversation:
        if options.kind in ("sft", "parallel"):
            conversation = trim_unanswered(conversation)
        if options.redact:
            conversation, counts_of[conversation.trace_id, conversation.context] = redact(conversation)
        return conversation

    selection = select(con, options.criteria, prepare, by_context)
    rows, left_out, turns, used = _rows(con, options, selection)
    kept_counts = [counts_of[key] for c in used if counts_of.get(key := (c.trace_id, c.context))]
    redaction_counts = sum(kept_counts, Counter())
    features = None if options.fmt == "openai" else _features(options.kind)
    entry = {
        "kind": options.kind,
        "format": options.fmt,
        "created_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "traceforge_version": __version__,
        "command": options.command or f"traceforge export {options.kind}",
        "source": _source(con, list(dict.fromkeys(c.trace_id for c in used))),
        "criteria": options.criteria.describe(),
        "selection": {
            "matched": selection.matched,
            "selected": len(selection.conversations),
            "later_contexts": sum(1 for c in selection.conversations if c.context),
            "dropped": dict(selection.dropped),
        },
        "left_out": dict(left_out),
        "user_tool_calls_removed": sum(len(c.removed_user_calls) for c in used),
        "unanswered_user_messages_trimmed": sum(c.unanswered_user_messages for c in used),
        "inferred_tool_schemas": sum(1 for c in used if c.inferred_tools),
        "rows": {split: len(items) for split, items in rows.items() if items},
        "turns": turns,
        "redaction": {
            "enabled": options.redact,
            "counts": dict(redaction_counts),
            "traces": len(kept_counts),
        },
    }
    with _quiet_datasets():
        files = folder.write_config(
            options.out,
            options.config,
            rows,
            features=features,
            entry=entry,
            license=options.license,
            max_shard_bytes=options.max_shard_bytes,
        )
    return ExportReport(
        kind=options.kind,
        config=options.config,
        out=options.out,
        matched=selection.matched,
        selected=len(selection.conversations),
        dropped=dict(selection.dropped),
        left_out=dict(left_out),
        rows=entry["rows"],
        redaction=entry["redaction"],
        turns=turns,
        files=files,
        user_tool_calls_removed=entry["user_tool_calls_removed"],
        unanswered_user_messages_trimmed=entry["unanswered_user_messages_trimmed"],
        later_contexts=entry["selection"]["later_contexts"],
    )


def _features(kind: str) -> datasets.Features:
    return {
        "sft": sft.FEATURES,
        "parallel": parallel.FEATURES,
        "preference": preference.PREFERENCE_FEATURES,
        "rl": preference.RL_FEATURES,
    }[kind]


def _rows(
    con: duckdb.DuckDBPyConnection, options: ExportOptions, selection: Selection
) -> tuple[dict[str, list[dict[str, Any]]], Counter, dict[str, int] | None, list[Conversation]]:
    """Rows per split for the export's kind, what was left out and why, the turn counts, and the
    conversations the rows were made from (for the card's counts)."""
    openai = options.fmt == "openai"
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in options.criteria.splits}
    left_out: Counter = Counter()
    used: list[Conversation] = []
    if options.kind == "sft":
        for conversation in selection.conversations:
            made = sft.openai_row(conversation) if openai else sft.row(conversation)
            rows[selection.split[conversation.trace_id]].append(made)
        return rows, left_out, None, selection.conversations
    if options.kind == "rl":
        for conversation in selection.conversations:
            made = preference.rl_row(conversation)
            if made is None:
                left_out["no_user_prompt"] += 1
                continue
            rows[selection.split[conversation.trace_id]].append(made)
            used.append(conversation)
        return rows, left_out, None, used

    trace_ids = [c.trace_id for c in selection.conversations]
    deps, analysed = parallel.load_deps(con, trace_ids)
    turns = Counter()
    for conversation in selection.conversations:
        removed = set(conversation.removed_user_calls)  # edges to the user's own calls cross a user turn
        trace_deps = [
            (s, d) for s, d in deps.get(conversation.trace_id, []) if s not in removed and d not in removed
        ]
        if conversation.contexts > 1:  # edges from an earlier context: it was over before this one began
            held = conversation.call_ids
            trace_deps = [(s, d) for s, d in trace_deps if s in held and d in held]
        outcome = parallel.rewrite_conversation(conversation, trace_deps, conversation.trace_id in analysed)
        if outcome.rewrite is None:
            left_out[outcome.left_out] += 1
            continue
        result = outcome.rewrite
        used.append(conversation)
        split = rows[selection.split[conversation.trace_id]]
        turns.update(
            original=result.original_turns,
            parallel=result.parallel_turns,
            saved=result.turns_saved,
            thoughts_dropped=result.thoughts_dropped,
        )
        if options.kind == "parallel":
            split.append(
                parallel.openai_row(conversation, result) if openai else parallel.row(conversation, result)
            )
        else:
            pairs = preference.pairs(conversation, result)
            split.extend([preference.openai_pair(p) for p in pairs] if openai else pairs)
    return rows, left_out, dict(turns) if turns else None, used


def _source(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, Any]:
    """The store's file name and the source files and formats the selected traces came from."""
    database = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    store_name = Path(database[0]).name if database and database[0] else "(in memory)"
    selected = "traces JOIN (SELECT unnest(?::VARCHAR[]) AS trace_id) USING (trace_id)"
    formats = con.execute(
        f"SELECT coalesce(source_format, 'unknown'), count(*) FROM {selected} GROUP BY 1", [trace_ids]
    ).fetchall()
    files = con.execute(f"SELECT count(DISTINCT source_path) FROM {selected}", [trace_ids]).fetchone()[0]
    return {"store": store_name, "files": files, "traces": len(trace_ids), "formats": dict(formats)}


def command_line(argv: list[str] | None = None) -> str:
    """The command line as typed, for the dataset card, with the value of `--token` hidden.

    >>> command_line(["export", "sft", "--push-to-hub", "org/x", "--token", "hf_abc"])
    'traceforge export sft --push-to-hub org/x --token REDACTED'
    """
    args = list(sys.argv[1:] if argv is None else argv)
    for index, arg in enumerate(args):
        if arg == "--token" and index + 1 < len(args):
            args[index + 1] = "REDACTED"
        elif arg.startswith("--token="):
            args[index] = "--token=REDACTED"
    return shlex.join(["traceforge", *args])


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """No `datasets` progress bars while writing shards (traceforge prints its own summary)."""
    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if enabled:
            datasets.enable_progress_bars()
