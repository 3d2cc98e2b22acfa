"""Rendering scenarios in Anthropic Messages shapes: a gateway's per-request log and transcripts.

Content blocks: `thinking` (with a signature), `text`, `tool_use`; tool results go back in a user
message as `tool_result` blocks with `is_error`. Requests mark the system prompt and the last block
of the conversation with `cache_control`, as agent clients do, so each call reads the previous
call's prompt from the cache and writes the rest. Anthropic's `input_tokens` counts only what
follows the last cache breakpoint (`UNCACHED_TAIL_TOKENS`, as real agent logs show) and prompts
under `CACHE_MIN_TOKENS` are not cached at all
(https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
"""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

from traceforge.samples.rendering import Rendering, iso, log_order, metadata
from traceforge.samples.scenario import LlmTurn, Scenario, ToolUse, UserTurn

CACHE_MIN_TOKENS = 1024
UNCACHED_TAIL_TOKENS = 3
MAX_TOKENS = 16000
THINKING_BUDGET = 6000
EPHEMERAL = {"type": "ephemeral"}


def tool_use_id(use: ToolUse) -> str:
    return "toolu_01" + use.uid[:22]


def tools(scenario: Scenario) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in scenario.tools
    ]


def content_blocks(turn: LlmTurn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.reasoning:
        signature = base64.b64encode(hashlib.blake2b(turn.uid.encode(), digest_size=48).digest()).decode()
        blocks.append({"type": "thinking", "thinking": turn.reasoning, "signature": signature})
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    for use in turn.tool_uses:
        blocks.append({"type": "tool_use", "id": tool_use_id(use), "name": use.name, "input": use.arguments})
    return blocks


def conversation(scenario: Scenario) -> tuple[list[dict[str, Any]], list[int]]:
    """The whole conversation as Messages API messages (alternating roles), and for each LLM call
    the number of messages its request held."""
    messages: list[dict[str, Any]] = []
    prompt_lengths = []
    for turn in scenario.turns:
        if isinstance(turn, UserTurn):
            if messages and isinstance(messages[-1]["content"], list) and messages[-1]["role"] == "user":
                # right after tool results: the same user message carries the new text
                messages[-1]["content"].append({"type": "text", "text": turn.text})
            else:
                messages.append({"role": "user", "content": turn.text})
            continue
        prompt_lengths.append(len(messages))
        messages.append({"role": "assistant", "content": content_blocks(turn)})
        if turn.tool_uses:
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_use_id(use),
                    "content": use.result_text,
                    "is_error": use.is_error,
                }
                for use in turn.tool_uses
            ]
            messages.append({"role": "user", "content": results})
    return messages, prompt_lengths


def with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages with `cache_control` on the last content block."""
    marked = copy.deepcopy(messages)
    last = marked[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = EPHEMERAL
    return marked


def usage(turn: LlmTurn) -> dict[str, Any]:
    if turn.prompt_tokens < CACHE_MIN_TOKENS:
        read = written = 0
    else:
        read = turn.prefix_tokens - UNCACHED_TAIL_TOKENS if turn.prefix_tokens >= CACHE_MIN_TOKENS else 0
        written = turn.prompt_tokens - UNCACHED_TAIL_TOKENS - read
    return {
        "input_tokens": turn.prompt_tokens - read - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": turn.output_tokens,
        "service_tier": "standard",
    }


def response(scenario: Scenario, turn: LlmTurn) -> dict[str, Any]:
    return {
        "id": "msg_01" + turn.uid[:22],
        "type": "message",
        "role": "assistant",
        "model": scenario.model.snapshot,
        "content": content_blocks(turn),
        "stop_reason": "tool_use" if turn.tool_uses else "end_turn",
        "stop_sequence": None,
        "usage": usage(turn),
    }


def gateway_log(scenarios: list[Scenario]) -> Rendering:
    """One record per API call, as a proxy logs the HTTP exchange: request and response bodies,
    status, metadata and timings, in the order the calls completed."""
    calls = []
    for scenario in scenarios:
        messages, prompt_lengths = conversation(scenario)
        system = [{"type": "text", "text": scenario.system, "cache_control": EPHEMERAL}]
        for turn, length in zip(scenario.llm_turns, prompt_lengths, strict=True):
            body = {
                "model": scenario.model.name,
                "max_tokens": MAX_TOKENS,
                "thinking": {"type": "enabled", "budget_tokens": THINKING_BUDGET},
                "system": system,
                "tools": tools(scenario),
                "messages": with_breakpoint(messages[:length]),
            }
            record = {
                "start_time": iso(turn.started_ms),
                "end_time": iso(turn.ended_ms),
                "metadata": metadata(scenario),
                "request": {"method": "POST", "url": "https://api.anthropic.com/v1/messages", "body": body},
                "response": {"status": 200, "body": response(scenario, turn)},
            }
            calls.append((turn.ended_ms, scenario, record))
    return log_order(scenarios, calls)


def transcripts(scenarios: list[Scenario]) -> Rendering:
    """One conversation per record: id, model, system, tools, messages, and the run's outcome."""
    records = []
    for scenario in scenarios:
        record: dict[str, Any] = {
            "id": "run_" + scenario.uid[:16],
            "model": scenario.model.snapshot,
            "system": scenario.system,
            "tools": tools(scenario),
            "messages": conversation(scenario)[0],
            "outcome": "success" if scenario.reward > 0 else "failure",
        }
        if scenario.tagged:
            record["metadata"] = {"workload": scenario.workload}
        records.append(record)
    return Rendering(records, list(range(len(records))), [r["id"] for r in records])
