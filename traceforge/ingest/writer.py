"""Writing parsed files to the store: final ids, then one transaction per batch of whole files.

Ids keep the source's own where it has one (`chatcmpl-...`, `toolu_...`, a session id) and are
prefixed only where that is needed to stay unique, in the batch or against what the store holds.
A file that changed since it was last ingested has its old rows removed in the same transaction
that writes the new ones, so the store never holds half a file or a file twice.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from traceforge import __version__, store
from traceforge.ingest.values import clean_text, to_json
from traceforge.model import ParseResult, Reject, Trace

TS = pl.Datetime("us", "UTC")
SCHEMAS: dict[str, dict[str, Any]] = {
    "traces": {
        "trace_id": pl.Utf8,
        "workload": pl.Utf8,
        "agent": pl.Utf8,
        "source_format": pl.Utf8,
        "source_path": pl.Utf8,
        "source_line": pl.Int64,
        "started_at": TS,
        "ended_at": TS,
        "outcome": pl.Utf8,
        "parent_trace_id": pl.Utf8,
        "attributes": pl.Utf8,
    },
    "llm_calls": {
        "call_id": pl.Utf8,
        "trace_id": pl.Utf8,
        "seq": pl.Int32,
        "model": pl.Utf8,
        "provider": pl.Utf8,
        "started_at": TS,
        "ended_at": TS,
        "duration_ms": pl.Float64,
        "ttft_ms": pl.Float64,
        "input_tokens": pl.Int64,
        "cache_read_tokens": pl.Int64,
        "cache_write_tokens": pl.Int64,
        "output_tokens": pl.Int64,
        "reasoning_tokens": pl.Int64,
        "usage_reported": pl.Boolean,
        "output_tokens_partial": pl.Boolean,
        "cost_usd": pl.Float64,
        "finish_reason": pl.Utf8,
        "source_line": pl.Int64,
        "response_key": pl.Utf8,
        "chain_state": pl.Utf8,
        "request_prefixes": pl.List(pl.Utf8),
        "source_line_path": pl.Utf8,
    },
    "tool_calls": {
        "tool_call_id": pl.Utf8,
        "trace_id": pl.Utf8,
        "call_id": pl.Utf8,
        "seq": pl.Int32,
        "name": pl.Utf8,
        "arguments": pl.Utf8,
        "result": pl.Utf8,
        "is_error": pl.Boolean,
        "started_at": TS,
        "ended_at": TS,
        "duration_ms": pl.Float64,
        "requestor": pl.Utf8,
        "source_tool_call_id": pl.Utf8,
    },
    "messages": {
        "trace_id": pl.Utf8,
        "seq": pl.Int32,
        "role": pl.Utf8,
        "content": pl.Utf8,
        "tool_calls": pl.Utf8,
        "tool_call_id": pl.Utf8,
        "name": pl.Utf8,
        "reasoning": pl.Utf8,
        "call_id": pl.Utf8,
    },
    "tool_defs": {
        "trace_id": pl.Utf8,
        "name": pl.Utf8,
        "description": pl.Utf8,
        "parameters": pl.Utf8,
        "annotations": pl.Utf8,
    },
    "rejects": {
        "source_path": pl.Utf8,
        "line": pl.Int64,
        "error": pl.Utf8,
        "raw": pl.Utf8,
        "rejected_at": TS,
    },
    "sources": {
        "path": pl.Utf8,
        "sha256": pl.Utf8,
        "format": pl.Utf8,
        "bytes": pl.Int64,
        "records": pl.Int64,
        "ingested": pl.Int64,
        "rejected": pl.Int64,
        "skipped": pl.Int64,
        "skipped_by_kind": pl.Utf8,
        "traces": pl.Int64,
        "duplicate_of": pl.Utf8,
        "error": pl.Utf8,
        "ingested_at": TS,
        "traceforge_version": pl.Utf8,
        "described_traces": pl.Utf8,
    },
}
# Tables whose rows belong to a trace, removed with it when its file is re-ingested.
TRACE_TABLES = ("llm_calls", "tool_calls", "messages", "tool_defs", "tool_deps", "trace_dag", "tool_schedule")


@dataclass
class ParsedFile:
    """One file ready to write: what the adapter made of it, or why the whole file failed."""

    path: str
    sha256: str
    size: int
    format: str | None
    result: ParseResult = field(default_factory=ParseResult)
    replaces: bool = False  # the path was ingested before with other content
    duplicate_of: str | None = None
    error: str | None = None  # the file as a whole could not be read
    raw_sample: str | None = None  # for a whole-file reject: the start of the content


class Rows:
    """Column lists per table, filled trace by trace."""

    def __init__(self) -> None:
        self.columns = {table: {c: [] for c in schema} for table, schema in SCHEMAS.items()}
        # (column, its list's append) per table: the per-row loop of a big ingest
        self._appenders = {
            table: [(column, items.append) for column, items in columns.items()]
            for table, columns in self.columns.items()
        }

    def add(self, table: str, **values: Any) -> None:
        get = values.get
        for column, append in self._appenders[table]:
            append(get(column))

    def count(self, table: str) -> int:
        return len(next(iter(self.columns[table].values())))

    def frame(self, table: str) -> pl.DataFrame:
        """The table's rows as a frame, taken out: its column lists are emptied as each is
        converted, so a big file's rows are not held twice."""
        columns = self.columns[table]
        frame = pl.DataFrame(
            [pl.Series(name, columns.pop(name), dtype=dtype) for name, dtype in SCHEMAS[table].items()]
        )
        self.columns[table] = {name: [] for name in SCHEMAS[table]}
        self._appenders[table] = [(c, items.append) for c, items in self.columns[table].items()]
        return frame


