"""Per-request gateway logs whose conversations lie in several files: a log rotated in the middle of
a conversation, the instances of a load-balanced gateway each writing their own log. Ingested
together, one after the other in either order, or with a file still growing, they give the
conversations, calls, DAG and analysis the whole log gives.

The logs are the recorded samples `openai_chat_gateway.jsonl` (8 conversations, some with a
session id, some chained by their prefixes only, interleaved as a gateway logs them) and
`anthropic_messages_gateway.jsonl.gz`, and the Responses API fixture `gateway.jsonl` (a
conversation chained by `previous_response_id`, a stateless one); cutting between lines is what a
rotation does. A trace
whose first call lies in the later file gets an id from that file (ids are stable per input), so
traces are compared by their first call's id."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
from accounting import assert_accounting
from split_traces import CONTENT, ingest, query, run, write

import traceforge.ingest
from traceforge import store
from traceforge.cli import cli
from traceforge.ingest import sources, stream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import corpus as bench_corpus
import recut_logs

SAMPLES = Path(__file__).parent.parent / "sample_traces"
OPENAI = SAMPLES / "openai_chat_gateway.jsonl"
ANTHROPIC = SAMPLES / "anthropic_messages_gateway.jsonl.gz"
RESPONSES = Path(__file__).parent / "fixtures" / "openai_responses" / "gateway.jsonl"
# A branch's line is in the file of the call it branched from: left out of the comparison too.
SOURCE_PATHS_OUT = '"source_paths": null'  # in CONTENT's merge patch
# Where a trace's calls came from, which only the split stores say.
WHERE = {"llm_calls": "SELECT * EXCLUDE (source_line, source_line_path) FROM llm_calls"}


def lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return handle.readlines()


def content(runner, db: Path) -> dict[str, list[tuple]]:
    """Everything the store holds of its traces and what `analyze` makes of them, each trace named
    by its first call's id (a provider's response id in these logs)."""
    run(runner, "deps", "--db", str(db))
    con = store.connect(db, read_only=True)
    try:
        names = dict(con.execute("SELECT trace_id, call_id FROM llm_calls WHERE seq = 0").fetchall())
        tables = {}
        for table, sql in {**CONTENT, **WHERE}.items():
            sql = sql.replace(SOURCE_PATHS_OUT, SOURCE_PATHS_OUT + ', "branched_from_line": null')
            tables[table] = sorted((_renamed(row, names) for row in con.execute(sql).fetchall()), key=repr)
        return tables
    finally:
        con.close()


def _renamed(row: tuple, names: dict[str, str]) -> tuple:
    def rename(value):
        if not isinstance(value, str):
            return value
        for trace_id, name in names.items():
            value = value.replace(trace_id, f"<{name}>")
        return value

    return tuple(rename(value) for value in row)


def whole(runner, folder: Path, rows: list[str]) -> dict[str, list[tuple]]:
    db = folder / "whole.duckdb"
    ingest(runner, db, write(folder / "whole" / "gateway.jsonl", "".join(rows)))
    return content(runner, db)


def report_of(runner, db: Path, folder: Path) -> dict:
    """`analyze` of files already ingested: what it reports of the store."""
    out = Path(str(db) + ".out")
    result = runner.invoke(cli, ["analyze", str(folder), "--db", str(db), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def comparable(report: dict) -> dict:
    """The analysis's figures, floats to 12 significant digits (sums taken in another order),
    without trace ids (a trace whose first call is in a later file has an id from that file)."""

    def rounded(value):
        if isinstance(value, float):
            return float(f"{value:.12g}")
        if isinstance(value, dict):
            return {key: rounded(item) for key, item in value.items() if key != "trace_id"}
        if isinstance(value, list):
            return [rounded(item) for item in value]
        return value

    return rounded({key: report[key] for key in ("spend", "parallel", "inference", "by_workload_model")})


def check_accounting(db: Path) -> None:
    con = store.connect(db, read_only=True)
    try:
        assert_accounting(con)
        sql = "SELECT count(*) FROM llm_calls WHERE request_prefixes IS NOT NULL"
        (openers,) = con.execute(sql).fetchone()
        assert openers == 0  # every conversation found its beginning
    finally:
        con.close()


@pytest.mark.parametrize(
    ("sample", "cuts", "joined"),
    [
        (OPENAI, [20], 2),  # in a session's conversation and a chained one, interleaved
        (OPENAI, [45], 1),  # a session after its second call
        (OPENAI, [16, 22], 3),  # a session's conversation over three files
        (ANTHROPIC, [5], 1),  # a session's conversation
        (ANTHROPIC, [13], 1),  # a conversation chained by its prefixes only
        (RESPONSES, [2], 1),  # a Responses conversation chained by `previous_response_id`
        (RESPONSES, [1, 4], 1),  # ... over three files
        (RESPONSES, [7], 1),  # a stateless one (each request re-sends its input), logged without times
    ],
)
def test_a_log_rotated_mid_conversation_gives_the_whole_logs_traces(runner, tmp_path, sample, cuts, joined):
    rows = lines(sample)
    bounds = [0, *cuts, len(rows)]
    files = []
    for k in range(len(bounds) - 1):  # rotated files gzipped, as logrotate leaves them
        text = "".join(rows[bounds[k] : bounds[k + 1]])
        path = tmp_path / "logs" / (f"gateway.{k}.jsonl.gz" if k < len(cuts) else "gateway.jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
        files.append(str(path))
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, tmp_path / "logs")
    assert len(report["joined"]) == joined and report["left_apart"] == {}
    expected = whole(runner, tmp_path, rows)
    assert report["after_joins"]["tool_calls"] == len(expected["tool_calls"])
    assert content(runner, db) == expected
    con = store.connect(db, read_only=True)
    try:
        spread = con.execute(
            "SELECT trace_id, source_path, attributes->>'$.source_paths' FROM traces "
            "WHERE json_exists(attributes, '$.source_paths') ORDER BY 1"
        ).fetchall()
        # each call's file, in the order of the trace's calls
        call_files = dict(
            con.execute(
                "SELECT c.trace_id, list(coalesce(c.source_line_path, t.source_path) ORDER BY c.seq) "
                "FROM llm_calls c JOIN traces t USING (trace_id) GROUP BY 1"
            ).fetchall()
        )
    finally:
        con.close()
    assert sorted(row[0] for row in spread) == sorted(report["joined"])
    for trace_id, path, paths in spread:
        assert path == call_files[trace_id][0]
        assert json.loads(paths) == sorted(set(call_files[trace_id])) and len(json.loads(paths)) > 1
        # the calls lie in the files in the log's order: each file's calls after the earlier file's
        assert call_files[trace_id] == sorted(call_files[trace_id], key=files.index)
    check_accounting(db)
    split = report_of(runner, db, tmp_path / "logs")
    assert comparable(split) == comparable(report_of(runner, tmp_path / "whole.duckdb", tmp_path / "whole"))


def test_the_logs_of_a_load_balanced_gateway_give_the_whole_logs_traces(runner, tmp_path):
    """Two instances, each taking every other call: every conversation alternates between files,
    so each file's calls chain only with the other's."""
    rows = lines(OPENAI)
    write(tmp_path / "logs" / "instance-a.jsonl", "".join(rows[0::2]))
    write(tmp_path / "logs" / "instance-b.jsonl", "".join(rows[1::2]))
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, tmp_path / "logs")
    assert len(report["joined"]) == 8 and report["left_apart"] == {}
    assert content(runner, db) == whole(runner, tmp_path, rows)
    check_accounting(db)
    said = run(runner, "ingest", str(tmp_path / "logs"), "--db", str(tmp_path / "terminal.duckdb"))
    assert "Joined 8 traces whose parts lay in several files" in said
    assert "the store now holds 8 traces, 56 LLM calls, 47 tool calls of these files." in said


def test_parts_ingested_in_either_order_or_growing_are_joined(runner, tmp_path):
    rows = lines(OPENAI)
    expected = whole(runner, tmp_path, rows)
    early = write(tmp_path / "a" / "gateway.1.jsonl", "".join(rows[:20]))
    late = write(tmp_path / "b" / "gateway.2.jsonl", "".join(rows[20:]))
    for name, order in (("forward", (early, late)), ("backward", (late, early))):
        db = tmp_path / f"{name}.duckdb"
        assert ingest(runner, db, order[0])["joined"] == []
        assert len(ingest(runner, db, order[1])["joined"]) == 2, name
        assert content(runner, db) == expected, name
        check_accounting(db)
        assert ingest(runner, db, early, late)["totals"]["files_unchanged"] == 2
        assert content(runner, db) == expected, name

    # the active log grows after the first ingest; then the rotated one had lost its last lines
    for name, first, grown in (
        ("later file grows", (rows[:20], rows[20:40]), (rows[:20], rows[20:])),
        ("earlier file grows", (rows[:15], rows[20:]), (rows[:20], rows[20:])),
    ):
        db = tmp_path / f"{name}.duckdb"
        one = write(tmp_path / name / "gateway.1.jsonl", "".join(first[0]))
        two = write(tmp_path / name / "gateway.2.jsonl", "".join(first[1]))
        ingest(runner, db, one, two)
        write(one, "".join(grown[0]))
        write(two, "".join(grown[1]))
        report = ingest(runner, db, one, two)
        assert report["totals"]["files_changed"] == 1, name
        assert content(runner, db) == expected, name
        check_accounting(db)


def test_a_part_whose_file_is_gone_is_kept_apart_until_the_file_is_back(runner, tmp_path):
    rows = lines(OPENAI)
    early = write(tmp_path / "logs" / "gateway.1.jsonl", "".join(rows[:20]))
    late = write(tmp_path / "logs" / "gateway.2.jsonl", "".join(rows[20:]))
    db = tmp_path / "store.duckdb"
    ingest(runner, db, early)
    shutil.move(early, tmp_path / "gateway.1.jsonl")
    report = ingest(runner, db, late)
    assert report["joined"] == [] and len(report["left_apart"]) == 2
    assert all(f"{early} cannot be read again" in reason for reason in report["left_apart"].values())
    check = run(runner, "ingest", str(late), "--db", str(db))
    assert "kept in parts" not in check  # reported once, not at every ingest
    shutil.move(tmp_path / "gateway.1.jsonl", early)
    report = ingest(runner, db, late)
    assert len(report["joined"]) == 2 and report["left_apart"] == {}
    assert content(runner, db) == whole(runner, tmp_path, rows)
    check_accounting(db)


def test_a_joined_conversation_whose_session_id_is_taken_keeps_its_first_parts_id(runner, tmp_path):
    """Another conversation logged under the same session id, ingested first, holds the id: the
    joined trace keeps the id its first part was given, and the other trace is left alone."""
    rows = lines(ANTHROPIC)
    session = json.loads(rows[0])["metadata"]["session_id"]
    other = json.loads(rows[9])  # a conversation of its own, logged without a session id
    other["metadata"]["session_id"] = session
    db = tmp_path / "store.duckdb"
    ingest(runner, db, write(tmp_path / "other.jsonl", json.dumps(other) + "\n"))
    early = write(tmp_path / "logs" / "gateway.1.jsonl", "".join(rows[:5]))
    assert ingest(runner, db, early)["joined"] == []
    [(first_part,)] = query(db, "SELECT trace_id FROM traces WHERE source_path = ?", [str(early)])
    assert first_part.startswith(f"{session}@")
    report = ingest(runner, db, write(tmp_path / "logs" / "gateway.2.jsonl", "".join(rows[5:9])))
    assert report["joined"] == [first_part]
    traces = query(db, "SELECT trace_id, count(*) FROM llm_calls GROUP BY trace_id ORDER BY trace_id")
    assert traces == [(session, 1), (first_part, 9)]
    check_accounting(db)


def test_a_big_log_is_read_again_for_its_parts_lines_only(runner, tmp_path, monkeypatch):
    """Files are streamed in chunks here (as logs over 8 MB are): reading the earlier file again,
    the join parses the lines of the conversations it joins, not the whole file."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 32768)  # a few of the sample's lines (up to 10 KB)
    rows = lines(OPENAI)
    early = write(tmp_path / "logs" / "gateway.1.jsonl", "".join(rows[:20]))
    late = write(tmp_path / "logs" / "gateway.2.jsonl", "".join(rows[20:]))
    db = tmp_path / "store.duckdb"
    ingest(runner, db, early)
    parsed, parse_json = [], sources.parse_json

    def counted(text: str, *args, **kwargs):
        parsed.append(text)
        return parse_json(text, *args, **kwargs)

    monkeypatch.setattr(sources, "parse_json", counted)
    assert len(ingest(runner, db, late)["joined"]) == 2
    earlier = {row.strip() for row in rows[:20]}
    assert 0 < sum(text.strip() in earlier for text in parsed) < 20
    assert content(runner, db) == whole(runner, tmp_path, rows)
    check_accounting(db)


