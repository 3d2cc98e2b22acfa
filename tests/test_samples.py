"""The sample traces: the committed files are what the generator writes, and `traceforge analyze`
finds in them what the generator says it wrote (counts from its manifest, checked in the store)."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import random
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from traceforge.cli import cli
from traceforge.ingest.sources import IGNORED_SUFFIXES
from traceforge.samples import DEFAULT_SEED, FILES, generate, travel
from traceforge.samples.scenario import Builder, ScenarioError

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def content(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("regenerated"), seed=DEFAULT_SEED)


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    """The store `traceforge analyze sample_traces/ --strict` leaves."""
    workdir = tmp_path_factory.mktemp("analyze")
    db = workdir / "samples.duckdb"
    with contextlib.chdir(workdir):  # whatever analyze writes beside the store stays out of the repo
        result = CliRunner().invoke(cli, ["analyze", str(SAMPLES), "--db", str(db), "--strict"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    yield con
    con.close()


def rows(con, sql: str, *params) -> list[tuple]:
    return con.execute(sql, list(params)).fetchall()


def test_committed_samples_are_what_the_generator_writes(tmp_path):
    regenerated = generate(tmp_path, seed=DEFAULT_SEED)
    trace_files = {p.name for p in SAMPLES.iterdir() if p.suffix not in IGNORED_SUFFIXES}
    assert trace_files == {f.name for f in regenerated.files}
    for file in regenerated.files:
        # Compressed bytes depend on the zlib build; the content must not differ at all.
        assert content(tmp_path / file.name) == content(SAMPLES / file.name), (
            f"sample_traces/{file.name} is stale: run `traceforge samples sample_traces/`"
        )
        if not file.name.endswith(".gz"):
            assert (tmp_path / file.name).read_bytes() == (SAMPLES / file.name).read_bytes()
    assert sum((SAMPLES / name).stat().st_size for name in trace_files) < 600_000


def test_another_seed_writes_other_runs_in_the_same_shapes(tmp_path):
    other = generate(tmp_path, seed=7)
    assert [f.name for f in other.files] == [s.name for s in FILES]
    assert any(content(tmp_path / f.name) != content(SAMPLES / f.name) for f in other.files)


def test_samples_verb_writes_the_files_and_prints_the_manifest(runner, tmp_path, manifest):
    result = runner.invoke(cli, ["samples", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed == json.loads(json.dumps(manifest.to_dict()))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f.name for f in manifest.files)


def test_every_record_is_ingested_without_rejects(analyzed, manifest):
    assert rows(analyzed, "SELECT count(*) FROM rejects") == [(0,)]
    stored = {
        Path(path).name: (fmt, records, rejected, traces)
        for path, fmt, records, rejected, traces in rows(
            analyzed, "SELECT path, format, records, rejected, traces FROM sources"
        )
    }
    assert stored == {f.name: (f.format, f.records, 0, len(f.traces)) for f in manifest.files}


def stored_trace(con, file_name: str, line: int) -> str:
    found = rows(
        con,
        "SELECT trace_id FROM traces WHERE source_path LIKE ? AND source_line = ?",
        f"%/{file_name}",
        line,
    )
    assert len(found) == 1, f"{file_name}:{line}: expected one trace there, found {len(found)}"
    return found[0][0]


def test_each_trace_holds_what_the_generator_wrote(analyzed, manifest):
    for file in manifest.files:
        for expected in file.traces:
            trace_id = stored_trace(analyzed, file.name, expected.line)
            if expected.conversation_id is not None:
                assert trace_id == expected.conversation_id
            else:
                assert trace_id.startswith("conv-")  # grouped by prefix chaining alone
            [(llm_calls, tool_calls, errors, user_turns, parallel)] = rows(
                analyzed,
                """
                SELECT (SELECT count(*) FROM llm_calls WHERE trace_id = $1),
                       (SELECT count(*) FROM tool_calls WHERE trace_id = $1),
                       (SELECT count(*) FILTER (WHERE is_error) FROM tool_calls WHERE trace_id = $1),
                       (SELECT count(*) FROM messages WHERE trace_id = $1 AND role = 'user'),
                       (SELECT count(*) FROM (SELECT call_id FROM tool_calls WHERE trace_id = $1
                                              GROUP BY call_id HAVING count(*) > 1))
                """,
                trace_id,
            )
            where = f"{file.name}:{expected.line}"
            assert llm_calls == expected.llm_calls, where
            assert tool_calls == expected.tool_calls, where
            assert errors == expected.tool_errors, where
            assert user_turns == expected.user_turns, where
            assert parallel == expected.parallel_calls, where


def test_three_workloads_named_or_fingerprinted(analyzed, manifest):
    by_workload: dict[str, set[str]] = {}
    for file in manifest.files:
        for expected in file.traces:
            trace_id = stored_trace(analyzed, file.name, expected.line)
            [(workload,)] = rows(analyzed, "SELECT workload FROM traces WHERE trace_id = ?", trace_id)
            by_workload.setdefault(expected.workload, set()).add(workload)
            if expected.workload_named:
                assert workload == expected.workload
            else:
                assert workload.startswith("fp-")
    # Runs of one agent land in one workload, whichever file and format they came from.
    assert all(len(stored) == 1 for stored in by_workload.values()), by_workload
    assert len(by_workload) >= 3
    counts = sorted(
        (sum(t.workload == w for f in manifest.files for t in f.traces) for w in by_workload), reverse=True
    )
    assert counts[0] >= 2 * counts[-1]  # a power-law-ish spread, not an even one


def test_declared_dependencies_retries_and_serial_calls_are_in_the_store(analyzed, manifest):
    checked = {"dependencies": 0, "retries": 0, "retries that worked": 0, "serial": 0}
    for file in manifest.files:
        for expected in file.traces:
            trace_id = stored_trace(analyzed, file.name, expected.line)
            calls = {
                seq: (name, arguments, result, is_error, llm_seq)
                for seq, name, arguments, result, is_error, llm_seq in rows(
                    analyzed,
                    "SELECT seq, name, arguments::VARCHAR, result, is_error, llm_seq FROM v_tool_calls "
                    "WHERE trace_id = ?",
                    trace_id,
                )
            }
            told = " ".join(
                text
                for (text,) in rows(
                    analyzed,
                    "SELECT content FROM messages WHERE trace_id = ? AND role IN ('system', 'user')",
                    trace_id,
                )
            )
            for dep in expected.dependencies:
                source, target = calls[dep.src], calls[dep.dst]
                assert dep.value in source[2] and dep.value in target[1], (file.name, dep)
                assert source[4] < target[4]  # the result came back before the call was written
                assert dep.value not in told
                checked["dependencies"] += 1
            for failed, retry in expected.retries:
                assert calls[failed][0] == calls[retry][0]
                assert calls[failed][3]
                checked["retries that worked"] += not calls[retry][3]
                assert calls[failed][1] != calls[retry][1]  # corrected arguments
                assert calls[failed][4] < calls[retry][4]
                checked["retries"] += 1
            for group in expected.serial_groups:
                assert len({calls[seq][4] for seq in group}) == len(group)  # one LLM call each
                assert len({calls[seq][1] for seq in group}) == len(group)
                checked["serial"] += 1
    assert all(checked.values()), checked


def test_the_store_shows_parallel_calls_errors_retries_turns_and_dependencies(analyzed):
    """The properties the samples exist for, found with SQL alone (no manifest)."""
    [(parallel,)] = rows(
        analyzed,
        "SELECT count(*) FROM (SELECT call_id FROM tool_calls GROUP BY call_id HAVING count(*) > 1)",
    )
    [(retried,)] = rows(
        analyzed,
        """
        SELECT count(*) FROM tool_calls failed
        WHERE failed.is_error AND EXISTS (
            SELECT 1 FROM tool_calls retry
            WHERE retry.trace_id = failed.trace_id AND retry.name = failed.name
              AND retry.seq > failed.seq AND retry.arguments::VARCHAR <> failed.arguments::VARCHAR)
        """,
    )
    [(multi_turn,)] = rows(
        analyzed,
        "SELECT count(*) FROM (SELECT trace_id FROM messages WHERE role = 'user' "
        "GROUP BY trace_id HAVING count(*) > 1)",
    )
    # A string of 8+ characters in a call's arguments that an earlier call's result holds and that
    # no system or user message of the trace contains.
    [(dependent,)] = rows(
        analyzed,
        """
        WITH leaves AS (
            SELECT tc.trace_id, tc.seq, j.value ->> '$' AS value
            FROM tool_calls tc, json_tree(tc.arguments) j
            WHERE j.type = 'VARCHAR' AND length(j.value ->> '$') >= 8)
        SELECT count(DISTINCT (l.trace_id, l.seq)) FROM leaves l
        JOIN tool_calls src ON src.trace_id = l.trace_id AND src.seq < l.seq
             AND contains(src.result, l.value)
        WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.trace_id = l.trace_id
                          AND m.role IN ('system', 'user') AND contains(m.content, l.value))
        """,
    )
    assert parallel > 0 and retried > 0 and multi_turn > 0 and dependent > 0


def log_records(name: str) -> list[dict]:
    return [json.loads(line) for line in content(SAMPLES / name).decode().splitlines()]


def first_user_text(messages: list[dict]) -> str:
    text = next(m["content"] for m in messages if m["role"] == "user")
    return text if isinstance(text, str) else text[0]["text"]


def test_log_timings_and_token_counts_are_plausible():
    """Read the per-request logs with plain json: 2026 timestamps, latency that grows with output,
    tool gaps of 0.1-3 s, prompt tokens near chars/4 and cached tokens within the prompt."""
    for sample in FILES:
        if sample.json_array or "response" not in log_records(sample.name)[0]:
            continue  # a transcript: no per-call records
        by_conversation: dict[str, list[dict]] = {}
        for record in log_records(sample.name):
            response = record["response"].get("body", record["response"])
            request = record["request"].get("body", record["request"])
            usage = response["usage"]
            start = datetime.fromisoformat(record["start_time"])
            end = datetime.fromisoformat(record["end_time"])
            assert start.year == 2026 and end > start
            if "prompt_tokens" in usage:  # OpenAI: cached tokens are part of the prompt, in 128s
                prompt, output = usage["prompt_tokens"], usage["completion_tokens"]
                cached = usage["prompt_tokens_details"]["cached_tokens"]
                assert cached % 128 == 0 and cached <= prompt
            else:  # Anthropic: input_tokens excludes what the cache served or stored
                output = usage["output_tokens"]
                prompt = (
                    usage["input_tokens"]
                    + usage["cache_read_input_tokens"]
                    + usage["cache_creation_input_tokens"]
                )
            chars = len(json.dumps([request.get("system"), request["messages"], request["tools"]]))
            assert 0.5 < prompt / (chars / 4) < 1.5, (sample.name, prompt, chars)
            seconds = (end - start).total_seconds()
            assert 0.2 < seconds < 1.0 + output / 40
            key = first_user_text(request["messages"])
            by_conversation.setdefault(key, []).append(record)
        for records in by_conversation.values():
            for before, after in itertools.pairwise(records):
                gap = (
                    datetime.fromisoformat(after["start_time"]) - datetime.fromisoformat(before["end_time"])
                ).total_seconds()
                assert gap > 0
                stop = before["response"].get("body", before["response"])
                if (
                    stop.get("stop_reason") == "tool_use"
                    or stop.get("choices", [{}])[0].get("finish_reason") == "tool_calls"
                ):
                    assert 0.1 <= gap <= 3.1, gap  # the tools ran in between


def test_builder_refuses_a_dependency_on_what_the_user_said():
    b = Builder(random.Random(0), "demo", True, "gpt-4.1-mini", "You help.", travel.TOOLS)
    b.user("My booking is QX7P2M, email ann@example.com")
    lookup = b.tool("get_customer", {"email": "ann@example.com"}, {"customer_id": "cus_1", "note": "QX7P2M"})
    b.llm(lookup)
    fetch = b.tool("get_reservation", {"confirmation_code": "QX7P2M"}, {}, uses=[(lookup, "QX7P2M")])
    with pytest.raises(ScenarioError, match="known before"):
        b.llm(fetch)
