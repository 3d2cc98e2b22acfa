"""Benchmark corpora: realistic production agent traces at any size, in the formats traceforge reads.

    python benchmarks/corpus.py benchmarks/corpus/1m --tool-calls 1000000
    python benchmarks/corpus.py benchmarks/corpus/long --shape long --tool-calls 5000
    python benchmarks/corpus.py benchmarks/corpus/small --shape small --traces 100000

A corpus is a folder of log files as a month of production would leave them:

- `openai-log-NNN.jsonl`: an OpenAI Chat Completions gateway log, one record per LLM call (the whole
  request, the response, metadata, timings), conversations interleaved in completion order;
- `anthropic-log-NNN.jsonl`: an Anthropic Messages proxy log (request and response bodies);
- `transcripts-NNN.jsonl`: OpenAI-style transcripts, one conversation per line (eval harnesses);
- `otlp-NNN.jsonl`: OpenTelemetry GenAI spans (OTLP/JSON, one `resourceSpans` document per trace),
  LLM spans with their input and output messages, tool spans with their times;
- `openai-responses-NNN.jsonl` (only with `--only openai-responses`): an OpenAI Responses API log,
  each call sending only its new items and naming the response it continues
  (`previous_response_id`), so its size grows with a run's length, not its square;
- `claude-code-<session>.jsonl` (only with `--only claude-code`): Claude Code session files, one per
  run, as `~/.claude/projects/<project>/` holds them: an event a line, an assistant line per content
  block, the project folder naming the workload.

Traffic follows a power law: workload k gets a share of the traces proportional to 1 / k^1.1, and
each workload has its own system prompt (1.5-6 KB), tool set (JSON schemas), model and run length
(short support chats with a median of 3 tool calls, long coding runs with a median of 30 and a tail
to hundreds). Tool results are log-normal in size (median about 700 characters, 1% above 10 KB);
about half of the arguments reuse an id from an earlier result (a real data dependency), the others
come from the user's message (independent calls made one after another, the case traceforge finds);
3% of tool calls fail and are retried. Files rotate at `--file-mb` megabytes.

Everything is generated from one seed, so the same command writes the same bytes. `manifest.json`
holds what was written, counted by the generator itself: per file its format, traces, LLM calls,
tool calls and bytes, so a test or the benchmark can check an ingest against it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("openai-log", "anthropic-log", "transcripts", "otlp")
# Share of the traces each format receives in a mixed corpus.
FORMAT_SHARES = {"openai-log": 0.35, "anthropic-log": 0.25, "transcripts": 0.25, "otlp": 0.15}
# Written only when asked for alone (`--only`): the mixed corpus, and the figures measured on it, stay.
ONLY_FORMATS = (*FORMATS, "openai-responses", "claude-code")
# Per-request logs (and OTLP spans that carry their input) grow with the square of a run's length:
# runs longer than this go to the transcripts, as long agent sessions are saved whole in practice.
MAX_LOGGED_CALLS = 25
QUADRATIC_FORMATS = ("openai-log", "anthropic-log", "otlp")
EPOCH_MS = 1_772_323_200_000  # 2026-03-01T00:00:00Z: the month of traffic starts here
MONTH_MS = 30 * 24 * 3600 * 1000
DEFAULT_SEED = 8
MANIFEST = ".manifest.json"  # hidden: a folder walk (traceforge ingest DIR) skips it

_SYLLABLES = [
    "ka",
    "to",
    "ri",
    "mo",
    "sa",
    "ne",
    "lu",
    "pe",
    "di",
    "ga",
    "vo",
    "shi",
    "re",
    "an",
    "el",
    "or",
    "in",
    "us",
    "at",
    "ex",
    "com",
    "pro",
    "ver",
    "tra",
    "lin",
    "dat",
    "sol",
    "mar",
    "ten",
    "por",
    "sig",
    "nal",
    "fil",
    "ord",
    "ack",
    "ser",
    "vic",
    "ran",
    "qua",
    "bil",
    "net",
    "cor",
    "mod",
    "ent",
]


def _word_pool(rng: random.Random, size: int = 4000) -> list[str]:
    words = []
    for _ in range(size):
        words.append("".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
    return words


class Text:
    """Fast pseudo-prose: slices of one long pre-generated text of common and rare words."""

    def __init__(self, rng: random.Random) -> None:
        words = _word_pool(rng)
        common = ["the", "a", "to", "of", "and", "in", "is", "for", "on", "with", "that", "it", "as"]
        parts = []
        for k in range(200_000):
            parts.append(rng.choice(common) if k % 3 == 0 else rng.choice(words))
            if k % 17 == 16:
                parts[-1] += "."
        self.text = " ".join(parts)
        self.words = words
        self.rng = rng

    def prose(self, chars: int) -> str:
        chars = max(1, min(chars, len(self.text) - 1))
        start = self.rng.randrange(0, len(self.text) - chars)
        return self.text[start : start + chars].strip() or "ok"

    def word(self) -> str:
        return self.rng.choice(self.words)


def lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(max(rng.lognormvariate(math.log(median), sigma), low), high)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    id_prefix: str  # ids its results hand out (ORD-, usr_, ...)
    result_median: int  # characters
    writes: bool


@dataclass(frozen=True)
class Workload:
    name: str
    tagged: bool  # the application names its workload in the gateway metadata
    system: str
    tools: tuple[Tool, ...]
    model: str  # OpenAI-side model name; Anthropic-side runs use ANTHROPIC_MODELS[model]
    calls_median: float  # tool calls per run
    calls_sigma: float
    parallel_share: float  # LLM calls that emit several tool calls at once
    user_turn_share: float  # chance of a new user message after a tool round


ANTHROPIC_MODELS = {
    "gpt-4.1": "claude-sonnet-4-5",
    "gpt-4.1-mini": "claude-haiku-4-5",
    "o4-mini": "claude-opus-4-1",
}
WORKLOAD_KINDS = (
    # name, tool verbs, calls median, sigma, parallel share, model
    (
        "support-agent",
        ("get_order", "get_customer", "search_faq", "issue_refund", "update_ticket"),
        3,
        0.8,
        0.15,
    ),
    (
        "coding-agent",
        ("read_file", "search_code", "run_tests", "edit_file", "list_dir", "git_diff"),
        30,
        1.0,
        0.3,
    ),
    (
        "travel-agent",
        ("search_flights", "search_hotels", "get_weather", "book_flight", "get_booking"),
        6,
        0.7,
        0.35,
    ),
    ("data-analyst", ("run_sql", "describe_table", "list_tables", "plot_chart"), 9, 0.8, 0.2),
    ("research-agent", ("web_search", "fetch_page", "summarize", "save_note"), 12, 0.9, 0.45),
    ("sales-assistant", ("crm_lookup", "get_account", "draft_email", "log_activity"), 4, 0.7, 0.2),
    ("it-helpdesk", ("get_device", "reset_password", "search_kb", "open_incident"), 5, 0.8, 0.15),
    ("finance-ops", ("get_invoice", "match_payment", "get_vendor", "post_journal"), 7, 0.8, 0.25),
    ("hr-assistant", ("get_employee", "get_policy", "submit_leave", "search_jobs"), 3, 0.6, 0.1),
    ("devops-agent", ("get_logs", "get_metrics", "list_pods", "restart_service", "get_alerts"), 14, 0.9, 0.4),
    ("legal-review", ("search_clauses", "get_contract", "compare_versions", "flag_issue"), 8, 0.8, 0.3),
    ("shopping-agent", ("search_products", "get_product", "add_to_cart", "checkout"), 5, 0.7, 0.35),
)
MODELS = ("gpt-4.1", "gpt-4.1-mini", "o4-mini")
WRITE_VERBS = (
    "issue",
    "update",
    "book",
    "edit",
    "save",
    "draft",
    "log",
    "reset",
    "open",
    "submit",
    "post",
    "flag",
    "add",
    "checkout",
    "restart",
    "match",
)
ID_PREFIXES = ("ORD-", "usr_", "tkt_", "INV-", "acct_", "dev-", "emp", "job_", "PR-", "fl_", "htl_", "doc_")


def make_workloads(rng: random.Random, text: Text) -> list[Workload]:
    workloads = []
    for index, (name, verbs, median, sigma, parallel) in enumerate(WORKLOAD_KINDS):
        tools = []
        for verb in verbs:
            params = {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": text.prose(40)},
                    "query": {"type": "string", "description": text.prose(50)},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                },
                "required": ["id"],
            }
            tools.append(
                Tool(
                    name=verb,
                    description=text.prose(rng.randint(60, 240)),
                    parameters=params,
                    id_prefix=rng.choice(ID_PREFIXES),
                    result_median=(1200 if name == "coding-agent" else 400) * rng.choice((0.5, 1, 1, 2)),
                    writes=verb.split("_")[0] in WRITE_VERBS,
                )
            )
        workloads.append(
            Workload(
                name=name,
                tagged=index % 3 != 2,  # a third of the applications send no workload tag
                system=f"You are the {name}. " + text.prose(rng.randint(1000, 4000)),
                tools=tuple(tools),
                model=MODELS[index % len(MODELS)],
                calls_median=median,
                calls_sigma=sigma,
                parallel_share=parallel,
                user_turn_share=0.08,
            )
        )
    return workloads


@dataclass
class Use:
    """One tool call and its result."""

    id: str
    name: str
    arguments: dict[str, Any]
    result: str
    is_error: bool
    start_ms: int
    end_ms: int


@dataclass
class Step:
    """One LLM call: what it said and which tools it called."""

    uid: str
    text: str
    uses: list[Use]
    start_ms: int
    end_ms: int
    prompt_chars: int  # the request's conversation, system prompt and tool definitions
    output_chars: int
    previous_prompt_chars: int  # the prompt of the call before (a reusable prefix)


@dataclass
class Run:
    """One agent run: user messages and LLM calls in order."""

    uid: str
    workload: Workload
    session: str | None
    events: list[Any]  # str (a user message) | Step
    reward: float

    @property
    def steps(self) -> list[Step]:
        return [e for e in self.events if isinstance(e, Step)]

    @property
    def tool_calls(self) -> int:
        return sum(len(s.uses) for s in self.steps)


class RunMaker:
    """Draws runs: their length, calls, dependencies, results, sizes and times."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.text = Text(self.rng)
        self.workloads = make_workloads(self.rng, self.text)
        weights = [1 / (k + 1) ** 1.1 for k in range(len(self.workloads))]
        total = sum(weights)
        self.weights = [w / total for w in weights]
        self.counter = 0

    def uid(self) -> str:
        self.counter += 1
        return f"{self.rng.getrandbits(64):016x}{self.counter:08x}"

    def workload(self) -> Workload:
        return self.rng.choices(self.workloads, self.weights)[0]

    def length(self, workload: Workload) -> int:
        return max(1, round(lognormal(self.rng, workload.calls_median, workload.calls_sigma, 1, 2000)))

    def run(self, workload: Workload, tool_calls: int, start_ms: int) -> Run:
        rng, text = self.rng, self.text
        uid = self.uid()
        user = self._user_message(workload)
        events: list[Any] = [user]
        known_ids: list[str] = [w for w in user.split() if any(ch.isdigit() for ch in w)]
        clock = start_ms
        prompt = len(workload.system) + sum(len(t.description) + 200 for t in workload.tools) + len(user)
        previous_prompt = 0
        made = 0
        retry: Use | None = None
        while made < tool_calls:
            width = 1
            if retry is None and rng.random() < workload.parallel_share:
                width = rng.randint(2, 4)
            width = min(width, tool_calls - made)
            llm_ms = round(lognormal(rng, 1800, 0.6, 250, 60_000))
            step_start = clock
            clock += llm_ms
            uses = []
            for _ in range(width):
                tool = (
                    next(t for t in workload.tools if t.name == retry.name)
                    if retry
                    else rng.choice(workload.tools)
                )
                uses.append(self._use(tool, known_ids, user, retry, clock))
                retry = None
            step_text = text.prose(rng.randint(20, 300)) if rng.random() < 0.4 else ""
            output = len(step_text) + sum(len(json.dumps(u.arguments)) + 40 for u in uses)
            events.append(
                Step(self.uid(), step_text, uses, step_start, clock, prompt, output, previous_prompt)
            )
            clock = max(u.end_ms for u in uses) + rng.randint(20, 80)
            previous_prompt = prompt
            prompt += output + sum(len(u.result) + 30 for u in uses)
            made += width
            failed = [u for u in uses if u.is_error]
            if failed and made < tool_calls:
                retry = failed[0]
            elif made < tool_calls and rng.random() < workload.user_turn_share:
                follow_up = self._user_message(workload)
                events.append(follow_up)
                prompt += len(follow_up)
                clock += round(lognormal(rng, 20_000, 1.0, 2000, 600_000))
        answer = text.prose(rng.randint(80, 1200))
        llm_ms = round(lognormal(rng, 2500, 0.6, 300, 60_000))
        events.append(
            Step(self.uid(), answer, [], clock, clock + llm_ms, prompt, len(answer), previous_prompt)
        )
        session = f"sess-{uid[:12]}" if rng.random() < 0.3 else None
        return Run(uid, workload, session, events, reward=1.0 if rng.random() < 0.8 else 0.0)

    def _user_message(self, workload: Workload) -> str:
        rng = self.rng
        ids = [
            f"{rng.choice(workload.tools).id_prefix}{rng.randint(10_000, 999_999)}"
            for _ in range(rng.randint(0, 2))
        ]
        return " ".join([self.text.prose(rng.randint(60, 900)), *ids]).strip()

    def _use(self, tool: Tool, known_ids: list[str], user: str, retry: Use | None, clock: int) -> Use:
        rng, text = self.rng, self.text
        if retry is not None:
            arguments = dict(retry.arguments, id=retry.arguments["id"].rstrip("x"))
        else:
            dependent = known_ids and rng.random() < 0.55
            arguments = {
                "id": rng.choice(known_ids)
                if dependent
                else f"{tool.id_prefix}{rng.randint(10_000, 999_999)}"
            }
            if rng.random() < 0.5:
                arguments["query"] = (
                    " ".join(rng.sample(user.split(), min(4, len(user.split())))) or text.word()
                )
            if rng.random() < 0.3:
                arguments["limit"] = rng.choice((5, 10, 20, 50))
            if rng.random() < 0.03:
                arguments["id"] += "x"  # a typo: this call fails and is retried
        failed = arguments["id"].endswith("x")
        if failed:
            result = json.dumps({"error": f"not found: {arguments['id']}", "code": 404})
        else:
            new_ids = [f"{tool.id_prefix}{rng.randint(10_000, 999_999)}" for _ in range(rng.randint(1, 3))]
            known_ids.extend(new_ids)
            size = round(lognormal(rng, tool.result_median, 1.0, 40, 48_000))
            result = json.dumps(
                {
                    "status": "ok",
                    "items": [
                        {"id": i, "name": text.word(), "score": round(rng.random(), 3)} for i in new_ids
                    ],
                    "detail": text.prose(size),
                },
                ensure_ascii=False,
            )
        duration = round(lognormal(rng, 400, 1.0, 5, 120_000))
        start = clock + rng.randint(5, 40)
        return Use("call_" + self.uid()[:24], tool.name, arguments, result, failed, start, start + duration)


