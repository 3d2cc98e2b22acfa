"""LangSmith run exports: runs as flat lists (JSON, JSON Lines, a `{"runs": [...]}` query page) or
as trees nested under `child_runs`.

A run (`id`, `name`, `run_type`, `trace_id`, `parent_run_id`, `dotted_order`, `start_time`,
`end_time`, `inputs`, `outputs`, `error`, `extra`) is one span of a trace. What becomes what:
- `llm` runs are LLM calls. `inputs` holds what the model received (LangChain's
  `{"messages": [[...]]}` batch of serialized messages, an OpenAI-style `{"messages": [...],
  "tools": [...]}` from `wrap_openai`, or `{"prompts": [...]}`), `outputs` what it returned
  (`{"generations": [[{"message": ...}]], "llm_output": {...}}`, a chat completion, a message);
  see `traced_messages`. Tokens come from the run's `prompt_tokens` / `completion_tokens` (the
  prompt count includes cached tokens, whose part is `prompt_token_details.cache_read`), else from
  the usage recorded in the output (0 prompt and 0 completion tokens, as LangSmith writes for a run
  without usage, count as not reported). `first_token_time` (else the first `new_token` event) gives the
  time to first token, `extra.metadata.ls_model_name` / `ls_provider` the model and provider,
  `total_cost` the cost;
- `tool` runs are tool executions, joined to the LLM call that requested them by the tool call id
  of the ToolMessage they returned, else by parentage and time (`span_traces`);
- other run types (`chain`, `retriever`, `prompt`, `parser`, `embedding` ...) are skipped by rule and
  counted by type;
- the trace's root run names the agent (`name`) and, through its `error`, a failed run; the workload
  is `extra.metadata.workload` where set, else the project (`session_name`).
Runs are ordered by start time, then `dotted_order` (LangSmith's execution-ordered path key).
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
    dig,
    duration_ms,
    first,
    json_text,
    parse_arguments,
    parse_time,
    text_of,
)
from traceforge.model import LlmCall, ParseResult, Reject, Trace

FORMAT = "langsmith"
RUN_SHAPE_KEYS = {"trace_id", "dotted_order", "parent_run_id", "child_runs", "inputs", "outputs"}


def is_run(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("run_type"), str)
        and value.get("id") is not None
        and "start_time" in value
        and len(RUN_SHAPE_KEYS & value.keys()) >= 2
    )


def _runs_of(record: Record) -> list[tuple[Any, str | None, str | None]]:
    """The runs a record holds as (run, parent id, trace id): a query page's `runs`, or a run and
    the runs nested under its `child_runs` (which take their parent and trace from the tree)."""
    value = record.value
    if isinstance(value, dict) and isinstance(value.get("runs"), list) and not is_run(value):
        return [run for element in value["runs"] for run in _runs_of(Record(record.line, element))]
    out: list[tuple[Any, str | None, str | None]] = []
    stack: list[tuple[Any, str | None, str | None]] = [(value, None, None)]
    while stack:
        run, parent, trace = stack.pop()
        out.append((run, parent, trace))
        if is_run(run) and isinstance(run.get("child_runs"), list):
            run_id = as_id(run["id"])
            trace = as_id(run.get("trace_id")) or trace
            children = [(c, run_id, trace) for c in run["child_runs"] if isinstance(c, dict)]
            stack.extend(reversed(children))
    return out


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _trace_key(run: dict, inherited: str | None) -> str:
    """The run's trace id: its own field, the tree's, the root id at the head of `dotted_order`
    (`<time>Z<root id>.<time>Z<child id>...`), or the run's own id."""
    explicit = as_id(run.get("trace_id")) or inherited
    if explicit:
        return explicit
    dotted = as_str(run.get("dotted_order"))
    if dotted and "Z" in dotted.split(".", 1)[0]:
        return dotted.split(".", 1)[0].split("Z", 1)[1]
    return str(run["id"])


def _apply_usage(call: LlmCall, run: dict, recorded: Any) -> None:
    prompt, completion = as_int(run.get("prompt_tokens")), as_int(run.get("completion_tokens"))
    # LangSmith writes 0 / 0 for a run that reported no usage (a failed call): not a count.
    if prompt or completion:
        details = _dict(run.get("prompt_token_details"))
        usage = {
            "input": prompt,
            "cache_read": as_int(details.get("cache_read")),
            "cache_write": as_int(first(details, "cache_creation", "cache_write")),
            "output": completion,
            "reasoning": as_int(dig(run, "completion_token_details", "reasoning")),
        }
    else:
        usage = traced_messages.usage_counts(recorded) or traced_messages.usage_counts(
            dig(run, "outputs", "usage_metadata")
        )
    if usage is None:
        return
    call.usage_reported = True
    call.input_tokens = usage["input"]
    call.cache_read_tokens = usage["cache_read"]
    call.cache_write_tokens = usage["cache_write"]
    call.output_tokens = usage["output"]
    call.reasoning_tokens = usage["reasoning"]


