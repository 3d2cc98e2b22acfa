"""Well-formed files of every format (the project's fixtures and sample traces) and the helpers the
reliability tests use to damage or vary them: walking a JSON value's paths, writing it back as JSON
Lines or a document, and reading text back as the ingest reads it."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from builders import AnthropicLoop, OpenAILoop, openai_tool_call, write_jsonl

from traceforge.ingest.sources import Record, SourceFile, read_records
from traceforge.model import Reject

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SAMPLES = REPO / "sample_traces"

# One well-formed file per adapter (several shapes where an adapter reads several).
SEEDS: dict[str, list[Path]] = {
    "openai-chat": [SAMPLES / "openai_chat_gateway.jsonl", SAMPLES / "openai_chat_transcripts.json"],
    "anthropic-messages": [SAMPLES / "anthropic_messages_transcripts.jsonl"],
    "claude-code": [FIXTURES / "claude_code" / "parallel_session.jsonl"],
    "otlp": [
        FIXTURES / "otlp" / "otel_genai_current.jsonl",
        FIXTURES / "otlp" / "otel_genai_deprecated.json",
    ],
    "openai-responses": [FIXTURES / "openai_responses" / "gateway.jsonl"],
    "langfuse": [FIXTURES / "langfuse" / "observations.json", FIXTURES / "langfuse" / "trace_full.json"],
    "langsmith": [FIXTURES / "langsmith" / "runs.jsonl", FIXTURES / "langsmith" / "run_tree.json"],
    "openhands": [
        FIXTURES / "openhands" / "parallel_calls.json",
        FIXTURES / "openhands" / "eval_output.jsonl",
    ],
    "swe-agent": [FIXTURES / "swe-agent" / "function_calling_requery.traj"],
    "tau2": [FIXTURES / "tau2" / "telecom_results.json"],
    "toolbench": [FIXTURES / "toolbench" / "G2_answer" / "7_ChatGPT_DFS_woFilter_w2.json"],
}


def read_seed(path: Path) -> tuple[list[Any], bool]:
    """The seed's records and whether it is JSON Lines (else one JSON document)."""
    text = path.read_text()
    try:
        return [json.loads(text)], False
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()], True


def dump(records: list[Any], lines: bool) -> str:
    if lines:
        return "".join(json.dumps(r) + "\n" for r in records)
    return json.dumps(records[0], indent=1) + "\n"


def read_back(text: str, path: Path) -> tuple[list[Record], list[Reject]]:
    """`text` read as the ingest reads a file's content (NaN, surrogates and nesting included)."""
    data = text.encode("utf-8", errors="surrogatepass")
    source = SourceFile(path, data, hashlib.sha256(data).hexdigest(), len(data), False)
    rejects: list[Reject] = []
    return list(read_records(source, rejects)), rejects


def paths_in(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path to a value inside `value` (dict keys and list indices), parents first."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from paths_in(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from paths_in(item, (*prefix, index))


def get_at(value: Any, path: tuple) -> Any:
    for step in path:
        value = value[step]
    return value


def replace_at(value: Any, path: tuple, new: Any) -> None:
    get_at(value, path[:-1])[path[-1]] = new


def deep_value(levels: int) -> str:
    """JSON text nested `levels` deep (objects and lists alternating)."""
    return '{"a": [' * (levels // 2) + "1" + "]}" * (levels // 2)


def write_gateway_corpus(folder: Path, files: int) -> None:
    """OpenAI and Anthropic gateway logs (some gzipped), a bad line here and there, and the
    fixtures of the other formats."""
    for number in range(files):
        records = []
        for conversation in range(8):
            user = f"file {number} conversation {conversation}: find flights and hotels"
            if number % 3 == 2:
                loop = AnthropicLoop("You book travel.", user)
                for step in range(3):
                    loop.call(
                        [
                            {
                                "type": "tool_use",
                                "id": f"toolu_{number}_{conversation}_{step}",
                                "name": "search",
                                "input": {"q": f"{user} {step}"},
                            }
                        ]
                    )
                    loop.result(f"toolu_{number}_{conversation}_{step}", f"result {step} for {user}")
                loop.call([{"type": "text", "text": "Booked."}])
            else:
                loop = OpenAILoop("You book travel.", user)
                for step in range(3):
                    call_id = f"call_{number}_{conversation}_{step}"
                    loop.call(tool_calls=[openai_tool_call(call_id, "search", {"q": f"{user} {step}"})])
                    loop.result(call_id, f"result {step} for {user}")
                loop.call(content="Booked.")
            records.extend(loop.records)
        path = write_jsonl(folder / f"day-{number:02d}.jsonl", records, compress=number % 4 == 0)
        if number % 5 == 1:
            with open(path, "a") as fh:
                fh.write('{"request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "cut\n')
    for fixture in ("claude_code", "otlp", "langfuse", "langsmith", "openhands", "tau2"):
        shutil.copytree(FIXTURES / fixture, folder / fixture)
