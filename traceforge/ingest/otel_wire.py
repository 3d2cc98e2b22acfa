"""Reading OpenTelemetry spans out of the JSON shapes they are saved in.

Three shapes reach traceforge:
- OTLP/JSON `ExportTraceServiceRequest` documents (`resourceSpans[].scopeSpans[].spans[]`), one per
  line as the collector's file exporter writes them, or one per file. Ids are hex (base64 as written
  by protobuf's own JSON printer is accepted too), enums are integers (their names are accepted),
  64-bit integers are decimal strings or numbers, attribute values are `AnyValue`s. snake_case keys
  (`resource_spans`, `start_time_unix_nano`) and the pre-1.0 `instrumentationLibrarySpans` are read
  too. `resourceLogs` documents in the same file contribute their log records as events of the span
  they name (GenAI message events were log records for a while).
- ReadableSpan-style JSON: the JS SDK's (`spanContext{traceId, spanId}`, `parentSpanId`,
  `startTime: [seconds, nanos]`, flat `attributes`) and the Python SDK's `span.to_json()`
  (`context{trace_id: "0x..."}`, `parent_id`, ISO times, `status{status_code}`), one span per record,
  a list of them, or a dict of such lists (spans grouped by operation).
- A bare attribute map: one span's attributes with no envelope, as instrumentation test fixtures are
  saved. It becomes a one-span trace with a content-derived id.

`read(record)` turns one record into `Span`s; everything else in traceforge sees only `Span`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from traceforge.ingest.sources import Record
from traceforge.ingest.values import as_float, as_list, as_str, parse_time
from traceforge.model import Reject, stable_id

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2
SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
# Keys that only a GenAI span's attributes carry: a bare attribute map needs one of them.
MARKER_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.system",
    "gen_ai.provider.name",
    "openinference.span.kind",
    "traceloop.span.kind",
    "llm.request.type",
    "ai.operationId",
)
ATTRIBUTE_PREFIXES = ("gen_ai.", "llm.", "openinference.", "traceloop.", "ai.", "tool.", "input.", "output.")
_HEX = re.compile(r"^[0-9a-fA-F]+$")


@dataclass
class SpanEvent:
    name: str
    time: datetime | None
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Span:
    trace_id: str
    span_id: str
    name: str
    line: int  # the record it came from
    parent_id: str | None = None
    kind: str = "unspecified"
    start: datetime | None = None
    end: datetime | None = None
    status: int = STATUS_UNSET
    status_message: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None


@dataclass
class LogEvent:
    """An OTLP log record that names a span: attached to that span as one of its events."""

    trace_id: str
    span_id: str
    event: SpanEvent


@dataclass
class Batch:
    """What one record holds. `units` counts the spans and log records read (or 1 for a record that
    held none), so that units = used + rejected + skipped."""

    spans: list[Span] = field(default_factory=list)
    log_events: list[LogEvent] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    units: int = 0

    def skip(self, kind: str, n: int = 1) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + n
        self.units += n

    def reject(self, line: int, error: str, raw: Any) -> None:
        self.rejects.append(Reject(line, error, raw if isinstance(raw, str) or raw is None else _dump(raw)))
        self.units += 1


# ---------------------------------------------------------------- shapes


def shape_of(value: Any) -> str | None:
    """Which span serialization a record is: "otlp", "otlp-other" (logs or metrics), "span",
    "spans" (a list or a dict of lists of spans), "attributes" (a bare attribute map), or None."""
    if not isinstance(value, dict | list):
        return None
    if isinstance(value, list):
        return "spans" if value and all(_is_span(v) for v in value) else None
    if isinstance(_get(value, "resourceSpans"), list):
        return "otlp"
    if isinstance(_get(value, "resourceLogs"), list) or isinstance(_get(value, "resourceMetrics"), list):
        return "otlp-other"
    if _is_span(value):
        return "span"
    groups = list(value.values())
    if groups and all(isinstance(g, list) and g and all(_is_span(s) for s in g) for g in groups):
        return "spans"
    if _is_attribute_map(value):
        return "attributes"
    return None


def _is_span(value: Any) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return False
    context = value.get("spanContext") or value.get("context")
    if isinstance(context, dict):
        return bool(_get(context, "traceId")) and bool(_get(context, "spanId"))
    return False


def _is_attribute_map(value: dict) -> bool:
    if len(value) < 2 or not any(key in value for key in MARKER_KEYS):
        return False
    if any(isinstance(v, dict) for v in value.values()):
        return False
    prefixed = sum(1 for key in value if isinstance(key, str) and key.startswith(ATTRIBUTE_PREFIXES))
    return prefixed >= 0.6 * len(value)


# ---------------------------------------------------------------- reading records


def read(record: Record) -> Batch:
    """The spans (and span-bound log records) of one record; what cannot be used is rejected with
    the record's line."""
    batch = Batch()
    value = record.value
    shape = shape_of(value)
    if shape == "otlp":
        _read_traces_document(value, record.line, batch)
        _read_logs_document(value, record.line, batch)
    elif shape == "otlp-other":
        if isinstance(_get(value, "resourceLogs"), list):
            _read_logs_document(value, record.line, batch)
        if isinstance(_get(value, "resourceMetrics"), list):
            batch.skip("metrics document")
    elif shape == "span":
        _read_readable(value, record.line, batch)
    elif shape == "spans":
        items = value if isinstance(value, list) else [s for group in value.values() for s in group]
        for item in items:
            _read_readable(item, record.line, batch)
    elif shape == "attributes":
        batch.spans.append(attribute_map_span(value, record.line))
        batch.units += 1
    else:
        batch.reject(
            record.line,
            "not an OpenTelemetry trace record: expected an OTLP/JSON document with resourceSpans, a span "
            "with spanContext/context ids, or a GenAI span's attribute map",
            record.raw if record.raw is not None else value,
        )
    if batch.units == 0:
        batch.skip("empty document")
    return batch


