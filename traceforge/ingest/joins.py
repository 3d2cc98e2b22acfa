"""Traces whose parts lie in more than one file, joined into one trace: OpenTelemetry spans,
Langfuse observations and LangSmith runs.

A collector's file exporter rotates its output (by size or age), and Langfuse's scheduled exports,
API pages and LangSmith's run queries cut their tables by time or count, so a trace that was running
at a cut has parts in two files, or more; so does a trace exported from two places. Files are parsed
one at a time (in parallel), and the writer keeps ids unique: the trace of a later file gets its id
suffixed `@<its file's hash>`. After every write, in the write's transaction, `join_split_traces`
finds the traces held by more than one file (by their OTel, Langfuse or LangSmith trace id), reads
those files' parts of the trace again (parsing only the lines that hold the trace id, where its
spellings are known: `MAX_SPELLINGS`), and puts the traces built from all of them in place of the
parts, under their own ids (a span, observation or run found in two files counts once). Their
`source_path` is the file of the trace's first span, observation or run; `attributes.source_paths`
lists every file that holds part of it. A file that only describes traces (Langfuse's traces table
exported apart from its observations: `sources.described_traces`) is one of those files too.

A file read again must be the file ingested (the same SHA-256): where one has changed or gone, the
parts stay as they are and the ingest report says why; ingesting the changed file joins them. A
joined trace one of whose files is ingested again with new content is built again from the files'
content.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from traceforge import store
from traceforge.ingest import langfuse, langsmith, otlp, writer
from traceforge.ingest.otel_wire import LogEvent, Span, trace_id_spellings
from traceforge.ingest.sources import Record, SourceError, changed_since_ingest
from traceforge.ingest.stream import open_records
from traceforge.ingest.values import is_verbatim_id
from traceforge.model import ParseResult, Trace

# Traces by the id that names them in every file (a Langfuse trace's several conversations share
# it), with every file that holds part of them, a file that only describes them included
# (`sources.described_traces`): those held by several files, those described by a file none of
# their traces holds yet, and the joined ones that involve a file written again in this
# transaction; and whether every part was left apart before (`attributes.left_apart`), with the
# file that was missing then.
_GROUPS = f"""
WITH parts AS (
    SELECT trace_id,
           source_format,
           source_path,
           CASE WHEN list_contains(?::VARCHAR[], source_format)
                THEN json_extract_string(attributes, '$.conversation_id')
                ELSE regexp_replace(trace_id, ?, '') END AS key,
           CASE WHEN json_exists(attributes, '$.source_paths')
                THEN {writer.SOURCE_PATHS}
                ELSE [source_path] END AS paths,
           coalesce(json_exists(attributes, '$.left_apart'), false) AS settled,
           json_extract_string(attributes, '$.left_apart.missing') AS missing
    FROM traces
    WHERE source_format IN (SELECT unnest(?::VARCHAR[]))
    UNION ALL
    SELECT NULL, format, path, unnest(json_extract_string(described_traces, '$[*]')), [path], NULL, NULL
    FROM sources
    WHERE described_traces IS NOT NULL
)
SELECT source_format, key,
       list(trace_id ORDER BY trace_id) FILTER (WHERE trace_id IS NOT NULL),
       list_sort(list_distinct(flatten(list(paths)))),
       bool_and(settled), max(missing)
FROM parts
WHERE key IS NOT NULL
GROUP BY source_format, key
HAVING count(trace_id) > 0 AND (
    count(DISTINCT source_path) FILTER (WHERE trace_id IS NOT NULL) > 1
    OR NOT list_has_all(flatten(list(paths) FILTER (WHERE trace_id IS NOT NULL)),
                        list(source_path) FILTER (WHERE trace_id IS NULL))
    OR bool_or(len(paths) > 1 AND list_has_any(paths, ?::VARCHAR[]))
)
ORDER BY source_format, key
"""


# A file's `traces` count after a join: the traces holding its data, a joined one in each of its files
# (joining can change how many there are: a sub-agent's conversation in one file and its parent's
# in another make one trace with a child, each holding both files' data).
_RECOUNT = """
UPDATE sources SET traces = (
    SELECT count(*) FROM traces t
    WHERE t.source_path = sources.path
       OR list_contains(coalesce(json_extract_string(t.attributes, '$.source_paths[*]'), []), sources.path)
)
WHERE path IN (SELECT unnest(?::VARCHAR[]))
"""


# How many of the traces a file describes have been built with it.
_DESCRIBED_USED = f"""
SELECT count(DISTINCT json_extract_string(attributes, '$.conversation_id')) FROM traces
WHERE list_contains(coalesce({writer.SOURCE_PATHS}, []), ?)
  AND json_extract_string(attributes, '$.conversation_id') IN (SELECT unnest(?::VARCHAR[]))
