"""Reading a file's records without holding the file: big JSON Lines files in chunks of whole lines.

A production log is often gigabytes of JSON Lines. Reading it whole (its bytes, then every record
parsed at once) takes several times its size in memory; here such a file is read in chunks of about
`CHUNK_BYTES` that end at a line break, and its records are parsed chunk by chunk as the adapter
consumes them. Everything else (a file that fits in one chunk, a JSON document, a CSV table, UTF-16
text, binary content, a JSON Lines file whose first line is not JSON) is read whole by
`traceforge.ingest.sources.read_records`, exactly as before: streaming applies only where it cannot
change what is read. A file read again for a few of its lines (a trace's parts, to join them) is
streamed even when it fits in one chunk, so that its other lines are not parsed.

>>> rejects = []
>>> opened = open_records(Path("logs/gateway.jsonl"), rejects)          # doctest: +SKIP
>>> first = next(opened.records)                                         # doctest: +SKIP
"""

from __future__ import annotations

import functools
import gzip
import json
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from traceforge.ingest.sources import (
    GZIP_MAGIC,
    Record,
    SourceError,
    SourceFile,
    _read_json_lines,
    read_records,
)
from traceforge.model import ParseResult, Reject, Trace

Learned = TypeVar("Learned")
Item = TypeVar("Item")

CHUNK_BYTES = 8 << 20
SAMPLE_CHARS = 65_536
UTF8_BOM = b"\xef\xbb\xbf"


class ContentError(SourceError):
    """A file read whole whose content is not records; `head` is its start, kept with the reject."""

    def __init__(self, message: str, head: bytes) -> None:
        super().__init__(message)
        self.head = head


@dataclass
class OpenedFile:
    """A file's records, streamed or read whole, and what a whole-file reject needs."""

    records: Iterator[Record]
    size: int  # bytes on disk
    head: bytes  # the start of the (decompressed) content
    streamed: bool
    handle: BinaryIO | None = None  # the file on disk, while its records are streamed
    content_read: int = 0  # bytes of (decompressed) content read so far: all of it once read whole

    def bytes_read(self) -> int:
        """How many of the file's bytes on disk have been read (all of them once it is read whole
        or to its end): how far a big file's ingest has got."""
        try:
            return self.size if self.handle is None or self.handle.closed else self.handle.tell()
        except (OSError, ValueError):
            return self.size


def open_records(
    path: Path,
    rejects: list[Reject],
    sha256: str = "",
    lines: Collection[int] | None = None,
    holding: Collection[bytes] | None = None,
) -> OpenedFile:
    """The records of `path`; lines that are not JSON go to `rejects` as they are met.

    A file read again for a few of its records names them: by `lines` (line numbers), or by
    `holding` (lower-case ASCII byte strings, such as trace ids: a line is parsed only when its
    lower-cased bytes hold one of them). The other lines of a JSON Lines file, however small, are then
    skipped without being parsed; a file that is not plainly JSON Lines (a JSON document, a CSV
    table, UTF-16 text) still gives every record.

    Raises SourceError (as `sources.read_records` does) for a file that cannot be read as records;
    a streamed file can also raise it later, while its records are consumed (gzip data corrupt
    after the first chunk).
    """
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the generator or below
    except OSError as exc:
        raise SourceError(f"cannot read the file: {exc.strerror or exc}") from exc
    try:
        size = path.stat().st_size
        compressed = handle.read(2) == GZIP_MAGIC
        handle.seek(0)
        stream: BinaryIO = gzip.GzipFile(fileobj=handle) if compressed else handle
        first = _read_chunk(stream)
        complete = len(first) < CHUNK_BYTES  # the whole content is in the first chunk
        filtered = lines is not None or holding is not None
        if (complete and not filtered) or not _starts_with_json_line(first):
            data = first if complete else first + _read_rest(stream)
            handle.close()
            source = SourceFile(path=path, data=data, sha256=sha256, size=size, compressed=compressed)
            try:
                records = list(read_records(source, rejects))
            except SourceError as exc:
                raise ContentError(str(exc), data[:SAMPLE_CHARS]) from exc
            return OpenedFile(
                iter(records), size, data[:SAMPLE_CHARS], streamed=False, content_read=len(data)
            )
    except BaseException:
        handle.close()
        raise
    opened = OpenedFile(iter(()), size, first[:SAMPLE_CHARS], streamed=True, handle=handle)
    opened.records = _stream(opened, stream, first, rejects, lines, holding)
    return opened


def starts_as_json_lines(path: Path) -> bool:
    """Whether `path`'s content opens as JSON Lines (`_starts_with_json_line`, on its first chunk):
    what `open_records` streams when it is more than a chunk. Reads only that chunk."""
    try:
        with open(path, "rb") as handle:
            compressed = handle.read(2) == GZIP_MAGIC
            handle.seek(0)
            stream: BinaryIO = gzip.GzipFile(fileobj=handle) if compressed else handle
            return _starts_with_json_line(_read_chunk(stream))
    except (OSError, SourceError):
        return False


# Why a file read twice (`first_pass`) fails when the second reading differs from the first.
FILE_CHANGED = "the file changed while it was read: ingest it again"
PROGRESS_RECORDS = 2048  # how often `first_pass` reports how far it has read


