"""Reading loosely typed values out of source records: numbers, strings, timestamps, JSON arguments.

Sources disagree on types (tokens as strings, times as epoch seconds or ISO strings with or without
a zone, arguments as JSON strings or objects). These helpers coerce what can be coerced and return
None for what cannot, so adapters stay short and a bad field never crashes an ingest.
"""

from __future__ import annotations

import functools
import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

INT64_MAX = 2**63 - 1
# Deeper JSON is refused: traceforge's own code (and Python's JSON encoder, which writes JSON columns)
# recurses once or twice per level, and Python's stack allows about a thousand frames.
MAX_NESTING = 200
# A \uD800-\uDFFF escape that is not half of a valid pair: JSON allows it, UTF-8 cannot encode it.
_LONE_SURROGATE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]"
)
_SURROGATE_ESCAPE_START = re.compile(r"\\u[dD]")  # 2.4 times faster than two substring tests
_SURROGATE = re.compile("[\ud800-\udfff]")


class NestingError(ValueError):
    """JSON nested deeper than `MAX_NESTING` levels."""


def parse_json(text: str, max_nesting: int = MAX_NESTING) -> Any:
    """JSON text as a Python value, read the way traceforge reads every JSON it meets.

    NaN and Infinity (not JSON, but loggers write them) become None; an escaped lone UTF-16
    surrogate ("\\ud800", valid JSON that encodes no character) becomes U+FFFD; a value nested deeper
    than `max_nesting` levels raises NestingError. Raises ValueError (json.JSONDecodeError for bad
    syntax, with its position) for anything that is not JSON.

    >>> parse_json('{"n": NaN, "s": "\\\\ud800x"}')
    {'n': None, 's': '\ufffdx'}
    """
    try:
        try:  # the value alone: `decode` also matches the whitespace around it, at 3% of an ingest
            value, end = _DECODER.raw_decode(text)
        except json.JSONDecodeError:
            end = -1
        if end != len(text):  # whitespace around it, more after it or not JSON: read as json reads it
            value = _DECODER.decode(text)
    except RecursionError:
        raise NestingError(f"nested deeper than {max_nesting} levels") from None
    if text.count("[") + text.count("{") > max_nesting and nesting_exceeds(value, max_nesting):
        raise NestingError(f"nested deeper than {max_nesting} levels")
    return _lone_surrogates_replaced(value, text, 0, len(text))


def parse_json_at(text: str, start: int) -> tuple[Any, int]:
    """The JSON value that starts at `start` in `text` (no whitespace before it), read as
    `parse_json` reads one, and where it ends: how the elements of a JSON array read in chunks are
    taken one by one (`traceforge.ingest.stream`). Its nesting is not checked (the caller checks it
    with `nesting_exceeds`), but for a value too deep to parse at all, which raises NestingError.
    Raises json.JSONDecodeError for bad syntax, or for a value that `text` ends inside.

    >>> parse_json_at('[{"n": NaN}, "\\\\udc00"]', 1), parse_json_at('[{"n": NaN}, "\\\\udc00"]', 13)
    (({'n': None}, 11), ('\ufffd', 21))
    """
    try:
        value, end = _DECODER.raw_decode(text, start)
    except RecursionError:
        raise NestingError(f"nested deeper than {MAX_NESTING} levels") from None
    return _lone_surrogates_replaced(value, text, start, end), end


def _lone_surrogates_replaced(value: Any, text: str, start: int, end: int) -> Any:
    """`value`, read from `text[start:end]`, with the lone surrogates its escapes made replaced."""
    # a quick search first: the pattern's lookbehind makes it try every position of the text
    if _SURROGATE_ESCAPE_START.search(text, start, end) and _LONE_SURROGATE_ESCAPE.search(text, start, end):
        return _without_surrogates(value)
    return value


def _nonfinite_as_null(name: str) -> None:
    return None


