"""OpenTelemetry traces whose spans lie in more than one file, joined into one trace.

A collector's file exporter rotates its output (by size or age), so a trace that was running at a
rotation has spans in two files, or more; so does a trace exported from two places. Files are parsed
one at a time (in parallel), and the writer keeps ids unique: the trace of a later file gets the OTel
trace id suffixed `@<its file's hash>`. After every write, in the write's transaction,
`join_split_traces` finds the OTel traces held by more than one file, reads those files' spans of
the trace again, and puts one trace built from all of them in place of the parts, under the OTel
trace id (a span found in two files counts once). Its `source_path` is the file of its first span;
`attributes.source_paths` lists every file that holds spans of it.

A file read again must be the file ingested (the same SHA-256): where one has changed or gone, the
parts stay as they are and the ingest report says why; ingesting the changed file joins them. A
joined trace one of whose files is ingested again with new content is built again from the files'
content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from traceforge import store
from traceforge.ingest import otlp, writer
from traceforge.ingest.otel_wire import LogEvent, Span
from traceforge.ingest.sources import SourceError, sha256_file
from traceforge.ingest.stream import open_records
from traceforge.model import ParseResult, Trace

# OTel traces by their OTel id (the writer's `TRACE_ID_SUFFIX` taken off), with every
# file that holds spans of them: those held by several stored traces, and the joined ones that
# involve a file written again in this transaction.
_GROUPS = """
WITH otel AS (
    SELECT trace_id,
           regexp_replace(trace_id, ?, '') AS otel_id,
           CASE WHEN json_exists(attributes, '$.source_paths')
                THEN json_extract_string(attributes, '$.source_paths[*]')
                ELSE [source_path] END AS paths
    FROM traces
    WHERE source_format = ?
)
SELECT otel_id, list(trace_id ORDER BY trace_id), list_sort(list_distinct(flatten(list(paths))))
FROM otel
GROUP BY otel_id
HAVING count(*) > 1 OR bool_or(len(paths) > 1 AND list_has_any(paths, ?::VARCHAR[]))
ORDER BY otel_id
"""


@dataclass
class JoinReport:
    joined: list[str] = field(default_factory=list)  # trace ids now built from several files
    left_apart: dict[str, str] = field(default_factory=dict)  # OTel trace id -> why its parts were not


@dataclass
class _Group:
    otel_id: str
    trace_ids: list[str]
    paths: list[str]
    spans: list[tuple[str, Span]] = field(default_factory=list)  # (file, span)
    log_events: list[LogEvent] = field(default_factory=list)
    problem: str | None = None


def join_split_traces(con: duckdb.DuckDBPyConnection, replaced: Iterable[str] = ()) -> JoinReport:
    """Join the stored parts of every OTel trace spread over several files; `replaced` are the
    files this transaction wrote again with new content. Runs in the caller's transaction."""
    report = JoinReport()
    found = con.execute(_GROUPS, [writer.TRACE_ID_SUFFIX, otlp.FORMAT, sorted(replaced)]).fetchall()
    groups = [_Group(otel_id, trace_ids, paths) for otel_id, trace_ids, paths in found]
    if not groups:
        return report
    _read_spans(con, groups)
    for group in groups:
        joined = None if group.problem else _joined_trace(group)
        if joined is None:
            report.left_apart[group.otel_id] = group.problem or "no LLM or tool span is left in its files"
            continue
        _replace(con, group.trace_ids, *joined)
        report.joined.append(group.otel_id)
    return report


def _read_spans(con: duckdb.DuckDBPyConnection, groups: list[_Group]) -> None:
    """Each group's spans, reading every file once for all the traces wanted of it."""
    wanted: dict[str, list[_Group]] = {}
    for group in groups:
        for path in group.paths:
            wanted.setdefault(path, []).append(group)
    ingested = dict(
        con.execute(
            "SELECT path, sha256 FROM sources WHERE path IN (SELECT unnest(?::VARCHAR[]))", [sorted(wanted)]
        ).fetchall()
    )
    for path, readers in wanted.items():
        problem = _unreadable(path, ingested.get(path))
        spans: dict[str, list[Span]] = {}
        events: list[LogEvent] = []
        if problem is None:
            try:
                opened = open_records(Path(path), [], ingested[path])
                spans, events = otlp.spans_of(opened.records, {g.otel_id for g in readers})
            except SourceError as exc:
                problem = f"{path} cannot be read again ({exc})"
        for group in readers:
            if problem is not None:
                group.problem = group.problem or problem
                continue
            group.spans.extend((path, span) for span in spans.get(group.otel_id, []))
            group.log_events.extend(e for e in events if e.trace_id == group.otel_id)


def _unreadable(path: str, sha256: str | None) -> str | None:
    if sha256 is None:
        return f"{path} is not an ingested file"
    try:
        current = sha256_file(Path(path))
    except OSError as exc:
        reason = exc.strerror or exc
        return f"{path} cannot be read again ({reason}); put it back and ingest again to join them"
    if current != sha256:
        return f"{path} has changed since it was ingested; ingest it again to join them"
    return None


def _joined_trace(group: _Group) -> tuple[Trace, str] | None:
    """One trace of the group's spans from all its files, and the file of its first span; None when
    none of them is an LLM or tool span."""
    by_trace = {group.otel_id: [span for _, span in group.spans]}
    otlp.attach_log_events(by_trace, group.log_events, ParseResult())
    trace = otlp.build_trace(group.otel_id, by_trace[group.otel_id], ParseResult())
    if trace is None:
        return None
    files = {id(span): path for path, span in group.spans}
    first = min((span for _, span in group.spans), key=otlp.start_key)
    primary = files[id(first)]
    trace.source_line = min(span.line for path, span in group.spans if path == primary)
    trace.attributes["source_paths"] = sorted({path for path, _ in group.spans})
    return trace, primary


def _replace(con: duckdb.DuckDBPyConnection, trace_ids: list[str], trace: Trace, primary: str) -> None:
    """The parts' rows (and their analysis) deleted, the joined trace written in their place."""
    for table in (*writer.TRACE_TABLES, "traces"):
        con.execute(f"DELETE FROM {table} WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))", [trace_ids])
    parsed = writer.ParsedFile(primary, "", 0, otlp.FORMAT, ParseResult(traces=[trace]))
    ids = writer._assign_ids(con, [parsed])
    rows = writer.Rows()
    writer._add_trace(rows, primary, trace, ids, {})
    for table in writer.SCHEMAS:
        if rows.count(table):
            store.insert_frame(con, table, rows.frame(table))
