"""Reading a file's records without holding the file: big JSON Lines files, JSON arrays and CSV tables.

A production log is often gigabytes of JSON Lines, and an observability platform's export a JSON
array or a CSV table of as many records. Reading any of them whole (its bytes, then every record
parsed at once) takes several times its size in memory; here such a file is read in chunks of about
`CHUNK_BYTES`, and its records are parsed as the adapter consumes them: JSON Lines chunk by chunk
(each chunk ends at a line break), a JSON array element by element (`_ArrayReader`), a CSV table
row by row (`_stream_csv`). Everything else (a file that fits in one chunk, a JSON document that is
not an array of objects or arrays, UTF-16 text, binary content, a JSON Lines file whose first line
is not JSON) is read whole by `traceforge.ingest.sources.read_records`, exactly as before: streaming
applies only where it cannot change what is read, and which way a file is read is decided from its
first chunk as a whole read would decide it (`_first_chunk`). (A JSON array that breaks off, read
whole, fails the file; streamed, it fails the file too, once its records so far have been read: see
`_ArrayReader`.) A file read again for a few of its lines (a trace's parts, to join them) is
streamed even when it fits in one chunk, so that its other lines are not parsed.

>>> rejects = []
>>> opened = open_records(Path("logs/gateway.jsonl"), rejects)          # doctest: +SKIP
>>> first = next(opened.records)                                         # doctest: +SKIP
"""

from __future__ import annotations

import codecs
import functools
import gzip
import io
import itertools
import json
import re
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from traceforge.ingest.sources import (
    GZIP_MAGIC,
    TOO_DEEP,
    Record,
    SourceError,
    SourceFile,
    _read_json_lines,
    csv_table,
    json_error,
    read_records,
    refuse_other_compression,
)
from traceforge.ingest.values import MAX_NESTING, NestingError, nesting_exceeds, parse_json_at
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
        stream, compressed = _decompressed(handle, path)
        first, layout = _first_chunk(stream)
        complete = len(first) < CHUNK_BYTES  # the whole content is in the first chunk
        filtered = lines is not None or holding is not None
        if layout == WHOLE or (complete and (layout != LINES or not filtered)):
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
    if layout == ARRAY:  # every element, filtered or not: the docstring's "still gives every record"
        opened.records = _ArrayReader(opened, stream, first).records(rejects)
    elif layout == CSV:  # every row, likewise
        opened.records = _stream_csv(opened, stream, rejects)
    else:
        opened.records = _stream(opened, stream, first, rejects, lines, holding)
    return opened


def _decompressed(handle: BinaryIO, path: Path) -> tuple[BinaryIO, bool]:
    """The file's content as a stream, gunzipped where it is gzip, and whether it was; raises
    SourceError for another compression (`sources.refuse_other_compression`)."""
    head = handle.read(8)
    handle.seek(0)
    refuse_other_compression(head, path)
    compressed = head[:2] == GZIP_MAGIC
    return (gzip.GzipFile(fileobj=handle) if compressed else handle), compressed


def streams_in_chunks(path: Path) -> bool:
    """Whether `open_records` reads `path` in chunks: JSON Lines, or, bigger than a chunk, a JSON
    array of objects or arrays or a CSV table (decided from its first chunk, as `open_records`
    decides)."""
    try:
        with open(path, "rb") as handle:
            return _first_chunk(_decompressed(handle, path)[0])[1] != WHOLE
    except (OSError, SourceError):
        return False


# Why a file read twice (`first_pass`) fails when the second reading differs from the first.
FILE_CHANGED = "the file changed while it was read: ingest it again"
PROGRESS_RECORDS = 2048  # how often `first_pass` reports how far it has read


def first_pass(source_path: str, on_read: Callable[[int], None] | None = None) -> Iterator[Record] | None:
    """A big file's records read once more, for an adapter that must see them all before it can
    hand out any trace (where a conversation ends, which record holds a trace's last span), or None
    for a file `open_records` reads whole (`streams_in_chunks`): it is parsed whole. Lines that are
    not JSON are skipped here; the second reading rejects them. `on_read(bytes)` is told, every few
    thousand records and at the end, how many of the file's bytes on disk this reading has read."""
    path = Path(source_path)
    if not streams_in_chunks(path):
        return None
    opened = open_records(path, [])
    return opened.records if on_read is None else _reporting(opened, on_read)