# --- rendering -----------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tokens(chars: int) -> int:
    return max(1, math.ceil(chars / 4))


def _usage_openai(step: Step) -> dict[str, Any]:
    prompt = _tokens(step.prompt_chars)
    previous = _tokens(step.previous_prompt_chars) if step.previous_prompt_chars else 0
    cached = previous // 128 * 128 if previous >= 1024 else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": _tokens(step.output_chars),
        "total_tokens": prompt + _tokens(step.output_chars),
        "prompt_tokens_details": {"cached_tokens": min(cached, prompt)},
    }


def _openai_assistant(step: Step) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
    if step.uses:
        message["tool_calls"] = [
            {"id": u.id, "type": "function", "function": {"name": u.name, "arguments": _dumps(u.arguments)}}
            for u in step.uses
        ]
    return message


def _openai_messages(run: Run) -> tuple[list[str], list[int]]:
    """The conversation's messages, each already JSON, and per LLM call how many its request held."""
    messages = [_dumps({"role": "system", "content": run.workload.system})]
    lengths = []
    for event in run.events:
        if isinstance(event, str):
            messages.append(_dumps({"role": "user", "content": event}))
            continue
        lengths.append(len(messages))
        messages.append(_dumps(_openai_assistant(event)))
        for use in event.uses:
            messages.append(_dumps({"role": "tool", "tool_call_id": use.id, "content": use.result}))
    return messages, lengths


