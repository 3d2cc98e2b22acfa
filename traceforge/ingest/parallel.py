"""Parsing files in a process pool while this process writes: both cores busy on a big ingest.

Each worker hashes a file, parses it with its adapter and turns the result into the store's rows
(Arrow-backed polars frames), with ids chosen as `writer` would choose them in an empty store. The
main process takes the files back in their order, applies the same unchanged / duplicate / changed
rules as a serial ingest, and writes each batch in one transaction. Before writing, it checks the
ids a worker chose against the store and against the files before it in the batch: a file whose ids
collide (the same conversation id ingested from another file, a source that reuses tool call ids
across files) is parsed again here and given its ids by `writer`, exactly as the serial ingest
would. So the store ends up the same whichever way a file went.

Workers are plain subprocesses fed over pipes (see `_Worker` for why not multiprocessing), and at
most two files per worker are in flight, so memory stays bounded by a few files' rows however many
files there are.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import polars as pl

from traceforge.ingest import writer
from traceforge.ingest.sources import sha256_file

# Below this many bytes of input, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
ID_COLUMNS = {"traces": "trace_id", "llm_calls": "call_id", "tool_calls": "tool_call_id"}


def default_workers() -> int:
    """One worker per CPU this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass
class Outcome:
    """What a worker made of one file."""

    path: str
    sha256: str | None  # None: the file could not be read
    status: str  # unchanged | duplicate | skipped | parsed | unreadable
    message: str | None = None
    prepared: Prepared | None = None  # parsed in a worker: rows ready to insert
    parsed: writer.ParsedFile | None = None  # parsed in this process: written through `writer`


@dataclass
class Prepared:
    """One parsed file as rows ready to insert, with its report."""

    path: str
    sha256: str
    report: Any  # traceforge.ingest.FileReport
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(frame.height for frame in self.frames.values())

    @property
    def bytes(self) -> int:
        return sum(frame.estimated_size() for frame in self.frames.values())


class WorkerError(RuntimeError):
    """A parsing worker failed: its traceback, or how it died."""


def prepare_file(path_text: str, fmt: str, known: dict[str, str], shas: set[str]) -> Outcome:
    """Hash and parse one file into rows, as a worker does (`known`: path -> sha256 in the store,
    `shas`: its values)."""
    from traceforge.ingest import _file_report, _parse_file, _resolve_adapter

    path = Path(path_text)
    try:
        sha = sha256_file(path)
    except OSError as exc:
        return Outcome(path_text, None, "unreadable", message=f"cannot read the file: {exc}")
    if known.get(path_text) == sha:
        return Outcome(path_text, sha, "unchanged")
    if sha in shas:
        return Outcome(path_text, sha, "duplicate")
    parsed = _parse_file(path, sha, _resolve_adapter(fmt))
    parsed.replaces = path_text in known
    report = _file_report(parsed)
    ids = writer._assign_ids(None, [parsed])
    rows = writer.Rows()
    writer._add_file(rows, parsed, ids)
    frames = {table: rows.frame(table) for table in writer.SCHEMAS if rows.count(table)}
    return Outcome(path_text, sha, "parsed", prepared=Prepared(path_text, sha, report, frames))


def _send(stream: BinaryIO, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)
    stream.flush()


def _receive(stream: BinaryIO) -> Any:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


class _Worker:
    """A parsing process (a fresh Python running `_serve`), fed file paths over a pipe.

    A plain subprocess rather than multiprocessing: a worker never re-imports the caller's main
    script (a script without an `if __name__ == "__main__"` guard would ingest again in each
    worker) and never inherits this process's threads (DuckDB's, polars') through fork."""

    def __init__(self, fmt: str, known: dict[str, str], results: queue.Queue) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from traceforge.ingest import parallel; parallel._serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        _send(self.process.stdin, (fmt, known))
        self.in_flight = 0
        self.reader = threading.Thread(target=self._read, args=(results,), daemon=True)
        self.reader.start()

    def submit(self, index: int, path: Path) -> None:
        self.in_flight += 1
        _send(self.process.stdin, (index, str(path)))

    def _read(self, results: queue.Queue) -> None:
        while True:
            try:
                message = _receive(self.process.stdout)
            except (EOFError, OSError, pickle.UnpicklingError):
                results.put((None, self, None))
                return
            results.put((*message, self))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def parse_in_pool(files: list[Path], fmt: str, known: dict[str, str], workers: int) -> Iterator[Outcome]:
    """Outcomes of `files`, in their order, parsed by `workers` processes (at most two files in
    flight per worker, so finished results never pile up)."""
    results: queue.Queue = queue.Queue()
    pool = [_Worker(fmt, known, results) for _ in range(workers)]
    try:
        upcoming = iter(enumerate(files))
        done: dict[int, Outcome] = {}
        next_index = 0

        def feed(worker: _Worker) -> None:
            while worker.in_flight < 2:
                item = next(upcoming, None)
                if item is None:
                    return
                worker.submit(*item)

        for worker in pool:
            feed(worker)
        while next_index < len(files):
            while next_index not in done:
                index, outcome, worker = results.get()
                if index is None:
                    code = worker.process.wait()
                    raise WorkerError(f"a parsing worker exited unexpectedly (exit status {code})")
                if isinstance(outcome, WorkerError):
                    raise outcome
                worker.in_flight -= 1
                done[index] = outcome
                feed(worker)
            yield done.pop(next_index)
            next_index += 1
    finally:
        for worker in pool:
            worker.close()