@dataclass(frozen=True)
class HeldWhole:
    """What a first pass learns when it cannot stand for the whole file (`read_twice`): why. The
    file is then parsed whole, its traces held until it is read."""

    why: str


def read_twice(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None,
    parse: Callable[[Iterable[Record], str], ParseResult],
    learn: Callable[[Iterator[Record]], Learned | HeldWhole],
    hand_out: Callable[[Iterable[Record], Learned, ParseResult], Iterator[Trace]],
) -> Iterator[Trace]:
    """The `stream` of an adapter that must read a big file once before it can hand out any trace:
    `learn` reads the first pass (`first_pass`) for what the second needs (where each trace ends),
    then `hand_out` reads `records` with it, counting into `result`. A file that `open_records`
    reads whole, or whose first pass cannot stand for it (`learn` gives a `HeldWhole`, whose reason
    goes to `result.held_whole` before the file is parsed), is parsed whole by `parse`, and its
    traces handed out after (`ParseResult.drain_into`)."""
    first = first_pass(source_path, on_first_pass)
    learned = None if first is None else learn(first)
    if isinstance(learned, HeldWhole):
        result.held_whole = learned.why
    if first is None or isinstance(learned, HeldWhole):
        yield from parse(records, source_path).drain_into(result)
        return
    yield from hand_out(records, learned, result)


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
    chunk = _read(stream, CHUNK_BYTES)
    if len(chunk) == CHUNK_BYTES and not chunk.endswith(b"\n"):
        chunk += _read(stream, -1, line=True)
    return chunk


def _read_rest(stream: BinaryIO) -> bytes:
    return _read(stream, -1)


def _read(stream: BinaryIO, size: int, line: bool = False) -> bytes:
    """`size` bytes of content (all that is left for -1), or with `line` the rest of the line."""
    try:
        return stream.readline() if line else stream.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise _gzip_error(exc) from exc


# How `open_records` reads a file (`_first_chunk`).
LINES, ARRAY, CSV, WHOLE = "lines", "array", "csv", "whole"


def _first_chunk(stream: BinaryIO) -> tuple[bytes, str]:
    """The content's first chunk and how the file is read: as JSON Lines (`LINES`, the chunk
    extended to the end of its last line), or, when it is more than a chunk, as a JSON array of
    records (`ARRAY`, the chunk as read) or a CSV table (`CSV`, read again from its start); else
    `WHOLE`. Each is what `sources.read_records` would make of the first chunk.

    A first line longer than the chunk is either a JSON document written on one line or a long
    first line of JSON Lines; only the rest of the content tells them apart, so it is read up to
    the line's end and the stream sought back (for gzip, decompressed again) before deciding."""
    chunk = _read(stream, CHUNK_BYTES)
    if len(chunk) == CHUNK_BYTES and b"\n" not in chunk and _opens_array(chunk):
        if _ends_with_its_first_line(stream):
            return chunk, ARRAY
        stream.seek(0)
        chunk = _read(stream, CHUNK_BYTES)
    if len(chunk) == CHUNK_BYTES and not chunk.endswith(b"\n"):
        chunk += _read(stream, -1, line=True)
    if _starts_with_json_line(chunk):
        return chunk, LINES
    if len(chunk) < CHUNK_BYTES:
        return chunk, WHOLE  # the whole content, read whole whatever it holds
    first_line = chunk.removeprefix(UTF8_BOM).lstrip().split(b"\n", 1)[0]  # after a BOM, blank lines
    if _opens_array(chunk) and not _is_json(first_line):
        return chunk, ARRAY
    if _opens_csv(chunk):
        return chunk, CSV
    return chunk, WHOLE  # a first line that is a whole array: a document or JSON Lines, read whole


def _ends_with_its_first_line(stream: BinaryIO) -> bool:
    """Whether nothing but white space follows the line the stream is in; the stream is left
    where it was."""
    position = stream.tell()
    try:
        while b"\n" not in (piece := _read(stream, CHUNK_BYTES)):
            if not piece:
                return True
        rest = piece[piece.index(b"\n") :]
        while not rest.strip():
            rest = _read(stream, SAMPLE_CHARS)
            if not rest:
                return True
        return False
    finally:
        stream.seek(position)