def _openai_tools(workload: Workload) -> str:
    return _dumps(
        [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in workload.tools
        ]
    )


def _metadata(run: Run) -> dict[str, str]:
    meta = {"environment": "production"}
    if run.workload.tagged:
        meta["workload"] = run.workload.name
    if run.session:
        meta["session_id"] = run.session
    return meta


def openai_log_records(run: Run) -> Iterator[tuple[int, str]]:
    """(completion time, JSON line) per LLM call of `run`."""
    messages, lengths = _openai_messages(run)
    tools = _openai_tools(run.workload)
    meta = _dumps(_metadata(run))
    for step, length in zip(run.steps, lengths, strict=True):
        response = {
            "id": "chatcmpl-" + step.uid,
            "object": "chat.completion",
            "created": step.start_ms // 1000,
            "model": run.workload.model + "-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "message": _openai_assistant(step),
                    "finish_reason": "tool_calls" if step.uses else "stop",
                }
            ],
            "usage": _usage_openai(step),
        }
        line = (
            '{"request":{"model":'
            + _dumps(run.workload.model)
            + ',"messages":['
            + ",".join(messages[:length])
            + '],"tools":'
            + tools
            + ',"tool_choice":"auto","stream":true},"response":'
            + _dumps(response)
            + ',"metadata":'
            + meta
            + ',"start_time":"'
            + _iso(step.start_ms)
            + '","completion_start_time":"'
            + _iso(step.start_ms + 300)
            + '","end_time":"'
            + _iso(step.end_ms)
            + '"}'
        )
        yield step.end_ms, line