def _read_traces_document(document: dict, line: int, batch: Batch) -> None:
    for resource_spans in as_list(_get(document, "resourceSpans")):
        if not isinstance(resource_spans, dict):
            batch.reject(line, "resourceSpans entry is not an object", resource_spans)
            continue
        resource = attributes_of(_get(_get(resource_spans, "resource") or {}, "attributes"))
        scopes = _get(resource_spans, "scopeSpans") or _get(resource_spans, "instrumentationLibrarySpans")
        for scope_spans in as_list(scopes):
            if not isinstance(scope_spans, dict):
                batch.reject(line, "scopeSpans entry is not an object", scope_spans)
                continue
            scope = _get(scope_spans, "scope") or _get(scope_spans, "instrumentationLibrary") or {}
            scope_name = as_str(scope.get("name")) if isinstance(scope, dict) else None
            for raw in as_list(_get(scope_spans, "spans")):
                span = _otlp_span(raw, line, batch)
                if span is not None:
                    span.resource = resource
                    span.scope = scope_name
                    batch.spans.append(span)
                    batch.units += 1


def _otlp_span(raw: Any, line: int, batch: Batch) -> Span | None:
    if not isinstance(raw, dict):
        batch.reject(line, "span is not an object", raw)
        return None
    trace_id = normalize_id(_get(raw, "traceId"), 16)
    span_id = normalize_id(_get(raw, "spanId"), 8)
    if not trace_id or not span_id:
        batch.reject(line, "span without a traceId or spanId: it cannot be placed in a trace", raw)
        return None
    status = _get(raw, "status") or {}
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        name=as_str(raw.get("name")) or "",
        line=line,
        parent_id=normalize_id(_get(raw, "parentSpanId"), 8),
        kind=_kind(raw.get("kind")),
        start=nanos_time(_get(raw, "startTimeUnixNano")),
        end=nanos_time(_get(raw, "endTimeUnixNano")),
        status=_status(status.get("code") if isinstance(status, dict) else None),
        status_message=as_str(status.get("message")) if isinstance(status, dict) else None,
        attributes=attributes_of(raw.get("attributes")),
        events=[
            SpanEvent(
                name=as_str(e.get("name")) or "",
                time=nanos_time(_get(e, "timeUnixNano")),
                attributes=attributes_of(e.get("attributes")),
            )
            for e in as_list(raw.get("events"))
            if isinstance(e, dict)
        ],
    )


