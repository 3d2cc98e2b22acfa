"""Replay traces in the mooncake_trace JSON Lines format: writing ours, reading anyone's.

One request per line:
    {"timestamp": 27482, "input_length": 6955, "output_length": 52,
     "hash_ids": [46, 47, ...], "session_id": "conv-1", "delay": 1830}
- `timestamp`: arrival in integer milliseconds from the first request;
- `input_length` / `output_length`: tokens;
- `hash_ids`: one id per `block_size`-token block of the input, each standing for that block and
  every block before it (equal ids, equal prefixes); always `ceil(input_length / block_size)` ids;
- `session_id`: the trace the request belongs to (AIPerf sends it as `X-Session-Affinity`);
- `delay`: on a session's later turns, milliseconds between the previous response's end and this
  request (the tool or user gap), for replays that pace turns instead of following timestamps.
AIPerf (`--custom-dataset-type mooncake_trace`), vLLM (`--dataset-name timed_trace`), SGLang
(`--dataset-name mooncake`) and Dynamo replay read this format.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceforge.analysis.prefix_cache import BLOCK_SIZE, Request
from traceforge.model import Reject


class ReplayError(ValueError):
    """A replay file that cannot be read at all."""


@dataclass
class ReplayRead:
    """What `read_replay` made of a file: the usable requests, the rejected lines, and lines
    whose hash ids do not cover their length at the block size (used anyway, counted)."""

    requests: list[Request] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    lines: int = 0
    block_mismatch: int = 0
    untimed: int = 0


def replay_record(request: Request) -> dict[str, Any]:
    """The mooncake_trace record of one request."""
    record: dict[str, Any] = {
        "timestamp": round(request.timestamp_ms),
        "input_length": int(request.input_length),
        "output_length": int(request.output_length),
        "hash_ids": list(request.hash_ids),
    }
    if request.session_id is not None:
        record["session_id"] = request.session_id
    if request.delay_ms is not None:
        record["delay"] = round(request.delay_ms)
    return record


def write_replay(requests: list[Request], path: str | Path, block_size: int = BLOCK_SIZE) -> int:
    """Write `requests` (in arrival order) as mooncake_trace JSONL. Returns the lines written.

    Raises ValueError if a request's hash ids do not exactly cover its length at `block_size`:
    replay tools reject such rows.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for request in sorted(requests, key=lambda r: r.timestamp_ms):
            if request.input_length < 1 or len(request.hash_ids) != math.ceil(
                request.input_length / block_size
            ):
                raise ValueError(
                    f"request {request.call_id}: {len(request.hash_ids)} hash ids do not cover "
                    f"input_length {request.input_length} at block size {block_size}"
                )
            out.write(json.dumps(replay_record(request), separators=(", ", ": ")) + "\n")
    return len(requests)


def read_replay(path: str | Path, block_size: int = BLOCK_SIZE) -> ReplayRead:
    """Read a mooncake_trace JSONL file (ours, Mooncake's, or any tool's) for the simulator.

    Lines without a usable `input_length` and `hash_ids` become rejects naming the line and the
    problem. A line without `timestamp` is placed at the previous line's time (counted in
    `untimed`; time-to-live results then mean little).
    """
    path = Path(path)
    result = ReplayRead()
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    previous_time = 0.0
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            result.lines += 1
            problem, request = _parse_line(line, previous_time)
            if problem:
                result.rejects.append(Reject(number, problem, line.rstrip("\n")[:2000]))
                continue
            if request.timed:
                previous_time = request.timestamp_ms
            else:
                result.untimed += 1
            if len(request.hash_ids) != math.ceil(request.input_length / block_size):
                result.block_mismatch += 1
            result.requests.append(request)
    if result.lines == 0:
        raise ReplayError(f"{path}: empty file; expected one JSON request per line")
    return result


def _parse_line(line: str, previous_time: float) -> tuple[str | None, Request | None]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc.msg} at column {exc.colno}", None
    if not isinstance(value, dict):
        return "not a JSON object", None
    length = value.get("input_length")
    if not _is_int(length) or length < 1:
        return "`input_length` must be a positive integer (token count)", None
    ids = value.get("hash_ids")
    if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
        return "`hash_ids` must be a list of integers", None
    output = value.get("output_length", 0)
    if not _is_int(output) or output < 0:
        return "`output_length` must be a non-negative integer", None
    timestamp = value.get("timestamp")
    if timestamp is not None and (
        isinstance(timestamp, bool)
        or not isinstance(timestamp, int | float)
        or not math.isfinite(timestamp)
        or timestamp < 0
    ):
        return "`timestamp` must be a non-negative number of milliseconds", None
    session = value.get("session_id")
    return None, Request(
        timestamp_ms=float(timestamp) if timestamp is not None else previous_time,
        input_length=length,
        output_length=output,
        hash_ids=ids,
        session_id=str(session) if session is not None else None,
        delay_ms=value.get("delay") if _is_number(value.get("delay")) else None,
        timed=timestamp is not None,
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def replay_commands(path: str, model: str = "MODEL", block_size: int = BLOCK_SIZE) -> dict[str, str]:
    """Command lines that replay the trace at `path` against a server (as documented by each tool;
    the vLLM flags come from its CLI defaults, see docs/profiles.md)."""
    return {
        "aiperf": (
            f"aiperf profile -m {model} --endpoint-type chat --streaming --url localhost:8000 "
            f"--input-file {path} --custom-dataset-type mooncake_trace --fixed-schedule"
            + (f" --isl-block-size {block_size}" if block_size != BLOCK_SIZE else "")
        ),
        "vllm": (
            f"vllm bench serve --model {model} --dataset-name timed_trace --dataset-path {path} "
            f"--timed-trace-chunk-hash-size {block_size} --timed-trace-sec-multiplier 0.001 --self-timed"
        ),
        "sglang": (
            f"python -m sglang.bench_serving --backend sglang --dataset-name mooncake --dataset-path {path} "
            "--use-trace-timestamps  # SGLang ignores input_length (about 130 tokens per hash id)"
        ),
    }
