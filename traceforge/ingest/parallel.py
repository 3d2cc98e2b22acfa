"""Parsing files in a process pool while this process writes: both cores busy on a big ingest.

Each worker hashes a file, parses it with its adapter and turns the result into the store's rows
(Arrow-backed polars frames), with ids chosen as `writer` would choose them in an empty store. The
main process takes the files back in their order, applies the same unchanged / duplicate / changed
rules as a serial ingest, and writes each batch in one transaction. Before writing, it checks the
ids a worker chose against the store and against the files before it in the batch: a file whose ids
collide (a rotated OTel export's later part of a trace, the same conversation id ingested from
another file, a source that reuses tool call ids across files) is given its ids by `writer`,
exactly as the serial ingest would, from the names the worker sent with its rows (`writer.renamed`):
it is not parsed again. So the store ends up the same whichever way a file went.

The workers are `traceforge.workers` processes: at most two tasks per worker are in flight, so
memory stays bounded by a few files' rows however many files there are. A task is one file, or
several small ones (`file_groups`): thousands of small files (a team's Claude Code sessions) would
otherwise each cost a frame per table (about 2 ms whatever the file's size) and a message back. A
worker hands a task's rows back as Arrow files in a hidden folder beside the store
(`SharedRows.spool`), read back when the first file's turn comes (`Prepared.load`): pickled, the
frames were serialised whole first. Rows under `SPOOL_MIN_BYTES` go back pickled: five files
written, read and removed cost more than such rows' parsing, in the process that writes the store.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from traceforge import store
from traceforge.ingest import writer
from traceforge.ingest.copies import mark_copies
from traceforge.ingest.joins import JoinReport, join_split_traces
from traceforge.ingest.log_joins import join_log_conversations
from traceforge.ingest.sources import sha256_file
from traceforge.workers import ordered_map

# Below this many bytes of input, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
# A worker's rows smaller than this go back pickled, not through files (`SharedRows.spool`): for a
# small file, writing, reading back and removing five files cost more than its parsing.
SPOOL_MIN_BYTES = 1 << 20
# Files of under this many bytes in all (decompressed), and no more than `GROUP_FILES` of them, are
# parsed in one worker task (`file_groups`); a bigger file is a task alone.
GROUP_BYTES = 4 << 20
GROUP_FILES = 64
# More frames than this in one insert, small on average, are copied into one chunk first (`_concat`).
RECHUNK_FRAMES = 64
ID_COLUMNS = {"traces": "trace_id", "llm_calls": "call_id", "tool_calls": "tool_call_id"}


@dataclass
class Outcome:
    """What a worker made of one file."""

    path: str
    sha256: str | None  # None: the file could not be read
    status: str  # unchanged | duplicate | skipped | parsed | unreadable | in parts
    message: str | None = None
    prepared: Prepared | None = None  # parsed in a worker: rows ready to insert
    parsed: writer.ParsedFile | None = None  # parsed in this process: written through `writer`


@dataclass
class SharedRows:
    """The rows of the files of one worker task as a frame per table, handed back pickled or,
    `spool`ed, through Arrow files."""

    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    spooled: dict[str, str] = field(default_factory=dict)  # table -> the Arrow IPC file of its frame

    def spool(self, folder: str, min_bytes: int = 0) -> None:
        """Write the frames to Arrow IPC files in `folder` and let go of them, so that a worker
        hands back their paths: a pickled frame is first serialised whole, which took a worker
        2.7 times the frames' size at once (measured: 330 to 655 MB for a 64 MB file). Frames of
        under `min_bytes` in all are kept, to go pickled (`SPOOL_MIN_BYTES`); so are those whose
        files cannot be written (a full disk)."""
        if sum(frame.estimated_size() for frame in self.frames.values()) < min_bytes:
            return
        stem = os.path.join(folder, uuid.uuid4().hex)
        try:
            for table, frame in self.frames.items():
                path = self.spooled[table] = f"{stem}-{table}.arrow"
                frame.write_ipc(path, compression="uncompressed")
        except OSError:
            for path in self.spooled.values():
                with contextlib.suppress(OSError):
                    os.unlink(path)
            self.spooled = {}
            return
        self.frames = {}

    def load(self) -> None:
        """Read the spooled frames back, removing their files (where the system lets a file that is
        read go: elsewhere the spool's folder goes at the end of the ingest); once for a task."""
        for table, path in self.spooled.items():
            self.frames[table] = pl.read_ipc(path)
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.spooled = {}


@dataclass
class Prepared:
    """One parsed file as rows ready to insert, with its report."""

    path: str
    sha256: str
    report: Any  # traceforge.ingest.FileReport
    names: writer.FileNames  # what its ids were made from: to name them again (`writer.renamed`)
    spans: dict[str, tuple[int, int]]  # table -> (first row, rows) of its rows in `shared`
    shared: SharedRows  # its task's rows
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)  # its own rows, once `load`ed

    def load(self) -> None:
        """Its rows, sliced from its task's (no copy)."""
        self.shared.load()
        self.frames = {table: self.shared.frames[table].slice(*span) for table, span in self.spans.items()}

    @property
    def rows(self) -> int:
        return sum(frame.height for frame in self.frames.values())

    @property
    def bytes(self) -> int:
        return sum(frame.estimated_size() for frame in self.frames.values())