# One decoder for every call: json.loads with an option builds a new one each time.
_DECODER = json.JSONDecoder(parse_constant=_nonfinite_as_null)


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` holds lists or dicts more than `limit` levels deep (without recursing).

    >>> nesting_exceeds([[1]], 2), nesting_exceeds([[[1]]], 2)
    (False, True)
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    return value


def dig(value: Any, *path: str | int) -> Any:
    """`value[path[0]][path[1]]...`, or None where any step is missing or of the wrong type.

    >>> dig({"a": {"b": [1, 2]}}, "a", "b", 1)
    2
    """
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, list) or not -len(value) <= key < len(value):
                return None
        elif not isinstance(value, dict):
            return None
        value = value[key] if isinstance(key, int) else value.get(key)
        if value is None:
            return None
    return value


def first(value: Any, *paths: str) -> Any:
    """The first non-None of several dotted paths: first(rec, "metadata.session_id", "session_id").

    `dig` along each path's keys, inlined: a log record is asked for a dozen paths (ids, times,
    cost), and this was 10% of parsing one.

    >>> first({"metadata": {"session_id": "s-1"}, "session_id": None}, "session_id", "metadata.session_id")
    's-1'
    """
    for path in paths:
        found = value
        for key in _keys(path):
            if not isinstance(found, dict):
                found = None
                break
            found = found.get(key)
            if found is None:
                break
        if found is not None:
            return found
    return None


@functools.cache
def _keys(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


def as_int(value: Any) -> int | None:
    """A non-negative count that fits in BIGINT, from an int, float or numeric string."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = int(value)
    if isinstance(value, int) and 0 <= value <= INT64_MAX:
        return value
    return None


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def as_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float | bool):
        return str(value)
    return None


def as_list(value: Any) -> list:
    """`value` if it is a list, else an empty one: for fields a source may give as null or garbage.

    >>> as_list([1]), as_list(None), as_list(3)
    ([1], [], [])
    """
    return value if isinstance(value, list) else []


def as_id(value: Any) -> str | None:
    """An identifier: a non-empty string or an integer, as a string."""
    text = as_str(value)
    return text if text else None


# Letters, digits, `_` and `-`, which no JSON writer escapes; eight or more, so not a float's text
# (which JSON may have spelled otherwise): that has a `.` or a `+` (`0.5`, `1e+22`), or is shorter
# (`1e-05`).
_VERBATIM_ID = re.compile(r"[A-Za-z0-9_\-]{8,}")


def is_verbatim_id(text: str) -> bool:
    """Whether an id read with `as_id` is written as it is in its record's JSON text: one that is
    not could be escaped there, or have been a number written otherwise (`1E5`).

    >>> is_verbatim_id("0f8fad5b-d9cb-469f-a165-70867728950e"), is_verbatim_id("1e-05")
    (True, False)
    """
    return _VERBATIM_ID.fullmatch(text) is not None


def parse_time(value: Any) -> datetime | None:
    """A UTC datetime from ISO-8601 text (zone optional, assumed UTC), or an epoch number.

    Epoch numbers are read as seconds, milliseconds, microseconds or nanoseconds by their size.
    [seconds, nanoseconds] pairs (OpenTelemetry JS hrtime) are accepted too.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return _from_epoch(value[0] + value[1] / 1e9)
    if isinstance(value, int | float):
        return _from_epoch(float(value))
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return _from_epoch(float(text))
        except ValueError:
            pass
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    return None


def _from_epoch(number: float) -> datetime | None:
    if not math.isfinite(number) or number <= 0:
        return None
    magnitude = abs(number)
    if magnitude >= 1e17:
        number /= 1e9
    elif magnitude >= 1e14:
        number /= 1e6
    elif magnitude >= 1e11:
        number /= 1e3
    try:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=number)
    except OverflowError:
        return None


def add_ms(time: datetime, ms: float) -> datetime | None:
    """`time` moved by `ms` milliseconds; None when that leaves the calendar (a corrupt latency).

    >>> add_ms(datetime(2026, 1, 1, tzinfo=UTC), 1500).isoformat()
    '2026-01-01T00:00:01.500000+00:00'
    >>> add_ms(datetime(2026, 1, 1, tzinfo=UTC), 1e30) is None
    True
    """
    try:
        return time + timedelta(milliseconds=ms)
    except OverflowError:
        return None


def duration_ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000.0


def parse_arguments(value: Any) -> Any:
    """Tool arguments as an object: JSON strings are parsed; a string that is not JSON is kept."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        try:
            return parse_json(text)
        except ValueError:
            return value
    return value


def text_of(content: Any) -> str | None:
    """Plain text from a message content: a string, or a list of parts with text in them."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if text is None and part.get("type") in ("text", "input_text", "output_text"):
                    text = part.get("content")
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts) if texts else None
    if isinstance(content, dict):
        return as_str(content.get("text")) or json.dumps(content, ensure_ascii=False)
    return as_str(content)


def clean_text(text: str | None) -> str | None:
    """Text that encodes as UTF-8: lone surrogates (from JSON escapes like "\\ud800") replaced."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace").decode("utf-8")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# One encoder for every JSON column value (json.dumps with options builds a new one per call).
_COLUMN_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str)


def to_json(value: Any) -> str | None:
    """Valid JSON text for a JSON column (NaN and infinities become null), or None for None."""
    if value is None:
        return None
    try:
        text = _COLUMN_ENCODER.encode(value)
    except ValueError:
        text = json.dumps(_finite(value), ensure_ascii=False, default=str)
    return clean_text(text)


def json_text(value: Any) -> str | None:
    """A result or content as stored text: strings as is, anything else as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