# The files a trace was built from, where it was joined from several (`ingest.joins`, `ingest.log_joins`).
SOURCE_PATHS = "json_extract_string(attributes, '$.source_paths[*]')"
# The traces built from any of the files in the parameter $1 (a list of paths), joined ones included.
TRACES_OF_FILES = (
    "SELECT trace_id FROM traces WHERE source_path IN (SELECT unnest($1::VARCHAR[])) "
    f"OR list_has_any(coalesce({SOURCE_PATHS}, []), $1::VARCHAR[])"
)
# The traces the files in $1 hold alone: a trace joined from several files' parts (`ingest.joins`)
# is built again from them when one is written again, so it is not deleted with one of them.
_OWN_TRACES = (
    "SELECT trace_id FROM traces WHERE source_path IN (SELECT unnest($1::VARCHAR[])) "
    "AND NOT coalesce(json_exists(attributes, '$.source_paths'), false)"
)


def delete_sources(con: duckdb.DuckDBPyConnection, paths: list[str]) -> None:
    """Delete what the store holds of `paths` before they are written again: their own traces with
    their rows and analysis, their rejects and `sources` rows (the traces joined from them and
    other files are rebuilt by the joins after the write)."""
    _delete(con, paths, _OWN_TRACES)


def delete_files(con: duckdb.DuckDBPyConnection, paths: list[str]) -> None:
    """Delete everything the store holds of `paths`: what `delete_sources` deletes, and the traces
    joined from them and other files (their other files' parts go with them: `ingest.forget`
    reads those files again)."""
    _delete(con, paths, TRACES_OF_FILES)


def _delete(con: duckdb.DuckDBPyConnection, paths: list[str], traces: str) -> None:
    if not paths:
        return  # most write batches replace nothing: no statements for them
    for table in (*TRACE_TABLES, "traces"):  # traces last: the subquery reads it
        con.execute(f"DELETE FROM {table} WHERE trace_id IN ({traces})", [paths])
    con.execute("DELETE FROM rejects WHERE source_path IN (SELECT unnest($1::VARCHAR[]))", [paths])
    con.execute("DELETE FROM sources WHERE path IN (SELECT unnest($1::VARCHAR[]))", [paths])