def _utf8_content(chunk: bytes) -> bytes | None:
    """The chunk without its UTF-8 byte order mark, or None for UTF-16 text or binary content,
    which `sources.read_records` reads whole (re-encoded, or refused)."""
    data = chunk.removeprefix(UTF8_BOM)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data[:4096]:
        return None
    return data


def _starts_with_json_line(chunk: bytes) -> bool:
    """Whether the content is plainly JSON Lines: UTF-8, its first non-empty line a JSON object or
    array and another non-empty line after it. (A JSON document cannot be: a complete value followed
    by more content is not JSON.)"""
    data = _utf8_content(chunk)
    if data is None:
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


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def _opens_array(chunk: bytes) -> bool:
    """Whether the content opens as a JSON array of records: UTF-8, `[` then an object or array
    that ends in the chunk and is followed by `,` or `]`. (A file of text that merely starts with
    `[`, such as `[INFO] ...` log lines, is not.)"""
    data = _utf8_content(chunk)
    if data is None:
        return False
    try:
        text = codecs.utf_8_decode(data, "strict", False)[0]  # a character cut at the end waits
    except UnicodeDecodeError:
        return False
    start = _WHITESPACE.match(text).end()
    if not text.startswith("[", start):
        return False
    start = _WHITESPACE.match(text, start + 1).end()
    if not text.startswith(("{", "["), start):
        return False
    try:
        _, end = parse_json_at(text, start)
    except ValueError:
        return False
    return text.startswith((",", "]"), _WHITESPACE.match(text, end).end())


_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's white space
# What follows a value parsed at the end of the text read so far, where it may be a number the
# next chunk goes on with: nothing, or a number's part that does not parse yet (`.`, `e+`).
_MAY_GO_ON = re.compile(r"[0-9.eE+\-]*\Z")


def _opens_csv(chunk: bytes) -> bool:
    """Whether the content opens as a CSV table (`sources.csv_table`) that a whole read would take
    as one: UTF-8, a header row with a whole row after it that fits it, and no line of the chunk a
    JSON object or array (a whole read takes content holding one as JSON Lines whose other lines
    are bad). The one difference left: a table holding such a line only after its first chunk is
    read as a table, where a whole read would keep that line alone and reject the rest."""
    data = _utf8_content(chunk)
    if data is None:
        return False
    try:
        text = codecs.utf_8_decode(data[: data.rfind(b"\n") + 1], "strict", True)[0]
    except UnicodeDecodeError:
        return False
    rows = csv_table(io.StringIO(text, newline=""))  # first: a JSON document fails at its header
    if rows is None:
        return False
    if any(line.lstrip().startswith(("{", "[")) and _is_json(line.encode()) for line in text.splitlines()):
        return False
    # the chunk's last row may be cut inside a quoted cell, and fit the header only as cut
    return any(isinstance(row, Record) for row in list(rows)[:-1])


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