def _anthropic_blocks(step: Step) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if step.text:
        blocks.append({"type": "text", "text": step.text})
    for use in step.uses:
        blocks.append(
            {"type": "tool_use", "id": "toolu_" + use.id[5:], "name": use.name, "input": use.arguments}
        )
    return blocks


def anthropic_log_records(run: Run) -> Iterator[tuple[int, str]]:
    """(completion time, JSON line) per LLM call of `run`, as a proxy logs the HTTP exchange."""
    messages: list[dict[str, Any]] = []
    for event in run.events:
        if isinstance(event, str):
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"].append({"type": "text", "text": event})
            else:
                messages.append({"role": "user", "content": [{"type": "text", "text": event}]})
            continue
        request_messages = _dumps(messages)
        messages.append({"role": "assistant", "content": _anthropic_blocks(event)})
        if event.uses:
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_" + u.id[5:],
                            "content": u.result,
                            "is_error": u.is_error,
                        }
                        for u in event.uses
                    ],
                }
            )
        prompt = _tokens(event.prompt_chars)
        read = _tokens(event.previous_prompt_chars) if event.previous_prompt_chars >= 4096 else 0
        response = {
            "id": "msg_" + event.uid,
            "type": "message",
            "role": "assistant",
            "model": ANTHROPIC_MODELS[run.workload.model] + "-20250929",
            "content": _anthropic_blocks(event),
            "stop_reason": "tool_use" if event.uses else "end_turn",
            "usage": {
                "input_tokens": 3,
                "cache_read_input_tokens": min(read, prompt - 3) if read else 0,
                "cache_creation_input_tokens": max(prompt - 3 - read, 0) if read else 0,
                "output_tokens": _tokens(event.output_chars),
            },
        }
        if not read:
            response["usage"]["input_tokens"] = prompt
        body = (
            '{"model":'
            + _dumps(ANTHROPIC_MODELS[run.workload.model])
            + ',"max_tokens":16000,"system":'
            + _dumps([{"type": "text", "text": run.workload.system, "cache_control": {"type": "ephemeral"}}])
            + ',"tools":'
            + _dumps(
                [
                    {"name": t.name, "description": t.description, "input_schema": t.parameters}
                    for t in run.workload.tools
                ]
            )
            + ',"messages":'
            + request_messages
            + "}"
        )
        line = (
            '{"start_time":"'
            + _iso(event.start_ms)
            + '","end_time":"'
            + _iso(event.end_ms)
            + '","metadata":'
            + _dumps(_metadata(run))
            + ',"request":{"method":"POST","url":"https://api.anthropic.com/v1/messages","body":'
            + body
            + '},"response":{"status":200,"body":'
            + _dumps(response)
            + "}}"
        )
        yield event.end_ms, line