def test_a_generated_corpus_cut_mid_conversation_gives_what_the_uncut_logs_give(
    runner, tmp_path, monkeypatch
):
    """The benchmark's gateway logs (many interleaved conversations, with and without session ids,
    both providers) cut by `benchmarks/recut_logs.py` at line counts, not at conversations."""
    bench_corpus.generate(tmp_path / "corpus", tool_calls=600, file_mb=0.5)
    uncut = tmp_path / "uncut"
    uncut.mkdir()
    for path in (tmp_path / "corpus").glob("*-log-*.jsonl"):
        shutil.copy(path, uncut / path.name)
    cut = recut_logs.recut(tmp_path / "corpus", tmp_path / "cut", files_per_format=4)
    assert len(cut) == 8
    report = ingest(runner, tmp_path / "cut.duckdb", tmp_path / "cut")
    assert report["joined"] and report["left_apart"] == {}
    ingest(runner, tmp_path / "uncut.duckdb", uncut)
    expected = content(runner, tmp_path / "uncut.duckdb")
    assert content(runner, tmp_path / "cut.duckdb") == expected
    check_accounting(tmp_path / "cut.duckdb")

    # Parsed by worker processes: the parts take ids the earlier files do not hold, so no file is
    # parsed again in this process to be given other ids, and the store is the same.
    parsed_here = []
    monkeypatch.setattr(traceforge.ingest, "_parse_file", lambda *args: parsed_here.append(args))
    con = store.connect(tmp_path / "parallel.duckdb")
    try:
        report = traceforge.ingest.ingest_paths(con, [str(tmp_path / "cut")], workers=2)
    finally:
        con.close()
    assert parsed_here == [] and report.joined
    assert content(runner, tmp_path / "parallel.duckdb") == expected