def _read_logs_document(document: dict, line: int, batch: Batch) -> None:
    for resource_logs in as_list(_get(document, "resourceLogs")):
        for scope_logs in as_list(_get(resource_logs, "scopeLogs")):
            for raw in as_list(_get(scope_logs, "logRecords")):
                if not isinstance(raw, dict):
                    batch.reject(line, "log record is not an object", raw)
                    continue
                trace_id = normalize_id(_get(raw, "traceId"), 16)
                span_id = normalize_id(_get(raw, "spanId"), 8)
                if not trace_id or not span_id:
                    batch.skip("log record without a span")
                    continue
                attributes = attributes_of(raw.get("attributes"))
                body = any_value(raw.get("body"))
                if isinstance(body, dict):
                    attributes = {**body, **attributes}
                elif body is not None:
                    attributes.setdefault("body", body)
                name = as_str(_get(raw, "eventName")) or as_str(attributes.get("event.name")) or ""
                time = nanos_time(_get(raw, "timeUnixNano")) or nanos_time(_get(raw, "observedTimeUnixNano"))
                batch.log_events.append(LogEvent(trace_id, span_id, SpanEvent(name, time, attributes)))
                batch.units += 1


def _read_readable(raw: Any, line: int, batch: Batch) -> None:
    """A span as the JS SDK's ReadableSpan or the Python SDK's `to_json()` serializes it."""
    if not _is_span(raw):
        batch.reject(line, "not a span: expected name and spanContext/context with trace and span ids", raw)
        return
    context = raw.get("spanContext") or raw.get("context")
    trace_id = normalize_id(_get(context, "traceId"), 16)
    span_id = normalize_id(_get(context, "spanId"), 8)
    if not trace_id or not span_id:
        batch.reject(line, "span with an all-zero or empty trace or span id", raw)
        return
    parent = raw.get("parentSpanId") or raw.get("parent_id")
    parent_context = raw.get("parentSpanContext")
    if parent is None and isinstance(parent_context, dict):
        parent = _get(parent_context, "spanId")
    status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    resource = raw.get("resource") if isinstance(raw.get("resource"), dict) else {}
    scope = raw.get("instrumentationScope") or raw.get("instrumentationLibrary")
    batch.spans.append(
        Span(
            trace_id=trace_id,
            span_id=span_id,
            name=raw["name"],
            line=line,
            parent_id=normalize_id(parent, 8),
            kind=_kind(raw.get("kind")),
            start=_readable_time(raw.get("startTime", raw.get("start_time"))),
            end=_readable_time(raw.get("endTime", raw.get("end_time"))),
            status=_status(status.get("code", status.get("status_code"))),
            status_message=as_str(status.get("message") or status.get("description")),
            attributes=attributes_of(raw.get("attributes")),
            events=[
                SpanEvent(
                    name=as_str(e.get("name")) or "",
                    time=_readable_time(e.get("time", e.get("timestamp"))),
                    attributes=attributes_of(e.get("attributes")),
                )
                for e in as_list(raw.get("events"))
                if isinstance(e, dict)
            ],
            resource=attributes_of(resource.get("attributes")),
            scope=as_str(scope.get("name")) if isinstance(scope, dict) else None,
        )
    )
    batch.units += 1


def attribute_map_span(attributes: dict[str, Any], line: int) -> Span:
    """A one-span trace from a bare attribute map; its ids are derived from the content."""
    digest = stable_id(line, attributes, length=32)
    return Span(
        trace_id="attrs-" + digest[:16],
        span_id=digest[16:],
        name=as_str(attributes.get("gen_ai.operation.name")) or "span",
        line=line,
        attributes=dict(attributes),
    )


# ---------------------------------------------------------------- values


def any_value(value: Any) -> Any:
    """The Python value of an OTLP `AnyValue` (plain JSON values pass through).

    >>> any_value({"kvlistValue": {"values": [{"key": "n", "value": {"intValue": "7"}}]}})
    {'n': 7}
    """
    if not isinstance(value, dict):
        return value
    key = next((k for k in value if k in _ANY_VALUE_KEYS), None)  # an AnyValue holds one key
    if key is None:
        return value or None  # an empty AnyValue is no value
    kind, inner = _ANY_VALUE_KEYS[key], value[key]
    if kind == "int":
        try:
            return int(inner)
        except (TypeError, ValueError):
            return as_float(inner)
    if kind == "double":
        return as_float(inner)
    if kind == "bool":
        return inner if isinstance(inner, bool) else str(inner).lower() == "true"
    if kind == "array":
        items = inner.get("values") if isinstance(inner, dict) else inner
        return [any_value(v) for v in as_list(items)]
    if kind == "kvlist":
        items = inner.get("values") if isinstance(inner, dict) else inner
        return attributes_of(items)
    return inner  # string, or bytes kept as their base64 text


