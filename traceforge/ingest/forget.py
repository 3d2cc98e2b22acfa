"""Forgetting files: the store left holding what it would hold had they never been ingested.

A user forgets a file ingested by mistake (a test run's logs), one whose traces must go (a deletion
request under a data-protection law), or one a run stopped writing in parts whose source is gone
(every command warns about it until it is ingested again or forgotten).

A file's own traces go with their rows. Some traces hold other files' data too: a trace joined
from parts in several files (`ingest.joins`, `ingest.log_joins`: `attributes.source_paths`), and a
file whose content was the forgotten file's (`sources.duplicate_of`: it was not read). Those other
files are read again, as the ingest of a changed file reads it, and written in the same
transaction: the joined traces are rebuilt from the files that remain, and the first file with a
forgotten file's content holds it now. So each of them must still be the file ingested (the same
SHA-256); where one has gone or changed, nothing is forgotten and the error names it. Calls marked
as copies of a forgotten file's calls (`copy_of`, a resumed Claude Code session) become the first.

Files whose trace, LLM call or tool call ids took another form because a forgotten file held them
first (a resumed session's copied calls, `<session>/toolu_…`; a trace id with the writer's suffix)
are read again too, and take the ids they would have had alone. The other files' ids stay as
they were. The workload tables (`workloads`, `inference_profile`) and what was exported before
still count the forgotten traces until `traceforge analyze` (or `profile`) and the exports run
again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from traceforge import store
from traceforge.ingest import _parse_file, _resolve_adapter, parallel, writer
from traceforge.ingest.joins import JoinReport
from traceforge.ingest.sources import changed_since_ingest


class CannotForget(ValueError):
    """A path names no ingested file, or a file to read again cannot be: nothing was forgotten."""


# The tables whose rows a report counts: what the store holds fewer of once files are forgotten.
REMOVED_FROM = ("traces", "llm_calls", "tool_calls", "rejects")


@dataclass
class ForgetReport:
    forgotten: list[str]  # the ingested files whose rows went
    removed: dict[str, int]  # how many fewer rows each table of `REMOVED_FROM` holds
    read_again: list[str] = field(default_factory=list)  # files parsed again to rebuild what they shared
    joins: JoinReport = field(default_factory=JoinReport)
    dry_run: bool = False  # everything done, then rolled back


def stored_files(stored: Iterable[str], paths: Iterable[str | Path]) -> list[str]:
    """The ingested files (`stored`: `sources.path`) that `paths` name: a file as ingested, or a
    folder and every file ingested from under it; neither need exist any more. Raises CannotForget
    for a path that names none."""
    found: list[str] = []
    for given in paths:
        absolute = os.path.abspath(given)
        folder = absolute.rstrip(os.sep) + os.sep
        named = [p for p in sorted(stored) if p in (str(given), absolute) or p.startswith(folder)]
        if not named:
            raise CannotForget(
                f"{given}: no file ingested from there; the `sources` table lists those that were "
                '(traceforge sql "SELECT path FROM sources")'
            )
        found.extend(p for p in named if p not in found)
    return found


def forget_files(
    con: duckdb.DuckDBPyConnection, paths: Iterable[str | Path], dry_run: bool = False
) -> ForgetReport:
    """Delete what the store holds of the files `paths` name (`stored_files`), reading again the
    files whose data is in the same traces or that had the same content, all in one transaction.
    With `dry_run`, do all of it and roll it back: the report says what would go. Raises
    CannotForget."""
    rows = con.execute("SELECT path, sha256, format, duplicate_of FROM sources").fetchall()
    sources = {path: rest for path, *rest in rows}
    targets = stored_files(sources, paths)
    duplicates: dict[str, list[str]] = {}  # each forgotten file's duplicates not forgotten, in order
    for path, (_, _, original) in sorted(sources.items()):
        if original in targets and path not in targets:
            duplicates.setdefault(original, []).append(path)
    holders = [copies[0] for copies in duplicates.values()]
    sharing = _sharing(con, targets)
    read_again = sorted({*sharing, *holders, *_renamed_by(con, targets)})
    # a trace joined from a file read again and files kept is rebuilt from those files too
    needed = sorted({*read_again, *_sharing(con, read_again, exclude=targets)})
    for path in needed:
        if (why := _not_readable(path, sources[path][0])) is not None:
            raise CannotForget(
                f"{path} holds data of the same traces as the files to forget (or their content) and "
                f"must be read again, but {why}"
            )
    items = []
    for path in read_again:
        sha, fmt, _ = sources[path]
        item = _parse_file(Path(path), sha, _resolve_adapter(fmt or "auto"))
        item.replaces = True
        items.append(item)
    before = _totals(con)
    con.execute("BEGIN TRANSACTION")
    try:
        writer.delete_files(con, targets)
        for holder, *others in duplicates.values():
            if others:
                con.execute(
                    "UPDATE sources SET duplicate_of = ? WHERE path IN (SELECT unnest(?::VARCHAR[]))",
                    [holder, others],
                )
        joins = parallel.write_items(con, items, set(read_again))
        after = _totals(con)
        removed = {table: count - after[table] for table, count in before.items()}
        if dry_run:
            store.rollback(con)
        else:
            store.commit(con)
    except BaseException:
        store.rollback(con)
        raise
    return ForgetReport(targets, removed, read_again, joins, dry_run)


def _totals(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    counts = ", ".join(f"(SELECT count(*) FROM {table})" for table in REMOVED_FROM)
    return dict(zip(REMOVED_FROM, con.execute(f"SELECT {counts}").fetchone(), strict=True))


def _not_readable(path: str, sha256: str | None) -> str | None:
    """Why `path` cannot be read again as the file ingested, with what to do; None if it can."""
    match changed_since_ingest(Path(path), sha256):
        case ("gone", reason):
            return f"it cannot be read ({reason}). Put it back as it was, or forget it too"
        case ("changed", _):
            return "it has changed since it was ingested. Ingest it again first, or forget it too"
    return None


# The files of the traces that hold, in another form, an id a trace of the forgotten files ($1)
# holds: a trace id with the writer's suffix ($2), a tool call id `<its trace>/<id>`, or a call or
# tool call marked as a copy of one (a resumed session's). They took that form because the
# forgotten file held the id first; read again, they take the ids they would have had alone.
_RENAMED_BY = f"""
WITH gone AS ({writer.TRACES_OF_FILES}),
gone_tools AS (SELECT tool_call_id FROM tool_calls WHERE trace_id IN (SELECT trace_id FROM gone))
SELECT DISTINCT t.source_path FROM traces t
WHERE t.trace_id NOT IN (SELECT trace_id FROM gone) AND (
    regexp_replace(t.trace_id, $2, '') IN (SELECT trace_id FROM gone)
    OR t.trace_id IN (
        SELECT trace_id FROM llm_calls
        WHERE copy_of IN (SELECT call_id FROM llm_calls WHERE trace_id IN (SELECT trace_id FROM gone))
    )
    OR t.trace_id IN (
        SELECT trace_id FROM tool_calls
        WHERE copy_of IN (SELECT tool_call_id FROM gone_tools)
           OR (starts_with(tool_call_id, trace_id || '/')
               AND substr(tool_call_id, length(trace_id) + 2) IN (SELECT tool_call_id FROM gone_tools))
    )
)
"""


def _renamed_by(con: duckdb.DuckDBPyConnection, targets: list[str]) -> list[str]:
    """The files holding ids in another form because one of `targets` held them first (`_RENAMED_BY`)."""
    rows = con.execute(_RENAMED_BY, [targets, writer.TRACE_ID_SUFFIX]).fetchall()
    return sorted({path for (path,) in rows} - set(targets))


def _sharing(con: duckdb.DuckDBPyConnection, paths: list[str], exclude: Iterable[str] = ()) -> list[str]:
    """The other files of the traces joined from any of `paths` and other files, but `exclude`."""
    if not paths:
        return []
    (found,) = con.execute(
        f"SELECT list_sort(list_distinct(flatten(list({writer.SOURCE_PATHS})))) FROM traces "
        f"WHERE list_has_any(coalesce({writer.SOURCE_PATHS}, []), ?::VARCHAR[])",
        [paths],
    ).fetchone()
    left_out = {*paths, *exclude}
    return [path for path in found or [] if path not in left_out]