class _ArrayReader:
    """The elements of a JSON array, read in chunks and parsed one at a time: what a JSON array of
    records (an observability platform's export) holds while it is read is a chunk of its text and
    the element being parsed, not the file.

    Elements are numbered from 1, as a JSON array read whole numbers them (`Record.line`). An element
    nested deeper than `MAX_NESTING` goes to `rejects`, as it does there. Content that breaks off or
    is not JSON raises SourceError with where (line and column in the file), in the words a JSON
    document read whole fails with, once the elements before it have been read; so the file fails
    as a whole either way (`parts.write_in_parts` removes what it wrote of it).
    """

    def __init__(self, opened: OpenedFile, stream: BinaryIO, first: bytes) -> None:
        self.opened = opened
        self.stream = stream
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0  # where reading has got in `text`
        self.lines_before = 0  # line breaks in the text dropped before `text`
        self.column_before = 0  # characters after the last of them
        self.ended = False
        opened.content_read = len(first)
        self._append(first.removeprefix(UTF8_BOM))

    def records(self, rejects: list[Reject]) -> Iterator[Record]:
        try:
            self._skip_whitespace()
            self.pos += 1  # the `[` that `_opens_array` found
            self._skip_whitespace()
            if self._next_char() == "]":
                self.pos += 1
            else:
                yield from self._elements(rejects)
            self._skip_whitespace()
            if self._next_char():
                raise self._error("Extra data", self.pos)
        finally:
            self.opened.handle.close()

    def _elements(self, rejects: list[Reject]) -> Iterator[Record]:
        for number in itertools.count(1):
            value, end = self._value()
            text, start = self.text, self.pos
            self.pos = end
            if text.count("[", start, end) + text.count("{", start, end) > MAX_NESTING and nesting_exceeds(
                value, MAX_NESTING
            ):
                rejects.append(Reject(line=number, error=TOO_DEEP))
            else:
                yield Record(line=number, value=value)
            self._skip_whitespace()
            separator = self._next_char()
            if separator == "]":
                self.pos += 1
                return
            if separator != ",":
                raise self._error("Expecting ',' delimiter", self.pos)
            self.pos += 1
            self._skip_whitespace()

    def _value(self) -> tuple[Any, int]:
        """The element at `pos` and where it ends, reading on while the text read so far ends
        inside it."""
        while True:
            try:
                value, end = parse_json_at(self.text, self.pos)
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(self.text) - 16 or exc.msg.startswith("Unterminated string")
                if cut and self._read_on(len(self.text) - self.pos):
                    continue
                raise self._error(json_error(exc.msg), exc.pos) from None
            except NestingError:
                raise SourceError(f"a JSON document {TOO_DEEP}") from None
            if _MAY_GO_ON.match(self.text, end) and self._read_on():
                continue  # a number may go on in the next chunk: `1.35e` parses as 1.35, `1.` as 1
            return value, end

    def _read_on(self, held: int = 0) -> bool:
        """Drop the text read, add the next chunk (at least as much as the `held` text of an element
        being read, so a big element is parsed a few times, not once per chunk); False at the end."""
        if self.ended:
            return False
        last_break = self.text.rfind("\n", 0, self.pos)
        self.lines_before += self.text.count("\n", 0, self.pos)
        self.column_before = self.pos - last_break - 1 if last_break >= 0 else self.column_before + self.pos
        self.text, self.pos = self.text[self.pos :], 0
        data = _read(self.stream, max(CHUNK_BYTES, held))
        self.opened.content_read += len(data)
        self.ended = not data
        self._append(data)
        return not self.ended

    def _append(self, data: bytes) -> None:
        try:
            self.text += self.decoder.decode(data, final=self.ended)
        except UnicodeDecodeError as exc:  # said where the bad byte is: the text before it is added
            self.text += exc.object[: exc.start].decode("utf-8", errors="replace")
            raise self._error(f"not valid UTF-8 ({exc.reason})", len(self.text)) from None

    def _skip_whitespace(self) -> None:
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text) or not self._read_on():
                return

    def _next_char(self) -> str:
        if self.pos == len(self.text):
            self._read_on()
        return self.text[self.pos : self.pos + 1]

    def _error(self, message: str, pos: int) -> SourceError:
        """As `read_records` words a document that is not JSON, with the line and column in the file."""
        line = self.lines_before + self.text.count("\n", 0, pos) + 1
        last_break = self.text.rfind("\n", 0, pos)
        column = pos - last_break if last_break >= 0 else self.column_before + pos + 1
        return SourceError(
            f"not JSON or JSON Lines ({message} at line {line} column {column}); if it is a truncated "
            "JSON document, the writer may have crashed: restore or re-export it"
        )


CSV_PROGRESS_ROWS = 256  # how often a CSV table read in chunks updates how much of it is read


def _stream_csv(opened: OpenedFile, stream: BinaryIO, rejects: list[Reject]) -> Iterator[Record]:
    """A CSV table's rows as `sources.csv_table` reads them, from the file's start, a line at a
    time: a quoted cell may hold line breaks, so the table is read as text, not in chunks of lines."""
    try:
        stream.seek(0)
        text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
        rows = csv_table(text)
        if rows is None:  # `_opens_csv` read the same header
            raise SourceError(FILE_CHANGED)
        for number, row in enumerate(rows, start=1):
            if isinstance(row, Reject):
                rejects.append(row)
            else:
                yield row
            if number % CSV_PROGRESS_ROWS == 0:
                opened.content_read = stream.tell()
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"not valid UTF-8 in the CSV table ({exc.reason}); re-encode the file as UTF-8"
        ) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise _gzip_error(exc) from exc
    finally:
        opened.handle.close()