def file_groups(paths: list[str], sizes: dict[str, int], max_bytes: int, max_files: int) -> list[list[str]]:
    """`paths` in their order as worker tasks: consecutive files of under `max_bytes` in all
    (`sizes`: each file's bytes, decompressed where it is a gzip file), `max_files` at most,
    together; a bigger file, or one without a size (it cannot be read), alone."""
    groups: list[list[str]] = []
    group: list[str] = []
    held = 0
    for path in paths:
        size = sizes.get(path, max_bytes)
        if group and (held + size > max_bytes or len(group) >= max_files):
            groups.append(group)
            group, held = [], 0
        group.append(path)
        held += size
    if group:
        groups.append(group)
    return groups


def prepare_files(
    paths: list[str],
    fmt: str,
    known: dict[str, str],
    shas: set[str],
    in_parts: set[str] = frozenset(),
    parts_min_bytes: int | None = None,
    spool: str | None = None,
    spool_min_bytes: int = 0,
) -> list[Outcome]:
    """Hash and parse files into rows, as a worker does a task (`known`: path -> sha256 in the store,
    `shas`: its values; `in_parts`: the files the main process parses, to write them in parts, as it
    does a file found to hold `parts_min_bytes` or more once read: `BiggerThanItsTrailerSays`;
    `spool`: the folder to write the rows to, if they hold `spool_min_bytes` or more,
    `SharedRows.spool`). The files' rows are made into one frame per table, each file's `Prepared`
    knowing its rows' place in them."""
    from traceforge.ingest import BiggerThanItsTrailerSays, _file_report, _parse_file, _resolve_adapter

    rows = writer.Rows()
    shared = SharedRows()  # its frames made once every file is parsed
    outcomes = []
    for path_text in paths:
        path = Path(path_text)
        try:
            sha = sha256_file(path)
        except OSError as exc:
            outcomes.append(Outcome(path_text, None, "unreadable", message=f"cannot read the file: {exc}"))
            continue
        if known.get(path_text) == sha:
            outcomes.append(Outcome(path_text, sha, "unchanged"))
            continue
        if sha in shas:
            outcomes.append(Outcome(path_text, sha, "duplicate"))
            continue
        if path_text in in_parts:
            outcomes.append(Outcome(path_text, sha, "in parts"))
            continue
        try:
            parsed = _parse_file(path, sha, _resolve_adapter(fmt), parts_min_bytes)
        except BiggerThanItsTrailerSays:
            outcomes.append(Outcome(path_text, sha, "in parts"))
            continue
        parsed.replaces = path_text in known
        report = _file_report(parsed)
        names = writer.names_of(parsed)
        ids = writer._assign_ids(None, [names])
        before = {table: rows.count(table) for table in writer.SCHEMAS}
        writer._add_file(rows, parsed, ids)
        del parsed, ids  # the rows hold what is kept: a big file's parsed objects go before its frames
        spans = {
            table: (first, rows.count(table) - first)
            for table, first in before.items()
            if rows.count(table) > first
        }
        prepared = Prepared(path_text, sha, report, names, spans, shared)
        outcomes.append(Outcome(path_text, sha, "parsed", prepared=prepared))
    shared.frames = {table: rows.frame(table) for table in writer.SCHEMAS if rows.count(table)}
    if spool is not None:
        shared.spool(spool, spool_min_bytes)
    return outcomes


