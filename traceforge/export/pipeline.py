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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import datasets
import duckdb

from traceforge import __version__
from traceforge.analysis.batches import TraceProgressCallback, cut
from traceforge.export import folder, parallel, preference, sft
from traceforge.export.selection import Criteria, Preparation, Selection
from traceforge.export.source import Conversation

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
    workers: int | None = None  # processes preparing conversations (see Selection); None: automatic

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


# Conversations whose rows are built together (their dependency edges read in one query): at most
# this many, or as many as hold this many messages, so one long session or many short ones.
BATCH_CONVERSATIONS = 512
BATCH_MESSAGES = 20_000


def export(
    con: duckdb.DuckDBPyConnection, options: ExportOptions, on_progress: TraceProgressCallback | None = None
) -> ExportReport:
    """Write one export (a config of the folder `options.out`) and return what it did.

    The store is read a conversation at a time and rows are written as they are made, so memory
    holds a batch of conversations and rows, not the export. `on_progress` is called with the
    traces read so far and the traces matched."""
    if options.kind not in KINDS:
        raise ExportError(f"unknown export {options.kind!r}; choose one of {', '.join(KINDS)}")
    if options.fmt not in FORMATS:
        raise ExportError(f"unknown format {options.fmt!r}; choose one of {', '.join(FORMATS)}")
    if options.fmt == "openai" and options.kind == "rl":
        raise ExportError("OpenAI's fine-tuning formats have no prompt-only RL rows; use --format hf for rl")
    folder.prepare(options.out)  # before the selection's queries: a folder it would refuse

    # An RL row is a task: the session's first prompt and what the whole session did. The other
    # kinds train on what the model saw, so a compacted session gives a row per context; the rows
    # that hold whole conversations end at the last assistant turn.
    by_context = options.kind != "rl"
    preparation = Preparation(trim_unanswered=options.kind in ("sft", "parallel"), redact=options.redact)
    selection = Selection(con, options.criteria, preparation, by_context, options.workers)
    features = None if options.fmt == "openai" else _features(options.kind)
    splits = [name for name, _ in options.criteria.splits]
    with folder.ConfigWriter(
        options.out, options.config, splits, features=features, max_shard_bytes=options.max_shard_bytes
    ) as writer:
        used = _Used()
        left_out: Counter = Counter()
        turns: Counter = Counter()
        for batch in _batches(selection, on_progress):
            for split, row, conversation in _rows(con, options, batch, left_out, turns):
                writer.add(split, row, conversation.chars)
                used.add(conversation)
        entry = {
            "kind": options.kind,
            "format": options.fmt,
            "created_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "traceforge_version": __version__,
            "command": options.command or f"traceforge export {options.kind}",
            "source": _source(con, list(used.trace_ids)),
            "criteria": options.criteria.describe(),
            "selection": {
                "matched": selection.matched,
                "selected": selection.selected,
                "later_contexts": selection.later_contexts,
                "dropped": dict(selection.dropped),
            },
            "left_out": dict(left_out),
            "user_tool_calls_removed": used.user_tool_calls_removed,
            "unanswered_user_messages_trimmed": used.unanswered_user_messages_trimmed,
            "inferred_tool_schemas": used.inferred_tool_schemas,
            "rows": writer.rows,
            "turns": dict(turns) if turns else None,
            "redaction": {
                "enabled": options.redact,
                "counts": dict(used.redactions),
                "traces": used.redacted,
            },
        }
        # No rows: the folder is left as it was, its config of this kind (if any) and card kept,
        # rather than replaced by an empty one (a misspelt filter would wipe a dataset).
        files = writer.commit(entry, options.license) if writer.rows else []
    return ExportReport(
        kind=options.kind,
        config=options.config,
        out=options.out,
        matched=selection.matched,
        selected=selection.selected,
        dropped=dict(selection.dropped),
        left_out=dict(left_out),
        rows=entry["rows"],
        redaction=entry["redaction"],
        turns=entry["turns"],
        files=files,
        user_tool_calls_removed=used.user_tool_calls_removed,
        unanswered_user_messages_trimmed=used.unanswered_user_messages_trimmed,
        later_contexts=selection.later_contexts,
    )


@dataclass
class _Used:
    """What the dataset card says of the conversations rows were made from, counted as they go."""

    trace_ids: dict[str, None] = field(default_factory=dict)  # in order, once each
    user_tool_calls_removed: int = 0
    unanswered_user_messages_trimmed: int = 0
    inferred_tool_schemas: int = 0  # conversations with a tool schema inferred from its calls
    redactions: Counter = field(default_factory=Counter)
    redacted: int = 0  # conversations with something redacted
    last: Conversation | None = None

    def add(self, conversation: Conversation) -> None:
        """Count a conversation a row was made from, once however many rows it gave (a
        conversation's rows come one after another)."""
        if conversation is self.last:
            return
        self.last = conversation
        self.trace_ids[conversation.trace_id] = None
        self.user_tool_calls_removed += len(conversation.removed_user_calls)
        self.unanswered_user_messages_trimmed += conversation.unanswered_user_messages
        self.inferred_tool_schemas += bool(conversation.inferred_tools)
        if conversation.redactions:
            self.redactions.update(conversation.redactions)
            self.redacted += 1


def _batches(
    selection: Selection, on_progress: TraceProgressCallback | None
) -> Iterator[list[tuple[Conversation, str]]]:
    """The selection's conversations and splits, a batch at a time, reporting progress."""
    for batch in cut(selection, lambda item: len(item[0].messages), BATCH_CONVERSATIONS, BATCH_MESSAGES):
        yield batch
        if on_progress is not None:
            on_progress(selection.traces_read, selection.matched)
    if on_progress is not None:
        on_progress(selection.matched, selection.matched)


def _features(kind: str) -> datasets.Features:
    return {
        "sft": sft.FEATURES,
        "parallel": parallel.FEATURES,
        "preference": preference.PREFERENCE_FEATURES,
        "rl": preference.RL_FEATURES,
    }[kind]


def _rows(
    con: duckdb.DuckDBPyConnection,
    options: ExportOptions,
    batch: list[tuple[Conversation, str]],
    left_out: Counter,
    turns: Counter,
) -> Iterator[tuple[str, dict[str, Any], Conversation]]:
    """The rows of a batch of conversations for the export's kind, each with its split and the
    conversation it was made from; what was left out is counted by reason in `left_out`, the
    turns the rewrites changed in `turns`."""
    openai = options.fmt == "openai"
    if options.kind == "sft":
        for conversation, split in batch:
            yield split, (sft.openai_row(conversation) if openai else sft.row(conversation)), conversation
        return
    if options.kind == "rl":
        for conversation, split in batch:
            made = preference.rl_row(conversation)
            if made is None:
                left_out["no_user_prompt"] += 1
                continue
            yield split, made, conversation
        return

    deps, analysed = parallel.load_deps(con, list(dict.fromkeys(c.trace_id for c, _ in batch)))
    for conversation, split in batch:
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
        turns.update(
            original=result.original_turns,
            parallel=result.parallel_turns,
            saved=result.turns_saved,
            thoughts_dropped=result.thoughts_dropped,
        )
        if options.kind == "parallel":
            yield (
                split,
                parallel.openai_row(conversation, result) if openai else parallel.row(conversation, result),
                conversation,
            )
        else:
            for pair in preference.pairs(conversation, result):
                yield split, (preference.openai_pair(pair) if openai else pair), conversation


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