def adopt_relative_paths(con: duckdb.DuckDBPyConnection, files: list[Path]) -> None:
    """Stores written before traceforge kept paths absolute hold them as given, relative to the
    folder ingest ran in. A stored relative path that names, from this folder, one of the `files`
    being ingested (absolute paths) is that file: its rows take the absolute path, in one
    transaction, so the file is recognised as unchanged or changed instead of read as new, and later
    runs from any folder find it. (Where a run from another folder stored the absolute path as a
    duplicate of the relative one, that row, which holds no data, gives way.)"""
    stored = dict(con.execute("SELECT path, duplicate_of FROM sources").fetchall())
    given = {str(path) for path in files}
    moves = {}
    for path in stored:
        absolute = os.path.abspath(path)
        if not os.path.isabs(path) and absolute in given and stored.get(absolute, path) == path:
            moves[path] = absolute
    if not moves:
        return
    frame = pl.DataFrame(
        {"old": list(moves), "new": list(moves.values())}, schema={"old": pl.Utf8, "new": pl.Utf8}
    )
    joined = con.execute(
        "SELECT trace_id, attributes FROM traces WHERE json_exists(attributes, '$.source_paths')"
    ).fetchall()
    with store.transaction(con), store.registered(con, "_tf_moves", frame):
        con.execute(
            "DELETE FROM sources USING _tf_moves m "
            "WHERE sources.path = m.new AND sources.duplicate_of = m.old"
        )
        for table, column in _PATH_COLUMNS:
            con.execute(
                f"UPDATE {table} SET {column} = m.new FROM _tf_moves m WHERE {table}.{column} = m.old"
            )
        for trace_id, text in joined:
            attributes = json.loads(text)
            named = attributes["source_paths"]
            if any(path in moves for path in named):
                attributes["source_paths"] = sorted(moves.get(path, path) for path in named)
                con.execute(
                    "UPDATE traces SET attributes = ? WHERE trace_id = ?", [to_json(attributes), trace_id]
                )


# Every column that names an ingested file.
_PATH_COLUMNS = (
    ("sources", "path"),
    ("sources", "duplicate_of"),
    ("traces", "source_path"),
    ("llm_calls", "source_line_path"),
    ("rejects", "source_path"),
)


# A trace's key in `_Ids`: (the file's place in the batch, the trace's place in its file).
TraceKey = tuple[int, int]


@dataclass
class _Ids:
    trace: dict[TraceKey, str]  # -> trace_id
    by_source: dict[str, str]  # source_id -> trace_id over the batch, so a parent in another file resolves
    call: dict[tuple[TraceKey, int], str]  # (trace, call index) -> call_id
    tool: dict[tuple[TraceKey, str], str]  # (trace, local_id) -> tool_call_id


@dataclass
class TraceNames:
    """What a trace's ids are made from, without the trace: a parsing worker sends these with its
    rows, so the main process can name a file's rows again when the store holds their ids
    (`renamed`) instead of parsing the file again."""

    source_id: str
    parent: str | None  # the parent trace's source id
    part: bool  # `_is_part`, in a file with a hash
    calls: list[str | None]  # each LLM call's source id
    # each tool call's (local id, has a source id, emitted by none of the trace's LLM calls)
    tools: list[tuple[str, bool, bool]]


@dataclass
class FileNames:
    sha256: str
    traces: list[TraceNames]


def names_of(parsed: ParsedFile) -> FileNames:
    """The names `_assign_ids` makes `parsed`'s ids from."""
    return FileNames(parsed.sha256, [trace_names(t, whole=not parsed.sha256) for t in parsed.result.traces])


def trace_names(trace: Trace, whole: bool) -> TraceNames:
    """What `_assign_ids` makes one trace's ids from; `whole` when it cannot be a part of a
    conversation another file continues (`_is_part`): a trace a join has made whole, or one of a
    file without a hash to name its parts after."""
    return TraceNames(
        trace.source_id,
        trace.parent_source_id,
        not whole and _is_part(trace),
        [call.source_id for call in trace.llm_calls],
        [(call.local_id, bool(call.source_id), call.call_index is None) for call in trace.tool_calls],
    )