def spool_parent(con: duckdb.DuckDBPyConnection) -> str | None:
    """Where the workers' rows are spooled (`parse_in_pool`): `TRACEFORGE_TEMP_DIRECTORY` where set,
    else beside the store (on the disk the user chose for it: the system's temporary folder may be
    held in memory), else (a store in memory) the system's temporary folder."""
    (store_file,) = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    chosen = store.settings_from_env().get("temp_directory")
    if chosen:
        return chosen
    return os.path.dirname(os.path.abspath(store_file)) if store_file else None


def _prepare(
    fmt: str,
    known: dict[str, str],
    shas: set[str],
    in_parts: set[str],
    parts_min_bytes: int,
    spool: str,
    spool_min_bytes: int,
    paths: list[str],
) -> list[Outcome]:
    return prepare_files(paths, fmt, known, shas, in_parts, parts_min_bytes, spool, spool_min_bytes)


def parse_in_pool(
    files: list[Path],
    fmt: str,
    known: dict[str, str],
    workers: int,
    in_parts: set[str],
    parts_min_bytes: int,
    spool: str | None,
    content_sizes: dict[str, int],
) -> Iterator[Outcome]:
    """Outcomes of `files`, in their order, parsed by `workers` processes, but for the files
    `in_parts` (only hashed: this process writes them in parts, `traceforge.ingest.parts`) and those
    found to hold `parts_min_bytes` or more once read (`BiggerThanItsTrailerSays`). The workers hand
    their rows back through files (`SharedRows.spool`; `Prepared.load` reads them) in a hidden folder
    made in `spool` (`spool_parent`; a folder walk skips it), removed once every outcome is taken;
    rows of under `SPOOL_MIN_BYTES` go back pickled. Small files go to a worker several at a time
    (`file_groups`), by their sizes decompressed (`content_sizes`, where known) or on disk."""
    if spool:
        os.makedirs(spool, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=".traceforge-rows-", dir=spool)
    # sent to each worker once; `_prepare` gets them before each task's paths
    settings = (fmt, known, set(known.values()), in_parts, parts_min_bytes, folder, SPOOL_MIN_BYTES)
    paths = [str(path) for path in files]
    tasks = file_groups(paths, _sizes(paths, content_sizes), GROUP_BYTES, GROUP_FILES)
    try:
        for outcomes in ordered_map("traceforge.ingest.parallel:_prepare", tasks, workers, settings):
            yield from outcomes
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sizes(paths: list[str], content_sizes: dict[str, int]) -> dict[str, int]:
    """Each readable file's size decompressed where known, else on disk (a file most likely
    unchanged, only hashed)."""
    sizes = {}
    for path in paths:
        with contextlib.suppress(OSError):
            sizes[path] = content_sizes[path] if path in content_sizes else os.path.getsize(path)
    return sizes


def write_batch(
    con: duckdb.DuckDBPyConnection, items: list[Prepared | writer.ParsedFile], replaces: set[str]
) -> JoinReport:
    """Write a batch in one transaction (`write_items`). Returns what was joined."""
    with store.transaction(con):
        return write_items(con, items, replaces)


