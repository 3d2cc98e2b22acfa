"""A file a parsing worker named without the store, whose ids the store turns out to hold (a rotated
export's later file, a conversation logged again elsewhere): the main process renames the worker's
rows (`writer.renamed`) instead of parsing the file again. The renamed rows must be exactly the rows
a parse in the main process gives, for every format and every kind of id: traces and their parents,
LLM calls, tool calls, the ids messages answer and the tool calls they list."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal
from split_traces import content, ingest

import traceforge.ingest
from traceforge import store
from traceforge.ingest import _parse_file, ingest_paths, writer
from traceforge.ingest.parallel import prepare_files
from traceforge.ingest.sources import sha256_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import corpus as bench_corpus
import recut_logs

ROOT = Path(__file__).parent.parent
FILES = [
    ROOT / "sample_traces" / "openai_chat_gateway.jsonl",
    ROOT / "sample_traces" / "openai_chat_legacy_functions.jsonl",
    ROOT / "sample_traces" / "openai_chat_transcripts.json",
    ROOT / "sample_traces" / "anthropic_messages_transcripts.jsonl",
    *sorted((ROOT / "tests" / "fixtures" / "otlp").iterdir()),
    ROOT / "tests" / "fixtures" / "langfuse" / "observations.json",
    ROOT / "tests" / "fixtures" / "langsmith" / "runs.jsonl",
    ROOT / "tests" / "fixtures" / "claude_code" / "branched_session.jsonl",
    ROOT / "tests" / "fixtures" / "openai_responses" / "gateway.jsonl",
    ROOT / "tests" / "fixtures" / "openhands" / "eval_output.jsonl",
    ROOT / "tests" / "fixtures" / "tau2" / "telecom_results.json",
]
WHEN_WRITTEN = {"rejects": "rejected_at", "sources": "ingested_at"}


def again(path: Path, folder: Path) -> Path:
    """The same records in a file of other content (a trailing newline): not a duplicate by hash."""
    copy = folder / f"again-{path.name}"
    shutil.copy(path, copy)
    with copy.open("a") as out:
        out.write("\n")
    return copy


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_a_worker_s_rows_renamed_against_the_store_are_the_rows_a_parse_here_gives(tmp_path, path):
    check_renamed(tmp_path, path)


def test_a_result_answering_another_conversation_s_call_keeps_its_id(tmp_path):
    """A tool result whose call is not in its conversation keeps the id it names, as the source
    wrote it; another conversation's tool call of that id is renamed, the result is not."""
    rows = [json.loads(line) for line in FILES[0].read_text().splitlines()]
    named = "call_IeKGuPG9k5K04reNmp8Xu0fu"  # a call of the first conversation (session sess_yHaE...)
    assert named in json.dumps(rows[1]) and named not in json.dumps(rows[55])
    rows[55]["request"]["messages"].append({"role": "tool", "tool_call_id": named, "content": "late"})
    path = tmp_path / "logs" / "gateway.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    renamed = check_renamed(tmp_path, path)
    answers = renamed["messages"].filter(renamed["messages"]["role"] == "tool")["tool_call_id"].to_list()
    assert named in answers and any(answer.endswith(f"/{named}") for answer in answers)


def check_renamed(tmp_path: Path, path: Path) -> dict:
    """`path`'s rows, parsed by a worker without the store (in a task with another file) and renamed
    against a store holding its ids, compared to the rows a parse in the main process gives; the
    renamed rows."""
    con = store.connect(tmp_path / "store.duckdb")
    try:
        ingest_paths(con, [path], workers=1)  # the store now holds every id of the file
        other = FILES[0] if path != FILES[0] else FILES[1]
        copies = [again(other, tmp_path), again(path, tmp_path)]
        parsed = [_parse_file(copy, sha256_file(copy), None) for copy in copies]
        ids = writer._assign_ids(con, [writer.names_of(p) for p in parsed])  # as a batch: file 1 second
        expected = writer.rows_of(parsed[1], ids, file_no=1)
        # parsed in one worker task after another file: its rows are a slice of the task's
        _, outcome = prepare_files([str(copy) for copy in copies], "auto", {}, set())
        prepared = outcome.prepared
        assert prepared is not None and prepared.spans["traces"][0] > 0
        prepared.load()
        renamed = writer.renamed(prepared.frames, prepared.names, ids, file_no=1)
    finally:
        con.close()

    assert renamed.keys() == expected.keys()
    for table, frame in expected.items():
        when = WHEN_WRITTEN.get(table)
        got = renamed[table].drop(when) if when else renamed[table]
        assert_frame_equal(got, frame.drop(when) if when else frame, check_exact=True)
    # the worker's ids were taken: the test compares renamed rows, not the worker's own
    worker_ids = set(prepared.frames["traces"]["trace_id"])
    assert worker_ids and worker_ids.isdisjoint(renamed["traces"]["trace_id"])
    if "tool_calls" in renamed:
        worker_tool_ids = set(prepared.frames["tool_calls"]["tool_call_id"].drop_nulls())
        assert worker_tool_ids.isdisjoint(renamed["tool_calls"]["tool_call_id"].drop_nulls())
    return renamed


def test_no_file_of_a_rotated_export_is_parsed_again_in_the_main_process(runner, tmp_path, monkeypatch):
    """The benchmark corpus's OTel exports, each trace's spans in two batches, cut into files as a
    rotating exporter cuts them (`benchmarks/recut_logs.py --otlp`): every later file's part of a
    trace holds the id the earlier file holds. Parsed by workers, those files are renamed, not
    parsed again; the parts are joined, and the store is the serial ingest's and the uncut one's."""
    bench_corpus.generate(tmp_path / "corpus", tool_calls=600, file_mb=0.5)
    cut = recut_logs.recut_otlp(tmp_path / "corpus", tmp_path / "cut", files=4)
    assert len(cut) == 4
    uncut = tmp_path / "uncut"
    uncut.mkdir()
    for path in (tmp_path / "corpus").glob("otlp-*.jsonl"):
        shutil.copy(path, uncut / path.name)

    serial = store.connect(tmp_path / "serial.duckdb")
    try:
        assert ingest_paths(serial, [tmp_path / "cut"], workers=1).joined
    finally:
        serial.close()
    parsed_here = []
    monkeypatch.setattr(traceforge.ingest, "_parse_file", lambda *args: parsed_here.append(args))
    con = store.connect(tmp_path / "parallel.duckdb")
    try:
        assert ingest_paths(con, [tmp_path / "cut"], workers=2).joined
    finally:
        con.close()
    assert parsed_here == []
    monkeypatch.undo()
    expected = content(runner, tmp_path / "serial.duckdb")
    assert content(runner, tmp_path / "parallel.duckdb") == expected
    ingest(runner, tmp_path / "uncut.duckdb", uncut)
    assert content(runner, tmp_path / "uncut.duckdb") == expected
