"""Preference pairs (parallel chosen over sequential) and RL prompt rows.

Preference: for each segment the parallel rewrite changes, one pair at the first assistant turn
where the rewrite differs from the recording. Everything before that turn is the same in both, so it
is the `prompt`; `chosen` is the rewritten turn (the calls of its DAG generation, issued together)
and `rejected` the recorded turn (fewer calls). TRL's explicit-prompt preference format, which
`DPOTrainer` takes as is:

    {"prompt": [...messages...], "chosen": [assistant message], "rejected": [assistant message],
     "tools": [...], "trace_id": ..., "segment": 0, "chosen_calls": 2, "rejected_calls": 1, ...}

RL prompts (GRPO-style, TRL's prompt-only type): the messages before the first reply to a user, the
tools, and what was recorded (outcome, the calls made, the final answer if the trace ends with one)
for a reward function or an environment to use; TRL passes every column but `prompt` to reward
functions by name.
"""

from __future__ import annotations

from typing import Any

from datasets import Features, Json, List, Value

from traceforge.export import sft
from traceforge.export.parallel import Rewrite
from traceforge.export.source import Conversation

PREFERENCE_FEATURES = Features(
    {
        "prompt": sft.MESSAGES,
        "chosen": sft.MESSAGES,
        "rejected": sft.MESSAGES,
        "tools": sft.TOOLS,
        **sft.METADATA,
        "segment": Value("int32"),
        "chosen_calls": Value("int32"),
        "rejected_calls": Value("int32"),
        "turns_saved": Value("int32"),
    }
)
RL_FEATURES = Features(
    {
        "prompt": sft.MESSAGES,
        "tools": sft.TOOLS,
        **sft.METADATA,
        "recorded_calls": List(Json()),  # [{"name", "arguments"}] in recorded order
        "recorded_answer": Value("string"),
        "recorded_turns": Value("int32"),
    }
)


def pairs(conversation: Conversation, result: Rewrite) -> list[dict[str, Any]]:
    """One preference row per rewritten segment, at its first differing turn."""
    rows = []
    for number, segment in enumerate(result.segments):
        for position, new_turn in enumerate(segment.turns):
            old_index = segment.original_turns[position]
            old_turn = conversation.messages[old_index]
            if [c["id"] for c in old_turn["tool_calls"]] == [c["id"] for c in new_turn["tool_calls"]]:
                continue
            rows.append(
                {
                    "prompt": conversation.messages[:old_index],
                    "chosen": [new_turn],
                    "rejected": [old_turn],
                    "tools": conversation.tools,
                    **sft.metadata(conversation),
                    "segment": number,
                    "chosen_calls": len(new_turn["tool_calls"]),
                    "rejected_calls": len(old_turn["tool_calls"]),
                    "turns_saved": segment.turns_saved,
                }
            )
            break
    return rows


def openai_pair(row: dict[str, Any]) -> dict[str, Any]:
    """A preference row in OpenAI's DPO fine-tuning format."""
    return {
        "input": {
            "messages": [sft.openai_message(m) for m in row["prompt"]],
            "tools": row["tools"],
            "parallel_tool_calls": True,
        },
        "preferred_output": [sft.openai_message(m) for m in row["chosen"]],
        "non_preferred_output": [sft.openai_message(m) for m in row["rejected"]],
    }


def rl_row(conversation: Conversation) -> dict[str, Any] | None:
    """The prompt-only row of a conversation, or None when it has no user message.

    The prompt runs up to the assistant's first reply to the first user message (an agent that
    greets first keeps its greeting in the prompt), so it ends right before an assistant turn."""
    messages = conversation.messages
    user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
    if user is None:
        return None
    reply = next((i for i in range(user, len(messages)) if messages[i]["role"] == "assistant"), len(messages))
    prompt = messages[:reply]
    calls = [
        {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
        for m in conversation.messages
        for call in m["tool_calls"] or []
    ]
    last = conversation.messages[-1]
    answer = last["content"] if last["role"] == "assistant" and not last["tool_calls"] else None
    return {
        "prompt": prompt,
        "tools": conversation.tools,
        **sft.metadata(conversation),
        "recorded_calls": calls,
        "recorded_answer": answer,
        "recorded_turns": sum(1 for m in conversation.messages if m["role"] == "assistant"),
    }
