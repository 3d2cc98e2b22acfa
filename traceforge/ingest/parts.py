"""Big files written in parts, so that memory is bounded by a part rather than by the file.

A file of at least `PARTS_MIN_BYTES` (decompressed) is parsed in the main process and its traces are
written as they come, in parts of about `PART_ROWS` rows, each part in its own transaction: DuckDB
holds the rows a transaction adds in memory until it commits (measured: a 1 GB insert in one
transaction grew the process by about its size, committed in parts it stayed under 0.9 GB at a
512 MB limit), so one transaction per file would hold the whole file again. An adapter that can
hand out traces as it reads them (`stream`: transcripts, one conversation per record, and OpenHands
evaluation output, one run per record; a gateway or Responses API log, an OTel, Langfuse or
LangSmith export, read twice to learn where each conversation or trace ends; in JSON Lines, as one
JSON array or as a CSV table, all read in chunks) keeps only the part being written and what is
still going on; the others (other agent frameworks' own logs, JSON documents other than arrays of
records) are parsed whole first, and only their rows are built and written in parts.

While the parts are written, the file's `sources` row says so (`INTERRUPTED`): a run that stops half
way (killed, out of disk, Ctrl-C) leaves that row with the parts written so far, and the next ingest
of the file removes them and writes it again, as for a changed file, so no trace is stored twice and
none half. The last part's transaction writes the real `sources` row, joins the file's traces with
other files' (`ingest.joins`, `ingest.log_joins`) and marks copies, as a batch of whole files does.

Ids are chosen as they would be for the whole file: the store holds the file's earlier parts, so a
trace whose source id an earlier trace of the file has is named apart from it as it would be within
one batch. Two differences remain: a trace whose parent comes in a later part and had to be renamed
there points at the parent's source id (files that record parents write them first, and a gateway
log hands a branch out after the conversation it branched off); and a file read twice hands out its
traces in the order they end, not begin, so where two unrelated traces hold the same tool call id
(ids a model numbers per conversation), the one written first keeps it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import duckdb
import polars as pl

from traceforge import store
from traceforge.ingest import writer
from traceforge.ingest.copies import mark_copies
from traceforge.ingest.joins import JoinReport, join_split_traces
from traceforge.ingest.log_joins import join_log_conversations
from traceforge.ingest.parallel import write_batch
from traceforge.ingest.sources import SourceError
from traceforge.model import ParseResult, Reject, Trace

# Below this a file is parsed whole, by a worker where there are several files, and its rows are held
# until written (a 257 MB file of transcripts peaked at 2.05 GB so); at and above it, one process
# parses it and writes it in parts. A lower threshold would bound memory further but take files the
# size loggers rotate at (64 MB) away from the workers.
PARTS_MIN_BYTES = 256 << 20
PART_ROWS = 50_000
# How often Python hands its lock from thread to thread while a part is committed beside the
# parsing (`_Committer`), against its default of 5 ms: DuckDB takes the lock back again and again
# while it reads a part's rows, and waited up to 5 ms each time, so that committing a part beside
# the parsing took twice as long as alone (a 300 MB file of transcripts: 9.6 s at 0.5 ms, 11.0 s at
# 5 ms, 11.6 s committing on the main thread).
COMMITTER_SWITCH_INTERVAL = 0.0005
# `sources.error` while a file is written in parts, and after a run that stopped before its end.
INTERRUPTED = "ingest stopped before the end of this file: ingest it again to finish it"


def unfinished_files(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The files a run stopped writing in parts: the store holds part of each."""
    return [
        row[0]
        for row in con.execute(
            "SELECT path FROM sources WHERE error = ? ORDER BY path", [INTERRUPTED]
        ).fetchall()
    ]


@dataclass
class Written:
    """What the store holds of a file written in parts."""

    traces: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    rejected: int = 0  # lines rejected, by the reader or the adapter


