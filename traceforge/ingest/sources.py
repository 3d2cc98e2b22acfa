"""Finding input files and reading their records.

Paths may be files, folders (walked recursively), or glob patterns; any file may be gzip-compressed
(recognised by its magic bytes, not its name). A file holds either JSON Lines (one record per line)
or one JSON document; which one is decided from the content. A top-level JSON array yields its
elements as records. A file that is not JSON but a CSV table with a header row (as observability
platforms export tables) yields one dict per row, its cells as text. Records carry their line number
(JSON Lines; the row's first line in CSV) or 1-based element index (JSON arrays) so that a reject can
say where it came from.
"""

from __future__ import annotations

import csv
import glob
import gzip
import hashlib
import io
import json
import os
import shlex
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceforge.ingest.values import MAX_NESTING, nesting_exceeds, parse_json
from traceforge.model import Reject

GZIP_MAGIC = b"\x1f\x8b"
# Other archives and compressions a log shipper or an export may write, by their magic bytes:
# (name, the command that unpacks one). traceforge reads plain and gzip files.
OTHER_COMPRESSIONS = (
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -d FILE"),
    (b"BZh", "bzip2", "bunzip2 FILE"),
    (b"\xfd7zXZ\x00", "xz", "unxz FILE"),
    (b"\x04\x22\x4d\x18", "lz4", "lz4 -d FILE"),
    (b"PK\x03\x04", "a zip archive", "unzip FILE"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "7z x FILE"),
)
# Deflate expands at most 1,032 times (zlib's technical details): a gzip trailer saying more than
# that of the whole file is not a trailer but the last bytes of a cut or damaged file.
DEFLATE_MAX_RATIO = 1032
# Files that are certainly not traces, skipped when walking a folder (named explicitly, they are read):
# docs and code beside the traces, and DuckDB stores (`traceforge analyze .` must not read its own store).
IGNORED_SUFFIXES = {
    ".md",
    ".txt",
    ".py",
    ".sql",
    ".toml",
    ".yaml",
    ".yml",
    ".lock",
    ".png",
    ".jpg",
    ".duckdb",
    ".wal",
}


class SourceError(Exception):
    """A whole file that cannot be read as records (corrupt gzip, binary, not JSON)."""


@dataclass
class Record:
    line: int  # 1-based line (JSON Lines) or element index (JSON array); 1 for a single document
    value: Any
    raw: str | None = None  # the record's text, kept for JSON Lines so a reject can store it


@dataclass
class SourceFile:
    path: Path
    data: bytes  # decompressed content
    sha256: str  # of the bytes on disk, so an unchanged file is recognised before decompressing
    size: int
    compressed: bool


def expand_paths(paths: list[str | Path]) -> tuple[list[Path], list[str]]:
    """Resolve files, folders and globs to a sorted, de-duplicated list of absolute file paths (the
    store keys files by them, so a file is the same file whichever folder ingest runs in).

    Returns (files, problems): `problems` names each argument that matched nothing.
    """
    found: dict[str, Path] = {}
    problems = []

    def add(path: Path) -> None:
        found[str(path.resolve())] = Path(os.path.abspath(path))  # symbolic links kept as named

    for raw in paths:
        text = str(raw)
        path = Path(text).expanduser()
        if path.is_file():
            add(path)
        elif path.is_dir():
            before = len(found)
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    candidate = Path(root) / name
                    if name.startswith(".") or candidate.suffix.lower() in IGNORED_SUFFIXES:
                        continue
                    add(candidate)
            if len(found) == before:
                problems.append(
                    f"{text}: the folder holds no file to read (hidden files and "
                    f"{', '.join(sorted(IGNORED_SUFFIXES))} files are left out)"
                )
        elif glob.has_magic(text):
            matches = [Path(m) for m in sorted(glob.glob(os.path.expanduser(text), recursive=True))]
            files = [m for m in matches if m.is_file()]
            if not files:
                problems.append(f"{text}: the pattern matched no files")
            for match in files:
                add(match)
        else:
            problems.append(f"{text}: no such file or folder")
    return sorted(found.values(), key=lambda p: str(p)), problems