def responses_log_records(run: Run) -> Iterator[tuple[int, str]]:
    """(completion time, JSON line) per LLM call of `run`, as a Responses API gateway logs it: each
    request sends the items since the response it continues (`previous_response_id`), and the
    instructions and tools again, as the API wants them."""
    tools = _dumps(
        [
            {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
            for t in run.workload.tools
        ]
    )
    meta = _dumps(_metadata(run))
    new_items: list[dict[str, Any]] = []
    previous: str | None = None
    for event in run.events:
        if isinstance(event, str):
            new_items.append({"role": "user", "content": event})
            continue
        output: list[dict[str, Any]] = []
        if event.text:
            output.append(
                {
                    "type": "message",
                    "id": "msg_" + event.uid,
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": event.text, "annotations": []}],
                }
            )
        for use in event.uses:
            output.append(
                {
                    "type": "function_call",
                    "id": "fc_" + use.id[5:],
                    "call_id": use.id,
                    "name": use.name,
                    "arguments": _dumps(use.arguments),
                    "status": "completed",
                }
            )
        prompt = _tokens(event.prompt_chars)
        previous_tokens = _tokens(event.previous_prompt_chars) if event.previous_prompt_chars else 0
        cached = previous_tokens // 128 * 128 if previous_tokens >= 1024 else 0
        response = {
            "id": "resp_" + event.uid,
            "object": "response",
            "created_at": event.start_ms // 1000,
            "status": "completed",
            "model": run.workload.model + "-2025-04-14",
            "output": output,
            "previous_response_id": previous,
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": min(cached, prompt)},
                "output_tokens": _tokens(event.output_chars),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + _tokens(event.output_chars),
            },
        }
        request = (
            '{"model":'
            + _dumps(run.workload.model)
            + ',"instructions":'
            + _dumps(run.workload.system)
            + ',"input":'
            + _dumps(new_items)
            + (',"previous_response_id":' + _dumps(previous) if previous else "")
            + ',"tools":'
            + tools
            + ',"store":true}'
        )
        yield (
            event.end_ms,
            '{"request":'
            + request
            + ',"response":'
            + _dumps(response)
            + ',"metadata":'
            + meta
            + ',"start_time":"'
            + _iso(event.start_ms)
            + '","end_time":"'
            + _iso(event.end_ms)
            + '"}',
        )
        previous = response["id"]
        new_items = [
            {"type": "function_call_output", "call_id": u.id, "output": u.result} for u in event.uses
        ]


def transcript_record(run: Run) -> str:
    messages, _ = _openai_messages(run)
    meta = {"workload": run.workload.name} if run.workload.tagged else {}
    return (
        '{"id":"run_'
        + run.uid
        + '","model":'
        + _dumps(run.workload.model)
        + ',"tools":'
        + _openai_tools(run.workload)
        + ',"messages":['
        + ",".join(messages)
        + '],"reward":'
        + str(run.reward)
        + ',"metadata":'
        + _dumps(meta)
        + "}"
    )


CLAUDE_CODE_VERSION = "2.1.39"


def _uuid(uid: str, n: int) -> str:
    """A UUID-shaped id, the `n`th of the object `uid` names: the same corpus, the same ids."""
    digits = f"{uid[:24]}{n:08x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"


