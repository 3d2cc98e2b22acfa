"""Hostile and broken input: every adapter, fed a corpus of damaged files, gives data or a reject
with its reason, never a traceback, and every file's accounting holds (see `accounting.py`).

The corpus is written by this module into tmp_path from one well-formed file per format (the
project's fixtures and sample traces): each damage is applied to each format's file. Targeted tests
below check what the data must be where the damage leaves data (orphan results, parent-link cycles,
mixed time zones, missing fields, very long lines, nesting).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import re
import signal
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from accounting import assert_accounting, check_parse_result
from builders import OpenAILoop, openai_tool_call, write_jsonl
from seed_traces import FIXTURES, SAMPLES, SEEDS, deep_value, dump, get_at, paths_in, read_seed, replace_at

from traceforge import store
from traceforge.cli import cli
from traceforge.ingest import detect, ingest_paths
from traceforge.ingest.sources import Record
from traceforge.ingest.values import MAX_NESTING, parse_json

DEEP = 10_000


# --------------------------------------------------------------------------- the corpus


def wrong_type(value: Any, rng: random.Random) -> Any:
    """A value of another JSON type than `value`."""
    choices: list[Any] = [None, True, 7, -3.5, "text", [], {}, ["x"], {"k": 1}]
    return rng.choice([c for c in choices if type(c) is not type(value)])


def with_wrong_types(records: list[Any], rng: random.Random, per_record: int = 4) -> list[Any]:
    out = copy.deepcopy(records)
    for record in out:
        paths = list(paths_in(record))
        for path in rng.sample(paths, min(per_record, len(paths))):
            try:
                replace_at(record, path, wrong_type(get_at(record, path), rng))
            except (KeyError, IndexError, TypeError):
                continue  # an earlier change in this record removed the path
    return out


def without_fields(records: list[Any], rng: random.Random, share: float = 0.3) -> list[Any]:
    """Each dict loses about `share` of its keys."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if rng.random() >= share}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(r) for r in records]