def content_size(path: Path) -> tuple[int, bool]:
    """How many bytes `path` holds once decompressed, and whether it is a gzip file: its size, or
    for a gzip file the size its trailer records (of the last member, modulo 4 GiB: an estimate,
    which a file parsed whole corrects once read: `ingest.BiggerThanItsTrailerSays`), whichever is
    larger; a trailer no deflate stream could reach is ignored (a cut file, which fails when read)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size < 18 or fh.read(2) != GZIP_MAGIC:
            return size, False
        fh.seek(-4, os.SEEK_END)
        trailer = int.from_bytes(fh.read(4), "little")
        return max(size, trailer if trailer <= DEFLATE_MAX_RATIO * size else 0), True


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def changed_since_ingest(path: Path, sha256: str | None) -> tuple[str, str] | None:
    """How the file at `path` is no longer the one ingested with `sha256`: ("gone", the system's
    reason) where it cannot be read, ("changed", "") where its content differs; None where it is
    the same file. For the steps that must read an ingested file again as it was."""
    try:
        current = sha256_file(path)
    except OSError as exc:
        return "gone", str(exc.strerror or exc)
    return None if current == sha256 else ("changed", "")


def refuse_other_compression(head: bytes, path: Path) -> None:
    """Raise SourceError naming the compression that a file's first bytes show, other than gzip,
    and how to unpack it: read as text, a zstd log failed as "not JSON", which says nothing of why."""
    for magic, name, command in OTHER_COMPRESSIONS:
        if head.startswith(magic):
            compressed = name if name.startswith("a ") else f"compressed with {name}"
            raise SourceError(
                f"{compressed}, which traceforge does not read (plain and gzip files only): unpack it "
                f"({command.replace('FILE', shlex.quote(path.name))}) and ingest what it gives"
            )


def load(path: Path, sha256: str | None = None) -> SourceFile:
    """Read `path`, decompressing gzip content. Raises SourceError for a corrupt archive."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read the file: {exc.strerror or exc}") from exc
    refuse_other_compression(raw[:8], path)
    digest = sha256 or hashlib.sha256(raw).hexdigest()
    compressed = raw[:2] == GZIP_MAGIC
    data = raw
    if compressed:
        try:
            data = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise SourceError(
                f"corrupt or truncated gzip data ({exc}); re-copy the file or gunzip it to see "
                "what is recoverable"
            ) from exc
    return SourceFile(path=path, data=data, sha256=digest, size=len(raw), compressed=compressed)


UTF8_BOM = b"\xef\xbb\xbf"
TOO_DEEP = (
    f"nested deeper than {MAX_NESTING} levels, more than any trace needs; "
    "the writer may have looped: check the record at its source"
)


def _as_utf8(data: bytes) -> bytes:
    """The content without its byte order mark; UTF-16 text (as Windows PowerShell redirects write
    it, recognised by its mark) re-encoded as UTF-8."""
    if data.startswith(UTF8_BOM):
        return data[3:]
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError:
            return data
    return data


def looks_binary(data: bytes) -> bool:
    sample = data[:4096]
    return b"\x00" in sample


def read_records(source: SourceFile, rejects: list[Reject]) -> Iterator[Record]:
    """Yield the records of a file; lines that are not JSON go to `rejects` with their line number.

    The whole content is tried as one JSON document first (a JSON Lines file fails that at once, at
    its second line). Otherwise it is read as JSON Lines, as long as at least one line holds a JSON
    object or array: so a log whose first line was cut off still gives its other lines; failing that,
    as a CSV table with a header row. Raises SourceError when the file as a whole is none of these
    (binary, prose, a truncated document).
    """
    data = _as_utf8(source.data)
    if looks_binary(data):
        raise SourceError("binary content, not JSON or JSON Lines")
    if not data.strip():
        return
    document_error = None
    try:
        # nesting is checked below: per element of an array (one too deep is rejected on its own)
        document = parse_json(data.decode("utf-8"), max_nesting=sys.maxsize)
        if not isinstance(document, list) and nesting_exceeds(document, MAX_NESTING):
            raise ValueError(TOO_DEEP)
    except UnicodeDecodeError:
        document_error = "not valid UTF-8"
    except json.JSONDecodeError as exc:
        document_error = f"{json_error(exc.msg)} at line {exc.lineno} column {exc.colno}"
    except ValueError:
        document_error = TOO_DEEP
    else:
        if isinstance(document, list):
            deep = nesting_exceeds(document, MAX_NESTING)
            for index, value in enumerate(document, start=1):
                if deep and isinstance(value, dict | list) and nesting_exceeds(value, MAX_NESTING):
                    rejects.append(Reject(line=index, error=TOO_DEEP))
                else:
                    yield Record(line=index, value=value)
        else:
            yield Record(line=1, value=document)
        return
    line_rejects: list[Reject] = []
    records = list(_read_json_lines(data, line_rejects))
    if not any(isinstance(r.value, dict | list) for r in records):
        table = _read_csv(data, rejects)
        if table is not None:
            yield from table
            return
        if document_error == TOO_DEEP:
            raise SourceError(f"a JSON document {TOO_DEEP}")
        raise SourceError(
            f"not JSON or JSON Lines ({document_error}); if it is a truncated JSON document, "
            "the writer may have crashed: restore or re-export it"
        )
    rejects.extend(line_rejects)
    yield from records