def first_pass(source_path: str, on_read: Callable[[int], None] | None = None) -> Iterator[Record] | None:
    """A big file's records read once more, for an adapter that must see them all before it can
    hand out any trace (where a conversation ends, which record holds a trace's last span), or None
    for a file that is not JSON Lines: read whole, it is parsed whole. Lines that are not JSON are
    skipped here; the second reading rejects them. `on_read(bytes)` is told, every few thousand
    records and at the end, how many of the file's bytes on disk this reading has read."""
    path = Path(source_path)
    if not starts_as_json_lines(path):
        return None
    opened = open_records(path, [])
    return opened.records if on_read is None else _reporting(opened, on_read)


def read_twice(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None,
    parse: Callable[[Iterable[Record], str], ParseResult],
    learn: Callable[[Iterator[Record]], Learned],
    hand_out: Callable[[Iterable[Record], Learned, ParseResult], Iterator[Trace]],
) -> Iterator[Trace]:
    """The `stream` of an adapter that must read a big file once before it can hand out any trace:
    `learn` reads the first pass (`first_pass`) for what the second needs (where each trace ends),
    then `hand_out` reads `records` with it, counting into `result`. A file that is not JSON Lines
    is parsed whole by `parse`, and its traces handed out after (`ParseResult.drain_into`)."""
    first = first_pass(source_path, on_first_pass)
    if first is None:
        yield from parse(records, source_path).drain_into(result)
        return
    yield from hand_out(records, learn(first), result)


def last_lines(records: Iterable[Record], trace_ids: Callable[[Record], Iterable[str]]) -> dict[str, int]:
    """Per trace id, the line of the last record `trace_ids` finds it in: where a trace whose parts
    can come anywhere in a file (spans, observations, runs) is complete."""
    last: dict[str, int] = {}
    for record in records:
        for trace_id in trace_ids(record):
            last[trace_id] = record.line
    return last


def _reporting(opened: OpenedFile, on_read: Callable[[int], None]) -> Iterator[Record]:
    yield from calling_every(opened.records, PROGRESS_RECORDS, lambda: on_read(opened.bytes_read()))
    on_read(opened.size)


def calling_every(items: Iterable[Item], n: int, call: Callable[[], None]) -> Iterator[Item]:
    """`items`, calling `call()` after every `n` of them: how a long reading reports its progress."""
    for count, item in enumerate(items, start=1):
        yield item
        if count % n == 0:
            call()


def _gzip_error(exc: BaseException) -> SourceError:
    return SourceError(
        f"corrupt or truncated gzip data ({exc}); re-copy the file or gunzip it to see what is recoverable"
    )


def _read_chunk(stream: BinaryIO) -> bytes:
    """About CHUNK_BYTES of content, extended to the end of its last line."""
    try:
        chunk = stream.read(CHUNK_BYTES)
        if len(chunk) == CHUNK_BYTES and not chunk.endswith(b"\n"):
            chunk += stream.readline()
    except (OSError, EOFError, zlib.error) as exc:
        raise _gzip_error(exc) from exc
    return chunk


def _read_rest(stream: BinaryIO) -> bytes:
    try:
        return stream.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise _gzip_error(exc) from exc


def _starts_with_json_line(chunk: bytes) -> bool:
    """Whether the content is plainly JSON Lines: UTF-8, its first non-empty line a JSON object or
    array and another non-empty line after it. (A JSON document cannot be: a complete value followed
    by more content is not JSON.)"""
    data = chunk.removeprefix(UTF8_BOM)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data[:4096]:
        return False
    lines = (line for line in data.split(b"\n", 64) if line.strip())
    first = next(lines, None)
    if first is None or next(lines, None) is None:
        return False
    try:
        value = json.loads(first.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(value, dict | list)


def _lines_in(chunk: bytes) -> int:
    """How many lines `bytes.splitlines` finds in a chunk that ends at a line break."""
    lines = chunk.count(b"\n")
    if b"\r" in chunk:
        lines += chunk.count(b"\r") - chunk.count(b"\r\n")
    return lines


def _stream(
    opened: OpenedFile,
    stream: BinaryIO,
    first: bytes,
    rejects: list[Reject],
    lines: Collection[int] | None,
    holding: Collection[bytes] | None,
) -> Iterator[Record]:
    offset = 0
    chunk = first.removeprefix(UTF8_BOM)
    opened.content_read = len(first)
    try:
        while chunk:
            chunk_rejects: list[Reject] = []
            wanted = None
            if lines is not None or holding is not None:
                wanted = functools.partial(_wanted, lines, holding, offset)
            for record in _read_json_lines(chunk, chunk_rejects, wanted):
                if chunk_rejects:
                    rejects.extend(_shifted(chunk_rejects, offset))
                    chunk_rejects.clear()
                record.line += offset
                yield record
            rejects.extend(_shifted(chunk_rejects, offset))
            offset += _lines_in(chunk)
            chunk = _read_chunk(stream)
            opened.content_read += len(chunk)
    finally:
        opened.handle.close()


def _wanted(
    lines: Collection[int] | None, holding: Collection[bytes] | None, offset: int, number: int, line: bytes
) -> bool:
    if lines is not None and number + offset not in lines:
        return False
    if holding is None:
        return True
    lowered = line.lower()
    return any(text in lowered for text in holding)


def _shifted(rejects: list[Reject], offset: int) -> list[Reject]:
    for reject in rejects:
        if reject.line is not None:
            reject.line += offset
    return rejects