def with_odd_numbers(records: list[Any]) -> list[Any]:
    """Counts and times become NaN, infinities, 1e400, 10**30, negatives and 2**64."""
    odd_ints = [10**30, -5, 2**64, 0]
    odd_floats = [float("nan"), float("inf"), float("-inf")]
    counter = iter(range(10**9))

    def change(value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return odd_ints[next(counter) % len(odd_ints)]
        if isinstance(value, float):
            return odd_floats[next(counter) % len(odd_floats)]
        if isinstance(value, str) and re.fullmatch(r"\d{10,19}", value):  # OTLP nanos as text
            return "1e400"
        if isinstance(value, dict):
            return {k: change(v) for k, v in value.items()}
        if isinstance(value, list):
            return [change(v) for v in value]
        return value

    return [change(r) for r in records]


def first_string_path(record: Any) -> tuple | None:
    return next((p for p in paths_in(record) if get_at(record, p).__class__ is str), None)


Damage = Callable[[list[Any], bool, random.Random], bytes]


def _text(records: list[Any], lines: bool) -> bytes:
    return dump(records, lines).encode()


def _truncated_half(records, lines, rng):
    data = _text(records, lines)
    return data[: len(data) // 2]


def _truncated_end(records, lines, rng):
    return _text(records, lines).rstrip()[:-7]


def _bom_crlf(records, lines, rng):
    return b"\xef\xbb\xbf" + _text(records, lines).replace(b"\n", b"\r\n")


def _utf16(records, lines, rng):
    return dump(records, lines).encode("utf-16")


def _invalid_utf8(records, lines, rng):
    data = _text(records, lines)
    cut = data.index(b'"', len(data) // 3) + 1  # inside a string a third of the way in
    return data[:cut] + b"\xff\xfe\xc3(" + data[cut:]


def _wrong_types(records, lines, rng):
    return _text(with_wrong_types(records, rng), lines)


def _missing_fields(records, lines, rng):
    return _text(without_fields(records, rng), lines)


def _odd_numbers(records, lines, rng):
    text = dump(with_odd_numbers(records), lines)
    return text.replace("-Infinity", "-1e400").encode()


def _duplicated(records, lines, rng):
    if lines:
        return _text(records + records, True)
    return (json.dumps([records[0], records[0]]) + "\n").encode()


def _deep(records, lines, rng):
    """The first record (the first element of a JSON array) with a value 10,000 levels deep."""
    out = copy.deepcopy(records)
    target = out[0][0] if isinstance(out[0], list) else out[0]
    target["deep"] = "__DEEP__"
    return dump(out, lines).replace('"__DEEP__"', deep_value(DEEP), 1).encode()


def _lone_surrogates_and_nul(records, lines, rng):
    """Escapes that decode to text UTF-8 cannot hold, and a NUL, in the first string values."""
    out = copy.deepcopy(records)
    for record in out:
        path = first_string_path(record)
        if path:
            replace_at(record, path, get_at(record, path) + "\ud800 \udfff \x00 end")
    return _text(out, lines)


def _gzip_truncated(records, lines, rng):
    data = gzip.compress(_text(records, lines))
    return data[: int(len(data) * 0.6)]


def _gzip_trailing_garbage(records, lines, rng):
    return gzip.compress(_text(records, lines)) + b"\x00garbage after the gzip member"


DAMAGES: dict[str, Damage] = {
    "truncated-half": _truncated_half,
    "truncated-end": _truncated_end,
    "bom-crlf": _bom_crlf,
    "utf16": _utf16,
    "invalid-utf8": _invalid_utf8,
    "wrong-types": _wrong_types,
    "missing-fields": _missing_fields,
    "odd-numbers": _odd_numbers,
    "duplicated": _duplicated,
    "deep": _deep,
    "surrogates-nul": _lone_surrogates_and_nul,
    "gzip-truncated": _gzip_truncated,
    "gzip-garbage": _gzip_trailing_garbage,
}
# Whole files that are nothing at all, the same for every format.
NOTHING: dict[str, bytes] = {
    "empty.jsonl": b"",
    "blank.jsonl": b" \n\r\n\t\n",
    "nul-bytes.bin": bytes(range(256)) * 8,
    "high-bytes.bin": bytes(range(128, 256)) * 8,
    "empty.jsonl.gz": gzip.compress(b""),
    "zero.gz": b"\x1f\x8b",
    "bom-only.json": b"\xef\xbb\xbf",
    "prose.log": b"Traceback (most recent call last):\n  File x\nValueError: nope\n",
    "csv-ragged.csv": b'id,name,value\n1,a,2\n2,b\n3,"unterminated,4\n',
}


def write_corpus(folder: Path, fmt: str) -> dict[str, str]:
    """Every damage applied to each seed of `fmt`, plus cross-file duplicates; file name -> damage."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for number, seed in enumerate(SEEDS[fmt]):
        records, lines = read_seed(seed)
        suffix = ".jsonl" if lines else ".json"
        for name, damage in DAMAGES.items():
            rng = random.Random(f"{fmt}/{number}/{name}")
            filename = f"{number}-{name}{'.gz' if name.startswith('gzip') else suffix}"
            (folder / filename).write_bytes(damage(records, lines, rng))
            written[filename] = name
        # the same content twice under other names and a byte apart: ids must stay unique
        for copy_name, extra in ((f"{number}-copy-a{suffix}", b""), (f"{number}-copy-b{suffix}", b"\n")):
            (folder / copy_name).write_bytes(_text(records, lines) + extra)
            written[copy_name] = "copy"
    return written


# --------------------------------------------------------------------------- running it


def ingest_json(runner, paths: list[Path], db: Path, *extra: str) -> dict:
    """`traceforge ingest --json`: it must end in a report (exit 0, or 1 when every file failed)."""
    result = runner.invoke(cli, ["ingest", *map(str, paths), "--db", str(db), "--json", *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    return json.loads(result.stdout)


def reports_by_name(report: dict) -> dict[str, dict]:
    return {Path(f["path"]).name: f for f in report["files"]}


@pytest.mark.parametrize("fmt", sorted(SEEDS))
@pytest.mark.parametrize("detection", ["auto", "forced"])
def test_every_damage_gives_data_or_a_reason_and_the_accounting_holds(runner, tmp_path, fmt, detection):
    corpus = tmp_path / "corpus"
    written = write_corpus(corpus, fmt)
    for name, data in NOTHING.items():
        (corpus / name).write_bytes(data)
    db = tmp_path / "store.duckdb"
    extra = ("--format", fmt) if detection == "forced" else ()

    report = reports_by_name(ingest_json(runner, [corpus], db, *extra))

    assert set(report) == set(written) | set(NOTHING), "every file is read and reported"
    con = store.connect(db, read_only=True)
    try:
        assert_accounting(con)
        for name, file in report.items():
            assert file["status"] in ("new", "failed"), (name, file)
            if file["status"] == "failed":
                assert file["message"], name
            else:
                assert file["traces"] or file["rejected"] or sum(file["skipped"].values()), (name, file)
        for name, damage in written.items():
            file = report[name]
            if damage in ("bom-crlf", "utf16", "copy"):  # nothing lost: the same data as the seed
                seed = report[name.split("-", 1)[0] + "-copy-a" + Path(name).suffix]
                keys = ("status", "format", "traces", "llm_calls", "tool_calls", "rejected", "skipped")
                assert [file[k] for k in keys] == [seed[k] for k in keys], (name, file, seed)
            elif damage.startswith("gzip"):
                assert file["status"] == "failed" and "gzip" in file["message"], (name, file)
            elif damage == "deep":
                reasons = [*_reasons(con, corpus / name), file["message"] or ""]
                assert any(f"nested deeper than {MAX_NESTING} levels" in r for r in reasons), (name, reasons)
            elif damage == "invalid-utf8":
                reasons = [*_reasons(con, corpus / name), file["message"] or ""]
                assert any("UTF-8" in r for r in reasons), (name, reasons)
        for name in ("empty.jsonl", "blank.jsonl", "empty.jsonl.gz", "bom-only.json"):
            assert "empty" in report[name]["message"], report[name]
        for name in ("nul-bytes.bin",):
            assert "binary" in report[name]["message"], report[name]
        assert "gzip" in report["zero.gz"]["message"]
    finally:
        con.close()


def test_a_file_compressed_other_than_with_gzip_says_how_to_unpack_it(runner, tmp_path):
    """A zstd log read as text failed as "not JSON or JSON Lines (Expecting value...)", which says
    nothing of why. Real bzip2, xz and zip files (the standard library's) and a zstd frame's
    magic: each fails with its compression and the command that unpacks it, the reason kept in
    `rejects`, and the gateway log beside them is read."""
    import bz2
    import lzma
    import zipfile

    loop = OpenAILoop("You look up orders.", "where is order 7?", workload="orders")
    loop.call(tool_calls=[openai_tool_call("call_0", "get_order", {"order_id": "O-7"})])
    loop.result("call_0", "shipped")
    loop.call(content="It shipped.")
    logs = tmp_path / "logs"
    write_jsonl(logs / "gateway.jsonl", loop.records)
    text = (logs / "gateway.jsonl").read_bytes()
    (logs / "gateway-1.jsonl.bz2").write_bytes(bz2.compress(text))
    (logs / "gateway-2.jsonl.xz").write_bytes(lzma.compress(text))
    with zipfile.ZipFile(logs / "gateway-3.zip", "w") as archive:
        archive.writestr("gateway.jsonl", text)
    (logs / "gateway 4.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(64)))
    db = tmp_path / "store.duckdb"

    report = reports_by_name(ingest_json(runner, [logs], db))

    assert report["gateway.jsonl"]["status"] == "new" and report["gateway.jsonl"]["traces"] == 1
    said = {
        "gateway-1.jsonl.bz2": "compressed with bzip2, which traceforge does not read (plain and gzip "
        "files only): unpack it (bunzip2 gateway-1.jsonl.bz2) and ingest what it gives",
        "gateway-2.jsonl.xz": "compressed with xz, which traceforge does not read (plain and gzip files "
        "only): unpack it (unxz gateway-2.jsonl.xz) and ingest what it gives",
        "gateway-3.zip": "a zip archive, which traceforge does not read (plain and gzip files only): "
        "unpack it (unzip gateway-3.zip) and ingest what it gives",
        "gateway 4.jsonl.zst": "compressed with zstd, which traceforge does not read (plain and gzip "
        "files only): unpack it (zstd -d 'gateway 4.jsonl.zst') and ingest what it gives",
    }
    for name, message in said.items():
        assert report[name]["status"] == "failed" and report[name]["message"] == message, report[name]
    con = store.connect(db, read_only=True)
    try:
        assert_accounting(con)
        for name, message in said.items():
            assert _reasons(con, logs / name) == [message]
    finally:
        con.close()


def _reasons(con, path: Path) -> list[str]:
    return [
        r[0] for r in con.execute("SELECT error FROM rejects WHERE source_path = ?", [str(path)]).fetchall()
    ]


def test_a_cut_log_line_is_rejected_with_its_line_and_the_rest_kept(tmp_path, con):
    loop = OpenAILoop("You are helpful.", "find two cities")
    for i in range(3):
        loop.call(tool_calls=[openai_tool_call(f"call_{i}", "lookup", {"q": f"city {i}"})])
        loop.result(f"call_{i}", f"result {i}")
    loop.call(content="done")
    records = loop.records
    lines = [json.dumps(r) for r in records]
    path = tmp_path / "crashed-writer.jsonl"
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 3])

    ingest_paths(con, [path])

    assert con.execute("SELECT line, error LIKE 'invalid JSON%' FROM rejects").fetchall() == [
        (len(lines), True)
    ]
    assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == len(lines) - 1
    assert_accounting(con)


# --------------------------------------------------------------------------- targeted cases


@contextmanager
def deadline(seconds: int):
    """Fail instead of hanging: a parent-link cycle must not loop forever."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds}s: a cycle loops?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def otlp_span(span_id: str, parent: str | None, name: str, attributes: dict[str, Any], start: int) -> dict:
    span = {
        "traceId": "c" * 32,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 10**9),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def test_parent_link_cycles_end_and_keep_every_span_accounted(tmp_path, runner):
    chat = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        "gen_ai.output.messages": json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "tool_call", "id": "c1", "name": "look", "arguments": {}}],
                }
            ]
        ),
    }
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "look", "gen_ai.tool.call.id": "c1"}
    agent = {"gen_ai.operation.name": "invoke_agent"}
    t0 = 1_760_000_000 * 10**9
    spans = [
        otlp_span("a" * 16, "b" * 16, "invoke_agent", agent, t0),  # a -> b -> a
        otlp_span("b" * 16, "a" * 16, "chat gpt-4o", chat, t0 + 1),
        otlp_span("d" * 16, "d" * 16, "execute_tool look", tool, t0 + 2),  # its own parent
    ]
    otlp = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    (tmp_path / "otlp-cycle.json").write_text(json.dumps(otlp))

    session = "55555555-5555-4555-8555-555555555555"

    def cc_line(uuid: str, parent: str | None, kind: str, content: Any, second: int) -> dict:
        line = {
            "parentUuid": parent,
            "sessionId": session,
            "type": kind,
            "uuid": uuid,
            "timestamp": f"2026-03-02T10:00:{second:02d}.000Z",
            "isSidechain": False,
        }
        line["message"] = (
            {"role": "user", "content": content}
            if kind == "user"
            else {
                "id": f"msg_{uuid}",
                "role": "assistant",
                "model": "claude-opus-4-6",
                "content": content,
                "usage": {"input_tokens": 5, "output_tokens": 2},
            }
        )
        return line

    claude = [
        cc_line("u-1", "a-2", "user", "go", 1),  # u-1 -> a-2 -> a-1 -> u-1
        cc_line(
            "a-1", "u-1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}], 2
        ),
        cc_line("a-2", "a-1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}], 3),
        cc_line("s-1", "s-1", "assistant", [{"type": "text", "text": "self"}], 4),
    ]
    write_jsonl(tmp_path / "claude-cycle.jsonl", claude)

    def run(run_id: str, parent: str | None, run_type: str, second: int) -> dict:
        return {
            "id": run_id,
            "name": run_type,
            "run_type": run_type,
            "trace_id": "tr-1",
            "parent_run_id": parent,
            "start_time": f"2025-10-14T16:20:{second:02d}",
            "end_time": f"2025-10-14T16:20:{second + 1:02d}",
            "inputs": {"messages": [{"role": "user", "content": "hi"}]},
            "outputs": {"generations": [[{"text": "hello"}]]},
            "extra": {},
        }

    langsmith = [run("r1", "r3", "chain", 1), run("r2", "r1", "llm", 2), run("r3", "r2", "tool", 3)]
    langsmith.append(run("r4", "r4", "llm", 4))
    write_jsonl(tmp_path / "langsmith-cycle.jsonl", langsmith)

    db = tmp_path / "store.duckdb"
    with deadline(60):
        report = reports_by_name(ingest_json(runner, [tmp_path], db))

    assert {name: f["format"] for name, f in report.items()} == {
        "otlp-cycle.json": "otlp",
        "claude-cycle.jsonl": "claude-code",
        "langsmith-cycle.jsonl": "langsmith",
    }
    con = store.connect(db, read_only=True)
    try:
        assert_accounting(con)
        records = dict(con.execute("SELECT regexp_extract(path, '[^/]+$'), records FROM sources").fetchall())
        assert records == {"otlp-cycle.json": 3, "claude-cycle.jsonl": 4, "langsmith-cycle.jsonl": 4}
        # the LLM calls in the cycles are kept, not lost to the loop
        calls = dict(
            con.execute(
                "SELECT t.source_format, count(c.call_id) FROM traces t "
                "LEFT JOIN llm_calls c USING (trace_id) "
                "GROUP BY 1"
            ).fetchall()
        )
        assert calls["otlp"] == 1 and calls["claude-code"] >= 1 and calls["langsmith"] >= 1, calls
    finally:
        con.close()


def test_results_for_calls_that_do_not_exist_are_never_invented_into_calls(tmp_path, con):
    transcript = {
        "messages": [
            {"role": "user", "content": "weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [openai_tool_call("call_real", "get_weather", {"city": "Oslo"})],
            },
            {"role": "tool", "tool_call_id": "call_real", "content": "4C"},
            {"role": "tool", "tool_call_id": "call_ghost", "content": "from nowhere"},
            {"role": "tool", "tool_call_id": "call_real", "content": "4C again"},
            {"role": "assistant", "content": "It is 4C."},
        ]
    }
    anthropic = {
        "system": "be brief",
        "messages": [
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                    {"type": "tool_result", "tool_use_id": "toolu_ghost", "content": "?"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "a.txt"}]},
        ],
    }
    write_jsonl(tmp_path / "openai.jsonl", [transcript])
    write_jsonl(tmp_path / "anthropic.jsonl", [anthropic])

    ingest_paths(con, [tmp_path])

    assert_accounting(con)
    calls = con.execute(
        "SELECT source_format, source_tool_call_id, result FROM v_tool_calls ORDER BY 1"
    ).fetchall()
    assert calls == [("anthropic-messages", "toolu_1", "a.txt"), ("openai-chat", "call_real", "4C")]
    orphans = dict(
        con.execute(
            "SELECT source_format, json_extract(attributes, '$.orphan_results')::INT FROM traces"
        ).fetchall()
    )
    assert orphans == {"openai-chat": 2, "anthropic-messages": 1}