def json_error(message: str) -> str:
    """A JSON reader's error, to be followed by where: "Unterminated string starting at" without
    its last word, which the place adds."""
    return message.removesuffix(" at")


def _read_json_lines(
    data: bytes, rejects: list[Reject], wanted: Callable[[int, bytes], bool] | None = None
) -> Iterator[Record]:
    """The records of JSON Lines `data`, numbered from 1; with `wanted`, only the lines it takes
    (given their number and bytes; the others are not parsed)."""
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip() or (wanted is not None and not wanted(number, line)):
            continue
        try:
            text = line.decode("utf-8").removeprefix("\ufeff")  # a BOM inside: files concatenated
        except UnicodeDecodeError as exc:
            rejects.append(
                Reject(
                    line=number,
                    error=f"not valid UTF-8 at byte {exc.start} of the line; re-encode the file as UTF-8",
                    raw=line.decode("utf-8", errors="replace"),
                )
            )
            continue
        try:
            value = parse_json(text)
        except json.JSONDecodeError as exc:
            rejects.append(
                Reject(
                    line=number,
                    error=(
                        f"invalid JSON: {json_error(exc.msg)} at column {exc.colno} "
                        "(truncated or corrupt line?)"
                    ),
                    raw=text,
                )
            )
            continue
        except ValueError:
            rejects.append(Reject(line=number, error=TOO_DEEP, raw=text))
            continue
        yield Record(line=number, value=value, raw=text)


CSV_MAX_HEADER_CHARS = 200


def _read_csv(data: bytes, rejects: list[Reject]) -> list[Record] | None:
    """The rows of a CSV table with a header row, as dicts of text cells; None when the content is
    not such a table (one column, an empty or overlong header name, no row that fits the header).
    A row whose field count differs from the header's goes to `rejects` with its line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    rows = csv_table(io.StringIO(text, newline=""))  # split at \n, \r, \r\n only, as csv expects
    if rows is None:
        return None
    records: list[Record] = []
    bad: list[Reject] = []
    for row in rows:
        (records if isinstance(row, Record) else bad).append(row)
    if not records:
        return None
    rejects.extend(bad)
    return records


def csv_table(lines: Iterable[str]) -> Iterator[Record | Reject] | None:
    """A CSV table's rows, read from its `lines` (their line ends kept) as they are taken: each a
    Record of text cells by header name, or a Reject (a row whose field count differs from the
    header's; an unreadable row, which ends the table); None when the first line is not a header
    (one column, an empty or overlong name)."""
    csv.field_size_limit(2**31 - 1)  # exported prompts and outputs exceed the default 128 KiB cell
    taken = _TakenLines(iter(lines))
    reader = csv.reader(taken)
    try:
        header = next(reader)
    except (csv.Error, StopIteration):
        return None
    if len(header) < 2 or any(not h.strip() or len(h) > CSV_MAX_HEADER_CHARS or "\n" in h for h in header):
        return None
    taken.take()
    return _csv_rows(reader, taken, header)


class _TakenLines:
    """The lines csv.reader reads, kept until the row they make is taken: its raw text."""

    def __init__(self, lines: Iterator[str]) -> None:
        self.lines = lines
        self.taken: list[str] = []

    def __iter__(self) -> _TakenLines:
        return self

    def __next__(self) -> str:
        line = next(self.lines)
        self.taken.append(line)
        return line

    def take(self) -> list[str]:
        taken, self.taken = self.taken, []
        return taken


def _csv_rows(reader: Any, taken: _TakenLines, header: list[str]) -> Iterator[Record | Reject]:
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield Reject(start, f"unreadable CSV row: {exc}", "".join(taken.take()[:1]))
            return
        raw = "".join(taken.take()).rstrip("\r\n")
        if not row:
            continue
        if len(row) != len(header):
            yield Reject(start, f"CSV row has {len(row)} fields, the header has {len(header)}", raw)
            continue
        yield Record(line=start, value=dict(zip(header, row, strict=True)), raw=raw)