def _taken(con: duckdb.DuckDBPyConnection | None, table: str, column: str, candidates: list[str]) -> set[str]:
    """Which `candidates` the store behind `con` holds (none without a store: a parsing worker),
    with the ids `_unique` numbered from those (`id~2`, ...): a file written in parts
    (`ingest.parts`) can hold one id more times than one part does."""
    if not candidates or con is None:
        return set()
    frame = pl.DataFrame({"id": candidates}, schema={"id": pl.Utf8})
    with store.registered(con, "_tf_ids", frame):
        taken = {
            row[0]
            for row in con.execute(
                f"SELECT {column} FROM {table} WHERE {column} IN (SELECT id FROM _tf_ids)"
            ).fetchall()
        }
    if not taken:
        return taken
    frame = pl.DataFrame({"id": sorted(taken)}, schema={"id": pl.Utf8})
    with store.registered(con, "_tf_ids", frame):
        numbered = con.execute(
            f"SELECT {column} FROM {table} WHERE contains({column}, '~') "
            f"AND regexp_replace({column}, '~[0-9]+$', '') IN (SELECT id FROM _tf_ids)"
        ).fetchall()
    return taken | {row[0] for row in numbered}


def _unique(wanted: dict[Any, str], fallback: dict[Any, str], in_store: set[str]) -> dict[Any, str]:
    """Keep each wanted id unless the store or an earlier item holds it; then use its fallback
    (numbered further if even that is taken). `in_store` holds which wanted and fallback ids the
    store already has."""
    used = set(in_store)
    out = {}
    for key, candidate in wanted.items():
        chosen = candidate
        if chosen in used:
            chosen = fallback[key]
            n = 2
            while chosen in used:
                chosen = f"{fallback[key]}~{n}"
                n += 1
        used.add(chosen)
        out[key] = chosen
    return out


# What `_unique` and `_assign_ids` add to a trace id the store or the batch already holds: `@` and its
# file's hash prefix, then `~<n>` if even that is taken. A regular expression for SQL's
# regexp_replace, which takes it off again (`ingest.joins` finds a trace's parts by it).
TRACE_ID_SUFFIX = r"@[0-9a-f]{8}(~[0-9]+)?$"


def _is_part(trace: Trace) -> bool:
    """A trace of a per-request log that opens mid-conversation: the part of a conversation whose
    beginning lies in another file (a rotated log), or was never logged (`ingest.log_joins`)."""
    return bool(trace.llm_calls) and trace.llm_calls[0].request_prefixes is not None


def _assign_ids(con: duckdb.DuckDBPyConnection | None, files: list[FileNames]) -> _Ids:
    """Each trace's, LLM call's and tool call's id, for the files of a batch (`names_of`), keyed by
    their places. A part of a conversation (`_is_part`) in a file takes its fallback ids at once,
    its own and those of the tool calls it re-sends from earlier turns: the conversation's
    beginning, in another file, holds the plain ones. So a rotated log's files do not collide (a
    parsing worker's ids stand), and joining the parts names the whole. (Traces rebuilt by a join
    come without a file hash: their names are the join's.)"""
    traces = [((f, k), names, t) for f, names in enumerate(files) for k, t in enumerate(names.traces)]
    fallback = {key: f"{t.source_id}@{names.sha256[:8]}" for key, names, t in traces}
    wanted = {key: fallback[key] if t.part else t.source_id for key, _, t in traces}
    trace_ids = _unique(
        wanted, fallback, _taken(con, "traces", "trace_id", [*wanted.values(), *fallback.values()])
    )

    wanted_calls, fallback_calls = {}, {}
    for key, _, t in traces:
        for index, source_id in enumerate(t.calls):
            synthetic = f"{trace_ids[key]}/llm-{index}"
            wanted_calls[key, index] = source_id or synthetic
            fallback_calls[key, index] = synthetic
    call_ids = _unique(
        wanted_calls,
        fallback_calls,
        _taken(con, "llm_calls", "call_id", [*wanted_calls.values(), *fallback_calls.values()]),
    )

    wanted_tools, fallback_tools = {}, {}
    for key, _, t in traces:
        for seq, (local_id, has_source_id, no_call) in enumerate(t.tools):
            synthetic = f"{trace_ids[key]}/tool-{seq}"
            fallback_tools[key, local_id] = f"{trace_ids[key]}/{local_id}" if has_source_id else synthetic
            re_sent = t.part and no_call  # requested before the part's first call
            own = has_source_id and not re_sent
            wanted_tools[key, local_id] = local_id if own else fallback_tools[key, local_id]
    tool_ids = _unique(
        wanted_tools,
        fallback_tools,
        _taken(con, "tool_calls", "tool_call_id", [*wanted_tools.values(), *fallback_tools.values()]),
    )
    by_source: dict[str, str] = {}
    for key, _, t in traces:
        by_source.setdefault(t.source_id, trace_ids[key])
    return _Ids(trace_ids, by_source, call_ids, tool_ids)