"""


# The traces, LLM calls and tool calls the store holds of some files, a joined trace counted once.
_HOLDINGS = f"""
WITH held AS ({writer.TRACES_OF_FILES})
SELECT (SELECT count(*) FROM held),
       (SELECT count(*) FROM llm_calls WHERE trace_id IN (SELECT trace_id FROM held)),
       (SELECT count(*) FROM tool_calls WHERE trace_id IN (SELECT trace_id FROM held))
"""


def holdings(con: duckdb.DuckDBPyConnection, paths: list[str]) -> dict[str, int]:
    """What the store holds of `paths`: traces, LLM calls and tool calls, a joined trace once."""
    traces, llm_calls, tool_calls = con.execute(_HOLDINGS, [paths]).fetchone()
    return {"traces": traces, "llm_calls": llm_calls, "tool_calls": tool_calls}


@dataclass(frozen=True)
class _Joinable:
    """How a format's parts of one trace are read again from a file and put together."""

    read: Callable[[Iterable[Record], set[str]], dict[str, list[Any]]]  # wanted keys -> a file's parts
    build: Callable[[str, list[Any]], list[Trace]]  # every file's parts -> the trace(s); [] if none
    start: Callable[[Any], tuple[bool, datetime, int] | None]  # a part's (no time, time, line)
    # A trace id -> what the JSON text of each of its parts holds one of (in some case), or None
    # where that cannot be known: then every line of its files is parsed.
    spellings: Callable[[str], list[str] | None]


def _otlp_parts(records: Iterable[Record], wanted: set[str]) -> dict[str, list[Span | LogEvent]]:
    spans, events = otlp.spans_of(records, wanted)
    parts: dict[str, list[Span | LogEvent]] = {key: list(found) for key, found in spans.items()}
    for event in events:
        parts.setdefault(event.trace_id, []).append(event)
    return parts


def _otlp_traces(key: str, parts: list[Span | LogEvent]) -> list[Trace]:
    by_trace = {key: [part for part in parts if isinstance(part, Span)]}
    otlp.attach_log_events(by_trace, [part for part in parts if isinstance(part, LogEvent)], ParseResult())
    trace = otlp.build_trace(key, by_trace[key], ParseResult())
    return [trace] if trace is not None else []


def _as_written(trace_id: str) -> list[str] | None:
    """A Langfuse or LangSmith trace id is one of its parts' field values (or, in LangSmith's
    `dotted_order`, part of one), written as it is unless it could be escaped or was a number."""
    return [trace_id] if is_verbatim_id(trace_id) else None


JOINABLE = {
    otlp.FORMAT: _Joinable(
        _otlp_parts,
        _otlp_traces,
        lambda part: otlp.start_key(part) if isinstance(part, Span) else None,
        trace_id_spellings,
    ),
    langfuse.FORMAT: _Joinable(langfuse.items_of, langfuse.traces_of, langfuse.start_key, _as_written),
    langsmith.FORMAT: _Joinable(langsmith.items_of, langsmith.traces_of, langsmith.start_key, _as_written),
}
# A file's lines are searched for the spellings of the trace ids wanted of it, and only those that
# hold one parsed, while that costs less than parsing them all: each spelling is one more pass over
# the bytes. On the benchmark's OTel export, 32 spellings were searched at about 100 MB/s, 64 at
# 60 MB/s, and parsing every line and reading its spans ran at 85 MB/s.
MAX_SPELLINGS = 32
# Formats whose traces carry their source's trace id as `attributes.conversation_id` (one source
# trace can make several: a sub-agent's conversation is a child trace); OTel traces keep it as
# their id, the writer's suffix aside.
_BY_CONVERSATION = [langfuse.FORMAT, langsmith.FORMAT]


@dataclass
class JoinReport:
    joined: list[str] = field(default_factory=list)  # source trace ids now built from several files
    left_apart: dict[str, str] = field(default_factory=dict)  # such an id -> why its parts were not

    def extend(self, other: JoinReport) -> None:
        self.joined.extend(other.joined)
        self.left_apart.update(other.left_apart)


