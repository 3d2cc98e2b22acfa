"""What a span is and what it says, in each GenAI attribute dialect.

Dialects: OTel GenAI semantic conventions, current (`gen_ai.provider.name`, `gen_ai.input.messages`)
and deprecated (`gen_ai.system`, `gen_ai.usage.prompt_tokens`, message events); OpenInference
(`openinference.span.kind`, `llm.*`, `tool.*`, `input.value`); OpenLLMetry (`traceloop.*`,
`gen_ai.prompt.N.*`); Vercel AI SDK (`ai.*`).

A span's role is decided by the first of these that it carries (the priority Langfuse's OTel
ingestion uses): an explicit vendor type (`langfuse.observation.type`), `openinference.span.kind`,
`gen_ai.operation.name`, `traceloop.span.kind` / `langsmith.span.kind` / `llm.request.type`, the
Vercel AI SDK's `ai.operationId`, then heuristics (GenAI usage or tool attributes). Spans that are
neither an LLM call nor a tool execution get a kind (agent, chain, embedding, http, db...) under
which the adapter counts them as skipped.

Token counts follow OTel semantics (input includes cached tokens). A source whose cache counts
exceed its input count evidently reported input without them (Anthropic's native usage leaking
through an instrumentation); those cache counts are added back in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traceforge.ingest.otel_messages import DETAILS_EVENT, finish_reason_of
from traceforge.ingest.otel_wire import STATUS_ERROR, STATUS_OK, Span
from traceforge.ingest.values import as_float, as_id, as_int, as_str, duration_ms, json_text, parse_arguments
from traceforge.model import LlmCall, ToolDef

LLM, TOOL = "llm", "tool"
LLM_OPERATIONS = {"chat", "text_completion", "completion", "generate_content", "generate", "responses"}
OPERATION_KINDS = {
    "execute_tool": TOOL,
    "invoke_agent": "agent",
    "create_agent": "agent",
    "agent_step": "chain",
    "invoke_workflow": "chain",
    "embeddings": "embedding",
    "retrieval": "retriever",
}
FIRST_CHUNK_EVENTS = ("ai.stream.firstChunk", "First Token Stream Event", "llm.content.completion.chunk")
UNKNOWN_SERVICE = "unknown_service"

INPUT_TOKENS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "ai.usage.inputTokens",
    "ai.usage.promptTokens",
    "llm.usage.prompt_tokens",
)
OUTPUT_TOKENS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "ai.usage.outputTokens",
    "ai.usage.completionTokens",
    "llm.usage.completion_tokens",
)
CACHE_READ_TOKENS = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
    "ai.usage.inputTokenDetails.cacheReadTokens",
    "ai.usage.cachedInputTokens",
    "gen_ai.usage.input_token_details.cache_read",
)
CACHE_WRITE_TOKENS = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
    "llm.token_count.prompt_details.cache_write",
    "ai.usage.inputTokenDetails.cacheWriteTokens",
    "gen_ai.usage.input_token_details.cache_creation",
)
REASONING_TOKENS = (
    "gen_ai.usage.reasoning.output_tokens",
    "gen_ai.usage.reasoning_tokens",
    "llm.token_count.completion_details.reasoning",
    "ai.usage.outputTokenDetails.reasoningTokens",
    "ai.usage.reasoningTokens",
)


def _lower(value: Any) -> str:
    return (as_str(value) or "").strip().lower()


def _first(attributes: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None and value != "":
            return value
    return None


# ---------------------------------------------------------------- role and dialect


def classify(span: Span) -> str:
    """`llm`, `tool`, or the kind of span it is instead (agent, chain, embedding, http...)."""
    attributes = span.attributes
    explicit = _lower(attributes.get("langfuse.observation.type"))
    if explicit:
        return {"generation": LLM, "tool": TOOL}.get(explicit, explicit)
    openinference = _lower(attributes.get("openinference.span.kind"))
    if openinference:
        return openinference
    operation = _lower(attributes.get("gen_ai.operation.name"))
    if operation:
        return LLM if operation in LLM_OPERATIONS else OPERATION_KINDS.get(operation, operation)
    for key in ("traceloop.span.kind", "langsmith.span.kind"):
        kind = _lower(attributes.get(key))
        if kind:
            return kind
    request_type = _lower(attributes.get("llm.request.type"))
    if request_type:
        return LLM if request_type in ("chat", "completion") else request_type
    vercel = as_str(attributes.get("ai.operationId"))
    if vercel:
        return _vercel_kind(vercel)
    if attributes.get("gen_ai.tool.name") or span.name.startswith("execute_tool"):
        return TOOL
    if any(key.startswith(("gen_ai.usage.", "llm.token_count.")) for key in attributes) or (
        attributes.get("gen_ai.request.model") or attributes.get("llm.model_name")
    ):
        return LLM
    return _plain_kind(span)


def _vercel_kind(operation_id: str) -> str:
    if operation_id.endswith((".doGenerate", ".doStream")):
        return LLM
    if operation_id == "ai.toolCall":
        return TOOL
    return "embedding" if "embed" in operation_id.lower() else "chain"


def _plain_kind(span: Span) -> str:
    """The kind of a span no GenAI convention claims: by its semantic-convention family, else its
    span kind."""
    keys = span.attributes.keys()
    for prefix, kind in (("http.", "http"), ("url.", "http"), ("db.", "db"), ("rpc.", "rpc")):
        if any(key.startswith(prefix) for key in keys):
            return kind
    if any(key.startswith("messaging.") for key in keys):
        return "messaging"
    return span.kind if span.kind != "unspecified" else "other"


def dialect(span: Span) -> str:
    """Which convention wrote a span's GenAI attributes (it decides where its messages are read
    first): vercel-ai, openinference, openllmetry, otel-genai-deprecated or otel-genai."""
    attributes = span.attributes
    keys = list(attributes)
    if "ai.operationId" in attributes or any(key.startswith("ai.") for key in keys):
        return "vercel-ai"
    if "openinference.span.kind" in attributes or any(
        key.startswith(("llm.input_messages.", "llm.output_messages.", "llm.token_count.")) for key in keys
    ):
        return "openinference"
    if any(key.startswith("traceloop.") for key in keys) or "llm.request.type" in attributes:
        return "openllmetry"
    deprecated_events = {"gen_ai.user.message", "gen_ai.choice", "gen_ai.content.prompt"}
    if (
        "gen_ai.prompt" in attributes
        or "gen_ai.usage.prompt_tokens" in attributes
        or any(key.startswith("gen_ai.prompt.") for key in keys)
        or any(event.name in deprecated_events for event in span.events)
        or ("gen_ai.system" in attributes and "gen_ai.provider.name" not in attributes)
    ):
        return "otel-genai-deprecated"
    return "otel-genai"


# ---------------------------------------------------------------- LLM spans


def llm_call(span: Span, span_dialect: str) -> LlmCall:
    """The LLM call an LLM span records: model, provider, timing, usage, finish reason."""
    attributes = span.attributes
    details = next((e.attributes for e in span.events if e.name == DETAILS_EVENT), {})
    merged = {**details, **attributes}
    call = LlmCall(
        model=as_str(
            _first(
                merged,
                (
                    "gen_ai.response.model",
                    "llm.response.model_name",
                    "ai.response.model",
                    "gen_ai.request.model",
                    "llm.model_name",
                    "llm.request.model_name",
                    "ai.model.id",
                ),
            )
        ),
        provider=_provider(merged, span_dialect),
        source_id=as_id(_first(merged, ("gen_ai.response.id", "ai.response.id"))) or span.span_id,
        started_at=span.start,
        ended_at=span.end,
        duration_ms=duration_ms(span.start, span.end),
        ttft_ms=_ttft_ms(span),
        finish_reason=_finish_reason(span, merged),
        source_line=span.line,
    )
    _apply_usage(call, merged)
    cost = as_float(_first(merged, ("llm.cost.total", "gen_ai.usage.cost")))
    if cost is not None:
        call.cost_usd = cost
    return call


def _provider(attributes: dict[str, Any], span_dialect: str) -> str | None:
    provider = as_str(
        _first(
            attributes,
            ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system", "ai.model.provider"),
        )
    )
    if provider and span_dialect == "vercel-ai":
        # The AI SDK names the provider's API too ("openai.responses", "anthropic.messages").
        provider = provider.split(".", 1)[0]
    return provider.lower() if provider else None


def _apply_usage(call: LlmCall, attributes: dict[str, Any]) -> None:
    call.input_tokens = as_int(_first(attributes, INPUT_TOKENS))
    call.output_tokens = as_int(_first(attributes, OUTPUT_TOKENS))
    call.cache_read_tokens = as_int(_first(attributes, CACHE_READ_TOKENS))
    call.cache_write_tokens = as_int(_first(attributes, CACHE_WRITE_TOKENS))
    call.reasoning_tokens = as_int(_first(attributes, REASONING_TOKENS))
    call.usage_reported = call.input_tokens is not None or call.output_tokens is not None
    cached = (call.cache_read_tokens or 0) + (call.cache_write_tokens or 0)
    if call.input_tokens is not None and cached > call.input_tokens:
        call.input_tokens += cached


def _ttft_ms(span: Span) -> float | None:
    seconds = as_float(span.attributes.get("gen_ai.response.time_to_first_chunk"))
    if seconds is not None:
        return seconds * 1000.0
    milliseconds = as_float(span.attributes.get("ai.response.msToFirstChunk"))
    if milliseconds is not None:
        return milliseconds
    times = [e.time for e in span.events if e.name in FIRST_CHUNK_EVENTS and e.time is not None]
    return duration_ms(span.start, min(times)) if times and span.start else None


def _finish_reason(span: Span, attributes: dict[str, Any]) -> str | None:
    reasons = attributes.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and reasons:
        reasons = reasons[0]
    reason = as_str(reasons) or as_str(
        _first(
            attributes, ("gen_ai.completion.0.finish_reason", "ai.response.finishReason", "llm.finish_reason")
        )
    )
    if reason:
        return reason
    for key in ("gen_ai.output.messages", "output.value", "gen_ai.completion"):
        reason = finish_reason_of(attributes.get(key))
        if reason:
            return reason
    choice = next((e for e in span.events if e.name == "gen_ai.choice"), None)
    return as_str(choice.attributes.get("finish_reason")) if choice else None


def tool_defs(span: Span) -> list[ToolDef]:
    """The tools an LLM span offered the model, from whichever attribute lists them."""
    attributes = span.attributes
    details = next((e.attributes for e in span.events if e.name == DETAILS_EVENT), {})
    raw: list[Any] = []
    for value in (attributes.get("gen_ai.tool.definitions"), details.get("gen_ai.tool.definitions")):
        parsed = parse_arguments(value) if isinstance(value, str) else value
        if isinstance(parsed, list):
            raw.extend(parsed)
    raw.extend(_indexed_values(attributes, "llm.tools.", ".tool.json_schema"))
    raw.extend(_indexed_groups(attributes, "llm.request.functions."))
    prompt_tools = attributes.get("ai.prompt.tools")
    if isinstance(prompt_tools, list):
        raw.extend(prompt_tools)
    defs = []
    for item in raw:
        definition = tool_def(parse_arguments(item) if isinstance(item, str) else item)
        if definition is not None:
            defs.append(definition)
    return defs


def tool_def(raw: Any) -> ToolDef | None:
    """A tool definition in the OpenAI (`function` wrapper), flat, or Anthropic (`input_schema`) shape."""
    if not isinstance(raw, dict):
        return None
    function = raw.get("function") if isinstance(raw.get("function"), dict) else raw
    name = as_str(function.get("name"))
    if not name:
        return None
    parameters = function.get("parameters", function.get("input_schema", function.get("inputSchema")))
    return ToolDef(
        name=name,
        description=as_str(function.get("description")),
        parameters=parse_arguments(parameters) if isinstance(parameters, str) else parameters,
    )


def _indexed_values(attributes: dict[str, Any], prefix: str, suffix: str) -> list[Any]:
    found = []
    for key, value in attributes.items():
        if key.startswith(prefix) and key.endswith(suffix) and key[len(prefix) : -len(suffix)].isdigit():
            found.append((int(key[len(prefix) : -len(suffix)]), value))
    return [value for _, value in sorted(found, key=lambda item: item[0])]


def _indexed_groups(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    groups: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, _, field_name = key[len(prefix) :].partition(".")
        if index.isdigit() and field_name:
            groups.setdefault(int(index), {})[field_name] = value
    return [groups[i] for i in sorted(groups)]


# ---------------------------------------------------------------- tool spans


@dataclass
class ToolSpan:
    """What a tool-execution span says about the call it ran."""

    name: str
    call_id: str | None
    arguments: Any
    result: str | None
    error: bool | None  # None: the span does not say
    definition: ToolDef | None


def tool_span(span: Span) -> ToolSpan:
    attributes = span.attributes
    name = as_str(
        _first(attributes, ("gen_ai.tool.name", "tool.name", "ai.toolCall.name", "traceloop.entity.name"))
    )
    if not name:
        name = span.name.removeprefix("execute_tool").strip() or span.name or "(unnamed)"
    arguments = _first(
        attributes,
        (
            "gen_ai.tool.call.arguments",
            "ai.toolCall.args",
            "ai.toolCall.input",
            "input.value",
            "traceloop.entity.input",
            "input",
        ),
    )
    arguments = parse_arguments(arguments) if arguments is not None else None
    if isinstance(arguments, dict) and set(arguments) <= {"args", "kwargs"} and not arguments.get("args"):
        arguments = arguments.get("kwargs", arguments)  # OpenLLMetry's {"args": [], "kwargs": {...}}
    result = _first(
        attributes,
        (
            "gen_ai.tool.call.result",
            "ai.toolCall.result",
            "ai.toolCall.output",
            "output.value",
            "traceloop.entity.output",
            "output",
        ),
    )
    error = None
    if span.status == STATUS_ERROR or attributes.get("error.type"):
        error = True
    elif span.status == STATUS_OK:
        error = False
    description = as_str(_first(attributes, ("gen_ai.tool.description", "tool.description")))
    parameters = _first(attributes, ("tool.parameters", "tool.json_schema"))
    parameters = parse_arguments(parameters) if isinstance(parameters, str) else parameters
    return ToolSpan(
        name=name,
        call_id=as_id(
            _first(attributes, ("gen_ai.tool.call.id", "tool_call.id", "tool.id", "ai.toolCall.id"))
        ),
        arguments=arguments,
        result=json_text(result),
        error=error,
        definition=ToolDef(name, description, parameters) if description or parameters else None,
    )


# ---------------------------------------------------------------- trace-level names


def service_name(span: Span) -> str | None:
    """The resource's service.name, unless it is the SDK's `unknown_service` default."""
    name = as_str(span.resource.get("service.name"))
    return None if not name or name.startswith(UNKNOWN_SERVICE) else name


def agent_name(span: Span) -> str | None:
    attributes = span.attributes
    name = as_str(_first(attributes, ("gen_ai.agent.name", "agent.name")))
    if not name and _lower(attributes.get("traceloop.span.kind")) == "agent":
        name = as_str(attributes.get("traceloop.entity.name"))
    return name


def workflow_name(span: Span) -> str | None:
    return as_str(
        _first(
            span.attributes, ("gen_ai.workflow.name", "traceloop.workflow.name", "ai.telemetry.functionId")
        )
    )


def conversation_id(span: Span) -> str | None:
    return as_id(
        _first(span.attributes, ("gen_ai.conversation.id", "session.id", "ai.telemetry.metadata.sessionId"))
    )
