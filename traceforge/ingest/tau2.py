"""tau2-bench results: `{timestamp, info, tasks, simulations: [...]}`, one trace per simulation.

A simulation holds the conversation between the agent (an LLM), a user simulator (another LLM) and
the domain's tools. tau2's own tool-call shape is `{id, name, arguments (an object), requestor}`; a
tool result is a `role: tool` message whose `id` is the call's id. In the telecom domain the user
simulator calls tools too (`requestor: "user"`, on `role: user` messages): those calls are kept, with
requestor `user`, so the dependency analysis can tell the two actors apart.

LLM calls are the agent's: assistant messages with `usage` or `raw_data` (tau2's opening greeting
is canned and has neither); per message `usage` and `cost`. `raw_data` holds the provider's own
response, an OpenAI choice or an Anthropic message; it gives the finish reason and, for Anthropic,
the usage with cache fields and the message id. The user simulator's calls are not the workload's:
their count, tokens and cost go to the trace's attributes.

The system prompt is not in the results file: the trace's system message is the domain policy
(`info.environment_info.policy`), which tau2's agent wraps in a fixed instruction template.
Workload `tau2/<domain>`; outcome success when the reward is 1, as tau2's pass^k counts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from traceforge.ingest import anthropic_messages, openai_chat
from traceforge.ingest.conversation import assemble
from traceforge.ingest.providers import provider_of
from traceforge.ingest.sources import Record
from traceforge.ingest.values import as_float, as_id, as_int, as_str, dig, duration_ms, parse_time, to_json
from traceforge.model import LlmCall, Message, ParseResult, Reject, ToolDef, Trace

FORMAT = "tau2"
DEFAULT_GREETING = "Hi! How can I help you today?"
SUCCESS_REWARD = 1.0 - 1e-6


def sniff(sample: list[Record]) -> float:
    for record in sample:
        value = record.value
        if (
            isinstance(value, dict)
            and isinstance(value.get("simulations"), list)
            and isinstance(value.get("info"), dict)
            and ("tasks" in value or "environment_info" in value["info"])
        ):
            return 0.95
    return 0.0


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    """Each simulation counts as one record (a reject names its index in `simulations`)."""
    result = ParseResult()
    for record in records:
        value = record.value
        if not (isinstance(value, dict) and isinstance(value.get("simulations"), list)):
            result.records += 1
            result.rejects.append(
                Reject(
                    record.line,
                    "not a tau2 results document: no `simulations` list",
                    record.raw or to_json(value),
                )
            )
            continue
        info = value.get("info") if isinstance(value.get("info"), dict) else {}
        context = _Context(info)
        for index, simulation in enumerate(value["simulations"]):
            result.records += 1
            messages = simulation.get("messages") if isinstance(simulation, dict) else None
            if not isinstance(messages, list):
                result.rejects.append(
                    Reject(
                        index + 1,
                        f"simulations[{index}] has no `messages` list; it is not a tau2 simulation",
                        to_json(simulation),
                    )
                )
                continue
            result.traces.append(_trace(simulation, messages, context, index + 1))
    return result


class _Context:
    """What the results' `info` says about every simulation in it."""

    def __init__(self, info: dict) -> None:
        self.domain = as_str(dig(info, "environment_info", "domain_name"))
        self.agent = as_str(dig(info, "agent_info", "implementation"))
        self.model = as_str(dig(info, "agent_info", "llm"))
        self.user_model = as_str(dig(info, "user_info", "llm"))
        self.policy = as_str(dig(info, "environment_info", "policy"))
        self.tool_defs = _tool_defs(dig(info, "environment_info", "tool_defs"))
        self.attributes = {
            k: v
            for k, v in {
                "domain": self.domain,
                "user_llm": self.user_model,
                "git_commit": as_str(info.get("git_commit")),
            }.items()
            if v
        }


def _tool_defs(raw: Any) -> list[ToolDef]:
    """Tool definitions as tau2 saves them: OpenAI tool schemas, in a list or by name."""
    if isinstance(raw, dict):
        raw = [_named(name, schema) for name, schema in raw.items()]
    if not isinstance(raw, list):
        return []
    flat = [t.get("function", t) for t in raw if isinstance(t, dict)]
    return openai_chat.tool_defs({"functions": flat})


def _named(name: str, schema: Any) -> dict:
    if not isinstance(schema, dict):
        return {"name": name}
    return schema if "function" in schema or "name" in schema else {"name": name, **schema}