_ANY_VALUE_KEYS = {
    "stringValue": "string",
    "string_value": "string",
    "intValue": "int",
    "int_value": "int",
    "doubleValue": "double",
    "double_value": "double",
    "boolValue": "bool",
    "bool_value": "bool",
    "arrayValue": "array",
    "array_value": "array",
    "kvlistValue": "kvlist",
    "kvlist_value": "kvlist",
    "bytesValue": "bytes",
    "bytes_value": "bytes",
}


def attributes_of(items: Any) -> dict[str, Any]:
    """A flat dict from OTLP `KeyValue`s (a dict, as ReadableSpan JSON has, is taken as is)."""
    if isinstance(items, dict):
        return dict(items)
    out: dict[str, Any] = {}
    for item in as_list(items):
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = any_value(item.get("value"))
    return out


def normalize_id(value: Any, size: int) -> str | None:
    """A trace (size 16) or span (size 8) id as lowercase hex: hex text (with or without `0x`) or the
    base64 some exporters write. None for a missing or all-zero id; an id of another shape is kept."""
    text = as_str(value)
    if not text:
        return None
    text = text.strip()
    if text[:2] in ("0x", "0X"):
        text = text[2:]
    if len(text) == 2 * size and _HEX.match(text):
        hex_id = text.lower()
    else:
        try:
            decoded = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            decoded = b""
        hex_id = decoded.hex() if len(decoded) == size else text
    return None if not hex_id.strip("0") else hex_id


_LETTERS_AND_DIGITS = re.compile(r"[A-Za-z0-9]+")
_MIN_RUN = 8


def trace_id_spellings(trace_id: str) -> list[str] | None:
    """What the JSON text of a record naming `trace_id` (as `normalize_id` gives it) holds, in some
    case: for a 16-byte id, its hex or the longest run of letters and digits in its base64 (a JSON
    writer may escape the base64's `+`, `/` and `=`). None for an id of another shape, which may
    have been derived rather than read (`attribute_map_span`), or when that run is too short.

    >>> trace_id_spellings("5b8efff798038103d269b633813fc60c")
    ['5b8efff798038103d269b633813fc60c', '95gDgQPSabYzgT']
    """
    if len(trace_id) != 32 or not _HEX.match(trace_id):
        return None
    encoded = base64.b64encode(bytes.fromhex(trace_id)).decode("ascii")
    run = max(_LETTERS_AND_DIGITS.findall(encoded), key=len)
    return [trace_id, run] if len(run) >= _MIN_RUN else None


def nanos_time(value: Any) -> datetime | None:
    """A UTC datetime from OTLP's nanoseconds since the epoch (string or number); 0 means unset."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text.isdigit():
            return parse_time(text)
        value = int(text)
    if isinstance(value, float):
        value = int(value) if math.isfinite(value) else None  # 1e400 reads as infinity
    if not isinstance(value, int) or value <= 0:
        return None
    try:
        return EPOCH + timedelta(microseconds=value // 1000)
    except OverflowError:
        return None


def _readable_time(value: Any) -> datetime | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        try:
            return EPOCH + timedelta(seconds=value[0], microseconds=value[1] // 1000)
        except OverflowError:
            return None
    return parse_time(value)


def _status(code: Any) -> int:
    if isinstance(code, int) and not isinstance(code, bool):
        return code if code in (STATUS_OK, STATUS_ERROR) else STATUS_UNSET
    text = (as_str(code) or "").upper()
    if text.endswith("ERROR"):
        return STATUS_ERROR
    if text.endswith("OK"):
        return STATUS_OK
    return STATUS_UNSET


def _kind(kind: Any) -> str:
    if isinstance(kind, int) and not isinstance(kind, bool):
        return SPAN_KINDS.get(kind, "unspecified")
    text = (as_str(kind) or "").lower()
    for name in SPAN_KINDS.values():
        if text.endswith(name):
            return name
    return "unspecified"


@cache
def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _get(obj: Any, name: str) -> Any:
    """`obj[name]` under its lowerCamelCase or snake_case spelling (protobuf JSON allows both)."""
    if not isinstance(obj, dict):
        return None
    value = obj.get(name)
    return value if value is not None else obj.get(_snake(name))


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