def write_in_parts(
    con: duckdb.DuckDBPyConnection,
    parsed: writer.ParsedFile,
    traces: Iterator[Trace],
    line_rejects: list[Reject],
    replaces: bool,
    on_part: Callable[[], None] | None = None,
) -> tuple[writer.ParsedFile, Written, JoinReport]:
    """Write the `traces` of the file `parsed` names as they come, in parts, each but the last
    committed on a thread of its own while the next is read (`_Committer`).

    `parsed.result` is the `ParseResult` the adapter adds its counts and rejects to while `traces`
    is consumed; `line_rejects` the list the reader adds the lines that are not JSON to. `replaces`:
    the store holds the file with other content, or from a run that stopped in it (its rows go in
    the first part's transaction). `on_part()` is called as each part is handed over to be
    committed. Returns `parsed` with its counts, what was written, and what was joined; a file whose
    content breaks off (corrupt gzip data after its start) is written as failed, as a whole file
    would be, its parts removed: the `parsed` returned then carries the error, and nothing is
    written of it.
    """
    result = parsed.result
    file_ids: dict[str, str] = {}
    written = Written()
    part: list[Trace] = []
    rows = 0
    started = False
    unread = 0  # lines the reader rejected: records the adapter never saw
    committer = _Committer(con)
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(COMMITTER_SWITCH_INTERVAL)

    def part_frames(final: bool) -> dict[str, pl.DataFrame]:
        """The part's rows, in the transaction open on `con`."""
        nonlocal part, rows, started, unread
        rejects = [*line_rejects, *result.rejects]
        unread += len(line_rejects)
        line_rejects.clear()
        result.rejects.clear()
        if final:
            result.records += unread
        if not started and replaces:  # before naming the part: the ids it held are free again
            writer.delete_sources(con, [parsed.path])
        frames = writer.part_rows(con, parsed.path, parsed.sha256, part, rejects, file_ids)
        written.traces += len(part)
        written.llm_calls += sum(len(t.llm_calls) for t in part)
        written.tool_calls += sum(len(t.tool_calls) for t in part)
        written.rejected += len(rejects)
        part, rows = [], 0
        if final:
            if started:
                con.execute("DELETE FROM sources WHERE path = ?", [parsed.path])  # the mark
            frames["sources"] = writer.source_row(parsed, written.traces, written.rejected)
        elif not started:  # the mark, until the last part replaces it
            placeholder = replace(parsed, result=ParseResult())
            frames["sources"] = writer.source_row(placeholder, 0, 0).with_columns(
                pl.lit(INTERRUPTED).alias("error")
            )
        started = True
        return frames

    try:
        for trace in traces:
            part.append(trace)
            rows += 1 + len(trace.llm_calls) + len(trace.tool_calls) + len(trace.messages)
            if rows >= PART_ROWS:
                committer.wait()  # the part before is in the store: this one is named against it
                con.execute("BEGIN TRANSACTION")
                try:
                    frames = part_frames(final=False)
                except BaseException:
                    store.rollback(con)
                    raise
                committer.commit(frames)
                if on_part:
                    on_part()
        committer.wait()
    except SourceError as exc:
        committer.wait()
        failed = writer.ParsedFile(parsed.path, parsed.sha256, parsed.size, None, error=str(exc))
        joins = write_batch(con, [failed], {parsed.path} if started or replaces else set())
        return failed, Written(), joins
    finally:
        committer.wait_quietly()
        sys.setswitchinterval(switch_interval)
    with store.transaction(con):
        replaced = [parsed.path] if replaces else []
        _insert(con, part_frames(final=True))
        joins = join_split_traces(con, replaced)
        joins.extend(join_log_conversations(con, replaced))
        mark_copies(con)
    if on_part:
        on_part()
    return parsed, written, joins


def _insert(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame]) -> None:
    for table, frame in frames.items():
        store.insert_frame(con, table, frame)


class _Committer:
    """Inserts a part's rows and commits its transaction on a thread of its own, while the main
    thread reads and parses the next part: DuckDB lets go of Python's lock while it inserts and
    commits, so a big file keeps two cores busy, not one. One part at a time: the next is named
    (`writer.part_rows`) only once this one is in the store, and nothing else uses the connection
    until `wait` returns."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def commit(self, frames: dict[str, pl.DataFrame]) -> None:
        """Insert `frames` and commit the transaction open on the connection, on the thread."""
        self.thread = threading.Thread(target=self._commit, args=(frames,), name="traceforge-part")
        self.thread.start()

    def _commit(self, frames: dict[str, pl.DataFrame]) -> None:
        try:
            _insert(self.con, frames)
            store.commit(self.con)
        except BaseException as exc:
            store.rollback(self.con)
            self.error = exc

    def wait(self) -> None:
        """Wait for the part being committed; raise what stopped it."""
        self.wait_quietly()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def wait_quietly(self) -> None:
        """Wait for the part being committed, its error left for `wait` (the caller is already
        raising one of its own). A Ctrl-C meanwhile (a second one, where the first stopped the
        reading) is raised only once the commit is done: the caller would close the store under
        it."""
        interrupted = False
        while self.thread is not None:
            try:
                self.thread.join()
                self.thread = None
            except KeyboardInterrupt:
                interrupted = True
        if interrupted:
            raise KeyboardInterrupt