EPOCH_S = 1_790_000_000
AT_EPOCH = datetime.fromtimestamp(EPOCH_S, UTC)  # 2026-09-21 14:13:20 UTC
TIMES = [
    # (how the source wrote it, the instant it means)
    ("2026-09-21T10:00:00Z", datetime(2026, 9, 21, 10, 0, tzinfo=UTC)),
    ("2026-09-21T12:30:00+02:30", datetime(2026, 9, 21, 10, 0, tzinfo=UTC)),
    ("2026-09-21T05:00:00-05:00", datetime(2026, 9, 21, 10, 0, tzinfo=UTC)),
    ("2026-09-21 10:00:00", datetime(2026, 9, 21, 10, 0, tzinfo=UTC)),  # no zone: read as UTC
    ("2026-09-21T10:00:00.250000z", datetime(2026, 9, 21, 10, 0, 0, 250000, tzinfo=UTC)),
    (EPOCH_S, AT_EPOCH),  # epoch seconds
    (EPOCH_S * 1000 + 500, AT_EPOCH + timedelta(milliseconds=500)),  # milliseconds
    (EPOCH_S * 10**9, AT_EPOCH),  # nanoseconds
    (str(EPOCH_S), AT_EPOCH),  # epoch seconds as text
    (EPOCH_S + 0.25, AT_EPOCH + timedelta(milliseconds=250)),
]
NOT_TIMES = ["yesterday", "2026-13-45T99:99:99", "", -5, 0, 10**30, True, [], {"t": 1}, "NaN"]