def write_items(
    con: duckdb.DuckDBPyConnection, items: list[Prepared | writer.ParsedFile], replaces: set[str]
) -> JoinReport:
    """Write files in the transaction open on `con`: prepared files whose ids are free as they are;
    the files parsed here (duplicates, a serial ingest's) and the prepared files whose ids collide,
    named together by `writer` (a prepared file's rows renamed, not parsed again); then join the
    traces now spread over several files (`ingest.joins`, `ingest.log_joins`), mark the requests
    logged twice (`ingest.copies`) and drop the workload rows of traces that went. The files in
    `replaces` replace what the store held of them. Returns what was joined."""
    replaced = [item.path for item in items if item.path in replaces]
    writer.delete_sources(con, replaced)
    prepared = [item for item in items if isinstance(item, Prepared)]
    colliding = {id(prepared[k]) for k in _colliding(con, prepared)}
    for table in writer.SCHEMAS:
        frames = [p.frames[table] for p in prepared if table in p.frames and id(p) not in colliding]
        if frames:
            store.insert_frame(con, table, _concat(frames))
    slow = [item for item in items if not isinstance(item, Prepared) or id(item) in colliding]
    if slow:
        names = [item.names if isinstance(item, Prepared) else writer.names_of(item) for item in slow]
        ids = writer._assign_ids(con, names)
        written = [
            writer.renamed(item.frames, item.names, ids, file_no)
            if isinstance(item, Prepared)
            else writer.rows_of(item, ids, file_no)
            for file_no, item in enumerate(slow)
        ]
        for table in writer.SCHEMAS:
            frames = [frames[table] for frames in written if table in frames]
            if frames:
                store.insert_frame(con, table, _concat(frames))
    joins = join_split_traces(con, replaced)
    joins.extend(join_log_conversations(con, replaced))
    mark_copies(con)
    # A trace that went (a file replaced or forgotten, parts joined) goes from the workloads the last
    # `analyze` gave; a trace written again under its id keeps its workload until the next one.
    con.execute("DELETE FROM trace_workloads WHERE trace_id NOT IN (SELECT trace_id FROM traces)")
    return joins


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The frames as one, for one insert. Many small frames (a batch of small files) are copied
    into one chunk: DuckDB reads a frame of thousands of tiny chunks several times slower (4,204
    Claude Code sessions: 8.0 s to insert, 3.8 of them turning the chunks to Arrow). Bigger ones
    (files of 64 MB) are not copied: that would hold the batch twice."""
    small = (
        len(frames) > RECHUNK_FRAMES
        and sum(f.estimated_size() for f in frames) < len(frames) * SPOOL_MIN_BYTES
    )
    return pl.concat(frames, how="vertical", rechunk=small)


def _colliding(con: duckdb.DuckDBPyConnection, prepared: list[Prepared]) -> set[int]:
    """Indices of the prepared files holding an id the store has, or one an earlier file of the
    batch has."""
    colliding: set[int] = set()
    for table, column in ID_COLUMNS.items():
        holding = [(k, p.frames[table][column]) for k, p in enumerate(prepared) if table in p.frames]
        if not holding:
            continue
        # one frame of every file's ids, not a frame per file: a batch can hold thousands of small files
        files = itertools.chain.from_iterable(itertools.repeat(k, len(ids)) for k, ids in holding)
        ids = pl.DataFrame(
            {
                "id": pl.concat([ids for _, ids in holding], rechunk=True),
                "file": pl.Series(list(files), dtype=pl.Int32),
            }
        )
        first = ids.group_by("id").agg(pl.col("file").min().alias("first"))
        later = ids.join(first, on="id").filter(pl.col("file") > pl.col("first"))
        colliding.update(later["file"].to_list())
        with store.registered(con, "_tf_ids", ids):
            taken = con.execute(
                f"SELECT DISTINCT i.file FROM _tf_ids i JOIN {table} t ON t.{column} = i.id"
            ).fetchall()
        colliding.update(row[0] for row in taken)
    return colliding