def _serve() -> None:
    """The worker's loop: read (fmt, known), then (index, path) per file; answer (index, outcome)."""
    source = sys.stdin.buffer
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing else may write to the answer pipe
    fmt, known = _receive(source)
    shas = set(known.values())
    while True:
        try:
            index, path_text = _receive(source)
        except EOFError:
            return
        try:
            outcome: Outcome | WorkerError = prepare_file(path_text, fmt, known, shas)
        except Exception:
            outcome = WorkerError(f"parsing {path_text} failed in a worker:\n{traceback.format_exc()}")
        _send(answers, (index, outcome))


def write_batch(
    con: duckdb.DuckDBPyConnection,
    items: list[Prepared | writer.ParsedFile],
    replaces: set[str],
    reparse: Callable[[str, str], writer.ParsedFile],
) -> None:
    """Write a batch in one transaction: prepared files whose ids are free as they are, the rest
    (collisions, duplicates) through `writer` after parsing them again with `reparse(path, sha)`."""
    con.execute("BEGIN TRANSACTION")
    try:
        for item in items:
            if item.path in replaces:
                writer._delete_source(con, item.path)
        prepared = [item for item in items if isinstance(item, Prepared)]
        colliding = _colliding(con, prepared)
        fast = [p for k, p in enumerate(prepared) if k not in colliding]
        for table in writer.SCHEMAS:
            frames = [p.frames[table] for p in fast if table in p.frames]
            if frames:
                _insert(con, table, pl.concat(frames, how="vertical", rechunk=False))
        position = {id(p): k for k, p in enumerate(prepared)}
        slow: list[writer.ParsedFile] = []
        for item in items:
            if not isinstance(item, Prepared):
                slow.append(item)
            elif position[id(item)] in colliding:
                parsed = reparse(item.path, item.sha256)
                parsed.replaces = item.path in replaces
                slow.append(parsed)
        if slow:
            ids = writer._assign_ids(con, slow)
            rows = writer.Rows()
            for parsed in slow:
                writer._add_file(rows, parsed, ids)
            for table in writer.SCHEMAS:
                if rows.count(table):
                    _insert(con, table, rows.frame(table))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _insert(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> None:
    con.register("_tf_rows", frame)
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _tf_rows")
    finally:
        con.unregister("_tf_rows")


def _colliding(con: duckdb.DuckDBPyConnection, prepared: list[Prepared]) -> set[int]:
    """Indices of the prepared files holding an id the store has, or one an earlier file of the
    batch has."""
    colliding: set[int] = set()
    for table, column in ID_COLUMNS.items():
        parts = [
            pl.DataFrame({"id": p.frames[table][column], "file": k}, schema={"id": pl.Utf8, "file": pl.Int32})
            for k, p in enumerate(prepared)
            if table in p.frames
        ]
        if not parts:
            continue
        ids = pl.concat(parts)
        first = ids.group_by("id").agg(pl.col("file").min().alias("first"))
        later = ids.join(first, on="id").filter(pl.col("file") > pl.col("first"))
        colliding.update(later["file"].to_list())
        con.register("_tf_ids", ids)
        try:
            taken = con.execute(
                f"SELECT DISTINCT i.file FROM _tf_ids i JOIN {table} t ON t.{column} = i.id"
            ).fetchall()
        finally:
            con.unregister("_tf_ids")
        colliding.update(row[0] for row in taken)
    return colliding
