"""Rendering scenarios in OpenAI Chat Completions shapes: a gateway's per-request log, transcripts
with `tool_calls`, and transcripts in the legacy `function_call` / `role: function` form.

OpenAI caches prompt prefixes automatically: prompts of 1024 tokens or more, reused in 128-token
increments (https://platform.openai.com/docs/guides/prompt-caching), so `cached_tokens` is the
prefix the previous call already sent, rounded down to a multiple of 128.
"""

from __future__ import annotations

import hashlib
from typing import Any

from traceforge.samples.rendering import Rendering, iso, log_order, metadata
from traceforge.samples.scenario import LlmTurn, Scenario, ScenarioError, ToolUse, UserTurn

CACHE_MIN_TOKENS = 1024
CACHE_BLOCK_TOKENS = 128


def tool_call_id(use: ToolUse) -> str:
    return "call_" + use.uid


def tools(scenario: Scenario) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in scenario.tools
    ]


def assistant_message(turn: LlmTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool_uses:
        message["tool_calls"] = [
            {
                "id": tool_call_id(use),
                "type": "function",
                "function": {"name": use.name, "arguments": use.arguments_text},
            }
            for use in turn.tool_uses
        ]
    return message


def chat_messages(scenario: Scenario) -> tuple[list[dict[str, Any]], list[int]]:
    """The whole conversation as Chat Completions messages, and for each LLM call the number of
    messages its request held."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": scenario.system}]
    prompt_lengths = []
    for turn in scenario.turns:
        if isinstance(turn, UserTurn):
            messages.append({"role": "user", "content": turn.text})
            continue
        prompt_lengths.append(len(messages))
        messages.append(assistant_message(turn))
        for use in turn.tool_uses:
            messages.append({"role": "tool", "tool_call_id": tool_call_id(use), "content": use.result_text})
    return messages, prompt_lengths


def legacy_messages(scenario: Scenario) -> list[dict[str, Any]]:
    """The conversation in the legacy functions form: one `function_call` per assistant message,
    answered by a `role: function` message that names the function (there are no call ids)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": scenario.system}]
    for turn in scenario.turns:
        if isinstance(turn, UserTurn):
            messages.append({"role": "user", "content": turn.text})
            continue
        if len(turn.tool_uses) > 1:
            raise ScenarioError("the legacy function_call form allows one call per assistant message")
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        for use in turn.tool_uses:
            message["function_call"] = {"name": use.name, "arguments": use.arguments_text}
        messages.append(message)
        for use in turn.tool_uses:
            messages.append({"role": "function", "name": use.name, "content": use.result_text})
    return messages


def usage(turn: LlmTurn) -> dict[str, Any]:
    cached = 0
    if turn.prefix_tokens >= CACHE_MIN_TOKENS:
        cached = turn.prefix_tokens // CACHE_BLOCK_TOKENS * CACHE_BLOCK_TOKENS
    return {
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.prompt_tokens + turn.output_tokens,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def response(scenario: Scenario, turn: LlmTurn) -> dict[str, Any]:
    fingerprint = hashlib.blake2b(scenario.model.snapshot.encode(), digest_size=5).hexdigest()
    return {
        "id": "chatcmpl-" + turn.uid,
        "object": "chat.completion",
        "created": turn.started_ms // 1000,
        "model": scenario.model.snapshot,
        "choices": [
            {
                "index": 0,
                "message": {**assistant_message(turn), "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "tool_calls" if turn.tool_uses else "stop",
            }
        ],
        "usage": usage(turn),
        "service_tier": "default",
        "system_fingerprint": "fp_" + fingerprint,
    }


def gateway_log(scenarios: list[Scenario]) -> Rendering:
    """One record per LLM call, as an LLM gateway logs them: the request, the response, the
    gateway's metadata and timings, in the order the calls completed (so conversations interleave)."""
    calls = []
    for scenario in scenarios:
        messages, prompt_lengths = chat_messages(scenario)
        definitions = tools(scenario)
        for turn, length in zip(scenario.llm_turns, prompt_lengths, strict=True):
            record = {
                "request": {
                    "model": scenario.model.name,
                    "messages": messages[:length],
                    "tools": definitions,
                    "tool_choice": "auto",
                    "stream": True,
                },
                "response": response(scenario, turn),
                "metadata": metadata(scenario),
                "start_time": iso(turn.started_ms),
                "completion_start_time": iso(turn.first_token_ms),
                "end_time": iso(turn.ended_ms),
            }
            calls.append((turn.ended_ms, scenario, record))
    return log_order(scenarios, calls)


def transcripts(scenarios: list[Scenario]) -> Rendering:
    """One record per conversation, as an eval harness saves them: id, model, tools, messages, reward."""
    records = []
    for scenario in scenarios:
        record: dict[str, Any] = {
            "id": "run_" + scenario.uid[:16],
            "model": scenario.model.name,
            "tools": tools(scenario),
            "messages": chat_messages(scenario)[0],
            "reward": scenario.reward,
        }
        if scenario.tagged:
            record["metadata"] = {"workload": scenario.workload}
        records.append(record)
    return Rendering(records, list(range(len(records))), [r["id"] for r in records])


def legacy_transcripts(scenarios: list[Scenario]) -> Rendering:
    """One record per conversation in the legacy form, with the `functions` that were offered."""
    records = []
    for scenario in scenarios:
        record: dict[str, Any] = {
            "id": "run_" + scenario.uid[:16],
            "model": scenario.model.name,
            "functions": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in scenario.tools
            ],
            "messages": legacy_messages(scenario),
        }
        if scenario.tagged:
            record["metadata"] = {"workload": scenario.workload}
        records.append(record)
    return Rendering(records, list(range(len(records))), [r["id"] for r in records])