def test_timestamps_in_mixed_formats_and_zones_land_on_the_same_utc_instant(tmp_path, con):
    records = []
    for index, written in enumerate([*[w for w, _ in TIMES], *NOT_TIMES]):
        loop = OpenAILoop("You are helpful.", f"question number {index}")
        record = loop.call(content=f"answer {index}")
        record["start_time"] = written
        del record["end_time"]
        del record["response"]["created"]
        records.append(record)
    write_jsonl(tmp_path / "mixed-times.jsonl", records)

    ingest_paths(con, [tmp_path])

    assert_accounting(con)
    stored = dict(
        con.execute(
            "SELECT m.content, c.started_at FROM llm_calls c JOIN messages m ON m.call_id = c.call_id"
        ).fetchall()
    )
    for index, (written, instant) in enumerate(TIMES):
        assert stored[f"answer {index}"] == instant, (written, stored[f"answer {index}"])
    for index, written in enumerate(NOT_TIMES, start=len(TIMES)):
        assert stored[f"answer {index}"] is None, written


def test_missing_usage_is_not_reported_rather_than_zero(tmp_path, con):
    loop = OpenAILoop("You are helpful.", "hi")
    record = loop.call(content="hello")
    del record["response"]["usage"]
    del record["response"]["id"]
    record["response"]["choices"][0]["message"]["tool_calls"] = [
        {"type": "function", "function": {"name": "look", "arguments": "{not json"}}  # no id either
    ]
    write_jsonl(tmp_path / "sparse.jsonl", [record])

    ingest_paths(con, [tmp_path])

    assert_accounting(con)
    assert con.execute("SELECT usage_reported, input_tokens, output_tokens FROM llm_calls").fetchall() == [
        (False, None, None)
    ]
    assert con.execute("SELECT name, arguments FROM tool_calls").fetchall() == [("look", '"{not json"')]


