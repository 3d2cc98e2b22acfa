"""Ingest: files in, canonical rows in the store out.

>>> from traceforge import store
>>> from traceforge.ingest import ingest_paths
>>> con = store.connect("traceforge.duckdb")                     # doctest: +SKIP
>>> report = ingest_paths(con, ["logs/"])                        # doctest: +SKIP
>>> report.totals()["traces"]                                    # doctest: +SKIP
42

Each file is read once, its format detected from its content, parsed by its adapter, and written in
a transaction together with other whole files. A file whose bytes were ingested before (at this path
or another) is not read again; a file whose bytes changed replaces what it gave before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from traceforge.ingest import detect
from traceforge.ingest.sources import SourceError, expand_paths, load, read_records, sha256_file
from traceforge.ingest.writer import ParsedFile, write
from traceforge.model import ParseResult, Reject

# Files are written together until a batch holds about this many rows.
BATCH_ROWS = 50_000
RAW_SAMPLE_CHARS = 65_536


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

    def totals(self) -> dict[str, int]:
        keys = ("records", "traces", "llm_calls", "tool_calls", "rejected")
        totals = {k: sum(getattr(f, k) for f in self.files) for k in keys}
        totals["skipped"] = sum(sum(f.skipped.values()) for f in self.files)
        for status in ("new", "changed", "unchanged", "duplicate", "failed"):
            totals[f"files_{status}"] = sum(1 for f in self.files if f.status == status)
        return totals


ProgressCallback = Callable[[Path, int, int], None]


def ingest_paths(
    con: duckdb.DuckDBPyConnection,
    paths: list[str | Path],
    fmt: str = "auto",
    on_file: ProgressCallback | None = None,
) -> IngestReport:
    """Ingest files, folders and globs into the store behind `con`.

    `fmt` forces an adapter by name (see `traceforge.ingest.detect.formats()`); "auto" detects it
    per file. `on_file(path, index, total)` is called before each file, for progress display.
    """
    adapter = None if fmt == "auto" else detect.by_name(fmt)
    files, problems = expand_paths(paths)
    report = IngestReport(problems=problems)
    known = {path: sha for path, sha in con.execute("SELECT path, sha256 FROM sources").fetchall()}
    by_sha = {}
    for path, sha in known.items():
        by_sha.setdefault(sha, path)
    batch: list[ParsedFile] = []
    batch_reports: list[FileReport] = []
    batch_rows = 0
    for index, path in enumerate(files):
        if on_file:
            on_file(path, index, len(files))
        key = str(path)
        try:
            sha = sha256_file(path)
        except OSError as exc:
            report.files.append(FileReport(key, "failed", message=f"cannot read the file: {exc}"))
            continue
        if known.get(key) == sha:
            report.files.append(FileReport(key, "unchanged"))
            continue
        if sha in by_sha and by_sha[sha] != key:
            parsed = ParsedFile(
                key, sha, path.stat().st_size, None, duplicate_of=by_sha[sha], replaces=key in known
            )
            file_report = FileReport(key, "duplicate", message=f"same content as {by_sha[sha]}")
        else:
            parsed = _parse_file(path, sha, adapter)
            parsed.replaces = key in known
            file_report = _file_report(parsed)
        by_sha.setdefault(sha, key)
        known[key] = sha
        batch.append(parsed)
        batch_reports.append(file_report)
        batch_rows += _row_estimate(parsed.result)
        if batch_rows >= BATCH_ROWS:
            write(con, batch)
            report.files.extend(batch_reports)
            batch, batch_reports, batch_rows = [], [], 0
    if batch:
        write(con, batch)
        report.files.extend(batch_reports)
    return report


def _row_estimate(result: ParseResult) -> int:
    return sum(1 + len(t.llm_calls) + len(t.tool_calls) + len(t.messages) for t in result.traces) + len(
        result.rejects
    )


def _parse_file(path: Path, sha: str, adapter) -> ParsedFile:
    key = str(path)
    try:
        source = load(path, sha)
    except SourceError as exc:
        return ParsedFile(key, sha, _size(path), None, error=str(exc))
    parsed = ParsedFile(key, sha, source.size, None)
    rejects: list[Reject] = []
    try:
        records = list(read_records(source, rejects))
    except SourceError as exc:
        parsed.error = str(exc)
        parsed.raw_sample = _sample(source.data)
        return parsed
    chosen = adapter or detect.detect(records[: detect.SAMPLE_SIZE])
    if chosen is None:
        if not records and not rejects:
            parsed.error = "empty file: no records"
        elif not records:
            parsed.error = "no record in the file could be read as JSON"
        else:
            parsed.error = (
                "not a recognised trace format (known: " + ", ".join(detect.formats()) + "); "
                "pass --format NAME if you know which it is"
            )
            parsed.raw_sample = _sample(source.data)
        parsed.result = ParseResult(rejects=rejects, records=len(records) + len(rejects))
        return parsed
    parsed.format = chosen.FORMAT
    result = chosen.parse(records, key)
    result.rejects[:0] = rejects
    result.records += len(rejects)
    parsed.result = result
    return parsed


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _sample(data: bytes) -> str:
    return data[:RAW_SAMPLE_CHARS].decode("utf-8", errors="replace")


def _file_report(parsed: ParsedFile) -> FileReport:
    result = parsed.result
    return FileReport(
        path=parsed.path,
        status="failed" if parsed.error else ("changed" if parsed.replaces else "new"),
        format=parsed.format,
        records=result.records,
        traces=len(result.traces),
        llm_calls=sum(len(t.llm_calls) for t in result.traces),
        tool_calls=sum(len(t.tool_calls) for t in result.traces),
        rejected=len(result.rejects) + (1 if parsed.error else 0),
        skipped=dict(result.skipped),
        message=parsed.error,
    )