@dataclass
class _Group:
    source_format: str
    key: str
    trace_ids: list[str]
    paths: list[str]
    settled: bool  # every part was left apart by an earlier join, none written since
    missing: str | None  # the file that was gone then
    parts: list[tuple[str, Any]] = field(default_factory=list)  # (file, a span, observation ...)
    problem: str | None = None
    gone: str | None = None  # the file that cannot be read now


def join_split_traces(con: duckdb.DuckDBPyConnection, replaced: Iterable[str] = ()) -> JoinReport:
    """Join the stored parts of every trace spread over several files; `replaced` are the files
    this transaction wrote again with new content. Runs in the caller's transaction."""
    report = JoinReport()
    found = con.execute(
        _GROUPS, [_BY_CONVERSATION, writer.TRACE_ID_SUFFIX, sorted(JOINABLE), sorted(replaced)]
    ).fetchall()
    groups = [group for row in found if worth_trying((group := _Group(*row)).settled, group.missing)]
    if not groups:
        return report
    _read_parts(con, groups)
    replacements = []
    for group in groups:
        joined = None if group.problem else _joined_traces(group)
        if joined is None:
            reason = group.problem or "no LLM call or tool execution is left in its files"
            report.left_apart[group.key] = reason
            mark_left_apart(con, group.trace_ids, reason, group.gone)
            continue
        traces, primary, line = joined
        for trace in traces:
            trace.source_line = line
        replacements.append(Replacement(group.trace_ids, [(primary, trace) for trace in traces], group.paths))
        report.joined.append(group.key)
    replace_traces(con, replacements)
    return report


def mark_left_apart(
    con: duckdb.DuckDBPyConnection, trace_ids: list[str], reason: str, gone: str | None
) -> None:
    """Mark the parts of a trace that could not be joined: why, and the file that was gone then."""
    marker = {"left_apart": {"reason": reason, "missing": gone}}
    con.execute(
        "UPDATE traces SET attributes = json_merge_patch(attributes, ?) "
        "WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))",
        [json.dumps(marker), trace_ids],
    )


def worth_trying(settled: bool, missing: str | None) -> bool:
    """Parts left apart before are tried again only when something may have changed: a file of
    theirs written since (its part then carries no mark) or the missing file back. So a file
    deleted for good (an exporter's retention) is reported once, not read around at every ingest."""
    return not settled or (missing is not None and os.path.exists(missing))


def _read_parts(con: duckdb.DuckDBPyConnection, groups: list[_Group]) -> None:
    """Each group's parts, reading every file once for all the traces wanted of it."""
    wanted: dict[tuple[str, str], list[_Group]] = {}
    for group in groups:
        for path in group.paths:
            wanted.setdefault((path, group.source_format), []).append(group)
    ingested = dict(
        con.execute(
            "SELECT path, sha256 FROM sources WHERE path IN (SELECT unnest(?::VARCHAR[]))",
            [sorted({path for path, _ in wanted})],
        ).fetchall()
    )
    for (path, source_format), readers in sorted(wanted.items()):
        problem, gone = unreadable(path, ingested.get(path))
        parts: dict[str, list[Any]] = {}
        if problem is None:
            joinable, keys = JOINABLE[source_format], {g.key for g in readers}
            try:
                opened = open_records(Path(path), [], ingested[path], holding=_holding(joinable, keys))
                parts = joinable.read(opened.records, keys)
            except SourceError as exc:
                problem = f"{path} cannot be read again ({exc})"
        for group in readers:
            if problem is not None:
                if group.problem is None:
                    group.problem, group.gone = problem, gone
                continue
            group.parts.extend((path, part) for part in parts.get(group.key, []))


def _holding(joinable: _Joinable, keys: set[str]) -> list[bytes] | None:
    """What a line holding a part of `keys` holds one of, lower-cased; None to parse every line."""
    spellings: set[bytes] = set()
    for key in keys:
        found = joinable.spellings(key)
        if found is None:
            return None
        spellings.update(text.lower().encode("ascii") for text in found)
    return sorted(spellings) if len(spellings) <= MAX_SPELLINGS else None


def unreadable(path: str, sha256: str | None) -> tuple[str | None, str | None]:
    """Why `path` cannot be read again as the file ingested, or None; and the path when it is gone."""
    if sha256 is None:
        return f"{path} is not an ingested file", None
    match changed_since_ingest(Path(path), sha256):
        case ("gone", reason):
            return f"{path} cannot be read again ({reason}); put it back and ingest again to join them", path
        case ("changed", _):
            return f"{path} has changed since it was ingested; ingest it again to join them", None
    return None, None


