"""Format-neutral agent runs: what happened in a conversation, before any provider's wire format.

A `Scenario` is one agent run: a system prompt, tools with JSON schemas, and turns: user messages and
LLM calls, each LLM call with its text, its reasoning and the tool calls it emitted (with their
results). `Builder` writes scenarios and checks what they claim (a declared data dependency really
is a value that first appears in an earlier result and that nobody told the agent). `schedule` then
gives every LLM call its token counts and every event its time, from the content alone, so every
renderer of the same scenario tells the same story.

The cost model, deliberately simple and stated once here:
- a text costs ceil(chars / 4) tokens; a message adds `MESSAGE_TOKENS` for its framing, a tool
  call `CALL_TOKENS`; tool definitions cost the tokens of their JSON;
- an LLM call's prompt is the whole conversation so far (reasoning of earlier calls is not re-sent:
  providers strip it); the part re-sent from the previous call (its prompt) is the reusable prefix;
- latency = a per-call base (queueing, network) + uncached prompt tokens / `PREFILL_TOKENS_PER_MS`
  until the first token, then output tokens at the model's decode speed;
- the client dispatches tool calls `DISPATCH_MS` after a response and runs the tools of one response
  concurrently; the next request leaves `RESUME_MS` after the slowest tool returns.
"""

from __future__ import annotations

import json
import math
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MESSAGE_TOKENS = 4
CALL_TOKENS = 6
PREFILL_TOKENS_PER_MS = 8.0
DISPATCH_MS = 20
RESUME_MS = 45
ID_ALPHABET = string.ascii_letters + string.digits


@dataclass(frozen=True)
class ModelSpec:
    name: str  # what clients put in the request
    snapshot: str  # what the provider answers with
    decode_tokens_per_s: float


MODELS = {
    spec.name: spec
    for spec in (
        ModelSpec("gpt-4.1-mini", "gpt-4.1-mini-2025-04-14", 105.0),
        ModelSpec("gpt-4.1", "gpt-4.1-2025-04-14", 72.0),
        ModelSpec("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", 64.0),
    )
}


def tokens(text: str | None) -> int:
    """The token estimate used throughout: a quarter of the characters, rounded up."""
    return math.ceil(len(text) / 4) if text else 0


def as_text(value: Any) -> str:
    """A tool result or argument object as the text a model sees: strings as they are, else JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def random_id(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(ID_ALPHABET) for _ in range(length))


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments
    latency_s: tuple[float, float]  # how long the tool takes, uniformly within this range

    def definition_tokens(self) -> int:
        return tokens(json.dumps([self.name, self.description, self.parameters]))


@dataclass
class ToolUse:
    """One tool call and its result. `ordinal` is its position among the scenario's tool calls."""

    name: str
    arguments: dict[str, Any]
    result: Any
    is_error: bool
    duration_ms: int
    uid: str
    ordinal: int = -1
    started_ms: int = 0
    ended_ms: int = 0

    @property
    def result_text(self) -> str:
        return as_text(self.result)

    @property
    def arguments_text(self) -> str:
        """The arguments as models write them: compact JSON."""
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


@dataclass
class UserTurn:
    text: str
    think_ms: int  # how long after the previous answer the user sent it


@dataclass
class LlmTurn:
    """One LLM call: the assistant message it produced (text, reasoning, tool calls)."""

    uid: str
    text: str | None
    reasoning: str | None
    tool_uses: list[ToolUse]
    base_latency_ms: int
    prompt_tokens: int = 0
    prefix_tokens: int = 0  # the part of the prompt the previous call already sent
    output_tokens: int = 0
    started_ms: int = 0
    first_token_ms: int = 0
    ended_ms: int = 0


Turn = UserTurn | LlmTurn


@dataclass(frozen=True)
class Dependency:
    """Tool call `dst` uses `value`, which first appeared in the result of tool call `src`."""

    src: int
    dst: int
    value: str