def _first_token(run: dict) -> Any:
    if run.get("first_token_time"):
        return parse_time(run["first_token_time"])
    events = run.get("events")
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict) and event.get("name") == "new_token":
            return parse_time(event.get("time"))
    return None


def _llm_span(run: dict, parent: str | None, trace_key: str, line: int) -> LlmSpan:
    inputs, outputs = run.get("inputs"), run.get("outputs")
    request = traced_messages.request_of(inputs)
    response = traced_messages.response_of(outputs)
    metadata = _dict(dig(run, "extra", "metadata"))
    params = _dict(dig(run, "extra", "invocation_params"))
    model = (
        as_str(metadata.get("ls_model_name"))
        or as_str(first(params, "model", "model_name"))
        or response.model
        or as_str(dig(inputs, "model"))
    )
    started, ended = parse_time(run.get("start_time")), parse_time(run.get("end_time"))
    call = LlmCall(
        model=model,
        provider=as_str(metadata.get("ls_provider")) or provider_of(model),
        source_id=as_id(run["id"]),
        started_at=started,
        ended_at=ended,
        duration_ms=duration_ms(started, ended),
        ttft_ms=duration_ms(started, _first_token(run)),
        cost_usd=as_float(run.get("total_cost")),
        finish_reason=response.finish_reason or ("error" if run.get("error") else None),
        source_line=line,
    )
    _apply_usage(call, run, response.usage)
    return LlmSpan(
        span_id=str(run["id"]),
        trace_key=trace_key,
        parent_id=parent,
        line=line,
        call=call,
        request=request.messages,
        errors=request.errors,
        response=response.messages,
        tool_defs=request.tool_defs
        or traced_messages.tool_defs(params.get("tools") or params.get("functions")),
        order=as_str(run.get("dotted_order")) or "",
    )


def _tool_span(run: dict, parent: str | None, trace_key: str, line: int) -> ToolSpan:
    inputs, outputs = run.get("inputs"), run.get("outputs")
    if isinstance(inputs, dict) and inputs.keys() == {"input"}:
        arguments = parse_arguments(inputs["input"]) if isinstance(inputs["input"], str) else inputs["input"]
    else:
        arguments = inputs
    output = outputs.get("output") if isinstance(outputs, dict) and "output" in outputs else outputs
    fields = traced_messages.message_fields(output)
    if fields is not None:
        result, failed = text_of(fields.get("content")), fields.get("status") == "error"
    else:
        result, failed = json_text(output), False
    error = as_str(run.get("error"))
    return ToolSpan(
        span_id=str(run["id"]),
        trace_key=trace_key,
        parent_id=parent,
        line=line,
        name=as_str(run.get("name")) or "(unnamed)",
        arguments=arguments,
        result=result if result is not None else error,
        is_error=failed or error is not None,
        started_at=parse_time(run.get("start_time")),
        ended_at=parse_time(run.get("end_time")),
        tool_call_id=traced_messages.call_id_of(output)
        or as_id(dig(run, "extra", "metadata", "tool_call_id")),
        order=as_str(run.get("dotted_order")) or "",
    )


def _trace_info(runs: list[tuple[dict, str | None]]) -> TraceInfo:
    """What the trace's root run (else its earliest run) says about the trace."""
    roots = [run for run, parent in runs if parent is None] or [run for run, _ in runs]
    root = min(roots, key=lambda r: (as_str(r.get("dotted_order")) or "", str(r.get("start_time"))))
    metadata = _dict(dig(root, "extra", "metadata"))
    project = as_str(first(root, "session_name", "project_name"))
    attributes = {
        "langsmith_project": project,
        "langsmith_project_id": as_id(root.get("session_id")),
        "root_run": as_str(root.get("name")),
        "thread_id": as_id(first(metadata, "thread_id", "session_id", "conversation_id")),
        "tags": root.get("tags") or None,
        "error": as_str(root.get("error")),
    }
    return TraceInfo(
        workload=as_str(first(metadata, "workload", "app", "application")) or project,
        agent=as_str(first(metadata, "agent", "agent_name")) or as_str(root.get("name")),
        outcome="failure" if root.get("error") else "unknown",
        started_at=parse_time(root.get("start_time")),
        ended_at=parse_time(root.get("end_time")),
        attributes={k: v for k, v in attributes.items() if v is not None},
    )


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    by_trace: dict[str, list[tuple[dict, str | None, int]]] = {}
    for record in records:
        for run, tree_parent, tree_trace in _runs_of(record):
            _take(record, run, tree_parent, tree_trace, by_trace, result)
    result.traces = _build(by_trace, result)
    return result


