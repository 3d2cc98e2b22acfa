"""SWE-agent `.traj` files: `{trajectory: [...], history: [...], info: {...}}`.

`history` is the conversation as the model saw it; `trajectory` has one step per model query
(`action`, `observation`, `thought`, `execution_time`); `info` holds the run's outcome
(`exit_status`, `submission`) and aggregate `model_stats`. Demonstration files hold `history` only.
Retry-loop runs (`attempts: [...]`) give one trace per attempt.

Two action styles:
- function calling: assistant messages carry OpenAI `tool_calls`; tool messages answer them through
  a `tool_call_ids` list;
- text actions (the original SWE-agent, and any model without function calling): the assistant's
  `action` string is the command. It becomes a tool call named after the command's first word with
  arguments `{"command": <the whole action>}`, and the observation that follows (a user message in
  the history) becomes its tool result. The trace records `action_format: text`.

What is lost: SWE-agent reports tokens and cost only for the whole run (`info.model_stats`:
tokens_sent, tokens_received, instance_cost, api_calls), so every LLM call keeps `usage_reported`
false and the aggregate goes to the trace's attributes. Requeried outputs (format errors, blocked
actions) are not in the history: they count in `model_stats.api_calls` but are not LLM call rows.
Steps have no wall clock: a tool call gets `duration_ms` from its step's `execution_time` only.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traceforge.ingest import openai_chat
from traceforge.ingest.conversation import assemble, default_workload
from traceforge.ingest.providers import provider_of
from traceforge.ingest.sources import Record
from traceforge.ingest.values import as_float, as_id, as_list, as_str, dig, parse_json, text_of, to_json
from traceforge.model import LlmCall, Message, ParseResult, Reject, Trace

FORMAT = "swe-agent"
AGENT = "swe-agent"
HISTORY_MARKERS = ("message_type", "agent", "action", "tool_call_ids", "is_demo")
MODEL_STAT_KEYS = ("instance_cost", "total_cost", "tokens_sent", "tokens_received", "api_calls")


def sniff(sample: list[Record]) -> float:
    for record in sample:
        value = record.value
        if not isinstance(value, dict):
            continue
        if isinstance(value.get("attempts"), list) and any(_is_run(a) for a in value["attempts"][:5]):
            return 0.95
        if _is_run(value):
            return 0.95
    return 0.0


def _is_run(value: Any) -> bool:
    """A trajectory with steps, or a history whose messages carry SWE-agent's own fields."""
    if not isinstance(value, dict):
        return False
    steps = value.get("trajectory")
    if (
        isinstance(steps, list)
        and steps
        and all(isinstance(s, dict) and "action" in s and "observation" in s for s in steps[:5])
    ):
        return True
    history = value.get("history")
    if (
        isinstance(history, list)
        and history
        and all(isinstance(h, dict) and "role" in h for h in history[:20])
    ):
        return any(any(k in h for k in HISTORY_MARKERS) for h in history[:20])
    return False


def parse(records: Iterable[Record], source_path: str) -> ParseResult:
    result = ParseResult()
    records = list(records)
    stem = Path(source_path).name.removesuffix(".traj").removesuffix(".json")
    for record in records:
        result.records += 1
        value = record.value
        base = _problem_id(value) or stem
        if len(records) > 1:
            base = f"{base}/{record.line}"
        attempts = value.get("attempts") if isinstance(value, dict) else None
        if isinstance(attempts, list) and attempts and all(_is_run(a) for a in attempts):
            best = as_id(dig(value, "info", "best_attempt_idx"))
            for index, attempt in enumerate(attempts):
                trace = _trace(attempt, f"{AGENT}/{base}/attempt-{index}", record.line)
                trace.attributes["attempt"] = index
                if best is not None:
                    trace.attributes["best_attempt"] = str(index) == best
                result.traces.append(trace)
        elif _is_run(value):
            result.traces.append(_trace(value, f"{AGENT}/{base}", record.line))
        else:
            result.rejects.append(
                Reject(
                    record.line,
                    "not a SWE-agent trajectory: expected `trajectory` steps with action/observation "
                    "or a `history` of SWE-agent messages",
                    record.raw or to_json(value),
                )
            )
    return result


def _replay_config(value: Any) -> dict:
    config = value.get("replay_config") if isinstance(value, dict) else None
    if isinstance(config, str):
        try:
            config = parse_json(config)
        except ValueError:
            return {}
    return config if isinstance(config, dict) else {}


def _problem_id(value: Any) -> str | None:
    return as_id(dig(_replay_config(value), "problem_statement", "id"))