def _parent_id(parent: str | None, ids: _Ids, by_source_id: dict[str, str]) -> str | None:
    """A parent trace's id: its file's trace of that source id, else the batch's, else the source id
    as it is (a parent not ingested yet)."""
    if not parent:
        return None
    return by_source_id.get(parent) or ids.by_source.get(parent, parent)


def renamed(
    frames: dict[str, pl.DataFrame], names: FileNames, ids: _Ids, file_no: int
) -> dict[str, pl.DataFrame]:
    """A parsing worker's rows of one file, named as `_assign_ids(None, [names])` names them (no
    store to avoid), under the ids `ids` gives the batch's file `file_no` instead: the rows
    `rows_of` gives with `ids`, without parsing the file again.

    The worker's ids are unique within the file, so they map one to one; only the id a message
    answers (kept as the source gave it where it names no tool call of its trace) is mapped with
    its trace."""
    first = _assign_ids(None, [names])
    traces, calls, tools, answered = {}, {}, {}, {}  # the ids that change: the worker's -> this batch's
    with_renamed_tools = set()
    for k, t in enumerate(names.traces):
        old_trace, new_trace = first.trace[0, k], ids.trace[file_no, k]
        if old_trace != new_trace:
            traces[old_trace] = new_trace
        for i in range(len(t.calls)):
            old, new = first.call[(0, k), i], ids.call[(file_no, k), i]
            if old != new:
                calls[old] = new
        for local_id, _, _ in t.tools:
            old, new = first.tool[(0, k), local_id], ids.tool[(file_no, k), local_id]
            if local_id and old != new:
                tools[old] = new
                answered[f"{old_trace}\0{old}"] = new
                with_renamed_tools.add(old_trace)
    own = {t.source_id: ids.trace[file_no, k] for k, t in enumerate(names.traces)}
    trace_ids = [ids.trace[file_no, k] for k in range(len(names.traces))]
    parents = [_parent_id(t.parent, ids, own) for t in names.traces]

    def rename_calls(column: str) -> pl.Expr:
        return pl.col(column).replace(calls) if calls else pl.col(column)

    def rename_tool_calls(text: str) -> str:
        listed = json.loads(text)
        for call in listed:
            call["id"] = tools.get(call["id"], call["id"])
        return to_json(listed)

    out = dict(frames)
    if "traces" in out:
        frame = out["traces"]
        assert frame.height == len(trace_ids), "a worker writes one traces row per trace"
        out["traces"] = frame.with_columns(
            pl.Series("trace_id", trace_ids, dtype=pl.Utf8),
            pl.Series("parent_trace_id", parents, dtype=pl.Utf8),
        )
    by_trace = pl.col("trace_id").replace(traces) if traces else pl.col("trace_id")
    for table in ("llm_calls", "tool_calls", "messages", "tool_defs"):
        if table not in out:
            continue
        columns = [by_trace]
        if table in ("llm_calls", "tool_calls", "messages"):
            columns.append(rename_calls("call_id"))
        if table == "tool_calls" and tools:
            columns.append(pl.col("tool_call_id").replace(tools))
        if table == "messages" and tools:
            key = pl.concat_str(pl.col("trace_id"), pl.lit("\0"), pl.col("tool_call_id"))
            answer = key.replace_strict(answered, default=pl.col("tool_call_id"), return_dtype=pl.Utf8)
            columns.append(answer.alias("tool_call_id"))
            rewritten = pl.col("tool_calls").map_elements(rename_tool_calls, return_dtype=pl.Utf8)
            columns.append(
                pl.when(pl.col("trace_id").is_in(sorted(with_renamed_tools)))
                .then(rewritten)
                .otherwise(pl.col("tool_calls"))
            )
        out[table] = out[table].with_columns(columns)
    return out