def test_nesting_up_to_the_limit_is_data_and_beyond_it_a_reject(tmp_path, con):
    """Tool arguments nested just under the limit are kept whole; just over it, and 10,000 levels
    deep, the record is rejected with the reason and its line."""
    lines = []
    for depth in (MAX_NESTING - 10, MAX_NESTING + 10, DEEP):
        loop = OpenAILoop("You are helpful.", f"depth {depth}")
        record = loop.call(tool_calls=[openai_tool_call(f"call_{depth}", "store", {})])
        function = record["response"]["choices"][0]["message"]["tool_calls"][0]["function"]
        function["arguments"] = "__NESTED__"  # an object, not a JSON string: the record's own nesting
        lines.append(json.dumps(record).replace('"__NESTED__"', deep_value(depth - 8)))
    (tmp_path / "nested.jsonl").write_text("\n".join(lines) + "\n")

    ingest_paths(con, [tmp_path])

    assert_accounting(con)
    rejects = con.execute("SELECT line, error FROM rejects ORDER BY line").fetchall()
    assert [line for line, _ in rejects] == [2, 3]
    assert all(f"nested deeper than {MAX_NESTING} levels" in error for _, error in rejects)
    stored = json.loads(con.execute("SELECT arguments FROM tool_calls").fetchone()[0])
    depth = 0
    while isinstance(stored, dict | list):
        stored = stored["a"] if isinstance(stored, dict) else stored[0]
        depth += 1
    assert depth == MAX_NESTING - 18  # kept whole