def claude_code_session(run: Run) -> list[str]:
    """The lines of one Claude Code session file (`~/.claude/projects/<project>/<session>.jsonl`):
    every event a line, chained by `parentUuid`; an assistant line per content block (text or
    tool_use), the lines of one API response sharing its message id and usage; a user line per tool
    result, with the output again in `toolUseResult`; and the lines Claude Code writes beside them
    (a SessionStart hook's progress, a stop hook's summary after the reply that ends the run)."""
    session = _uuid(run.uid, 0)
    common = {
        "isSidechain": False,
        "userType": "external",
        "cwd": f"/home/dev/projects/{run.workload.name}",
        "sessionId": session,
        "version": CLAUDE_CODE_VERSION,
        "gitBranch": "main",
    }
    lines: list[str] = []
    parent: str | None = None
    count = 0

    def line(kind: str, ms: int, **fields: Any) -> None:
        nonlocal parent, count
        count += 1
        uuid = _uuid(run.uid, count)
        record = {"parentUuid": parent, **common, "type": kind, **fields, "uuid": uuid, "timestamp": _iso(ms)}
        lines.append(_dumps(record))
        parent = uuid

    start = run.steps[0].start_ms
    hook = {"type": "hook_progress", "hookEvent": "SessionStart", "hookName": "SessionStart:startup"}
    line("progress", start - 2000, data=hook, toolUseID=_uuid(run.uid, 1 << 30))
    for n, event in enumerate(run.events):
        if isinstance(event, str):
            asked = start if n == 0 else _ended(run.events[n - 1]) + 1000
            line("user", asked, message={"role": "user", "content": event})
            continue
        prompt = _tokens(event.prompt_chars)
        read = _tokens(event.previous_prompt_chars) if event.previous_prompt_chars else 0
        usage = {
            "input_tokens": 3,
            "cache_creation_input_tokens": max(prompt - 3 - read, 0),
            "cache_read_input_tokens": min(read, prompt - 3),
            "output_tokens": _tokens(event.output_chars),
            "service_tier": "standard",
        }
        blocks = _anthropic_blocks(event)
        for k, block in enumerate(blocks):
            message = {
                "model": ANTHROPIC_MODELS[run.workload.model] + "-20250929",
                "id": "msg_" + event.uid,
                "type": "message",
                "role": "assistant",
                "content": [block],
                "stop_reason": ("tool_use" if event.uses else "end_turn") if k == len(blocks) - 1 else None,
                "stop_sequence": None,
                "usage": usage,
            }
            line("assistant", event.end_ms, message=message, requestId="req_" + event.uid)
        for use in sorted(event.uses, key=lambda u: u.end_ms):  # appended as each tool finishes
            result = {"tool_use_id": "toolu_" + use.id[5:], "type": "tool_result", "content": use.result}
            if use.is_error:
                result["is_error"] = True
            line("user", use.end_ms, message={"role": "user", "content": [result]}, toolUseResult=use.result)
        if not event.uses:
            line("system", event.end_ms + 50, subtype="stop_hook_summary", hookCount=1, level="suggestion")
    return lines


def _ended(event: Step) -> int:
    """When an LLM call's turn ended: its response, or the last of its tools."""
    return max([event.end_ms] + [use.end_ms for use in event.uses])


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _otel_parts(role: str, text: str | None, uses: list[Use] | None = None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"type": "text", "content": text})
    for use in uses or []:
        parts.append({"type": "tool_call", "id": use.id, "name": use.name, "arguments": use.arguments})
    return {"role": role, "parts": parts}