def counts(parsed: ParsedFile, rejected: int | None = None) -> tuple[int, int, int, int]:
    """A file's (records, ingested, rejected, skipped), as its `sources` row gives them; records =
    ingested + rejected + skipped. A file that fails as a whole (unreadable, not a known format)
    counts as one rejected record beside the lines rejected on their own: none of it is ingested.
    `rejected` counts the lines rejected where `parsed` no longer holds them (a file written in
    parts: `ingest.parts`).

    >>> counts(ParsedFile("a.jsonl", "", 0, "x", ParseResult(records=5, rejects=[Reject(2, "bad")])))
    (5, 4, 1, 0)
    """
    result = parsed.result
    rejected = len(result.rejects) if rejected is None else rejected
    if parsed.error:
        return rejected + 1, 0, rejected + 1, 0
    skipped = sum(result.skipped.values())
    return result.records, max(result.records - rejected - skipped, 0), rejected, skipped


def rows_of(parsed: ParsedFile, ids: _Ids, file_no: int = 0) -> dict[str, pl.DataFrame]:
    """`parsed`'s rows per table, with the ids `ids` gives the batch's file `file_no`."""
    rows = Rows()
    _add_file(rows, parsed, ids, file_no)
    return {table: rows.frame(table) for table in SCHEMAS if rows.count(table)}


def part_rows(
    con: duckdb.DuckDBPyConnection,
    path: str,
    sha256: str,
    traces: list[Trace],
    rejects: list[Reject],
    file_ids: dict[str, str],
) -> dict[str, pl.DataFrame]:
    """The rows of one part of a file written in parts (`ingest.parts`): its traces, named against
    the store, which holds the file's earlier parts (so a trace is named as it would be in the whole
    file), and its rejected lines. `file_ids` maps the source ids of the file's traces so far to
    their ids, for the parents of later ones; it is updated with this part's."""
    names = FileNames(sha256, [trace_names(t, whole=not sha256) for t in traces])
    ids = _assign_ids(con, [names])
    keys = [(0, k) for k in range(len(traces))]
    file_ids.update((t.source_id, ids.trace[key]) for key, t in zip(keys, traces, strict=True))
    rows = Rows()
    for key, trace in zip(keys, traces, strict=True):
        _add_trace(rows, path, trace, key, ids, file_ids)
    _add_rejects(rows, path, rejects, datetime.now(UTC))
    return {table: rows.frame(table) for table in SCHEMAS if rows.count(table)}


def source_row(parsed: ParsedFile, traces: int, rejected: int) -> pl.DataFrame:
    """The `sources` row of a file written in parts, its traces and rejected lines counted as they
    were written (`parsed.result` holds its counts, not its traces)."""
    rows = Rows()
    _add_source(rows, parsed, datetime.now(UTC), traces, rejected)
    return rows.frame("sources")


def _add_file(rows: Rows, parsed: ParsedFile, ids: _Ids, file_no: int = 0) -> None:
    """`parsed`'s rows, with the ids `ids` gives the batch's file `file_no`."""
    now = datetime.now(UTC)
    result = parsed.result
    keys = [(file_no, k) for k in range(len(result.traces))]
    by_source_id = {t.source_id: ids.trace[key] for key, t in zip(keys, result.traces, strict=True)}
    for key, trace in zip(keys, result.traces, strict=True):
        _add_trace(rows, parsed.path, trace, key, ids, by_source_id)
    rejects = list(result.rejects)
    if parsed.error:
        rejects.append(Reject(None, parsed.error, parsed.raw_sample))
    _add_rejects(rows, parsed.path, rejects, now)
    _add_source(rows, parsed, now, len(result.traces), len(result.rejects))


def _add_rejects(rows: Rows, path: str, rejects: list[Reject], now: datetime) -> None:
    for reject in rejects:
        rows.add(
            "rejects",
            source_path=path,
            line=reject.line,
            error=reject.error,
            raw=clean_text(reject.raw),
            rejected_at=now,
        )


