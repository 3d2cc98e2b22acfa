"""Ingest: files in, canonical rows in the store out.

>>> from traceforge import store
>>> from traceforge.ingest import ingest_paths
>>> con = store.connect("traceforge.duckdb")                     # doctest: +SKIP
>>> report = ingest_paths(con, ["logs/"])                        # doctest: +SKIP
>>> report.totals()["traces"]                                    # doctest: +SKIP
42

Each file is read once, its format detected from its content, parsed by its adapter, and written in
a transaction together with other whole files (a big file in parts of its own: `ingest.parts`). A
file whose bytes were ingested before (at this path or another) is not read again; a file whose
bytes changed replaces what it gave before.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import duckdb

from traceforge import store
from traceforge.ingest import detect, parallel, parts, writer
from traceforge.ingest.joins import JoinReport, holdings, join_split_traces
from traceforge.ingest.log_joins import join_log_conversations
from traceforge.ingest.sources import Record, SourceError, content_size, expand_paths, sha256_file
from traceforge.ingest.stream import ContentError, calling_every, open_records, streams_in_chunks
from traceforge.ingest.writer import ParsedFile
from traceforge.model import ParseResult, Reject, Trace
from traceforge.workers import worker_count

# A file this big (decompressed) whose traces are held until it is all read (a JSON document other
# than an array of records, or a format without `stream`: most agent frameworks' own logs) takes more
# than its size in memory: the user is told to split it (docs/ingest.md#big-files).
BIG_FILE_BYTES = 1 << 30
# Files are written together until a batch holds about this many rows, or this many bytes of rows
# (a batch is held in memory until it is written).
BATCH_ROWS = 50_000
BATCH_BYTES = 256 << 20
RAW_SAMPLE_CHARS = 65_536
PROGRESS_TRACES = 64  # how often a file written in parts reports how far it has been read


@dataclass
class FileReport:
    path: str
    status: str  # new | changed | unchanged | duplicate | failed
    format: str | None = None
    records: int = 0
    traces: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    rejected: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    message: str | None = None  # why the file failed, or what it duplicates


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # arguments that matched nothing
    joined: list[str] = field(default_factory=list)  # source trace ids joined from several files
    left_apart: dict[str, str] = field(default_factory=dict)  # such an id -> why its parts were not
    # files an earlier run stopped writing in parts (`ingest.parts`), not among this run's files:
    # the store holds part of each
    unfinished: list[str] = field(default_factory=list)
    # After joins, what the store holds of the files written: the files' own counts above are
    # what each gave alone (the part of a conversation in a later file re-sends the earlier turns).
    after_joins: dict[str, int] | None = None

    def add_joins(self, joins: JoinReport) -> None:
        """A batch's joins: a trace joined again by a later batch is listed once; one whose parts a
        later batch joined is no longer left apart."""
        self.joined = list(dict.fromkeys([*self.joined, *joins.joined]))
        self.left_apart = {k: v for k, v in self.left_apart.items() if k not in joins.joined}
        self.left_apart.update(joins.left_apart)

    def totals(self) -> dict[str, int]:
        keys = ("records", "traces", "llm_calls", "tool_calls", "rejected")
        totals = {k: sum(getattr(f, k) for f in self.files) for k in keys}
        totals["skipped"] = sum(sum(f.skipped.values()) for f in self.files)
        for status in ("new", "changed", "unchanged", "duplicate", "failed"):
            totals[f"files_{status}"] = sum(1 for f in self.files if f.status == status)
        return totals


ProgressCallback = Callable[[Path, int, int], None]
BigFileCallback = Callable[[Path, int, bool, str | None], None]
PartCallback = Callable[[Path, int, int], None]


def ingest_paths(
    con: duckdb.DuckDBPyConnection,
    paths: list[str | Path],
    fmt: str = "auto",
    on_file: ProgressCallback | None = None,
    workers: int | None = None,
    on_big_file: BigFileCallback | None = None,
    on_part: PartCallback | None = None,
) -> IngestReport:
    """Ingest files, folders and globs into the store behind `con` (`ingest_files` of what
    `sources.expand_paths` finds; the report's `problems` name the arguments that matched nothing)."""
    files, problems = expand_paths(paths)
    return ingest_files(con, files, fmt, on_file, workers, on_big_file, on_part, problems=problems)


def ingest_files(
    con: duckdb.DuckDBPyConnection,
    files: list[Path],
    fmt: str = "auto",
    on_file: ProgressCallback | None = None,
    workers: int | None = None,
    on_big_file: BigFileCallback | None = None,
    on_part: PartCallback | None = None,
    *,
    problems: list[str] | None = None,
) -> IngestReport:
    """Ingest `files` (absolute paths, as `sources.expand_paths` gives them) into the store
    behind `con`; `problems`, the walk's (arguments that matched nothing), go into the report.

    `fmt` forces an adapter by name (see `traceforge.ingest.detect.formats()`); "auto" detects it
    per file. `on_file(path, index, total)` is called as each file is taken up, for progress display;
    `on_big_file(path, size, compressed, None)` before any is read, for each new or changed file of
    at least `BIG_FILE_BYTES` decompressed (see `big_files`), and `on_big_file(path, size,
    compressed, why)` for such a file whose adapter finds, once it has read it a first time, that
    it must hold its traces after all (`ParseResult.held_whole`), before it does; `on_part(path,
    read, size)` as a file
    written in parts (`traceforge.ingest.parts`) is read (after each part, and every
    `PROGRESS_TRACES` traces), with the bytes of it read so far out of those to read: its size on
    disk, or twice that for a file read twice (a gateway or Responses API log; an OTel, Langfuse or
    LangSmith export), whose first pass reports as it goes.
    `workers` processes parse files while this one writes (`traceforge.ingest.parallel`); by default
    one per CPU when the files hold more than `parallel.PARALLEL_MIN_BYTES`, else files are parsed
    here. The store ends up the same either way.
    """
    adapter = _resolve_adapter(fmt)
    writer.adopt_relative_paths(con, files)
    stored = con.execute("SELECT path, sha256, bytes, error FROM sources").fetchall()
    # a file a run stopped writing in parts is read again, as new, its parts replaced
    interrupted = {path for path, _, _, error in stored if error == parts.INTERRUPTED}
    known = {path: sha for path, sha, _, _ in stored if path not in interrupted}
    by_sha = {}
    for path, sha in known.items():
        by_sha.setdefault(sha, path)
    replaces = {str(path) for path in files if str(path) in known or str(path) in interrupted}
    stored_sizes = {path: size for path, _, size, _ in stored if path not in interrupted}
    report = IngestReport(
        problems=list(problems or []), unfinished=sorted(interrupted - {str(path) for path in files})
    )
    sizes = content_sizes(files, stored_sizes)  # of the files most likely new or changed
    # written in parts by this process (`traceforge.ingest.parts`)
    in_parts = {str(path) for path, (size, _) in sizes.items() if size >= parts.PARTS_MIN_BYTES}
    if on_big_file:
        for path, size, compressed in big_files(sizes, adapter):
            on_big_file(path, size, compressed, None)
    count = _worker_count(workers, files)
    if count > 1:
        spool = parallel.spool_parent(con)
        decompressed = {str(path): size for path, (size, _) in sizes.items()}
        outcomes = parallel.parse_in_pool(
            files, fmt, dict(known), count, in_parts, parts.PARTS_MIN_BYTES, spool, decompressed
        )
    else:
        outcomes = (_outcome_here(path, known, by_sha, adapter, in_parts) for path in files)
    batch: list[parallel.Prepared | ParsedFile] = []
    batch_reports: list[FileReport] = []
    batch_rows = batch_bytes = 0

    def write_batch() -> None:
        nonlocal batch, batch_reports, batch_rows, batch_bytes
        report.add_joins(parallel.write_batch(con, batch, replaces))
        report.files.extend(batch_reports)
        batch, batch_reports, batch_rows, batch_bytes = [], [], 0, 0

    for index, (path, outcome) in enumerate(zip(files, outcomes, strict=True)):
        if on_file:
            on_file(path, index, len(files))
        key = str(path)
        sha = outcome.sha256
        if sha is None:
            report.files.append(FileReport(key, "failed", message=outcome.message))
            continue
        if known.get(key) == sha:
            report.files.append(FileReport(key, "unchanged"))
            continue
        item: parallel.Prepared | ParsedFile
        if sha in by_sha and by_sha[sha] != key:
            item = ParsedFile(key, sha, _size(path), None, duplicate_of=by_sha[sha], replaces=key in known)
            file_report = FileReport(key, "duplicate", message=f"same content as {by_sha[sha]}")
            rows = size = 0
        elif outcome.status == "in parts":
            if batch:  # files are written in their order
                write_batch()
            file_report, joins = _ingest_in_parts(
                con, path, sha, adapter, key in replaces, key in known, on_part, on_big_file
            )
            report.add_joins(joins)
            report.files.append(file_report)
            by_sha.setdefault(sha, key)
            known[key] = sha
            continue
        elif outcome.prepared is not None:
            item = outcome.prepared
            item.load()
            file_report = item.report
            rows, size = item.rows, item.bytes
        else:
            item = outcome.parsed
            file_report = _file_report(item)
            rows, size = _row_estimate(item.result), item.size
        by_sha.setdefault(sha, key)
        known[key] = sha
        batch.append(item)
        batch_reports.append(file_report)
        batch_rows += rows
        batch_bytes += size
        if batch_rows >= BATCH_ROWS or batch_bytes >= BATCH_BYTES:
            write_batch()
    if batch:
        write_batch()
    elif not any(f.status in ("new", "changed", "duplicate") for f in report.files):
        # nothing written: parts left apart earlier are joined once their files can be read again
        with store.transaction(con):
            report.add_joins(join_split_traces(con))
            report.add_joins(join_log_conversations(con))
    if report.joined:
        written = [f.path for f in report.files if f.status in ("new", "changed")]
        report.after_joins = holdings(con, written)
    return report


def content_sizes(files: list[Path], stored_sizes: dict[str, int]) -> dict[Path, tuple[int, bool]]:
    """Each file's size once decompressed and whether it is a gzip file (`sources.content_size`),
    but for the files the store holds with the same size on disk (most likely unchanged: not read
    again) and those that cannot be read (reported when their turn comes)."""
    found = {}
    for path in files:
        try:
            if stored_sizes.get(str(path)) != path.stat().st_size:
                found[path] = content_size(path)
        except OSError:
            continue
    return found


def big_files(
    sizes: dict[Path, tuple[int, bool]], adapter: ModuleType | None = None
) -> list[tuple[Path, int, bool]]:
    """The files of at least `BIG_FILE_BYTES` (of `content_sizes`) whose traces are held whole while
    they are parsed, with that size and whether they are gzip files. A big file is written in parts
    (`traceforge.ingest.parts`), but only an adapter that can `stream` it hands out its traces as it
    reads; for the others (agent frameworks' own logs, but OpenHands evaluation output) the file's
    traces are all in memory at once (`adapter`: the format forced, else detected from the file's
    first records). A Responses API log that its first pass finds it cannot stream
    (`openai_responses.stream`) is held whole too, but is not among these: that is only known once
    the file has been read, and `ingest_paths` names it then."""
    return [
        (path, size, compressed)
        for path, (size, compressed) in sizes.items()
        if size >= BIG_FILE_BYTES and not _streams(path, adapter)
    ]


def _streams(path: Path, adapter: ModuleType | None) -> bool:
    """Whether `path`'s records are read in chunks and its adapter hands out its traces as it reads
    them (decided from its first records; a file that `stream.streams_in_chunks` says is read
    whole is not opened whole to say so)."""
    if not streams_in_chunks(path):
        return False
    try:
        opened = open_records(path, [])
        sample = list(itertools.islice(opened.records, detect.SAMPLE_SIZE))
    except SourceError:
        return False
    return opened.streamed and _hands_out_traces(adapter or detect.detect(sample), sample)


def _hands_out_traces(adapter: ModuleType | None, sample: list[Record]) -> bool:
    """Whether `adapter` can `stream` the file these first records open, handing its traces out
    as it reads them (detect.py's protocol: `stream`, and `hands_out` where only some shapes do)."""
    if not hasattr(adapter, "stream") or not sample:
        return False
    hands_out = getattr(adapter, "hands_out", None)
    return hands_out is None or hands_out(sample)


def _resolve_adapter(fmt: str) -> ModuleType | None:
    return None if fmt == "auto" else detect.by_name(fmt)


def _worker_count(workers: int | None, files: list[Path]) -> int:
    size = sum(_size(path) for path in files) if len(files) > 1 else 0
    return worker_count(workers, size, parallel.PARALLEL_MIN_BYTES - 1, len(files))


def _outcome_here(
    path: Path, known: dict[str, str], by_sha: dict[str, str], adapter: ModuleType | None, in_parts: set[str]
) -> parallel.Outcome:
    """A file's outcome in this process: parsed unless unchanged, a duplicate, or to be written in
    parts."""
    key = str(path)
    try:
        sha = sha256_file(path)
    except OSError as exc:
        return parallel.Outcome(key, None, "unreadable", message=f"cannot read the file: {exc}")
    if known.get(key) == sha or (sha in by_sha and by_sha[sha] != key):
        return parallel.Outcome(key, sha, "skipped")
    if key in in_parts:
        return parallel.Outcome(key, sha, "in parts")
    try:
        parsed = _parse_file(path, sha, adapter, parts.PARTS_MIN_BYTES)
    except BiggerThanItsTrailerSays:
        return parallel.Outcome(key, sha, "in parts")
    parsed.replaces = key in known
    return parallel.Outcome(key, sha, "parsed", parsed=parsed)


def _row_estimate(result: ParseResult) -> int:
    return sum(1 + len(t.llm_calls) + len(t.tool_calls) + len(t.messages) for t in result.traces) + len(
        result.rejects
    )


@dataclass
class _Opened:
    """A file opened for parsing: its adapter and records, or (`records` None) why it cannot be
    parsed, in `parsed`."""

    parsed: ParsedFile
    adapter: ModuleType | None = None
    sample: list[Record] = field(default_factory=list)  # the first records, which chose the adapter
    records: Iterator[Record] | None = None  # every record, the sample's included
    rejects: list[Reject] = field(default_factory=list)  # lines that are not JSON, added as read
    bytes_read: Callable[[], int] = lambda: 0  # of the file on disk, so far (`OpenedFile.bytes_read`)
    content_read: Callable[[], int] = lambda: 0  # of its decompressed content (`OpenedFile.content_read`)


def _open_file(path: Path, sha: str, adapter: ModuleType | None) -> _Opened:
    """Open a file and choose its adapter (`adapter`, or the one its first records detect); big
    JSON Lines files, JSON arrays of records and CSV tables are streamed (`traceforge.ingest.stream`)."""
    key = str(path)
    rejects: list[Reject] = []
    try:
        opened = open_records(path, rejects, sha)
    except SourceError as exc:
        parsed = ParsedFile(key, sha, _size(path), None, error=str(exc))
        if isinstance(exc, ContentError):
            parsed.raw_sample = _sample(exc.head)
        return _Opened(parsed)
    parsed = ParsedFile(key, sha, opened.size, None)
    try:
        sample = list(itertools.islice(opened.records, detect.SAMPLE_SIZE))
        chosen = adapter or detect.detect(sample)
        if chosen is None or not sample:  # a forced format does not make an empty file a trace file
            count = len(sample) + sum(1 for _ in opened.records)
            if not count and not rejects:
                parsed.error = "empty file: no records"
            elif not count:
                parsed.error = "no record in the file could be read as JSON"
            else:
                parsed.error = (
                    "not a recognised trace format (known: " + ", ".join(detect.formats()) + "); "
                    "pass --format NAME if you know which it is"
                )
                parsed.raw_sample = _sample(opened.head)
            parsed.result = ParseResult(rejects=rejects, records=count + len(rejects))
            return _Opened(parsed)
    except SourceError as exc:  # a streamed file whose gzip data breaks off after its start
        return _Opened(ParsedFile(key, sha, opened.size, None, error=str(exc)))
    parsed.format = chosen.FORMAT
    records = itertools.chain(sample, opened.records)
    return _Opened(parsed, chosen, sample, records, rejects, opened.bytes_read, lambda: opened.content_read)


class BiggerThanItsTrailerSays(Exception):
    """A gzip file parsed whole holds more than `parts.PARTS_MIN_BYTES` after all: its trailer
    (`sources.content_size`) gave only its last member's size, or its size modulo 4 GiB. It is
    written in parts instead, as its real size would have had it."""


def _parse_file(path: Path, sha: str, adapter: ModuleType | None, limit: int | None = None) -> ParsedFile:
    """Read and parse one file whole; raises BiggerThanItsTrailerSays once more than `limit` bytes
    of its content have been read."""
    opened = _open_file(path, sha, adapter)
    parsed = opened.parsed
    if opened.records is None:
        return parsed
    records = opened.records if limit is None else _within(opened.records, opened.content_read, limit)
    try:
        result = opened.adapter.parse(records, parsed.path)
    except SourceError as exc:  # a streamed file whose gzip data breaks off after its start
        return ParsedFile(parsed.path, sha, parsed.size, None, error=str(exc))
    result.rejects[:0] = opened.rejects
    result.records += len(opened.rejects)
    parsed.result = result
    return parsed


def _within(records: Iterator[Record], content_read: Callable[[], int], limit: int) -> Iterator[Record]:
    for record in records:
        if content_read() >= limit:
            raise BiggerThanItsTrailerSays
        yield record


def _ingest_in_parts(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    sha: str,
    adapter: ModuleType | None,
    replaces: bool,
    changed: bool,
    on_part: PartCallback | None = None,
    on_big_file: BigFileCallback | None = None,
) -> tuple[FileReport, JoinReport]:
    """Parse a big file here and write it in parts as its traces come (`traceforge.ingest.parts`).
    `replaces`: the store holds rows of the file (`changed`: a version of it with other content; else
    the parts of a run that stopped in it). `on_big_file` is told if the adapter holds the file's
    traces after all (see `ingest_paths`)."""
    opened = _open_file(path, sha, adapter)
    parsed = opened.parsed
    parsed.replaces = changed
    if opened.records is None:
        return _file_report(parsed), parallel.write_batch(con, [parsed], {parsed.path} if replaces else set())
    chosen = opened.adapter
    read_twice = False  # a first pass has read the file: its progress counts both readings

    def first_progress(read: int) -> None:
        nonlocal read_twice
        read_twice = True
        if on_part:
            on_part(path, read, 2 * parsed.size)

    if _hands_out_traces(chosen, opened.sample):
        records = opened.records
        if on_big_file and (content := content_size(path))[0] >= BIG_FILE_BYTES:
            tell = functools.partial(on_big_file, path, *content)
            records = _telling_held_whole(records, parsed.result, tell)
        traces = chosen.stream(records, parsed.path, parsed.result, on_first_pass=first_progress)
    else:
        traces = _parsed_whole(chosen, opened.records, parsed)

    def progress() -> None:
        if on_part and read_twice:
            on_part(path, parsed.size + opened.bytes_read(), 2 * parsed.size)
        elif on_part:
            on_part(path, opened.bytes_read(), parsed.size)

    if on_part:  # a part can take many seconds to fill (9% of a big gateway log): report meanwhile
        traces = calling_every(traces, PROGRESS_TRACES, progress)
    parsed, written, joins = parts.write_in_parts(con, parsed, traces, opened.rejects, replaces, progress)
    return _file_report(parsed, written), joins


def _telling_held_whole(
    records: Iterator[Record], result: ParseResult, tell: Callable[[str], None]
) -> Iterator[Record]:
    """`records`, calling `tell(why)` once the adapter reading them says it holds the file's traces
    after all (`result.held_whole`, set after its first pass): at its next record, before it has
    parsed the file, which it does as it reads."""
    told = False
    for record in records:
        if not told and result.held_whole is not None:
            tell(result.held_whole)
            told = True
        yield record


def _parsed_whole(adapter: ModuleType, records: Iterator[Record], parsed: ParsedFile) -> Iterator[Trace]:
    """The traces of an adapter without `stream`, once it has parsed the whole file: parsed when the
    first is asked for, so that content breaking off midway fails the file where its parts are
    written (`parts.write_in_parts`)."""
    yield from adapter.parse(records, parsed.path).drain_into(parsed.result)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _sample(data: bytes) -> str:
    return data[:RAW_SAMPLE_CHARS].decode("utf-8", errors="replace")


def _file_report(parsed: ParsedFile, written: parts.Written | None = None) -> FileReport:
    """A file's line in the report; `written`: what the store took of a file written in parts,
    whose traces and rejects `parsed` no longer holds."""
    result = parsed.result
    if written is None:
        written = parts.Written(
            traces=len(result.traces),
            llm_calls=sum(len(t.llm_calls) for t in result.traces),
            tool_calls=sum(len(t.tool_calls) for t in result.traces),
            rejected=len(result.rejects),
        )
    return FileReport(
        path=parsed.path,
        status="failed" if parsed.error else ("changed" if parsed.replaces else "new"),
        format=parsed.format,
        records=writer.counts(parsed, written.rejected)[0],
        traces=written.traces,
        llm_calls=written.llm_calls,
        tool_calls=written.tool_calls,
        rejected=written.rejected + (1 if parsed.error else 0),
        skipped=dict(result.skipped),
        message=parsed.error,
    )