def test_a_re_sampled_call_logged_in_another_file_is_a_branch_of_its_conversation(runner, tmp_path):
    """A client re-samples its third call after the log rotated: the retry continues the same
    second call as the conversation does, so it branches off it, as it would in one log."""
    rows = lines(OPENAI)
    session = json.loads(rows[0])["metadata"]["session_id"]
    calls = [row for row in rows if json.loads(row).get("metadata", {}).get("session_id") == session]
    retry = json.loads(calls[2])
    retry["response"]["id"] += "-retry"
    retry["response"]["choices"][0]["message"] = {"role": "assistant", "content": "Let me look again."}
    retry["response"]["choices"][0]["finish_reason"] = "stop"
    retry["start_time"] = retry["end_time"] = "2026-03-10T15:30:00.000Z"
    retry_line = json.dumps(retry) + "\n"
    write(tmp_path / "logs" / "gateway.1.jsonl", "".join(rows))
    write(tmp_path / "logs" / "gateway.2.jsonl", retry_line)
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, tmp_path / "logs")
    assert report["left_apart"] == {}
    expected = whole(runner, tmp_path, [*rows, retry_line])
    assert content(runner, db) == expected
    branch = query(
        db,
        "SELECT t.parent_trace_id, t.source_path, attributes->>'$.source_paths' FROM traces t "
        "JOIN llm_calls c USING (trace_id) WHERE c.call_id = ?",
        [retry["response"]["id"]],
    )
    assert branch == [(session, str(tmp_path / "logs" / "gateway.2.jsonl"), None)]
    check_accounting(db)