def _joined_traces(group: _Group) -> tuple[list[Trace], str, int | None] | None:
    """The traces of the group's parts from all its files, the file of its first span or
    observation and that part's line there; None when no LLM call or tool execution is left."""
    joinable = JOINABLE[group.source_format]
    traces = joinable.build(group.key, [part for _, part in group.parts])
    starts = [(start, path) for path, part in group.parts if (start := joinable.start(part)) is not None]
    if not traces or not starts:
        return None
    primary = min(starts)[1]
    line = min(start[2] for start, path in starts if path == primary)
    for trace in traces:
        trace.attributes["source_paths"] = sorted({path for path, _ in group.parts})
    return traces, primary, line


@dataclass
class Replacement:
    """Traces built from several files, to put in the place of their parts."""

    old_ids: list[str]  # the parts' trace ids
    placed: list[tuple[str, Trace]]  # each trace built, with the file it is placed in (source_path)
    paths: list[str]  # every file involved, whose counts change


def replace_traces(con: duckdb.DuckDBPyConnection, replacements: list[Replacement]) -> None:
    """The rows of every replacement's old traces (and their analysis) deleted, and the traces built
    written in their place, all at once: a rotated export can join hundreds of traces at each cut.
    A trace's parent (a sub-agent's conversation's) is the joined trace of that source id."""
    if not replacements:
        return
    old_ids = [trace_id for replacement in replacements for trace_id in replacement.old_ids]
    for table in (*writer.TRACE_TABLES, "traces"):
        con.execute(f"DELETE FROM {table} WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))", [old_ids])
    placed = [(path, trace) for replacement in replacements for path, trace in replacement.placed]
    hashes = dict(
        con.execute(
            "SELECT path, sha256 FROM sources WHERE path IN (SELECT unnest(?::VARCHAR[]))",
            [sorted({path for path, _ in placed})],
        ).fetchall()
    )
    ids = writer._assign_ids(con, [_names(hashes.get(path, ""), trace) for path, trace in placed])
    rows = writer.Rows()
    for n, (path, trace) in enumerate(placed):
        writer._add_trace(rows, path, trace, (n, 0), ids, {})
    for table in writer.SCHEMAS:
        if rows.count(table):
            store.insert_frame(con, table, rows.frame(table))
    _recount(con, sorted({path for replacement in replacements for path in replacement.paths}))


def _names(sha256: str, trace: Trace) -> writer.FileNames:
    """What a joined trace's ids are made from: its file's hash, for the suffix an id the store
    already holds takes (`writer.TRACE_ID_SUFFIX`, which later joins take off again); never a
    part's names (`writer._is_part`), the join having made it whole."""
    return writer.FileNames(sha256, [writer.trace_names(trace, whole=True)])


def _recount(con: duckdb.DuckDBPyConnection, paths: list[str]) -> None:
    """The joined files' `traces`, and for a file describing traces (`sources.described_traces`)
    its records built into a trace counted as ingested rather than skipped."""
    con.execute(_RECOUNT, [paths])
    described = con.execute(
        "SELECT path, records, rejected, skipped_by_kind, described_traces FROM sources "
        "WHERE described_traces IS NOT NULL AND path IN (SELECT unnest(?::VARCHAR[]))",
        [paths],
    ).fetchall()
    for path, records, rejected, skipped_text, described_text in described:
        keys = json.loads(described_text)
        (used,) = con.execute(_DESCRIBED_USED, [path, keys]).fetchone()
        skipped = json.loads(skipped_text or "{}")
        skipped[langfuse.DESCRIBED] = len(keys) - used
        update_skipped(con, path, records, rejected, skipped)


def update_skipped(
    con: duckdb.DuckDBPyConnection, path: str, records: int, rejected: int, skipped: dict[str, int]
) -> None:
    """A file's records skipped by rule, per kind (a kind counted 0 left out), and so its ingested
    ones: what a join changes when records it used, or dropped, were counted otherwise."""
    skipped = {kind: n for kind, n in skipped.items() if n > 0}
    total = sum(skipped.values())
    con.execute(
        "UPDATE sources SET skipped_by_kind = ?, skipped = ?, ingested = ? WHERE path = ?",
        [json.dumps(skipped, sort_keys=True), total, records - rejected - total, path],
    )
