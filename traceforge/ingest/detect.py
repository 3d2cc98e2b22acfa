"""Choosing the adapter for a file from its content, never its name.

Every adapter module exposes `FORMAT` (the name users pass to `--format`), `sniff(sample) -> float`
(0: certainly not mine, 1: certainly mine) and `parse(records, source_path) -> ParseResult`.
The highest score of at least `THRESHOLD` wins; ties go to the adapter listed first.

An adapter that can hand out a file's traces as it reads them (so that a big file is not held
whole: `traceforge.ingest.parts`) also has `stream(records, source_path, result, on_first_pass)
-> Iterator[Trace]` (`parse`'s traces one by one, its counts and rejects added to `result` as they
come). One that reads the file a first time before it can hand out any trace (`stream.read_twice`)
tells `on_first_pass(bytes)` how far that reading has got. One whose `stream` hands traces out as it
reads for some shapes of file only also has `hands_out(sample) -> bool`, saying which a file is
from its first records (a big file of the other shapes is named as held whole).
"""

from __future__ import annotations

from types import ModuleType

from traceforge.ingest import (
    anthropic_messages,
    claude_code,
    langfuse,
    langsmith,
    openai_chat,
    openai_responses,
    openhands,
    otlp,
    swe_agent,
    tau2,
    toolbench,
)
from traceforge.ingest.sources import Record

ADAPTERS: list[ModuleType] = [
    openhands,
    swe_agent,
    tau2,
    toolbench,
    openai_chat,
    anthropic_messages,
    claude_code,
    otlp,
    openai_responses,
    langfuse,
    langsmith,
]
THRESHOLD = 0.5
SAMPLE_SIZE = 50


def formats() -> list[str]:
    return [adapter.FORMAT for adapter in ADAPTERS]


def by_name(name: str) -> ModuleType:
    for adapter in ADAPTERS:
        if name == adapter.FORMAT:
            return adapter
    raise KeyError(f"unknown format {name!r}; known formats: {', '.join(formats())}")


def detect(sample: list[Record]) -> ModuleType | None:
    """The adapter that recognises these records best, or None when none does."""
    best, best_score = None, 0.0
    for adapter in ADAPTERS:
        score = adapter.sniff(sample)
        if score > best_score:
            best, best_score = adapter, score
    return best if best_score >= THRESHOLD else None