@dataclass
class Scenario:
    workload: str
    tagged: bool  # whether its sources name the workload (else the ingest fingerprints it)
    model: ModelSpec
    system: str
    tools: list[ToolSpec]
    uid: str
    turns: list[Turn] = field(default_factory=list)
    reward: float = 1.0
    session_id: str | None = None  # an explicit conversation id, for logs that carry one
    started_ms: int = 0
    dependencies: list[Dependency] = field(default_factory=list)
    serial_groups: list[list[int]] = field(default_factory=list)  # independent calls made one per turn
    retries: list[tuple[int, int]] = field(default_factory=list)  # (failed call, its retry)

    @property
    def llm_turns(self) -> list[LlmTurn]:
        return [t for t in self.turns if isinstance(t, LlmTurn)]

    @property
    def user_turns(self) -> list[UserTurn]:
        return [t for t in self.turns if isinstance(t, UserTurn)]

    @property
    def tool_uses(self) -> list[ToolUse]:
        return [u for t in self.llm_turns for u in t.tool_uses]


class ScenarioError(ValueError):
    """A scenario that contradicts what it declares (a bug in a workload's script)."""


class Builder:
    """Writes one scenario turn by turn.

    >>> import random
    >>> from traceforge.samples import travel
    >>> b = Builder(random.Random(1), "demo", True, "gpt-4.1-mini", "You help.", travel.TOOLS)
    >>> b.user("Weather in Oslo on 2026-03-14?")
    >>> w = b.tool("get_weather", {"city": "Oslo", "date": "2026-03-14"}, {"high_c": 4})
    >>> call = b.llm(w)
    >>> answer = b.llm(text="4 °C.")
    >>> [len(turn.tool_uses) for turn in b.build().llm_turns]
    [1, 0]
    """

    def __init__(
        self,
        rng: random.Random,
        workload: str,
        tagged: bool,
        model: str,
        system: str,
        tools: list[ToolSpec],
    ) -> None:
        self.rng = rng
        self.specs = {spec.name: spec for spec in tools}
        self.scenario = Scenario(
            workload=workload,
            tagged=tagged,
            model=MODELS[model],
            system=system,
            tools=list(tools),
            uid=random_id(rng, 24),
        )
        self._pending: list[tuple[ToolUse, list[tuple[ToolUse, str]], ToolUse | None]] = []
        self._emitted: list[ToolUse] = []

    def user(self, text: str, think_s: tuple[float, float] = (12.0, 75.0)) -> None:
        """A user message; the first one opens the run, later ones come after the user thought."""
        think_ms = 0 if not self.scenario.turns else int(self.rng.uniform(*think_s) * 1000)
        self.scenario.turns.append(UserTurn(text, think_ms))

    def tool(
        self,
        name: str,
        arguments: dict[str, Any],
        result: Any,
        *,
        error: bool = False,
        uses: Sequence[tuple[ToolUse, str]] = (),
        retry_of: ToolUse | None = None,
    ) -> ToolUse:
        """A tool call with its result, to be emitted by the next `llm` call that names it.

        `uses` declares data dependencies: (earlier call, value from its result used here).
        `retry_of` marks this call as the corrected retry of a call that failed.
        """
        spec = self.specs.get(name)
        if spec is None:
            raise ScenarioError(f"tool {name!r} is not among the scenario's tools")
        use = ToolUse(
            name=name,
            arguments=arguments,
            result=result,
            is_error=error,
            duration_ms=int(self.rng.uniform(*spec.latency_s) * 1000),
            uid=random_id(self.rng, 24),
        )
        self._pending.append((use, list(uses), retry_of))
        return use

    def llm(self, *tool_uses: ToolUse, text: str | None = None, reasoning: str | None = None) -> LlmTurn:
        """An LLM call that answered with `text` and/or emitted `tool_uses` (their results follow)."""
        if not tool_uses and not text:
            raise ScenarioError("an LLM call needs text or tool calls")
        pending = {id(use): (uses, retry) for use, uses, retry in self._pending}
        for use in tool_uses:
            if id(use) not in pending:
                raise ScenarioError(f"tool call {use.name} emitted twice or never declared")
            use.ordinal = len(self._emitted)
            self._emitted.append(use)
            uses, retry = pending[id(use)]
            for source, value in uses:
                self._check_dependency(source, use, value)
                self.scenario.dependencies.append(Dependency(source.ordinal, use.ordinal, value))
            if retry is not None:
                if not retry.is_error or retry.ordinal < 0 or retry.name != use.name:
                    raise ScenarioError(f"{use.name}: a retry must follow a failed call of the same tool")
                self.scenario.retries.append((retry.ordinal, use.ordinal))
        emitted = {id(use) for use in tool_uses}
        self._pending = [p for p in self._pending if id(p[0]) not in emitted]
        turn = LlmTurn(
            uid=random_id(self.rng, 24),
            text=text,
            reasoning=reasoning,
            tool_uses=list(tool_uses),
            base_latency_ms=int(self.rng.uniform(0.25, 0.7) * 1000),
        )
        self.scenario.turns.append(turn)
        return turn

    def serial(self, *tool_uses: ToolUse) -> None:
        """Declare calls that did not depend on each other but were made one LLM call each."""
        owners = {id(u): i for i, t in enumerate(self.scenario.llm_turns) for u in t.tool_uses}
        turns = [owners.get(id(u)) for u in tool_uses]
        if None in turns or len(set(turns)) != len(turns):
            raise ScenarioError("serial calls must each come from a different, already made LLM call")
        self.scenario.serial_groups.append([u.ordinal for u in tool_uses])

    def _check_dependency(self, source: ToolUse, target: ToolUse, value: str) -> None:
        made = {id(u) for t in self.scenario.llm_turns for u in t.tool_uses}
        if id(source) not in made:
            raise ScenarioError(
                f"{target.name} uses {source.name}, which was not made by an earlier LLM call"
            )
        told = [self.scenario.system, *(t.text for t in self.scenario.user_turns)]
        earlier = [u.result_text for u in self._emitted[: source.ordinal]]
        if value not in source.result_text or value not in target.arguments_text:
            raise ScenarioError(f"{value!r} is not in {source.name}'s result and {target.name}'s arguments")
        if any(value in text for text in told + earlier):
            raise ScenarioError(f"{value!r} was known before {source.name} returned it")

    def build(self, reward: float = 1.0) -> Scenario:
        if self._pending:
            names = ", ".join(use.name for use, _, _ in self._pending)
            raise ScenarioError(f"tool calls declared but never emitted: {names}")
        self.scenario.reward = reward
        return self.scenario


