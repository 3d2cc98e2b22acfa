"""The sample traces traceforge writes itself: small, realistic, deterministic.

>>> from traceforge.samples import generate
>>> manifest = generate("sample_traces/")                         # doctest: +SKIP
>>> [(f.name, len(f.traces)) for f in manifest.files]              # doctest: +SKIP
[('openai_chat_gateway.jsonl', 8), ...]

Agent runs are written once, format-neutrally, as scenarios (`scenario.py`) by three workloads
with a power-law spread of runs: a travel-booking support agent (`travel.py`, 12 runs), a coding
agent (`coding.py`, 6) and a data analyst (`analyst.py`, 3). Between them they hold independent
calls made one per LLM call, real data dependencies (an id from one result in a later call's
arguments), parallel calls, tool errors followed by corrected retries, and several user turns.
`scenario.schedule` gives them token counts and timestamps (2026) from their content. Renderers
(`openai_chat.py`, `anthropic_messages.py`) write them in the shapes the ingest reads; a new format
is a new renderer and a line in `FILES`.

`generate` returns a `Manifest`: per file, what each trace holds (calls, tool calls, user turns,
parallel calls, errors, retries, dependencies, serially made independent calls, the line of its first
record), so tests can check the ingest against what was written rather than against numbers copied
from its output.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from traceforge.samples import analyst, anthropic_messages, coding, openai_chat, travel
from traceforge.samples.rendering import Rendering
from traceforge.samples.scenario import Dependency, Scenario, random_id, schedule

DEFAULT_SEED = 2026


@dataclass(frozen=True)
class SampleFile:
    """One file of samples: its name, the ingest format that reads it, how it is rendered, and which
    runs of which workloads it holds (each workload's runs are numbered across files)."""

    name: str
    format: str
    render: Callable[[list[Scenario]], Rendering]
    runs: tuple[tuple[ModuleType, int], ...]
    starts_at: str  # ISO time of the first run; the others follow at random intervals
    parallel: bool = True  # whether the format allows several tool calls per message
    json_array: bool = False  # one JSON array (else JSON Lines)
    compressed: bool = False


FILES = (
    SampleFile(
        "openai_chat_gateway.jsonl",
        "openai-chat",
        openai_chat.gateway_log,
        ((travel, 6), (analyst, 2)),
        "2026-03-10T14:00:00",
    ),
    SampleFile(
        "openai_chat_transcripts.json",
        "openai-chat",
        openai_chat.transcripts,
        ((travel, 5),),
        "2026-03-12T09:00:00",
        json_array=True,
    ),
    SampleFile(
        "openai_chat_legacy_functions.jsonl",
        "openai-chat",
        openai_chat.legacy_transcripts,
        ((travel, 1), (analyst, 1)),
        "2026-03-13T16:00:00",
        parallel=False,
    ),
    SampleFile(
        "anthropic_messages_gateway.jsonl.gz",
        "anthropic-messages",
        anthropic_messages.gateway_log,
        ((coding, 4),),
        "2026-03-11T10:30:00",
        compressed=True,
    ),
    SampleFile(
        "anthropic_messages_transcripts.jsonl",
        "anthropic-messages",
        anthropic_messages.transcripts,
        ((coding, 2),),
        "2026-03-12T15:00:00",
    ),
)


@dataclass
class TraceManifest:
    """What one trace of a sample file holds. Tool calls are numbered in conversation order."""

    line: int  # JSON Lines line / JSON array element (1-based) of the trace's first record
    workload: str
    workload_named: bool  # False: the source does not name it, the ingest fingerprints it
    conversation_id: str | None  # the id the file gives the conversation; None: only its content
    llm_calls: int
    tool_calls: int
    user_turns: int
    parallel_calls: int  # LLM calls that emitted more than one tool call
    tool_errors: int
    retries: list[tuple[int, int]]  # (failed tool call, the retry with corrected arguments)
    dependencies: list[Dependency]
    serial_groups: list[list[int]]  # independent tool calls made one per LLM call

    @classmethod
    def of(cls, scenario: Scenario, line: int, conversation_id: str | None) -> TraceManifest:
        return cls(
            line=line,
            workload=scenario.workload,
            workload_named=scenario.tagged,
            conversation_id=conversation_id,
            llm_calls=len(scenario.llm_turns),
            tool_calls=len(scenario.tool_uses),
            user_turns=len(scenario.user_turns),
            parallel_calls=sum(1 for t in scenario.llm_turns if len(t.tool_uses) > 1),
            tool_errors=sum(1 for u in scenario.tool_uses if u.is_error),
            retries=list(scenario.retries),
            dependencies=list(scenario.dependencies),
            serial_groups=[list(g) for g in scenario.serial_groups],
        )


@dataclass
class FileManifest:
    name: str
    format: str
    records: int
    bytes: int
    traces: list[TraceManifest] = field(default_factory=list)


@dataclass
class Manifest:
    seed: int
    files: list[FileManifest]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scenarios_for(sample: SampleFile, seed: int, first_index: dict[str, int]) -> list[Scenario]:
    """The runs of one sample file, scheduled: each run's content comes from its own random stream
    (seed, workload, run number), so changing one file's plan leaves the others' runs as they were."""
    arrivals = random.Random(f"{seed}/{sample.name}/arrivals")
    started = datetime.fromisoformat(sample.starts_at).replace(tzinfo=UTC)
    clock_ms = int(started.timestamp()) * 1000
    scenarios = []
    for workload, count in sample.runs:
        for _ in range(count):
            index = first_index.get(workload.WORKLOAD, 0)
            first_index[workload.WORKLOAD] = index + 1
            rng = random.Random(f"{seed}/{workload.WORKLOAD}/{index}")
            scenario = workload.scenario(rng, index, sample.parallel)
            if len(scenarios) % 2 == 0:
                scenario.session_id = "sess_" + random_id(rng, 20)
            schedule(scenario, clock_ms)
            clock_ms += int(arrivals.uniform(25, 140) * 1000)
            scenarios.append(scenario)
    return scenarios


def encode(sample: SampleFile, rendering: Rendering) -> bytes:
    """The file's bytes: JSON Lines or a JSON array with one element per line, gzip'd if asked
    (with no name or time in the gzip header, so the bytes depend on the content only)."""
    lines = [json.dumps(record, ensure_ascii=False, separators=(",", ":")) for record in rendering.records]
    text = "[\n" + ",\n".join(lines) + "\n]\n" if sample.json_array else "\n".join(lines) + "\n"
    data = text.encode()
    return gzip.compress(data, compresslevel=9, mtime=0) if sample.compressed else data


def generate(out_dir: str | Path, seed: int = DEFAULT_SEED) -> Manifest:
    """Write every file of `FILES` into `out_dir` (created if needed) and return what they hold.

    The same seed always gives the same files, byte for byte (the gzip'd file's compressed bytes
    can differ between zlib builds; its content does not).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(seed=seed, files=[])
    first_index: dict[str, int] = {}
    for sample in FILES:
        scenarios = scenarios_for(sample, seed, first_index)
        rendering = sample.render(scenarios)
        data = encode(sample, rendering)
        (out / sample.name).write_bytes(data)
        entry = FileManifest(sample.name, sample.format, len(rendering.records), len(data))
        for scenario, first, conversation_id in zip(
            scenarios, rendering.first_record, rendering.conversation_ids, strict=True
        ):
            entry.traces.append(TraceManifest.of(scenario, first + 1, conversation_id))
        manifest.files.append(entry)
    return manifest