def otlp_record(run: Run) -> str:
    """One OTLP/JSON document holding the run's spans: an agent span, an LLM span per call (with its
    input and output messages, as instrumentations with content capture record them), a tool span
    per tool call."""
    trace_id = run.uid[:32].ljust(32, "0")
    spans = []
    counter = 0

    def span_id() -> str:
        nonlocal counter
        counter += 1
        return f"{counter:016x}"

    root = span_id()
    steps = run.steps
    history: list[str] = []
    for event in run.events:
        if isinstance(event, str):
            history.append(_dumps(_otel_parts("user", event)))
            continue
        llm_span = span_id()
        attributes = [
            _attr("gen_ai.operation.name", "chat"),
            _attr("gen_ai.provider.name", "openai"),
            _attr("gen_ai.request.model", run.workload.model),
            _attr("gen_ai.response.id", "chatcmpl-" + event.uid),
            _attr("gen_ai.usage.input_tokens", _tokens(event.prompt_chars)),
            _attr("gen_ai.usage.output_tokens", _tokens(event.output_chars)),
            _attr("gen_ai.system_instructions", _dumps([{"type": "text", "content": run.workload.system}])),
            _attr("gen_ai.input.messages", "[" + ",".join(history) + "]"),
            _attr(
                "gen_ai.output.messages", "[" + _dumps(_otel_parts("assistant", event.text, event.uses)) + "]"
            ),
        ]
        spans.append(
            {
                "traceId": trace_id,
                "spanId": llm_span,
                "parentSpanId": root,
                "name": f"chat {run.workload.model}",
                "kind": 3,
                "startTimeUnixNano": str(event.start_ms * 1_000_000),
                "endTimeUnixNano": str(event.end_ms * 1_000_000),
                "attributes": attributes,
            }
        )
        history.append(_dumps(_otel_parts("assistant", event.text, event.uses)))
        for use in event.uses:
            spans.append(
                {
                    "traceId": trace_id,
                    "spanId": span_id(),
                    "parentSpanId": root,
                    "name": f"execute_tool {use.name}",
                    "kind": 1,
                    "startTimeUnixNano": str(use.start_ms * 1_000_000),
                    "endTimeUnixNano": str(use.end_ms * 1_000_000),
                    "attributes": [
                        _attr("gen_ai.operation.name", "execute_tool"),
                        _attr("gen_ai.tool.name", use.name),
                        _attr("gen_ai.tool.call.id", use.id),
                    ],
                    "status": {"code": 2} if use.is_error else {},
                }
            )
            history.append(
                _dumps(
                    {
                        "role": "tool",
                        "parts": [{"type": "tool_call_response", "id": use.id, "response": use.result}],
                    }
                )
            )
    agent = {
        "traceId": trace_id,
        "spanId": root,
        "name": f"invoke_agent {run.workload.name}",
        "kind": 1,
        "startTimeUnixNano": str(steps[0].start_ms * 1_000_000),
        "endTimeUnixNano": str(steps[-1].end_ms * 1_000_000),
        "attributes": [
            _attr("gen_ai.operation.name", "invoke_agent"),
            _attr("gen_ai.agent.name", run.workload.name),
        ],
        "status": {"code": 1},
    }
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", run.workload.name)]},
                "scopeSpans": [
                    {"scope": {"name": "opentelemetry.instrumentation.openai_v2"}, "spans": [agent, *spans]}
                ],
            }
        ]
    }
    return _dumps(document)


# --- corpus --------------------------------------------------------------------------------------


@dataclass
class FileStats:
    name: str
    format: str
    traces: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    records: int = 0
    bytes: int = 0


@dataclass
class Manifest:
    shape: str
    seed: int
    files: list[FileStats] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        keys = ("traces", "llm_calls", "tool_calls", "records", "bytes")
        return {k: sum(getattr(f, k) for f in self.files) for k in keys}


class _Writer:
    """Files of one format, rotated at a size; log formats write their records in completion order."""

    def __init__(self, out: Path, fmt: str, file_bytes: int, manifest: Manifest, compress: bool) -> None:
        self.out, self.fmt, self.file_bytes, self.manifest, self.compress = (
            out,
            fmt,
            file_bytes,
            manifest,
            compress,
        )
        self.pending: list[tuple[int, str]] = []
        self.stats = self._new_stats()

    def _new_stats(self) -> FileStats:
        number = sum(1 for f in self.manifest.files if f.format == self.fmt)
        return FileStats(f"{self.fmt}-{number:03d}{self._suffix}", self.fmt)

    @property
    def _suffix(self) -> str:
        return ".jsonl.gz" if self.compress else ".jsonl"

    def add(self, run: Run) -> None:
        if self.fmt == "openai-log":
            lines = list(openai_log_records(run))
        elif self.fmt == "anthropic-log":
            lines = list(anthropic_log_records(run))
        elif self.fmt == "openai-responses":
            lines = list(responses_log_records(run))
        elif self.fmt == "transcripts":
            lines = [(run.steps[0].start_ms, transcript_record(run))]
        elif self.fmt == "claude-code":  # a file per session, as Claude Code writes them
            self._write_session(run, claude_code_session(run))
            return
        else:
            lines = [(run.steps[0].start_ms, otlp_record(run))]
        self.pending.extend(lines)
        self.stats.traces += 1
        self.stats.llm_calls += len(run.steps)
        self.stats.tool_calls += run.tool_calls
        # OTLP records are spans: the agent span, one per LLM call, one per tool call.
        self.stats.records += 1 + len(run.steps) + run.tool_calls if self.fmt == "otlp" else len(lines)
        self.stats.bytes += sum(len(line.encode()) + 1 for _, line in lines)
        if self.stats.bytes >= self.file_bytes:
            self.flush()

    def _write_session(self, run: Run, lines: list[str]) -> None:
        stats = FileStats(f"{self.fmt}-{_uuid(run.uid, 0)}{self._suffix}", self.fmt)
        stats.traces, stats.llm_calls, stats.tool_calls = 1, len(run.steps), run.tool_calls
        stats.records = len(lines)
        self._write(stats, lines)

    def flush(self) -> None:
        if not self.pending:
            return
        self.pending.sort(key=lambda item: item[0])
        self._write(self.stats, [line for _, line in self.pending])
        self.pending = []
        self.stats = self._new_stats()

    def _write(self, stats: FileStats, lines: list[str]) -> None:
        """One file of `lines`, gzipped where the corpus is, counted in the manifest (its `bytes`
        those of the lines, as `add` counts them to rotate the files)."""
        data = "".join(line + "\n" for line in lines).encode()
        stats.bytes = len(data)
        (self.out / stats.name).write_bytes(gzip.compress(data, compresslevel=1) if self.compress else data)
        self.manifest.files.append(stats)