def _add_source(rows: Rows, parsed: ParsedFile, now: datetime, traces: int, rejected: int) -> None:
    result = parsed.result
    records, ingested, rejected, skipped = counts(parsed, rejected)
    rows.add(
        "sources",
        path=parsed.path,
        sha256=parsed.sha256,
        format=parsed.format,
        bytes=parsed.size,
        records=records,
        ingested=ingested,
        rejected=rejected,
        skipped=skipped,
        skipped_by_kind=json.dumps(result.skipped, sort_keys=True),
        traces=traces,
        duplicate_of=parsed.duplicate_of,
        error=parsed.error,
        ingested_at=now,
        traceforge_version=__version__,
        described_traces=json.dumps(result.described) if result.described else None,
    )


def _add_trace(
    rows: Rows, path: str, trace: Trace, key: TraceKey, ids: _Ids, by_source_id: dict[str, str]
) -> None:
    trace_id = ids.trace[key]
    rows.add(
        "traces",
        trace_id=trace_id,
        workload=trace.workload,
        agent=trace.agent,
        source_format=trace.source_format,
        source_path=path,
        source_line=trace.source_line,
        started_at=trace.started_at,
        ended_at=trace.ended_at,
        outcome=trace.outcome,
        parent_trace_id=_parent_id(trace.parent_source_id, ids, by_source_id),
        attributes=to_json(trace.attributes),
    )
    call_ids = [ids.call[(key, i)] for i in range(len(trace.llm_calls))]
    for seq, call in enumerate(trace.llm_calls):
        rows.add(
            "llm_calls",
            call_id=call_ids[seq],
            trace_id=trace_id,
            seq=seq,
            model=call.model,
            provider=call.provider,
            started_at=call.started_at,
            ended_at=call.ended_at,
            duration_ms=call.duration_ms,
            ttft_ms=call.ttft_ms,
            input_tokens=call.input_tokens,
            cache_read_tokens=call.cache_read_tokens,
            cache_write_tokens=call.cache_write_tokens,
            output_tokens=call.output_tokens,
            reasoning_tokens=call.reasoning_tokens,
            usage_reported=call.usage_reported,
            output_tokens_partial=call.output_tokens_partial,
            cost_usd=call.cost_usd,
            finish_reason=call.finish_reason,
            source_line=call.source_line,
            response_key=call.response_key,
            chain_state=call.chain_state,
            request_prefixes=call.request_prefixes,
            source_line_path=call.source_line_path,
        )

    def tool_id(local_id: str | None) -> str | None:
        return ids.tool.get((key, local_id)) if local_id else None

    for seq, tool in enumerate(trace.tool_calls):
        rows.add(
            "tool_calls",
            tool_call_id=tool_id(tool.local_id),
            trace_id=trace_id,
            call_id=call_ids[tool.call_index] if tool.call_index is not None else None,
            seq=seq,
            name=tool.name,
            arguments=to_json(tool.arguments),
            result=clean_text(tool.result),
            is_error=tool.is_error,
            started_at=tool.started_at,
            ended_at=tool.ended_at,
            duration_ms=tool.duration_ms,
            requestor=tool.requestor,
            source_tool_call_id=tool.source_id,
        )
    for seq, message in enumerate(trace.messages):
        calls = None
        if message.tool_calls:
            calls = to_json(
                [
                    {"id": tool_id(c.get("id")), "name": c.get("name"), "arguments": c.get("arguments")}
                    for c in message.tool_calls
                ]
            )
        rows.add(
            "messages",
            trace_id=trace_id,
            seq=seq,
            role=message.role,
            content=clean_text(message.content),
            tool_calls=calls,
            tool_call_id=tool_id(message.tool_call_id) or message.tool_call_id,
            name=message.name,
            reasoning=clean_text(message.reasoning),
            call_id=call_ids[message.call_index] if message.call_index is not None else None,
        )
    seen = set()
    for definition in trace.tool_defs:
        if definition.name in seen:
            continue
        seen.add(definition.name)
        rows.add(
            "tool_defs",
            trace_id=trace_id,
            name=definition.name,
            description=clean_text(definition.description),
            parameters=to_json(definition.parameters),
            annotations=to_json(definition.annotations),
        )