def _trace(run: dict, source_id: str, line: int) -> Trace:
    history = [h for h in as_list(run.get("history")) if isinstance(h, dict)]
    steps = [s for s in as_list(run.get("trajectory")) if isinstance(s, dict)]
    info = run.get("info") if isinstance(run.get("info"), dict) else {}
    model = as_str(dig(_replay_config(run), "agent", "model", "name"))
    trace = Trace(source_format=FORMAT, source_id=source_id, source_line=line, agent=AGENT)
    messages, actions, text_actions, demos = _messages(history)
    turns = sum(1 for m in messages if m.call_index is not None)
    trace.llm_calls = [LlmCall(model=model, provider=provider_of(model)) for _ in range(turns)]
    assemble(trace, messages)
    unmatched = _attach_steps(trace, messages, actions, steps)
    trace.attributes["action_format"] = "text" if text_actions else "function-calling"
    if demos:
        trace.attributes["demonstration_messages"] = demos
    if unmatched:
        trace.attributes["steps_not_in_history"] = unmatched
    stats = info.get("model_stats")
    if isinstance(stats, dict):
        trace.attributes["model_stats"] = {k: stats[k] for k in MODEL_STAT_KEYS if k in stats} or stats
    for key in ("exit_status", "swe_agent_version", "swe_agent_hash"):
        if as_str(info.get(key)):
            trace.attributes[key] = info[key]
    agents = sorted({str(h["agent"]) for h in history if h.get("agent")})
    if agents:
        trace.attributes["agent_names"] = agents
    if isinstance(run.get("environment"), str):
        trace.attributes["environment"] = run["environment"]
    trace.outcome = _outcome(info, trace)
    trace.workload = f"{AGENT}/{default_workload(trace)}"
    return trace


def _messages(history: list[dict]) -> tuple[list[Message], list[str | None], bool, int]:
    """Canonical messages, the action string of each model turn (by message index, None elsewhere),
    whether actions were text, and how many demonstration messages the history holds. Model turns
    get their call_index in order."""
    messages: list[Message] = []
    actions: list[str | None] = []
    text_actions = False
    demos = turns = 0
    pending_text_call: str | None = None  # the name of a text action awaiting its observation
    for item in history:
        role = as_str(item.get("role"))
        content = text_of(item.get("content"))
        if item.get("is_demo") or item.get("message_type") == "demonstration":
            # Shown to the model as an example: kept as text, never a call of this run.
            demos += 1
            messages.append(Message(role="user" if role == "tool" else role or "user", content=content))
            actions.append(None)
            continue
        if role == "assistant":
            message = openai_chat.convert_message({**item, "content": content})
            message.reasoning = message.reasoning or _thinking(item.get("thinking_blocks"))
            action = as_str(item.get("action"))
            if not message.tool_calls and action and action.strip():
                name = action.strip().split()[0]
                message.tool_calls = [{"id": None, "name": name, "arguments": {"command": action.strip()}}]
                pending_text_call = name
                text_actions = True
            else:
                pending_text_call = None
            message.call_index = turns
            turns += 1
            messages.append(message)
            actions.append(action)
        elif role == "tool":
            ids = [as_id(i) for i in as_list(item.get("tool_call_ids")) if as_id(i)] or [
                as_id(item.get("tool_call_id"))
            ]
            for tool_call_id in ids:
                messages.append(Message(role="tool", content=content, tool_call_id=tool_call_id))
                actions.append(None)
        elif role == "user" and pending_text_call is not None:
            messages.append(Message(role="tool", content=content, name=pending_text_call))
            actions.append(None)
            pending_text_call = None
        elif role in ("system", "user"):
            messages.append(Message(role=role, content=content))
            actions.append(None)
    return messages, actions, text_actions, demos


def _thinking(blocks: Any) -> str | None:
    if not isinstance(blocks, list):
        return None
    texts = [as_str(b.get("thinking")) for b in blocks if isinstance(b, dict) and as_str(b.get("thinking"))]
    return "\n".join(t for t in texts if t) or None


def _attach_steps(trace: Trace, messages: list[Message], actions: list[str | None], steps: list[dict]) -> int:
    """Give each model turn's tool calls their step's execution time (and the step's observation
    where the history ends before it). Steps pair with model turns by their action, in order; steps
    whose output was requeried have no turn. Returns how many steps were left unpaired."""
    tools_by_call: dict[int, list] = {}
    for tool in trace.tool_calls:
        if tool.call_index is not None:
            tools_by_call.setdefault(tool.call_index, []).append(tool)
    position = 0
    paired = 0
    for message, action in zip(messages, actions, strict=True):
        if message.call_index is None or action is None:
            continue
        for index in range(position, len(steps)):
            if (as_str(steps[index].get("action")) or "").strip() == action.strip():
                step = steps[index]
                position = index + 1
                paired += 1
                tools = tools_by_call.get(message.call_index, [])
                seconds = as_float(step.get("execution_time"))
                if tools and seconds is not None:
                    tools[0].duration_ms = seconds * 1000.0
                observation = step.get("observation")
                if tools and tools[0].result is None and isinstance(observation, str):
                    tools[0].result = observation
                break
    return len(steps) - paired


def _outcome(info: dict, trace: Trace) -> str:
    """success: the agent submitted a patch; failure: it stopped without one (cost limit, error,
    forfeit). Whether the patch resolves the issue is the evaluation's verdict, not the trajectory's."""
    submission = info.get("submission")
    if isinstance(submission, str) and submission.strip():
        trace.attributes["submission_chars"] = len(submission)
        return "success"
    if as_str(info.get("exit_status")):
        return "failure"
    return "unknown"