def generate(
    out: str | Path,
    *,
    tool_calls: int | None = None,
    traces: int | None = None,
    shape: str = "mixed",
    seed: int = DEFAULT_SEED,
    file_mb: float = 64.0,
    compress: bool = False,
    only: str | None = None,
    on_progress: Any = None,
) -> Manifest:
    """Write a corpus to `out` (created; files already there are replaced) and return its manifest.

    `shape`: "mixed" (all formats, power-law workloads, until `tool_calls` tool calls or `traces`
    traces), "long" (one transcript run of `tool_calls` tool calls) or "small" (`traces` runs of one
    to three tool calls, spread over the formats). `only` (mixed and small): every run in that one of
    `ONLY_FORMATS`, but the long runs of a format that grows with the square of a run's length.

    >>> manifest = generate("/tmp/tf-corpus-doctest", tool_calls=200)
    >>> manifest.totals()["tool_calls"] >= 200
    True
    """
    if shape not in ("mixed", "long", "small"):
        raise ValueError(f"shape must be mixed, long or small, not {shape!r}")
    if tool_calls is None and traces is None:
        raise ValueError("give tool_calls or traces")
    if only is not None and only not in ONLY_FORMATS:
        raise ValueError(f"only must be one of {', '.join(ONLY_FORMATS)}, not {only!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.jsonl*"):
        old.unlink()
    maker = RunMaker(seed)
    manifest = Manifest(shape=shape, seed=seed)
    writers = {fmt: _Writer(out, fmt, int(file_mb * 1e6), manifest, compress) for fmt in ONLY_FORMATS}
    formats, shares = list(FORMAT_SHARES), list(FORMAT_SHARES.values())
    made_calls = made_traces = 0
    if shape == "long":
        workload = next(w for w in maker.workloads if w.name == "coding-agent")
        run = maker.run(workload, tool_calls or 5000, EPOCH_MS)
        writers["transcripts"].add(run)
        made_calls, made_traces = run.tool_calls, 1
    while shape != "long" and not (
        (tool_calls is not None and made_calls >= tool_calls)
        or (traces is not None and made_traces >= traces)
    ):
        workload = maker.workload()
        length = maker.rng.randint(1, 3) if shape == "small" else maker.length(workload)
        start = EPOCH_MS + round(MONTH_MS * (made_calls / tool_calls if tool_calls else made_traces / traces))
        run = maker.run(workload, length, start + maker.rng.randint(0, 600_000))
        fmt = maker.rng.choices(formats, shares)[0]
        if length > MAX_LOGGED_CALLS and fmt in QUADRATIC_FORMATS:
            fmt = "transcripts"
        if only is not None and not (length > MAX_LOGGED_CALLS and only in QUADRATIC_FORMATS):
            fmt = only
        writers[fmt].add(run)
        made_calls += run.tool_calls
        made_traces += 1
        if on_progress and made_traces % 1000 == 0:
            on_progress(made_calls, made_traces)
    for writer in writers.values():
        writer.flush()
    (out / MANIFEST).write_text(
        json.dumps(
            {
                "shape": shape,
                "seed": seed,
                "totals": manifest.totals(),
                "files": [asdict(f) for f in manifest.files],
            },
            indent=1,
        )
        + "\n"
    )
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write (e.g. benchmarks/corpus/1m)")
    parser.add_argument("--tool-calls", type=int, help="stop after this many tool calls")
    parser.add_argument("--traces", type=int, help="stop after this many traces")
    parser.add_argument("--shape", choices=("mixed", "long", "small"), default="mixed")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--file-mb", type=float, default=64.0, help="rotate files at this size (MB)")
    parser.add_argument("--gzip", action="store_true", help="gzip the files, as rotated logs are")
    parser.add_argument("--only", choices=ONLY_FORMATS, help="write every run in this one format")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    manifest = generate(
        args.out,
        tool_calls=args.tool_calls,
        traces=args.traces,
        shape=args.shape,
        seed=args.seed,
        file_mb=args.file_mb,
        compress=args.gzip,
        only=args.only,
    )
    totals = manifest.totals()
    print(
        f"wrote {len(manifest.files)} files, {totals['bytes'] / 1e6:,.1f} MB: {totals['traces']:,} traces, "
        f"{totals['llm_calls']:,} LLM calls, {totals['tool_calls']:,} tool calls "
        f"in {time.perf_counter() - started:.1f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