def test_a_part_whose_beginning_is_not_ingested_is_named_as_a_part(runner, tmp_path):
    """The later file alone: its parts take the file's hash, and the tool calls they re-send from
    earlier turns the part's id, leaving the plain ids to the beginning (docs/schema.md)."""
    rows = lines(OPENAI)
    late = write(tmp_path / "gateway.2.jsonl", "".join(rows[20:]))
    db = tmp_path / "store.duckdb"
    ingest(runner, db, late)
    [(sha,)] = query(db, "SELECT sha256 FROM sources")
    parts = query(
        db,
        "SELECT t.trace_id, list(tc.tool_call_id ORDER BY tc.seq) FILTER (WHERE tc.call_id IS NULL), "
        "list(tc.tool_call_id ORDER BY tc.seq) FILTER (WHERE tc.call_id IS NOT NULL) "
        "FROM traces t JOIN tool_calls tc USING (trace_id) WHERE t.trace_id IN "
        "(SELECT trace_id FROM llm_calls WHERE seq = 0 AND request_prefixes IS NOT NULL) GROUP BY 1",
    )
    assert len(parts) == 2
    for trace_id, re_sent, own in parts:
        assert trace_id.endswith(f"@{sha[:8]}")
        assert re_sent and all(tool_id.startswith(f"{trace_id}/call_") for tool_id in re_sent)
        assert own and not any(tool_id.startswith(trace_id) for tool_id in own)


@pytest.mark.parametrize("sample", [OPENAI, RESPONSES])
def test_a_record_delivered_twice_counts_once_in_one_file_or_in_overlapping_files(runner, tmp_path, sample):
    """Log shippers deliver at least once: a record can reach the log again, in the same file or
    in the next one. The same response after the same request is one call."""
    rows = lines(sample)
    expected = whole(runner, tmp_path, rows)
    db = tmp_path / "again.duckdb"
    again = write(tmp_path / "again" / "gateway.jsonl", "".join([*rows, rows[3], rows[1]]))
    report = ingest(runner, db, again)
    assert report["files"][0]["skipped"] == {"duplicate record": 2}
    assert content(runner, db) == expected
    check_accounting(db)
    db = tmp_path / "overlap.duckdb"
    write(tmp_path / "overlap" / "gateway.1.jsonl", "".join(rows[:5]))
    later = write(tmp_path / "overlap" / "gateway.2.jsonl", "".join(rows[2:]))  # lines 3-5 again
    ingest(runner, db, tmp_path / "overlap")
    assert content(runner, db) == expected
    check_accounting(db)
    [(skipped,)] = query(db, "SELECT skipped_by_kind FROM sources WHERE path = ?", [str(later)])
    assert json.loads(skipped) == {"record logged again in another file": 3}  # counted in the first