def _trace(simulation: dict, raw_messages: list, context: _Context, line: int) -> Trace:
    source_id = as_id(simulation.get("id"))
    task_id = as_id(simulation.get("task_id"))
    trial = as_id(simulation.get("trial"))
    if not source_id:
        source_id = f"{task_id}/trial-{trial}" if task_id else f"simulation-{line}"
    trace = Trace(
        source_format=FORMAT,
        source_id=source_id,
        source_line=line,
        workload=f"tau2/{context.domain}" if context.domain else "tau2",
        agent=context.agent or "tau2",
        started_at=parse_time(simulation.get("start_time")),
        ended_at=parse_time(simulation.get("end_time")),
        attributes=dict(context.attributes),
    )
    messages: list[Message] = [Message(role="system", content=context.policy)] if context.policy else []
    errors: dict[int, bool] = {}
    requested_at: dict[str, datetime] = {}
    answered_at: dict[str, datetime] = {}
    recorded = any(
        isinstance(m, dict) and m.get("role") == "assistant" and (m.get("usage") or m.get("raw_data"))
        for m in raw_messages
    )
    user_llm = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    previous: datetime | None = trace.started_at
    for position, raw in enumerate(raw_messages):
        if not isinstance(raw, dict):
            continue
        message = openai_chat.convert_message(raw)
        if message is None:
            continue
        time = parse_time(raw.get("timestamp"))
        if message.role == "tool" and isinstance(raw.get("error"), bool):
            errors[len(messages)] = raw["error"]
        if message.role == "assistant" and _is_llm_output(raw, position, recorded):
            message.call_index = len(trace.llm_calls)
            trace.llm_calls.append(_call(raw, context, previous, time))
        elif message.role == "user" and (raw.get("usage") or raw.get("raw_data")):
            _count_user_llm(user_llm, raw)
        for call in message.tool_calls or []:
            if call.get("id") and time:
                requested_at.setdefault(call["id"], time)
        if message.role == "tool" and message.tool_call_id and time:
            answered_at.setdefault(message.tool_call_id, time)
        messages.append(message)
        previous = time or previous
    trace.tool_defs = list(context.tool_defs)
    assemble(trace, messages, result_errors=errors)
    for tool in trace.tool_calls:
        tool.started_at = requested_at.get(tool.source_id or "")
        tool.ended_at = answered_at.get(tool.source_id or "")
        tool.duration_ms = duration_ms(tool.started_at, tool.ended_at)
    if user_llm["calls"]:
        trace.attributes["user_simulator"] = user_llm
    _outcome(trace, simulation)
    return trace


def _is_llm_output(raw: dict, position: int, recorded: bool) -> bool:
    """An agent message the LLM wrote: it has usage or raw_data; where the harness recorded neither
    for any message, every assistant message except tau2's canned opening greeting."""
    if raw.get("usage") or raw.get("raw_data"):
        return True
    if recorded:
        return False
    return not (position == 0 and not raw.get("tool_calls") and raw.get("content") == DEFAULT_GREETING)


def _call(raw: dict, context: _Context, started: datetime | None, ended: datetime | None) -> LlmCall:
    response = raw.get("raw_data") if isinstance(raw.get("raw_data"), dict) else {}
    anthropic = "stop_reason" in response or as_str(response.get("type")) == "message"
    model = as_str(response.get("model")) or context.model
    call = LlmCall(
        model=model,
        provider="anthropic" if anthropic else provider_of(model),
        source_id=as_id(response.get("id")) if anthropic else None,
        started_at=started,
        ended_at=ended,
        duration_ms=duration_ms(started, ended),
        finish_reason=as_str(response.get("stop_reason"))
        or as_str(response.get("finish_reason"))
        or as_str(dig(response, "choices", 0, "finish_reason")),
    )
    provider_usage = response.get("usage")
    if anthropic and isinstance(provider_usage, dict):
        anthropic_messages.apply_usage(call, provider_usage)
    elif isinstance(provider_usage, dict):
        openai_chat.apply_usage(call, provider_usage)
    if not call.usage_reported:
        openai_chat.apply_usage(call, raw.get("usage"))
    cost = as_float(raw.get("cost"))
    if cost is not None:
        call.cost_usd = cost
    return call


def _count_user_llm(totals: dict, raw: dict) -> None:
    usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
    totals["calls"] += 1
    totals["input_tokens"] += as_int(usage.get("prompt_tokens")) or 0
    totals["output_tokens"] += as_int(usage.get("completion_tokens")) or 0
    totals["cost_usd"] += as_float(raw.get("cost")) or 0.0


def _outcome(trace: Trace, simulation: dict) -> None:
    reward = as_float(dig(simulation, "reward_info", "reward"))
    if reward is not None:
        trace.outcome = "success" if reward >= SUCCESS_REWARD else "failure"
        trace.attributes["reward"] = reward
    for key in ("task_id", "trial", "seed", "termination_reason", "agent_cost", "user_cost", "duration"):
        if simulation.get(key) is not None:
            trace.attributes[key] = simulation[key]
    db_match = dig(simulation, "reward_info", "db_check", "db_match")
    if isinstance(db_match, bool):
        trace.attributes["db_match"] = db_match