def test_very_long_lines_are_read_whole(tmp_path, con):
    """A 24 MB tool result on one line (an agent that read a big file) is data, not a reject; the
    same line cut at 20 MB is rejected with its line and its text."""
    big = "x" * (24 << 20)
    loop = OpenAILoop("You are helpful.", "read the log")
    loop.call(tool_calls=[openai_tool_call("call_big", "read_file", {"path": "/var/log/big.log"})])
    loop.result("call_big", big)
    loop.call(content="It is long.")
    path = write_jsonl(tmp_path / "long.jsonl", loop.records)
    first, second = path.read_bytes().split(b"\n")[:2]
    cut = tmp_path / "long-cut.jsonl"
    cut.write_bytes(first + b"\n" + second[: 20 << 20])

    ingest_paths(con, [path, cut])

    assert_accounting(con)
    results = con.execute(
        "SELECT t.source_path, length(c.result) FROM v_tool_calls c JOIN traces t USING (trace_id)"
    )
    assert (str(path), len(big)) in results.fetchall()
    assert con.execute("SELECT source_path, line, length(raw) FROM rejects").fetchall() == [
        (str(cut), 2, 20 << 20)
    ]


def test_the_accounting_holds_on_every_file_of_every_test_corpus(tmp_path, shared_data):
    """The fixtures, the sample traces and the real recorded traces, ingested together."""
    con = store.connect(tmp_path / "all.duckdb")
    try:
        report = ingest_paths(con, [FIXTURES, SAMPLES, shared_data])
        assert report.files and not report.problems
        assert_accounting(con)
        assert con.execute("SELECT count(*) FROM sources").fetchone()[0] == len(report.files)
    finally:
        con.close()