def stream(
    records: Iterable[Record],
    source_path: str,
    result: ParseResult,
    on_first_pass: Callable[[int], None] | None = None,
) -> Iterator[Trace]:
    """`parse`'s traces one by one, each as soon as the last record holding one of its runs is
    read, so that a big export is not held whole (`traceforge.ingest.parts`). A trace's runs can
    come anywhere in an export, so a first pass finds that record (`stream.read_twice`); traces
    then come in the order they end."""
    learn = functools.partial(last_lines, trace_ids=_trace_ids)
    return read_twice(records, source_path, result, on_first_pass, parse, learn, _as_they_end)


def _trace_ids(record: Record) -> list[str]:
    return [_trace_key(run, tree_trace) for run, _, tree_trace in _runs_of(record) if is_run(run)]


def _as_they_end(records: Iterable[Record], last: dict[str, int], result: ParseResult) -> Iterator[Trace]:
    by_trace: dict[str, list[tuple[dict, str | None, int]]] = {}
    for record in records:
        named = dict.fromkeys(_take(record, *found, by_trace, result) for found in _runs_of(record))
        for key in (key for key in named if key is not None and last.get(key) == record.line):
            yield from _build({key: by_trace.pop(key)}, result)
    if by_trace:
        raise SourceError(FILE_CHANGED)


def _take(
    record: Record,
    run: Any,
    tree_parent: str | None,
    tree_trace: str | None,
    by_trace: dict[str, list[tuple[dict, str | None, int]]],
    result: ParseResult,
) -> str | None:
    """Count one exported run into `result` and keep it by its trace id (returned), or reject it."""
    result.records += 1
    if not is_run(run):
        result.rejects.append(
            Reject(
                record.line,
                "not a LangSmith run (a run has `id`, `run_type`, `start_time`, and `trace_id`, "
                "`dotted_order`, `parent_run_id`, `inputs` or `outputs`)",
                record.raw if run is record.value else json_text(run),
            )
        )
        return None
    key = _trace_key(run, tree_trace)
    by_trace.setdefault(key, []).append((run, as_id(run.get("parent_run_id")) or tree_parent, record.line))
    return key


def items_of(records: Iterable[Record], trace_ids: set[str]) -> dict[str, list[tuple[dict, str | None, int]]]:
    """The runs of `trace_ids` in `records` as (run, parent id, line), by trace id: what
    `traceforge.ingest.joins` reads again of each file a trace is spread over."""
    found: dict[str, list[tuple[dict, str | None, int]]] = {}
    for record in records:
        for run, tree_parent, tree_trace in _runs_of(record):
            if is_run(run) and (key := _trace_key(run, tree_trace)) in trace_ids:
                found.setdefault(key, []).append(
                    (run, as_id(run.get("parent_run_id")) or tree_parent, record.line)
                )
    return found


def traces_of(trace_id: str, runs: list[tuple[dict, str | None, int]]) -> list[Trace]:
    """The traces of one LangSmith trace from its runs gathered from several files (`items_of`); a
    run found in two of them counts once."""
    return _build({trace_id: runs}, ParseResult())


def start_key(item: tuple[dict, str | None, int]) -> tuple[bool, datetime, int]:
    """A run's place in time (those without a start time last, then by line)."""
    run, _, line = item
    started = parse_time(run.get("start_time"))
    return (started is None, started or span_traces.EPOCH, line)


def _build(by_trace: dict[str, list[tuple[dict, str | None, int]]], result: ParseResult) -> list[Trace]:
    """The traces of runs grouped by trace id; what is skipped is counted in `result`."""
    llm_spans, tool_spans, parents, infos = [], [], {}, {}
    for trace_key, exported in by_trace.items():
        runs = span_traces.first_of_each(exported, lambda item: str(item[0]["id"]), result, "duplicate run")
        infos[trace_key] = _trace_info([(run, parent) for run, parent, _ in runs])
        for run, parent, line in runs:
            parents[str(run["id"])] = parent
            kind = run["run_type"].lower()
            if kind == "llm":
                llm_spans.append(_llm_span(run, parent, trace_key, line))
            elif kind == "tool":
                tool_spans.append(_tool_span(run, parent, trace_key, line))
            else:
                result.skip(kind)
    return span_traces.build_traces(llm_spans, tool_spans, parents, infos, FORMAT, "langsmith-export")


def sniff(sample: list[Record]) -> float:
    """LangSmith runs: `run_type`, `id`, `start_time` and the run-tree fields."""
    for record in sample:
        if any(is_run(run) for run, _, _ in _runs_of(record)[:1]):
            return 0.95
    return 0.0
