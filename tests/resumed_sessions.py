"""Claude Code sessions and the sessions that resume them, made the way `claude --resume` makes
them: what the tests of resumed sessions (and of forgetting one) build their files from."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
RESUMED = "99999999-9999-4999-8999-999999999999"


def read_lines(path: Path) -> list[dict]:
    return [json.loads(text) for text in path.read_text().splitlines() if text.strip()]


def write_lines(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def resumed_copy(resumed_lines: list[dict], continuation: list[dict], session_id: str) -> list[dict]:
    """What `claude --resume` writes: a summary line, the resumed session's lines under the new
    session id, then the lines of the new session's own turns."""
    last = [line["uuid"] for line in resumed_lines if line.get("uuid")][-1]
    lines = [*resumed_lines, *continuation]
    renamed = [{**line, "sessionId": session_id} if "sessionId" in line else line for line in lines]
    return [{"type": "summary", "summary": "Resumed session", "leafUuid": last}, *renamed]


def line(kind: str, uuid: str, parent: str, second: int, **fields) -> dict:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/projects/shop-api",
        "sessionId": RESUMED,
        "version": "2.1.39",
        "type": kind,
        "uuid": uuid,
        "timestamp": f"2026-03-02T10:05:{second:02d}.000Z",
        **fields,
    }


def response(uuid: str, parent: str, second: int, message_id: str, content: list, output: int) -> dict:
    usage = {"input_tokens": 5, "cache_read_input_tokens": 6400, "cache_creation_input_tokens": 200}
    message = {
        "model": "claude-opus-4-6",
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": "tool_use" if content[0]["type"] == "tool_use" else "end_turn",
        "usage": {**usage, "output_tokens": output},
    }
    return line("assistant", uuid, parent, second, requestId=f"req_{message_id}", message=message)


def result(uuid: str, parent: str, second: int, tool_id: str, text: str) -> dict:
    content = [{"tool_use_id": tool_id, "type": "tool_result", "content": text}]
    return line("user", uuid, parent, second, message={"role": "user", "content": content})


# The resumed session's own turns: two reads one after the other that did not need each other.
CONTINUATION = [
    line(
        "user", "u-3", "x-1", 0, message={"role": "user", "content": "Fix the cart total, then the config."}
    ),
    response(
        "c-1",
        "u-3",
        3,
        "msg_C",
        [{"type": "tool_use", "id": "toolu_C", "name": "Read", "input": {"file_path": "src/cart.py"}}],
        30,
    ),
    result("c-2", "c-1", 4, "toolu_C", "def total(items):\n    return sum(i.price for i in items) - 1"),
    response(
        "d-1",
        "c-2",
        7,
        "msg_D",
        [
            {
                "type": "tool_use",
                "id": "toolu_D",
                "name": "Read",
                "input": {"file_path": "config/settings.toml"},
            }
        ],
        28,
    ),
    result("d-2", "d-1", 8, "toolu_D", "[server]\nport = 8080"),
    response("e-1", "d-2", 12, "msg_E", [{"type": "text", "text": "The total drops one item price."}], 55),
]