def message_tokens(text: str | None, tool_uses: Sequence[ToolUse] = ()) -> int:
    calls = sum(CALL_TOKENS + tokens(u.name) + tokens(u.arguments_text) for u in tool_uses)
    return MESSAGE_TOKENS + tokens(text) + calls


def schedule(scenario: Scenario, started_ms: int) -> None:
    """Give every turn of `scenario` its token counts and its times (epoch milliseconds), starting at
    `started_ms`. Deterministic: the content and the latencies drawn by the builder decide it all."""
    scenario.started_ms = started_ms
    context = tokens(scenario.system) + MESSAGE_TOKENS + sum(s.definition_tokens() for s in scenario.tools)
    previous_prompt = 0
    now = started_ms
    decode_ms_per_token = 1000.0 / scenario.model.decode_tokens_per_s
    for turn in scenario.turns:
        if isinstance(turn, UserTurn):
            now += turn.think_ms
            context += message_tokens(turn.text)
            continue
        turn.prompt_tokens = context
        turn.prefix_tokens = previous_prompt
        reply_tokens = message_tokens(turn.text, turn.tool_uses)
        turn.output_tokens = reply_tokens - MESSAGE_TOKENS + tokens(turn.reasoning)
        turn.started_ms = now
        uncached = turn.prompt_tokens - turn.prefix_tokens
        turn.first_token_ms = now + turn.base_latency_ms + round(uncached / PREFILL_TOKENS_PER_MS)
        turn.ended_ms = turn.first_token_ms + round(turn.output_tokens * decode_ms_per_token)
        context += reply_tokens
        previous_prompt = turn.prompt_tokens
        now = turn.ended_ms
        if turn.tool_uses:
            for use in turn.tool_uses:
                use.started_ms = now + DISPATCH_MS
                use.ended_ms = use.started_ms + use.duration_ms
                context += message_tokens(use.result_text)
            now = max(use.ended_ms for use in turn.tool_uses) + RESUME_MS
