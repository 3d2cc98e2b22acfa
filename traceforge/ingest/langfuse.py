"""Langfuse exports: traces and observations, as JSON, JSON Lines or CSV.

Langfuse's batch export writes one table per file (JSON array, JSONL or CSV with a header row and
JSON-encoded cells); its public API returns pages (`{"data": [...], "meta": {...}}`) and full traces
with their `observations` nested. Field names are camelCase (`traceId`, `startTime`,
`usageDetails`); snake_case (`trace_id`, `usage_details`, as in the ClickHouse tables and blob
exports) is read too. What becomes what:
- `GENERATION` observations are LLM calls: `input` / `output` (messages in whatever shape the
  integration recorded, see `traced_messages`) rebuild the conversation; `usageDetails` gives the
  tokens; `costDetails.total` (else `totalCost`) the cost; `completionStartTime` the time to first
  token; `model` the model;
- `TOOL` observations are tool executions, joined to the call that requested them
  (`span_traces`); a `SPAN` named like a tool that a generation of its trace called is one too
  (Langfuse's LangChain integration recorded tools as SPANs before the TOOL type existed);
- other observations (`SPAN`, `AGENT`, `CHAIN`, `EVENT`, `RETRIEVER`, `EMBEDDING` ...) are skipped
  by rule and counted by type; the first `AGENT` observation names the trace's agent;
- a trace record gives the workload (its `metadata.workload`, else its `name`), and user id,
  session id, tags and environment as attributes; observation rows of the batch export carry
  `traceName` / `traceTags` / `userId` for when the traces were exported to another file, and such
  a file's records are joined to the traces built from the observations (`ingest.joins`).

Token semantics: Langfuse stores usage in non-overlapping buckets (`input` is what remains after
`input_cached_tokens`, `input_cache_read`, `input_cache_creation`... were taken out, and `output`
after `output_reasoning_tokens`), so the canonical `input_tokens` is the sum of every input bucket
(keys starting with `input`, and Anthropic-style `cache_*_input_tokens`) and `output_tokens` the sum
of the output buckets. A producer that passed overlapping counts shows itself by a `total` equal to
`input + output` alone; its `input` and `output` are then taken as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from traceforge.ingest import span_traces, traced_messages
from traceforge.ingest.providers import provider_of
from traceforge.ingest.sources import Record, SourceError
from traceforge.ingest.span_traces import LlmSpan, ToolSpan, TraceInfo
from traceforge.ingest.stream import FILE_CHANGED, last_lines, read_twice
from traceforge.ingest.values import (
    as_float,
    as_id,
    as_int,
    as_str,
    duration_ms,
    first,
    json_text,
    parse_arguments,
    parse_time,
    text_of,
)
from traceforge.model import LlmCall, ParseResult, Reject, ToolDef, Trace

FORMAT = "langfuse"
OBSERVATION_TYPES = {
    "GENERATION",
    "SPAN",
    "EVENT",
    "AGENT",
    "TOOL",
    "CHAIN",
    "RETRIEVER",
    "EVALUATOR",
    "EMBEDDING",
    "GUARDRAIL",
}
# Keys only a Langfuse trace record has (besides `id` and `timestamp`).
TRACE_KEYS = {
    "sessionId",
    "session_id",
    "userId",
    "user_id",
    "release",
    "htmlPath",
    "bookmarked",
    "public",
    "projectId",
    "project_id",
    "observations",
    "scores",
    "totalCost",
    "environment",
}
# Fields an export may hold as JSON text (CSV cells, ClickHouse string columns).
JSON_FIELDS = {
    "input",
    "output",
    "metadata",
    "usageDetails",
    "usage_details",
    "costDetails",
    "cost_details",
    "usage",
    "tags",
    "traceTags",
    "trace_tags",
    "toolDefinitions",
    "tool_definitions",
    "modelParameters",
    "model_parameters",
}
# The skip kind of a trace record whose calls and tools the file does not hold; `ingest.joins` counts
# it as ingested once a trace is built with it from the files that hold them.
DESCRIBED = "trace without generations or tools"
WORKLOAD_KEYS = ("workload", "app", "application", "service")
AGENT_KEYS = ("agent", "agent_name")


def _field(item: dict, *names: str) -> Any:
    """The first of `names` present with a value; empty text counts as absent (CSV cells), and
    JSON-holding fields are parsed when they arrive as text."""
    for name in names:
        value = item.get(name)
        if value is None or value == "":
            continue
        return traced_messages.decode_json_text(value) if name in JSON_FIELDS else value
    return None


def _type_of(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    kind = as_str(item.get("type"))
    return kind.upper() if kind and kind.upper() in OBSERVATION_TYPES else None


def is_observation(item: Any) -> bool:
    return (
        _type_of(item) is not None
        and _field(item, "traceId", "trace_id") is not None
        and _field(item, "startTime", "start_time") is not None
    )


def is_trace(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and "run_type" not in item
        and _type_of(item) is None
        and _field(item, "id") is not None
        and _field(item, "timestamp") is not None
        and len(TRACE_KEYS & item.keys()) >= 2
    )


def _expand(record: Record) -> list[tuple[Any, int]]:
    """The items a record holds with its line: an API page's `data`, a trace's nested observations
    (each taking the trace's id), or the record itself."""
    value = record.value
    if isinstance(value, dict) and isinstance(value.get("data"), list) and "meta" in value:
        return [item for element in value["data"] for item in _expand(Record(record.line, element))]
    if is_trace(value) and isinstance(value.get("observations"), list):
        nested = [o for o in value["observations"] if isinstance(o, dict)]
        trace_id = value.get("id")
        items = [({k: v for k, v in value.items() if k != "observations"}, record.line)]
        return items + [({"traceId": trace_id, **o}, record.line) for o in nested]
    return [(value, record.line)]


def usage_from_details(details: Any) -> dict[str, int] | None:
    """Canonical counts from Langfuse `usageDetails` (see the module docstring).

    >>> usage_from_details({"input": 200, "input_cache_read": 800, "output": 40,
    ...                     "output_reasoning": 10, "total": 1050})
    {'input': 1000, 'cache_read': 800, 'cache_write': 0, 'output': 50, 'reasoning': 10}
    """
    if not isinstance(details, dict):
        return None
    counts = {str(k): n for k, v in details.items() if (n := as_int(v)) is not None}
    inputs = [k for k in counts if k.startswith("input") or ("cache" in k and not k.startswith("output"))]
    outputs = [k for k in counts if k.startswith("output")]
    if not inputs and not outputs:
        return None
    writes = [k for k in inputs if "cache" in k and ("creation" in k or "write" in k)]
    reads = [k for k in inputs if "cache" in k and k not in writes]
    usage = {
        "input": sum(counts[k] for k in inputs),
        "cache_read": sum(counts[k] for k in reads),
        "cache_write": sum(counts[k] for k in writes),
        "output": sum(counts[k] for k in outputs),
        "reasoning": sum(counts[k] for k in outputs if "reasoning" in k),
    }
    total = counts.get("total")
    plain = counts.get("input", 0) + counts.get("output", 0)
    if total is not None and total == plain and total != usage["input"] + usage["output"]:
        usage["input"], usage["output"] = counts.get("input", 0), counts.get("output", 0)
    return usage


def _apply_usage(call: LlmCall, observation: dict, recorded: Any) -> None:
    usage = usage_from_details(_field(observation, "usageDetails", "usage_details"))
    legacy = _field(observation, "usage")
    if usage is None and isinstance(legacy, dict) and str(legacy.get("unit") or "TOKENS").upper() == "TOKENS":
        usage = usage_from_details({k: legacy.get(k) for k in ("input", "output", "total")})
    if usage is None:
        usage = traced_messages.usage_counts(recorded)
    if usage is None:
        return
    call.usage_reported = True
    call.input_tokens = usage["input"]
    call.cache_read_tokens = usage["cache_read"]
    call.cache_write_tokens = usage["cache_write"]
    call.output_tokens = usage["output"]
    call.reasoning_tokens = usage["reasoning"]


def _tool_definitions(value: Any) -> list[ToolDef]:
    """Langfuse's `toolDefinitions` map (tool name -> definition, possibly as JSON text)."""
    if isinstance(value, list):
        return traced_messages.tool_defs(value)
    if not isinstance(value, dict):
        return []
    defs = []
    for name, spec in value.items():
        spec = traced_messages.decode_json_text(spec)
        spec = spec if isinstance(spec, dict) else {}
        found = traced_messages.tool_defs([{"name": name, **spec}])
        defs.extend(found)
    return defs


def _llm_span(obs: dict, line: int, trace_key: str) -> LlmSpan:
    request = traced_messages.request_of(_field(obs, "input"))
    response = traced_messages.response_of(_field(obs, "output"))
    metadata = _field(obs, "metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    model = as_str(_field(obs, "model", "providedModelName", "provided_model_name")) or response.model
    started = parse_time(_field(obs, "startTime", "start_time"))
    ended = parse_time(_field(obs, "endTime", "end_time"))
    first_token = parse_time(_field(obs, "completionStartTime", "completion_start_time"))
    level = as_str(_field(obs, "level"))
    call = LlmCall(
        model=model,
        provider=as_str(metadata.get("ls_provider")) or provider_of(model),
        source_id=as_id(_field(obs, "id")),
        started_at=started,
        ended_at=ended,
        duration_ms=duration_ms(started, ended),
        ttft_ms=duration_ms(started, first_token),
        finish_reason=response.finish_reason or ("error" if level == "ERROR" else None),
        source_line=line,
    )
    _apply_usage(call, obs, response.usage)
    cost_details = _field(obs, "costDetails", "cost_details")
    cost = as_float(cost_details.get("total")) if isinstance(cost_details, dict) else None
    call.cost_usd = (
        cost if cost is not None else as_float(_field(obs, "totalCost", "calculatedTotalCost", "total_cost"))
    )
    return LlmSpan(
        span_id=call.source_id or f"line-{line}",
        trace_key=trace_key,
        parent_id=as_id(_field(obs, "parentObservationId", "parent_observation_id")),
        line=line,
        call=call,
        request=request.messages,
        errors=request.errors,
        response=response.messages,
        tool_defs=request.tool_defs or _tool_definitions(_field(obs, "toolDefinitions", "tool_definitions")),
    )


def _tool_span(obs: dict, line: int, trace_key: str) -> ToolSpan:
    raw_input = _field(obs, "input")
    output = _field(obs, "output")
    metadata = _field(obs, "metadata")
    fields = traced_messages.message_fields(output)
    if fields is not None:
        result = text_of(fields.get("content"))
        failed = fields.get("status") == "error"
    else:
        result, failed = json_text(output), False
    return ToolSpan(
        span_id=as_id(_field(obs, "id")) or f"line-{line}",
        trace_key=trace_key,
        parent_id=as_id(_field(obs, "parentObservationId", "parent_observation_id")),
        line=line,
        name=as_str(_field(obs, "name")) or "(unnamed)",
        arguments=parse_arguments(raw_input) if isinstance(raw_input, str) else raw_input,
        result=result,
        is_error=failed or as_str(_field(obs, "level")) == "ERROR",
        started_at=parse_time(_field(obs, "startTime", "start_time")),
        ended_at=parse_time(_field(obs, "endTime", "end_time")),
        tool_call_id=traced_messages.call_id_of(output)
        or (as_id(metadata.get("tool_call_id")) if isinstance(metadata, dict) else None),
    )


def _trace_info(trace: dict | None, observations: list[dict]) -> TraceInfo:
    """What a trace record (else the observation rows' copies of trace fields) says."""
    source = trace or {}
    metadata = _field(source, "metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name = as_str(_field(source, "name")) or next(
        (
            as_str(_field(o, "traceName", "trace_name"))
            for o in observations
            if _field(o, "traceName", "trace_name")
        ),
        None,
    )
    agents = sorted(
        (o for o in observations if _type_of(o) == "AGENT" and _field(o, "name")),
        key=lambda o: str(_field(o, "startTime", "start_time")),
    )
    attributes = {
        "langfuse_trace_name": name,
        "user_id": as_str(_field(source, "userId", "user_id"))
        or next((as_str(_field(o, "userId")) for o in observations if _field(o, "userId")), None),
        "session_id": as_str(_field(source, "sessionId", "session_id")),
        "tags": _field(source, "tags")
        or next(
            (
                _field(o, "traceTags", "trace_tags")
                for o in observations
                if _field(o, "traceTags", "trace_tags")
            ),
            None,
        ),
        "environment": as_str(_field(source, "environment")),
        "release": as_str(_field(source, "release")),
    }
    return TraceInfo(
        workload=as_str(first(metadata, *WORKLOAD_KEYS)) or name,
        agent=as_str(first(metadata, *AGENT_KEYS)) or (as_str(_field(agents[0], "name")) if agents else None),
        started_at=parse_time(_field(source, "timestamp")),
        attributes={k: v for k, v in attributes.items() if v not in (None, "", [])},
    )


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    trace_records: dict[str, dict] = {}
    observations: dict[str, list[tuple[dict, int]]] = {}
    for record in records:
        for item, line in _expand(record):
            _take(record, item, line, trace_records, observations, result)
    result.traces = _build(observations, trace_records, result)
    # records of traces whose calls this file does not hold: joined to the files that do (ingest.joins)
    _describe(sorted(trace_records.keys() - {t.attributes["conversation_id"] for t in result.traces}), result)
    return result


def stream(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None = None,
) -> Iterator[Trace]:
    """`parse`'s traces one by one, each as soon as the last record holding its trace record or one
    of its observations is read, so that a big export is not held whole (`traceforge.ingest.parts`).
    A trace's observations can come anywhere in an export, so a first pass finds that record
    (`stream.read_twice`); traces then come in the order they end."""
    learn = functools.partial(last_lines, trace_ids=_trace_ids)
    return read_twice(records, source_path, result, on_first_pass, parse, learn, _as_they_end)


def _trace_ids(record: Record) -> list[str]:
    return [trace_id for item, _ in _expand(record) if (trace_id := _trace_id_of(item)) is not None]


def _as_they_end(records: Iterable[Record], last: dict[str, int], result: ParseResult) -> Iterator[Trace]:
    trace_records: dict[str, dict] = {}
    observations: dict[str, list[tuple[dict, int]]] = {}
    described = []
    for record in records:
        named = dict.fromkeys(
            _take(record, item, line, trace_records, observations, result) for item, line in _expand(record)
        )
        for trace_id in (trace_id for trace_id in named if trace_id and last.get(trace_id) == record.line):
            held = {trace_id: observations.pop(trace_id)} if trace_id in observations else {}
            info = {trace_id: trace_records.pop(trace_id)} if trace_id in trace_records else {}
            traces = _build(held, info, result)
            if info and not traces:
                described.append(trace_id)
            yield from traces
    if trace_records or observations:
        raise SourceError(FILE_CHANGED)
    _describe(sorted(described), result)


def _trace_id_of(item: Any) -> str | None:
    """The trace an exported item belongs to (a trace record's own id), or None for an item that
    is rejected."""
    if is_trace(item):
        return str(item["id"])
    if _type_of(item) is not None and as_id(_field(item, "id")) is not None:
        return as_id(_field(item, "traceId", "trace_id"))
    return None


def _take(
    record: Record,
    item: Any,
    line: int,
    trace_records: dict[str, dict],
    observations: dict[str, list[tuple[dict, int]]],
    result: ParseResult,
) -> str | None:
    """Count one exported item into `result` and keep it by its trace id (returned), or reject it."""
    result.records += 1
    trace_id = _trace_id_of(item)
    if trace_id is None:
        reason = (
            "Langfuse observation without `id` or `traceId`"
            if _type_of(item) is not None
            else "not a Langfuse trace or observation (an observation has `id`, `traceId`, `type` and "
            "`startTime`; a trace has `id` and `timestamp`)"
        )
        result.rejects.append(Reject(line, reason, _raw(record, item)))
    elif is_trace(item):
        # exported twice (overlapping pages or files): the last wins
        if trace_id in trace_records:
            result.skip("duplicate trace record")
        trace_records[trace_id] = item
    else:
        observations.setdefault(trace_id, []).append((item, line))
    return trace_id


def _describe(trace_ids: list[str], result: ParseResult) -> None:
    """Trace records of traces whose calls this file does not hold: joined to the files that do
    (`ingest.joins`)."""
    result.described.extend(trace_ids)
    if trace_ids:
        result.skip(DESCRIBED, len(trace_ids))


def items_of(records: Iterable[Record], trace_ids: set[str]) -> dict[str, list[tuple[dict, int]]]:
    """The trace records and observations of `trace_ids` in `records`, with their lines, by trace id:
    what `traceforge.ingest.joins` reads again of each file a trace is spread over."""
    found: dict[str, list[tuple[dict, int]]] = {}
    for record in records:
        for item, line in _expand(record):
            trace_id = _trace_id_of(item)
            if trace_id is not None and trace_id in trace_ids:
                found.setdefault(trace_id, []).append((item, line))
    return found


def traces_of(trace_id: str, items: list[tuple[dict, int]]) -> list[Trace]:
    """The traces of one Langfuse trace from its records and observations gathered from several
    files (`items_of`): an observation found in two of them counts once, the last trace record wins."""
    records = [item for item, _ in items if is_trace(item)]
    trace_records = {trace_id: records[-1]} if records else {}
    observations = [(item, line) for item, line in items if not is_trace(item)]
    return _build({trace_id: observations}, trace_records, ParseResult())


def start_key(item: tuple[dict, int]) -> tuple[bool, datetime, int] | None:
    """An observation's place in time (those without a start time last, then by line); None for a
    trace record."""
    value, line = item
    if is_trace(value):
        return None
    started = parse_time(_field(value, "startTime", "start_time"))
    return (started is None, started or span_traces.EPOCH, line)


def _build(
    observations: dict[str, list[tuple[dict, int]]], trace_records: dict[str, dict], result: ParseResult
) -> list[Trace]:
    """The traces of observations grouped by trace id, with their trace records where known; what
    is skipped is counted in `result`."""
    llm_spans, tool_spans, parents, infos = [], [], {}, {}
    for trace_id, exported in observations.items():
        items = span_traces.first_of_each(
            exported, lambda item: str(_field(item[0], "id")), result, "duplicate observation"
        )
        infos[trace_id] = _trace_info(trace_records.get(trace_id), [o for o, _ in items])
        generations = [_llm_span(o, line, trace_id) for o, line in items if _type_of(o) == "GENERATION"]
        called = {
            c["name"] for g in generations for m in g.response for c in m.tool_calls or [] if c.get("name")
        }
        llm_spans.extend(generations)
        for obs, line in items:
            kind = _type_of(obs)
            parents[str(_field(obs, "id"))] = as_id(
                _field(obs, "parentObservationId", "parent_observation_id")
            )
            if kind == "TOOL" or (kind == "SPAN" and as_str(_field(obs, "name")) in called):
                tool_spans.append(_tool_span(obs, line, trace_id))
            elif kind != "GENERATION":
                result.skip(kind.lower())
    return span_traces.build_traces(llm_spans, tool_spans, parents, infos, FORMAT, "langfuse-export")


def _raw(record: Record, item: Any) -> str | None:
    return record.raw if item is record.value else json_text(item)


def sniff(sample: list[Record]) -> float:
    """Langfuse observations (`type` GENERATION / SPAN / TOOL ... with `traceId` and `startTime`), or
    Langfuse trace records; API pages and traces with nested observations included."""
    best = 0.0
    for record in sample:
        for item, _ in _expand(record):
            if is_observation(item):
                return 0.95
            if is_trace(item):
                best = 0.8
    return best