# Records whose role, type or kind (what detection and the adapters switch on) is an object or a
# list: each adapter must neither crash when sniffing nor when parsing them.
WRONG_KINDS = [
    [{"role": {}}, {"role": "user", "content": "x"}],
    [{"role": []}],
    [{"messages": [{"role": "user", "content": "x"}, {"role": {}}]}],
    [[{"role": "user"}, {"role": {"a": 1}}]],
    [{"type": {}, "uuid": "x", "parentUuid": None, "sessionId": "s", "message": {"role": []}}],
    [{"gen_ai.operation.name": {}, "gen_ai.request.model": "x", "gen_ai.system": []}],
    [{"id": "o", "traceId": "t", "type": {}, "startTime": "2024-01-01T00:00:00Z"}],
    [
        {
            "id": "o",
            "traceId": "t",
            "type": "GENERATION",
            "startTime": "2024-01-01T00:00:00Z",
            "input": [{"role": {}, "content": "x"}],
            "output": {"role": [], "content": {}},
        }
    ],
    [{"id": "r", "run_type": {}, "start_time": "2024-01-01T00:00:00", "trace_id": "t"}],
    [{"action": {}, "observation": [], "source": {}, "id": 1, "timestamp": "2024-01-01T00:00:00"}],
]


@pytest.mark.parametrize("values", WRONG_KINDS, ids=range(len(WRONG_KINDS)))
def test_kinds_and_roles_of_the_wrong_type_never_crash_detection_or_parsing(values):
    records = [Record(line, value, json.dumps(value)) for line, value in enumerate(values, start=1)]
    detect.detect(records)
    for adapter in detect.ADAPTERS:
        check_parse_result(adapter.parse(records, "wrong-kinds.jsonl"))


def test_json_is_read_alike_with_whitespace_around_it_more_after_it_or_upper_case_escapes():
    assert parse_json(' {"a": [1, 2.0, true, NaN]}\t') == {"a": [1, 2.0, True, None]}
    with pytest.raises(json.JSONDecodeError, match="Extra data") as extra:
        parse_json('{"a": 1} {"b": 2}')
    assert extra.value.colno == 10
    with pytest.raises(json.JSONDecodeError, match="Expecting value"):
        parse_json("  ")
    pair = "\\uD83D\\uDE00"  # a valid pair, upper case: one character
    assert parse_json(f'["\\uD83D", "{pair}", "x\\uDC00"]') == ["\ufffd", "\U0001f600", "x\ufffd"]


def test_concatenated_files_lone_surrogates_and_nul_are_read_as_text(tmp_path, con):
    """`cat a.jsonl b.jsonl` leaves b's byte order mark inside the file; an escaped lone surrogate
    encodes no character (it becomes U+FFFD); a NUL character is text like any other."""
    first = OpenAILoop("You are helpful.", "first conversation")
    first.call(content="one")
    second = OpenAILoop("You are helpful.", "second conversation")
    second.call(content="two \\ud800 and \\u0000 end")
    a = "".join(json.dumps(r) + "\n" for r in first.records).encode()
    b = "".join(json.dumps(r).replace("\\\\u", "\\u") + "\n" for r in second.records).encode()
    (tmp_path / "cat.jsonl").write_bytes(b"\xef\xbb\xbf" + a + b"\xef\xbb\xbf" + b)

    ingest_paths(con, [tmp_path])

    assert_accounting(con)
    assert con.execute("SELECT count(*) FROM rejects").fetchone()[0] == 0
    answers = [
        r[0]
        for r in con.execute("SELECT content FROM messages WHERE role = 'assistant' ORDER BY 1").fetchall()
    ]
    assert answers == ["one", "two \ufffd and \x00 end"]
