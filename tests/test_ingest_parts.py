"""Big files are written in parts: the store they give is the store whole files give, a run that
stops in one leaves it marked and the next run finishes it, and transcripts are handed out as their
records are read, so such a file is never held whole."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import traceforge.ingest as ingest_module
from traceforge import store
from traceforge.cli import cli
from traceforge.ingest import (
    api_log,
    ingest_paths,
    langfuse,
    langsmith,
    openai_chat,
    openai_responses,
    openhands,
    otlp,
    parts,
    sources,
    stream,
    writer,
)
from traceforge.ingest.sources import Record, SourceError
from traceforge.model import ParseResult
from traceforge.report.terminal import display_path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import corpus as bench_corpus  # noqa: E402
import recut_logs  # noqa: E402
from builders import WEATHER_TOOL, OpenAILoop, openai_tool_call, write_jsonl  # noqa: E402
from stopped_runs import stop_at_part  # noqa: E402
from store_snapshot import ingest, snapshot  # noqa: E402


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """Every generated format (gateway logs whose conversations cross files, transcripts, OTel
    spans, a Responses API log), the sample traces (gzip, a JSON document), and the recorded
    fixtures of every adapter (Claude Code sessions with sub-agents, Langfuse and LangSmith exports,
    bad lines)."""
    folder = tmp_path_factory.mktemp("parts") / "logs"
    bench_corpus.generate(folder / "corpus", tool_calls=800, file_mb=0.25)
    bench_corpus.generate(folder / "responses", tool_calls=300, file_mb=0.25, only="openai-responses")
    shutil.copytree(REPO / "sample_traces", folder / "samples")
    shutil.copytree(REPO / "tests" / "fixtures", folder / "fixtures")
    return folder


def in_parts(monkeypatch, min_bytes: int = 1, rows: int = 60) -> None:
    monkeypatch.setattr(parts, "PARTS_MIN_BYTES", min_bytes)
    monkeypatch.setattr(parts, "PART_ROWS", rows)


@pytest.mark.parametrize("workers", [1, 2])
def test_files_written_in_parts_give_the_store_whole_files_give(logs, tmp_path, monkeypatch, workers):
    whole = ingest(tmp_path / "whole.duckdb", [logs])
    sizes = sorted(path.stat().st_size for path in logs.rglob("*") if path.is_file())
    in_parts(monkeypatch, min_bytes=sizes[len(sizes) // 2], rows=20)  # half the files, the others whole
    written = []
    real_part_rows = writer.part_rows
    monkeypatch.setattr(
        writer, "part_rows", lambda con, path, *rest: written.append(path) or real_part_rows(con, path, *rest)
    )
    split = ingest(tmp_path / "parts.duckdb", [logs], workers=workers)
    assert len(written) > 3 * len(set(written)) > 30  # files in several parts each
    assert [(f.path, f.status) for f in split.files] == [(f.path, f.status) for f in whole.files]
    assert split.totals() == whole.totals()
    assert split.joined == whole.joined
    assert snapshot(tmp_path / "parts.duckdb") == snapshot(tmp_path / "whole.duckdb")


def json_arrays(logs: Path, folder: Path) -> Path:
    """The corpus's gateway logs, transcripts and OTel export, the Responses API log, and the
    recorded Langfuse and LangSmith exports, each as one JSON array, as platforms export them: an
    element a line, all on one line, or gzip-compressed, in turn."""
    sources = [
        *sorted((logs / "corpus").glob("*.jsonl")),
        *sorted((logs / "responses").glob("*.jsonl")),
        logs / "fixtures" / "langfuse" / "traces.jsonl",
        logs / "fixtures" / "langsmith" / "runs.jsonl",
    ]
    folder.mkdir()
    shutil.copy(logs / "fixtures" / "langfuse" / "observations.json", folder)  # exported as an array
    for n, source in enumerate(sources):
        elements = [line for line in source.read_text().splitlines() if line.strip()]
        text = "[" + ",".join(elements) + "]" if n % 3 == 1 else "[\n" + ",\n".join(elements) + "\n]\n"
        target = folder / f"{source.parent.parent.name}-{source.stem}.json"
        if n % 3 == 2:
            target.with_suffix(".json.gz").write_bytes(gzip.compress(text.encode()))
        else:
            target.write_text(text)
    return folder


def test_json_arrays_read_in_chunks_give_the_store_whole_reads_give(logs, tmp_path, monkeypatch):
    """Every format exported as one JSON array, read element by element (`stream._ArrayReader`),
    half the files written in parts (the logs and exports read twice), gives the store the same
    arrays read whole give."""
    folder = json_arrays(logs, tmp_path / "arrays")
    whole = ingest(tmp_path / "whole.duckdb", [folder])  # every array fits in a chunk: read whole
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    sizes = sorted(sources.content_size(path)[0] for path in folder.iterdir())
    in_parts(monkeypatch, min_bytes=sizes[len(sizes) // 2], rows=20)
    read = []
    real_records = stream._ArrayReader.records
    monkeypatch.setattr(
        stream._ArrayReader, "records", lambda self, rejects: read.append(self) or real_records(self, rejects)
    )
    streamed = ingest(tmp_path / "streamed.duckdb", [folder])
    files = sorted(path.name for path in folder.iterdir())
    assert len(files) >= 10 and len(read) > len(files)  # each array streamed; those read twice, twice
    assert [(f.path, f.status) for f in streamed.files] == [(f.path, f.status) for f in whole.files]
    assert streamed.totals() == whole.totals() and whole.totals()["traces"] > 40
    assert streamed.joined == whole.joined
    assert snapshot(tmp_path / "streamed.duckdb") == snapshot(tmp_path / "whole.duckdb")


def test_a_langfuse_csv_export_read_row_by_row_and_in_parts_gives_the_store_a_whole_read_gives(
    tmp_path, monkeypatch
):
    """Langfuse's CSV export of observations (JSON in quoted cells), beside its trace records: read
    a row at a time, twice (a trace's observations can come anywhere), and written in parts."""
    folder = tmp_path / "export"
    folder.mkdir()
    for name in ("observations.csv", "traces.jsonl"):
        shutil.copy(REPO / "tests" / "fixtures" / "langfuse" / name, folder)
    whole = ingest(tmp_path / "whole.duckdb", [folder])
    monkeypatch.setattr(stream, "CHUNK_BYTES", 2048)
    in_parts(monkeypatch, rows=5)
    read = []
    real_stream_csv = stream._stream_csv
    monkeypatch.setattr(stream, "_stream_csv", lambda *args: read.append(args[0]) or real_stream_csv(*args))
    streamed = ingest(tmp_path / "streamed.duckdb", [folder])
    assert len(read) >= 2  # both passes
    assert [(f.path, f.status, f.format) for f in streamed.files] == [
        (f.path, f.status, f.format) for f in whole.files
    ]
    assert streamed.totals() == whole.totals() and whole.totals()["tool_calls"] > 0
    assert snapshot(tmp_path / "streamed.duckdb") == snapshot(tmp_path / "whole.duckdb")


def test_a_json_array_that_breaks_off_in_a_file_written_in_parts_fails_it_whole(tmp_path, monkeypatch):
    """Its parts written so far are removed, and the file is rejected with where it breaks off."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    in_parts(monkeypatch, rows=100)
    conversations = [
        json.dumps(
            {
                "id": f"c{n}",
                "messages": [{"role": "user", "content": "q" * 50}, {"role": "assistant", "content": "a"}],
            }
        )
        for n in range(1000)
    ]
    text = "[\n" + ",\n".join(conversations) + "\n]\n"
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    parts_written = []
    real_part_rows = writer.part_rows
    monkeypatch.setattr(
        writer, "part_rows", lambda con, *rest: parts_written.append(1) or real_part_rows(con, *rest)
    )
    report = ingest(tmp_path / "s.duckdb", [path])
    assert len(parts_written) > 10  # the conversations before the break were written, then removed
    assert [(f.status, f.traces) for f in report.files] == [("failed", 0)]
    line = text[: len(text) // 2].count("\n") + 1  # where the cut is: the last line
    assert re.fullmatch(
        rf"not JSON or JSON Lines \(.+ at line {line} column \d+\); if it is a truncated JSON "
        "document, the writer may have crashed: restore or re-export it",
        report.files[0].message,
    )
    con = store.connect(tmp_path / "s.duckdb", read_only=True)
    assert con.execute("SELECT count(*) FROM traces").fetchone() == (0,)
    assert con.execute("SELECT error LIKE 'not JSON%', records, ingested FROM sources").fetchall() == [
        (True, 1, 0)
    ]
    con.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_gzip_file_holding_more_than_its_trailer_says_is_written_in_parts(
    logs, tmp_path, monkeypatch, workers
):
    """A gzip trailer records only its last member's size (and modulo 4 GiB): a log appended to as
    several members looks small. Parsed whole, it is found out once its content passes the size
    written in parts, and written in parts instead; the store is the one the file gives whole."""
    content = b"".join(path.read_bytes() for path in sorted((logs / "corpus").glob("openai-log-*.jsonl")))
    lines = content.splitlines(keepends=True)
    folder = tmp_path / "logs"
    folder.mkdir()
    appended = folder / "gateway.jsonl.gz"
    appended.write_bytes(gzip.compress(b"".join(lines[:-1])) + gzip.compress(lines[-1]))  # two members
    shutil.copy(next((logs / "corpus").glob("transcripts-*.jsonl")), folder)  # two files: the pool is used
    size, compressed = sources.content_size(appended)
    assert compressed and size < len(content) // 4  # what the trailer says
    whole = ingest(tmp_path / "whole.duckdb", [folder], workers=workers)
    in_parts(monkeypatch, min_bytes=len(content) // 2, rows=60)
    written = []
    real_part_rows = writer.part_rows
    monkeypatch.setattr(
        writer, "part_rows", lambda con, path, *rest: written.append(path) or real_part_rows(con, path, *rest)
    )
    split = ingest(tmp_path / "parts.duckdb", [folder], workers=workers)
    assert len(written) > 3 and set(written) == {str(appended)}
    assert split.totals() == whole.totals() and split.totals()["traces"] > 10
    assert snapshot(tmp_path / "parts.duckdb") == snapshot(tmp_path / "whole.duckdb")


@pytest.mark.parametrize("layout", ["JSON array", "CSV table"])
def test_a_gzip_array_or_table_holding_more_than_its_trailer_says_is_written_in_parts(
    logs, tmp_path, monkeypatch, layout
):
    """As for JSON Lines (above): a JSON array read element by element, or a CSV table a row at a
    time, counts the content it has read, so a gzip file whose trailer understates it is found out
    while it is parsed whole, and written in parts instead."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)  # read in chunks
    if layout == "JSON array":
        lines = b"".join(path.read_bytes() for path in sorted((logs / "corpus").glob("openai-log-*.jsonl")))
        content = b"[\n" + b",\n".join(lines.splitlines()) + b"\n]\n"
        name = "gateway.json.gz"
    else:
        header, body = (
            (REPO / "tests" / "fixtures" / "langfuse" / "observations.csv").read_bytes().split(b"\n", 1)
        )
        copies = [
            body.replace(b"e5e5e5e5a1a1", b"%012x" % k).replace(b"f5f5f5f5a1a1", b"%012x" % k)
            for k in range(60)
        ]
        content = header + b"\n" + b"".join(copies)
        name = "observations.csv.gz"
    folder = tmp_path / "logs"
    folder.mkdir()
    appended = folder / name
    appended.write_bytes(gzip.compress(content[:-300]) + gzip.compress(content[-300:]))  # two members
    assert sources.content_size(appended)[0] < len(content) // 4  # what the trailer says
    whole = ingest(tmp_path / "whole.duckdb", [folder])
    in_parts(monkeypatch, min_bytes=len(content) // 2, rows=60)
    written = []
    real_part_rows = writer.part_rows
    monkeypatch.setattr(
        writer, "part_rows", lambda con, path, *rest: written.append(path) or real_part_rows(con, path, *rest)
    )
    split = ingest(tmp_path / "parts.duckdb", [folder])
    assert len(written) > 3 and set(written) == {str(appended)}
    assert split.totals() == whole.totals() and split.totals()["traces"] >= 10
    assert snapshot(tmp_path / "parts.duckdb") == snapshot(tmp_path / "whole.duckdb")


def test_renamed_parents_and_rejected_lines_come_out_as_from_a_whole_file(tmp_path, monkeypatch):
    """A part names its traces against the store: a session ingested again from a copy takes the
    fallback ids, and its branch, in a later part, points at the copy's renamed session; lines that
    are not JSON, and records that are not transcripts, count as the whole file counts them."""
    logs = tmp_path / "logs"
    logs.mkdir()
    session = REPO / "tests" / "fixtures" / "claude_code" / "branched_session.jsonl"
    shutil.copy(session, logs / "a.jsonl")
    (logs / "b.jsonl").write_bytes(session.read_bytes() + b"\n")  # the same session, other bytes
    lines = (REPO / "sample_traces" / "anthropic_messages_transcripts.jsonl").read_text().splitlines()
    broken = [lines[0], lines[1][:300], '{"not": "a transcript"}', "not json", lines[1]]
    (logs / "c.jsonl").write_text("\n".join(broken) + "\n")
    whole = ingest(tmp_path / "whole.duckdb", [logs])
    in_parts(monkeypatch, rows=1)
    split = ingest(tmp_path / "parts.duckdb", [logs])
    assert split.totals() == whole.totals()
    expected = snapshot(tmp_path / "whole.duckdb")
    renamed = [row for row in expected["traces"] if "@" in row[0]]
    assert len(renamed) == 2 and any(row[9] and "@" in row[9] for row in renamed)  # a renamed parent
    assert [row[4:7] for row in expected["sources"]][-1] == (5, 2, 3)  # records, ingested, rejected
    assert snapshot(tmp_path / "parts.duckdb") == expected


def test_a_changed_file_written_in_parts_replaces_what_it_gave(logs, tmp_path, monkeypatch):
    work = tmp_path / "logs"
    shutil.copytree(logs / "corpus", work)
    gateway = sorted(work.glob("openai-log-*.jsonl"))[0]
    for name in ("whole", "parts"):
        ingest(tmp_path / f"{name}.duckdb", [work])
    gateway.write_text("\n".join(gateway.read_text().splitlines()[:-3]) + "\n")
    ingest(tmp_path / "whole.duckdb", [work])
    in_parts(monkeypatch)
    report = ingest(tmp_path / "parts.duckdb", [work])
    assert {Path(f.path).name: f.status for f in report.files if f.status != "unchanged"} == {
        gateway.name: "changed"
    }
    assert snapshot(tmp_path / "parts.duckdb") == snapshot(tmp_path / "whole.duckdb")


@pytest.mark.parametrize("before", ["nothing", "another version"])
def test_a_run_stopped_in_a_file_leaves_it_marked_and_the_next_run_finishes_it(
    logs, tmp_path, monkeypatch, runner, before
):
    work = tmp_path / "logs"
    shutil.copytree(logs / "corpus", work)
    transcripts = max(work.glob("transcripts-*.jsonl"), key=lambda path: path.stat().st_size)
    db = tmp_path / "parts.duckdb"
    if before == "another version":
        original = transcripts.read_text()
        transcripts.write_text("\n".join(original.splitlines()[:2]) + "\n")
        ingest(db, [work])
        transcripts.write_text(original)
    ingest(tmp_path / "whole.duckdb", [work])
    in_parts(monkeypatch, rows=40)
    resume = stop_at_part(monkeypatch, transcripts, 3)
    result = runner.invoke(cli, ["ingest", str(work), "--db", str(db)])
    assert result.exit_code == 130 and "Interrupted. What finished before it is kept" in result.stderr
    con = store.connect(db, read_only=True)
    marked = con.execute("SELECT path, error, traces FROM sources WHERE error IS NOT NULL").fetchall()
    held = con.execute("SELECT count(*) FROM traces WHERE source_path = ?", [str(transcripts)]).fetchone()[0]
    con.close()
    assert marked == [(str(transcripts), parts.INTERRUPTED, 0)]
    assert 0 < held < len(transcripts.read_text().splitlines())  # two parts of it were written

    resume()
    other = sorted(work.glob("openai-log-*.jsonl"))[0]  # ingested before the stop: unchanged
    result = runner.invoke(cli, ["ingest", str(other), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["unfinished"] == [str(transcripts)]
    for command in (
        ["ingest", str(other)],
        ["export", "sft", "--out", str(tmp_path / "sft")],
        ["profile", "--out", str(tmp_path / "profile")],
    ):
        result = runner.invoke(cli, [*command, "--db", str(db)])
        warning = f"warning: {display_path(str(transcripts))}: an earlier run stopped while writing this file"
        assert warning in result.stderr, (command, result.output)
    result = runner.invoke(cli, ["ingest", str(work), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"new {display_path(str(transcripts))}" in result.stderr
    assert snapshot(db) == snapshot(tmp_path / "whole.duckdb")


def test_a_part_is_committed_on_a_thread_of_its_own_while_the_next_is_read(logs, tmp_path, monkeypatch):
    """Inserting and committing a part (DuckDB, which lets go of Python's lock) overlaps reading
    and parsing the next: a big file keeps two cores busy. The last part (if the file has traces
    left for it), which joins and marks copies too, is written on the main thread."""
    transcripts = max((logs / "corpus").glob("transcripts-*.jsonl"), key=lambda path: path.stat().st_size)
    in_parts(monkeypatch, rows=40)
    read_more = threading.Event()
    real_stream, real_insert = openai_chat.stream, store.insert_frame

    def stream(*args, **kwargs):
        for trace in real_stream(*args, **kwargs):
            read_more.set()
            yield trace
        read_more.set()

    inserts = []  # (thread, whether a trace was read while the part was inserted)

    def insert_frame(con, table, frame):
        if table == "traces" and threading.current_thread() is not threading.main_thread():
            read_more.clear()
            inserts.append((threading.current_thread().name, read_more.wait(timeout=10)))
        elif table == "traces":
            inserts.append(("main", None))
        real_insert(con, table, frame)

    monkeypatch.setattr(openai_chat, "stream", stream)
    monkeypatch.setattr(store, "insert_frame", insert_frame)
    switch_interval = sys.getswitchinterval()
    ingest(tmp_path / "parts.duckdb", [transcripts])
    monkeypatch.undo()
    assert sys.getswitchinterval() == switch_interval  # Python's as it was (see COMMITTER_SWITCH_INTERVAL)
    on_thread = [read for thread, read in inserts if thread == "traceforge-part"]
    assert len(on_thread) >= 2 and all(on_thread), inserts
    assert inserts[len(on_thread) :] in ([], [("main", None)]), inserts  # the last part, if any
    ingest(tmp_path / "whole.duckdb", [transcripts])
    assert snapshot(tmp_path / "parts.duckdb") == snapshot(tmp_path / "whole.duckdb")


def test_a_part_that_cannot_be_committed_stops_the_ingest_with_the_parts_before_it_kept(
    logs, tmp_path, monkeypatch, runner
):
    """DuckDB running out of memory while it commits a part on its thread: the ingest says so as it
    would on the main thread, the parts before it stay with the file marked, and the next run
    finishes the file."""
    transcripts = max((logs / "corpus").glob("transcripts-*.jsonl"), key=lambda path: path.stat().st_size)
    db = tmp_path / "parts.duckdb"
    in_parts(monkeypatch, rows=40)
    real_commit = store.commit
    commits = []

    def commit(con):
        if threading.current_thread() is not threading.main_thread():
            commits.append(1)
            if len(commits) == 3:
                con.execute("ROLLBACK")  # as DuckDB ends a transaction whose COMMIT failed
                raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")
        real_commit(con)

    monkeypatch.setattr(store, "commit", commit)
    result = runner.invoke(cli, ["ingest", str(transcripts), "--db", str(db)])
    assert result.exit_code == 1 and "DuckDB needed more memory than its limit" in result.stderr
    con = store.connect(db, read_only=True)
    marked = con.execute("SELECT path, error FROM sources").fetchall()
    held = con.execute("SELECT count(*) FROM traces").fetchone()[0]
    con.close()
    assert marked == [(str(transcripts), parts.INTERRUPTED)]
    assert 0 < held < len(transcripts.read_text().splitlines())  # two parts of it were written
    monkeypatch.setattr(store, "commit", real_commit)
    result = runner.invoke(cli, ["ingest", str(transcripts), "--db", str(db)])
    assert result.exit_code == 0, result.output
    ingest(tmp_path / "whole.duckdb", [transcripts])
    assert snapshot(db) == snapshot(tmp_path / "whole.duckdb")


@pytest.mark.skipif(not hasattr(signal, "raise_signal"), reason="needs signal.raise_signal")
def test_a_second_ctrl_c_waits_for_the_part_being_committed():
    """The first Ctrl-C stops the reading, and the ingest waits for the part being committed on its
    thread; a second one meanwhile is raised only once that commit is done, so the command line
    does not close the store under it."""
    committer = parts._Committer(con=None)
    committed = threading.Event()
    committer.thread = threading.Thread(target=lambda: time.sleep(0.5) or committed.set())
    committer.thread.start()
    threading.Timer(0.1, signal.raise_signal, args=(signal.SIGINT,)).start()  # Ctrl-C during the wait
    with pytest.raises(KeyboardInterrupt):
        committer.wait_quietly()
    assert committed.is_set() and committer.thread is None


def counted(lines: list[str], read: list[int]) -> Iterator[Record]:
    """`lines` as records, each one's line number added to `read` as it is read."""
    for number, line in enumerate(lines, start=1):
        read.append(number)
        yield Record(number, json.loads(line), line)


def test_transcripts_are_handed_out_as_their_records_are_read():
    lines = [
        json.dumps(
            {
                "id": f"c{n}",
                "messages": [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": "a"}],
            }
        )
        for n in range(100)
    ]
    read = []
    result = ParseResult()
    traces = openai_chat.stream(counted(lines, read), "t.jsonl", result)
    first = next(traces)
    assert first.source_id == "c0" and len(read) <= api_log.LOG_SAMPLE + 1  # the first records tell
    assert [t.source_id for t in traces] == [f"c{n}" for n in range(1, 100)]
    assert result.records == 100 and not result.rejects


def evaluation_output(runs: int) -> list[str]:
    """OpenHands evaluation output: the recorded runs again under instance ids of their own, and
    a line that is not a run."""
    recorded = (REPO / "tests" / "fixtures" / "openhands" / "eval_output.jsonl").read_text().splitlines()
    lines = []
    for n in range(runs):
        run = json.loads(recorded[n % len(recorded)])
        run["instance_id"] = f"{run['instance_id']}-{n}"
        lines.append(json.dumps(run))
    lines.insert(runs // 2, json.dumps({"not": "a run"}))
    return lines


def test_openhands_evaluation_output_is_handed_out_a_run_at_a_time():
    """Each line of a benchmark run's `output.jsonl` is one trace, handed out once its line is
    read; a trajectory (a file of events, one trace) comes at the end. Either way the traces,
    counts and rejects are `parse`'s."""
    lines = evaluation_output(30)
    read = []
    result = ParseResult()
    handed_out = [
        (trace, len(read)) for trace in openhands.stream(counted(lines, read), "output.jsonl", result)
    ]
    whole = openhands.parse(counted(lines, []), "output.jsonl")
    assert [trace_rows(t) for t, _ in handed_out] == [trace_rows(t) for t in whole.traces]
    assert [when for _, when in handed_out] == [n for n in range(1, 32) if n != 16]  # as its line is read
    assert (result.records, [r.line for r in result.rejects]) == (31, [16]) == (whole.records, [16])
    events = [json.dumps(event) for event in json.loads(lines[0])["history"]]
    read.clear()
    (trajectory,) = openhands.stream(counted(events, read), "trajectory.json", ParseResult())
    assert len(read) == len(events) and trace_rows(trajectory) == trace_rows(
        openhands.parse(counted(events, []), "trajectory.json").traces[0]
    )


def test_openhands_evaluation_output_written_in_parts_gives_the_store_a_whole_read_gives(
    tmp_path, monkeypatch
):
    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "output.jsonl").write_text("\n".join(evaluation_output(40)) + "\n")
    whole = ingest(tmp_path / "whole.duckdb", [folder])
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    in_parts(monkeypatch, rows=50)
    streamed = []
    real_stream = openhands.stream
    monkeypatch.setattr(
        openhands, "stream", lambda *args, **kwargs: streamed.append(1) or real_stream(*args, **kwargs)
    )
    parts_written = []
    real_part_rows = writer.part_rows
    monkeypatch.setattr(
        writer, "part_rows", lambda con, *rest: parts_written.append(1) or real_part_rows(con, *rest)
    )
    split = ingest(tmp_path / "parts.duckdb", [folder])
    assert streamed and len(parts_written) > 3
    assert split.totals() == whole.totals() and whole.totals()["traces"] == 40
    assert snapshot(tmp_path / "parts.duckdb") == snapshot(tmp_path / "whole.duckdb")


def weather_run(n: int, cities: int) -> OpenAILoop:
    loop = OpenAILoop(
        "You are a weather assistant.", f"Weather in {cities} cities, run {n}?", tools=[WEATHER_TOOL]
    )
    for i in range(cities):
        call_id = f"call_{n}_{i}"
        loop.call(tool_calls=[openai_tool_call(call_id, "get_weather", {"city": f"city-{n}-{i}"})])
        loop.result(call_id, json.dumps({"city": f"city-{n}-{i}", "temp_c": 10 + i}))
    loop.call(content="Here is the weather.")
    return loop


def described(trace) -> tuple:
    return (
        trace.source_id,
        trace.parent_source_id,
        trace.attributes.get("branched_from_line"),
        [(c.source_line, c.chain_state, c.request_prefixes) for c in trace.llm_calls],
        [(m.role, m.content, m.call_index) for m in trace.messages],
        [(t.source_id, t.name, t.result) for t in trace.tool_calls],
    )


def test_a_gateway_log_hands_out_each_conversation_once_its_last_call_is_read(tmp_path):
    """A later request can continue any conversation of a log, so a first pass finds where each
    ends; each trace then comes as soon as its last call is read, a branch after the conversation
    it branched off (whose calls it re-sends), and the traces are `parse`'s."""
    records = []
    for n in range(30):  # one after another: each ends before the next begins
        records += weather_run(n, cities=1 + n % 3).records
    records += weather_run(200, cities=3).records[2:]  # its first calls are in an earlier file
    # Two conversations interleaved, one longer; the user edits a reply of the longer one, and the
    # branch this makes ends long before the conversation it branched off.
    long, short = weather_run(100, cities=6), weather_run(101, cities=2)
    branch = OpenAILoop.__new__(OpenAILoop)
    branch.__dict__.update({**long.__dict__, "messages": list(long.messages[:4]), "records": []})
    branch.user("Only the first city, please")
    branch.call(content="Fine.")
    interleaved = [long.records[0], short.records[0], long.records[1], branch.records[0], short.records[1]]
    interleaved += [short.records[2], long.records[1], *long.records[2:]]  # a record logged again
    records += interleaved
    write_jsonl(tmp_path / "gateway.jsonl", records)
    lines = (tmp_path / "gateway.jsonl").read_text().splitlines()
    lines.insert(72, "not json")
    (tmp_path / "gateway.jsonl").write_text("\n".join(lines) + "\n")

    read = []

    def logged():
        for number, line in enumerate(lines, start=1):
            read.append(number)
            if line != "not json":
                yield Record(number, json.loads(line), line)

    result = ParseResult()
    handed_out = []
    for trace in openai_chat.stream(logged(), str(tmp_path / "gateway.jsonl"), result):
        handed_out.append((trace, len(read)))
    whole = openai_chat.parse(logged(), str(tmp_path / "gateway.jsonl"))

    assert sorted(described(t) for t, _ in handed_out) == sorted(described(t) for t in whole.traces)
    assert sum(bool(t.llm_calls[0].request_prefixes) for t, _ in handed_out) == 1  # found across files
    assert len(handed_out) == 34 and result.skipped == whole.skipped == {api_log.DUPLICATE: 1}
    assert result.records == whole.records == len(lines) - 1  # the line that is not JSON is the reader's
    for trace, when in handed_out:
        last = max(call.source_line for call in trace.llm_calls)
        if last > api_log.LOG_SAMPLE:  # read ahead to tell a log from transcripts
            assert when == last or trace.parent_source_id, (trace.source_id, when, last)
    order = [trace.source_id for trace, _ in handed_out]
    parent, child = next((t.parent_source_id, t.source_id) for t, _ in handed_out if t.parent_source_id)
    assert order.index(parent) == order.index(child) - 1  # at once after it, not before
    assert handed_out[order.index(child)][1] == len(lines)  # the longer ends last


def responses_call(
    response_id: str,
    previous: str | None,
    items: list | str | None,
    output: list,
    started: int,
    ended: int,
    instructions: str = "You are a weather assistant.",
    conversation: str | None = None,
) -> dict:
    """One Responses API log record: the request (`items`: its input, None for a record without it)
    and the response, with the times the gateway saw (seconds from an epoch)."""
    request: dict = {"model": "gpt-5", "instructions": instructions, "tools": [WEATHER_TOOL["function"]]}
    if items is not None:
        request["input"] = items
    if previous:
        request["previous_response_id"] = previous
    if conversation:
        request["conversation"] = conversation
    response = {"id": response_id, "object": "response", "created_at": 1_760_000_000 + started}
    response |= {"status": "completed", "model": "gpt-5", "output": output}
    response["usage"] = {"input_tokens": 100, "output_tokens": 10}
    stamp = "2025-10-09T09:{:02d}:{:02d}Z"
    return {
        "request": request,
        "response": response,
        "start_time": stamp.format(*divmod(started, 60)),
        "end_time": stamp.format(*divmod(ended, 60)),
    }


def responses_run(n: int, cities: int, start: int, conversation: str | None = None) -> list[dict]:
    """A weather run of `cities` tool calls made one after another, each call sending only its new
    items after the response it continues (or, in a `conversation`, after the conversation's last)."""
    records, previous, items = [], None, f"Weather in {cities} cities, run {n}?"
    for k in range(cities + 1):
        call_id = f"call_{n}_{k}"
        if k < cities:
            arguments = json.dumps({"city": f"city-{n}-{k}"})
            output = [
                {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": arguments}
            ]
        else:
            output = [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Done."}],
                }
            ]
        response_id = f"resp_{n}_{k}"
        chained = None if conversation else previous
        began = start + 6 * k
        took = 1 + (n + k) % 5  # calls that take longer complete after calls made later
        records.append(
            responses_call(
                response_id, chained, items, output, began, began + took, conversation=conversation
            )
        )
        previous = response_id
        items = [
            {"type": "function_call_output", "call_id": call_id, "output": json.dumps({"temp_c": 10 + k})}
        ]
    return records


def in_completion_order(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda record: (record["end_time"], record["response"]["id"]))


def test_a_responses_log_hands_out_each_conversation_once_its_last_call_is_read(tmp_path):
    """Calls are logged as they complete, not in the order they were made; a call continuing a
    response sends only its new items. A first pass orders and chains the calls as `parse` does;
    each trace then comes as soon as the calls made up to its last one are read (a re-sampled call,
    a branch, after the conversation it branched off), and the traces, counts and rejects are
    `parse`'s."""
    records = []
    for n in range(12):  # overlapping runs
        records += responses_run(n, cities=1 + n % 4, start=2 * n)
    resample = json.loads(json.dumps(records[1]))  # the second call of run 0 made again
    resample["response"]["id"] = "resp_again"
    resample["response"]["output"][0]["content"] = [{"type": "output_text", "text": "Again."}]
    records.append(resample)
    records += responses_run(50, cities=2, start=30, conversation="conv_50")  # a conversation object
    records.append(
        responses_call("resp_lost", "resp_not_here", "and then?", records[0]["response"]["output"], 40, 45)
    )
    without_input = responses_call("resp_batch", None, None, records[-2]["response"]["output"], 41, 42)
    records.append(without_input)
    records.append({"request": {"model": "gpt-5", "input": "hi"}, "error": {"code": "rate_limit_exceeded"}})
    ordered = [*in_completion_order(records[:-1]), records[-1]]
    assert ordered != sorted(ordered, key=lambda record: record.get("start_time", ""))
    ordered.insert(9, ordered[4])  # a record a shipper delivered twice
    handed_out, result, whole = streamed_and_parsed(openai_responses, ordered, tmp_path / "responses.jsonl")

    assert len(handed_out) == len(whole.traces) == 12 + 1 + 1 + 1 + 1
    assert result.skipped == {api_log.DUPLICATE: 1} and len(result.rejects) == 1
    assert result.records == len(ordered)
    calls = {n: record["start_time"] for n, record in enumerate(ordered, start=1) if "response" in record}
    del calls[10]  # the record delivered twice counts once
    made = sorted(calls, key=lambda n: (calls[n], n))  # the order the calls were made
    branch = next(trace for trace, _ in handed_out if trace.parent_source_id)
    for trace, when in handed_out:
        if trace is branch:
            continue
        lines_of = [call.source_line for call in trace.llm_calls]
        last = max(made.index(n) for n in lines_of)
        assert when == max(made[: last + 1]), trace.source_id  # the calls made up to its last are read
    order = [trace.source_id for trace, _ in handed_out]
    assert order.index(branch.parent_source_id) < order.index(branch.source_id)
    assert sum(when < len(ordered) - 10 for _, when in handed_out) >= 8  # not held to the end
    attributes = [trace.attributes for trace, _ in handed_out]
    assert sum("previous_response_not_in_file" in a for a in attributes) == 1
    assert sum("records_without_input" in a for a in attributes) == 1


@pytest.mark.parametrize("fixture", ["gateway.jsonl", "batch_output.jsonl"])
def test_the_recorded_responses_logs_read_twice_give_parse_s_traces(tmp_path, fixture):
    """Stateless calls re-sending every item (reasoning included), hosted tools, a failed call, Batch
    API output without its input: the first pass plans them, and the traces are `parse`'s."""
    path = REPO / "tests" / "fixtures" / "openai_responses" / fixture
    items = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert openai_responses.plan(counted([json.dumps(item) for item in items], [])) is not None
    handed_out, result, whole = streamed_and_parsed(openai_responses, items, tmp_path / fixture)
    assert len(handed_out) == len(whole.traces) >= 2 and result.rejects


def responses_log_held_whole(kind: str | None) -> list[dict]:
    """A Responses API log whose first pass cannot stand for `parse`, for the reason `kind` (None:
    one whose first pass can)."""
    records = responses_run(1, cities=3, start=0) + responses_run(2, cities=2, start=1)
    if kind == "item reference":
        records[1]["request"]["input"].append({"type": "item_reference", "id": "fc_earlier"})
    elif kind == "instructions changed":
        records[2]["request"]["instructions"] = "You are a terse weather assistant."
    elif kind == "continues a later call":
        records[1]["start_time"] = "2025-10-08T09:00:00Z"  # a clock that went wrong
    return in_completion_order(records)


@pytest.mark.parametrize(
    "kind, why",
    [
        ("item reference", openai_responses.ITEM_REFERENCED),
        ("instructions changed", openai_responses.INSTRUCTIONS_CHANGED),
        ("continues a later call", openai_responses.CONTINUES_A_LATER_CALL),
    ],
)
def test_a_responses_log_a_first_pass_cannot_order_is_parsed_whole(tmp_path, kind, why):
    """Where the first pass cannot stand for `parse` (an item named by id, whose item it did not
    keep; instructions changed along a conversation, whose earlier items it did not keep; a call
    continuing a response made after it), the file is parsed whole, and gives `parse`'s traces;
    the result says why."""
    records = responses_log_held_whole(kind)
    lines = [json.dumps(record) for record in records]
    assert openai_responses.plan(counted(lines, [])) == stream.HeldWhole(why)
    handed_out, result, whole = streamed_and_parsed(openai_responses, records, tmp_path / "responses.jsonl")
    assert len(handed_out) == len(whole.traces) >= 2 and result.records == len(records)
    assert result.held_whole == why and whole.held_whole is None


def test_a_big_responses_log_held_whole_after_its_first_pass_is_named_before_it_is_parsed(
    tmp_path, runner, monkeypatch
):
    """A big file is named before it is read when its format holds its traces; a Responses API log
    is found to only once it has been read a first time: it is named then, with why, before it is
    parsed whole and written."""
    in_parts(monkeypatch, rows=10)
    monkeypatch.setattr(ingest_module, "BIG_FILE_BYTES", 1000)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)  # files of more than a chunk are streamed
    path = write_jsonl(tmp_path / "responses.jsonl", responses_log_held_whole("item reference"))
    events = []
    real_part_rows, real_parse = writer.part_rows, openai_responses.parse
    monkeypatch.setattr(writer, "part_rows", lambda *args: events.append("part") or real_part_rows(*args))

    def parse(records, source_path):
        def parsed_one_by_one():
            for number, record in enumerate(records):
                if number == 0:
                    events.append("parse")
                yield record

        return real_parse(parsed_one_by_one(), source_path)

    monkeypatch.setattr(openai_responses, "parse", parse)
    con = store.connect(tmp_path / "s.duckdb")
    ingest_paths(con, [path], on_big_file=lambda *args: events.append(args))
    con.close()
    assert events[0] == (path, path.stat().st_size, False, openai_responses.ITEM_REFERENCED)
    assert events[1] == "parse"  # told once, before the file's first record is parsed whole
    assert events[2:] == ["part"] * (len(events) - 2) and len(events) > 3

    plain = write_jsonl(tmp_path / "plain" / "responses.jsonl", responses_log_held_whole(None))
    result = runner.invoke(cli, ["ingest", str(path), str(plain), "--db", str(tmp_path / "cli.duckdb")])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith(
        f"note: {display_path(str(path))} holds {path.stat().st_size / 1000:.1f}kB of data. Its first "
        "reading found a request naming an earlier item by id (item_reference), so its traces are "
        "all held in memory until the whole file is read"
    )


@pytest.mark.parametrize("log", ["chat completions", "responses"])
@pytest.mark.parametrize("change", ["appended", "cut", "edited"])
def test_a_log_that_changes_between_its_two_passes_fails(tmp_path, log, change):
    adapter, run = {
        "chat completions": (openai_chat, weather_run(1, cities=3).records),
        "responses": (openai_responses, responses_run(1, cities=3, start=0)),
    }[log]
    first_pass = {"appended": run[:2], "cut": run, "edited": run}[change]
    second_pass = {"appended": run, "cut": run[:2], "edited": [run[0], {"not": "a call"}, *run[2:]]}[change]
    write_jsonl(tmp_path / "log.jsonl", first_pass)
    records = [Record(n, record, json.dumps(record)) for n, record in enumerate(second_pass, start=1)]
    with pytest.raises(SourceError, match="the file changed while it was read: ingest it again"):
        list(adapter.stream(records, str(tmp_path / "log.jsonl"), ParseResult()))


def otel_export(logs: Path, folder: Path) -> Path:
    """The corpus's OTel export with each trace's spans in two batches, the second after the next
    trace's first (`recut_logs.recut_otlp`), and log records at the end: one naming a span of the
    first trace, one naming no span the file holds."""
    (exported,) = recut_logs.recut_otlp(logs / "corpus", folder, 1)
    lines = exported.read_text().splitlines()
    first = json.loads(lines[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    logged = [
        {"traceId": first["traceId"], "spanId": first["spanId"], "eventName": "gen_ai.user.message"},
        {"traceId": "ab" * 16, "spanId": "cd" * 8, "eventName": "gen_ai.user.message"},
    ]
    for event in logged:
        event["body"] = {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": "hi"}}]}}
    lines.append(json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": logged}]}]}))
    exported.write_text("\n".join(lines) + "\n")
    return exported


def trace_rows(trace) -> tuple:
    return (
        trace.source_id,
        trace.source_line,
        [(c.source_id, c.model, c.input_tokens, c.output_tokens) for c in trace.llm_calls],
        [(m.role, m.content, m.call_index) for m in trace.messages],
        [(t.source_id, t.name, t.result) for t in trace.tool_calls],
        sorted(trace.attributes.items(), key=str),
    )


def test_an_otel_export_hands_out_each_trace_once_its_last_span_is_read(logs, tmp_path):
    """A trace's spans can come anywhere in an export, so a first pass finds the record that holds
    each trace's last span or log record; the trace comes as soon as that record is read, and the
    traces, counts and skips are `parse`'s."""
    exported = otel_export(logs, tmp_path / "cut")
    items = [json.loads(line) for line in exported.read_text().splitlines()]
    handed_out, result, whole = streamed_and_parsed(otlp, items, exported)
    lines = exported.read_text().splitlines()
    assert len(handed_out) == len(whole.traces) >= 5 and not result.rejects
    assert result.skipped["log record whose span is not in this file"] == 1  # the other is attached
    for trace, when in handed_out:
        if trace.source_line == 1:  # the first trace: a log record at the end names its span
            assert when == len(lines)
        else:
            spans = [n for n, line in enumerate(lines, start=1) if trace.source_id in line]
            assert when == max(spans) < len(lines), trace.source_id  # its second batch


def test_an_otel_export_that_changes_between_its_two_passes_fails(logs, tmp_path):
    exported = otel_export(logs, tmp_path / "cut")
    lines = exported.read_text().splitlines()
    records = [Record(n, json.loads(line), line) for n, line in enumerate(lines[:-2], start=1)]  # cut
    with pytest.raises(SourceError, match="the file changed while it was read: ingest it again"):
        list(otlp.stream(records, str(exported), ParseResult()))


def streamed_and_parsed(adapter, items: list, path: Path) -> tuple[list, ParseResult, ParseResult]:
    """`items` written one per line to `path`, streamed by `adapter` (each trace with how many lines
    had been read when it came) and parsed whole; what both give must be the same."""
    lines = [json.dumps(item) for item in items]
    path.write_text("\n".join(lines) + "\n")
    read = []
    result = ParseResult()
    handed_out = [(trace, len(read)) for trace in adapter.stream(counted(lines, read), str(path), result)]
    whole = adapter.parse(counted(lines, []), str(path))
    assert sorted(trace_rows(t) for t, _ in handed_out) == sorted(trace_rows(t) for t in whole.traces)
    assert (result.records, result.skipped, result.described) == (
        whole.records,
        whole.skipped,
        whole.described,
    )
    assert [(r.line, r.error) for r in result.rejects] == [(r.line, r.error) for r in whole.rejects]
    return handed_out, result, whole


def test_a_langfuse_export_hands_out_each_trace_once_its_last_item_is_read(tmp_path):
    """Observations of three traces interleaved, their trace records first and last, a trace record
    without observations (described: joined to the file that holds its calls), an observation
    exported twice and one without a trace id: each trace comes as soon as its last item is read,
    and the traces, counts, rejects and described traces are `parse`'s."""
    fixtures = REPO / "tests" / "fixtures" / "langfuse"
    observations = json.loads((fixtures / "observations.json").read_text())
    trace_records = {
        r["id"]: r for r in map(json.loads, (fixtures / "traces.jsonl").read_text().splitlines())
    }
    by_trace: dict[str, list] = {}
    for observation in observations:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    ids = sorted(by_trace, key=lambda t: -len(by_trace[t]))  # the longest first
    items = [trace_records[ids[1]], {**trace_records[ids[0]], "id": "only-described"}]
    for k in range(max(map(len, by_trace.values()))):
        items += [by_trace[t][k] for t in ids if k < len(by_trace[t])]
    items += [by_trace[ids[2]][0], {**observations[0], "traceId": None}, trace_records[ids[0]]]
    handed_out, result, whole = streamed_and_parsed(langfuse, items, tmp_path / "observations.jsonl")
    lines = (tmp_path / "observations.jsonl").read_text().splitlines()
    assert len(handed_out) == len(whole.traces) >= 3
    assert [r.line for r in result.rejects] == [len(lines) - 1]
    assert result.described == ["only-described"] and result.skipped["duplicate observation"] == 1
    for trace, when in handed_out:
        key = trace.attributes["conversation_id"]
        assert when == max(
            n for n, item in enumerate(items, start=1) if key in (item.get("id"), item.get("traceId"))
        )
    assert [when for _, when in handed_out] == sorted(when for _, when in handed_out) != [len(lines)] * 3
    cut = [Record(n, json.loads(line), line) for n, line in enumerate(lines[:-1], start=1)]
    with pytest.raises(SourceError, match="the file changed while it was read"):
        list(
            langfuse.stream(cut, str(tmp_path / "observations.jsonl"), ParseResult())
        )  # the file has a line more than was read


def test_a_langsmith_export_hands_out_each_trace_once_its_last_run_is_read(tmp_path):
    """The runs of two traces interleaved, the shorter ending first, a run exported twice and a
    record that is not a run: each trace comes as soon as its last run is read."""
    runs = [json.loads(line) for line in (REPO / "tests" / "fixtures" / "langsmith" / "runs.jsonl").open()]
    by_trace: dict[str, list] = {}
    for run in runs:
        by_trace.setdefault(run["trace_id"], []).append(run)
    long, short = sorted(by_trace.values(), key=len, reverse=True)
    items = [long[0], short[0], long[1], {"not": "a run"}, short[1], *long[2:5], short[1], *long[5:]]
    handed_out, result, whole = streamed_and_parsed(langsmith, items, tmp_path / "runs.jsonl")
    assert len(handed_out) == len(whole.traces) >= 2 and result.skipped["duplicate run"] == 1
    assert [r.line for r in result.rejects] == [4]
    for trace, when in handed_out:
        key = trace.attributes["conversation_id"].split("/")[0]
        assert when == max(n for n, item in enumerate(items, start=1) if item.get("trace_id") == key)
    assert {when for _, when in handed_out} == {9, len(items)}  # the shorter, with its run again


def test_a_tool_call_id_two_traces_share_goes_to_the_trace_written_first(tmp_path, monkeypatch):
    """Two conversations of a log whose model numbers its tool calls per conversation (`call_0`):
    the whole file gives the plain id to the conversation that began first; read twice, the
    conversation that ended first is written first and keeps it (docs/ingest.md#big-files). Both
    stores hold every call once, under ids of their own."""
    long, short = weather_run(1, cities=3), weather_run(2, cities=1)
    for run in (long, short):
        for record in run.records:
            for message in [*record["request"]["messages"], record["response"]["choices"][0]["message"]]:
                for call in message.get("tool_calls") or []:
                    call["id"] = "call_" + call["id"].rsplit("_", 1)[1]
                if message.get("tool_call_id"):
                    message["tool_call_id"] = "call_" + message["tool_call_id"].rsplit("_", 1)[1]
    records = [long.records[0], short.records[0], short.records[1], *long.records[1:]]
    write_jsonl(tmp_path / "logs" / "gateway.jsonl", records)
    holders = {}
    for name in ("whole", "parts"):
        if name == "parts":
            in_parts(monkeypatch)
        ingest(tmp_path / f"{name}.duckdb", [tmp_path / "logs"])
        con = duckdb.connect(str(tmp_path / f"{name}.duckdb"), read_only=True)
        rows = con.execute(
            "SELECT t.source_line, c.tool_call_id FROM tool_calls c JOIN traces t USING (trace_id) "
            "ORDER BY c.tool_call_id"
        ).fetchall()
        con.close()
        assert len(rows) == 4 and len({call for _, call in rows}) == 4
        holders[name] = next(line for line, call in rows if call == "call_0")
    assert holders == {"whole": 1, "parts": 2}  # the line each holder began at


def test_a_big_log_forgets_the_message_keys_it_no_longer_needs(tmp_path, monkeypatch):
    """The keys of a log's messages are remembered so that a re-sent message is converted once,
    up to a size: past it the older ones go, and the conversations come out the same."""
    records = [record for n in range(20) for record in weather_run(n, cities=3).records]
    write_jsonl(tmp_path / "gateway.jsonl", records)
    lines = (tmp_path / "gateway.jsonl").read_text().splitlines()
    as_records = [Record(n, json.loads(line), line) for n, line in enumerate(lines, start=1)]
    remembered = openai_chat.parse(as_records, "gateway.jsonl").traces
    held = []
    real_of = api_log.RequestKeys.of
    monkeypatch.setattr(api_log, "KNOWN_KEY_CHARS", 2_000)
    monkeypatch.setattr(
        api_log.RequestKeys, "of", lambda self, *a: held.append(self.held) or real_of(self, *a)
    )
    forgetting = openai_chat.parse(as_records, "gateway.jsonl").traces
    assert max(held) <= 2_000 < sum(map(len, lines)) // 10
    assert sum(later < earlier for earlier, later in itertools.pairwise(held)) > 3  # forgotten, often
    assert [described(t) for t in forgetting] == [described(t) for t in remembered]


@pytest.mark.parametrize("content", ["transcripts", "gateway log"])
def test_gzip_data_that_breaks_off_in_a_file_written_in_parts_fails_it_whole(tmp_path, monkeypatch, content):
    """Streamed transcripts break off after some parts are written; a gateway log, parsed whole
    before its parts, breaks off while it is parsed: either way the file fails as a whole."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096 if content == "transcripts" else 32768)  # lines fit
    in_parts(monkeypatch, rows=10)
    if content == "transcripts":
        lines = [
            json.dumps(
                {
                    "id": f"c{n}",
                    "messages": [
                        {"role": "user", "content": "q" * 50},
                        {"role": "assistant", "content": "a"},
                    ],
                }
            )
            for n in range(3000)
        ]
    else:
        # more lines than detection samples (50) before the cut: the log breaks off while parsed
        lines = (REPO / "sample_traces" / "openai_chat_gateway.jsonl").read_text().splitlines() * 4
    data = gzip.compress("\n".join(lines).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    report = ingest(tmp_path / "s.duckdb", [path])
    assert [(f.status, f.traces) for f in report.files] == [("failed", 0)]
    assert "corrupt or truncated gzip" in report.files[0].message
    con = store.connect(tmp_path / "s.duckdb", read_only=True)
    assert con.execute("SELECT count(*) FROM traces").fetchone() == (0,)
    assert con.execute("SELECT error LIKE 'corrupt%', records, ingested FROM sources").fetchall() == [
        (True, 1, 0)
    ]
    con.close()


@pytest.mark.parametrize(
    "interruption",
    [
        KeyboardInterrupt(),
        duckdb.InterruptException("INTERRUPT Error: Interrupted!"),
        RuntimeError("Query interrupted"),
    ],
)
def test_ctrl_c_wherever_it_lands_says_what_was_kept_and_exits_130(
    tmp_path, runner, monkeypatch, interruption
):
    """A Ctrl-C lands in Python, in a DuckDB query, or in DuckDB reading a frame from Python (a
    RuntimeError): each is an interruption, not a bug; any other RuntimeError still is one."""
    import traceforge.cli.ingest

    raised = [interruption]

    def ingest_files(*args, **kwargs):
        raise raised[0]

    monkeypatch.setattr(traceforge.cli.ingest, "ingest_files", ingest_files)
    command = ["ingest", str(REPO / "sample_traces"), "--db", str(tmp_path / "s.duckdb")]
    result = runner.invoke(cli, command)
    assert result.exit_code == 130, result.output
    assert result.stderr.startswith("Interrupted. What finished before it is kept")
    raised[0] = RuntimeError("boom")
    result = runner.invoke(cli, command)
    assert isinstance(result.exception, RuntimeError) and str(result.exception) == "boom"


@pytest.mark.parametrize("compressed", [False, True])
def test_a_file_in_parts_says_how_much_of_it_is_read(tmp_path, monkeypatch, compressed):
    """After each part, for the progress bar: the bytes of the file on disk read so far, up to all."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 65536)  # several lines a chunk
    in_parts(monkeypatch, rows=30)
    lines = (REPO / "sample_traces" / "anthropic_messages_transcripts.jsonl").read_bytes().splitlines()
    # every conversation again under an id of its own, with a field gzip cannot shrink (so that
    # even a gzip file is read over several parts)
    content = b"\n".join(
        line.replace(b"{", b'{"id": "c%d-%d", "noise": "%s", ' % (n, k, os.urandom(1500).hex().encode()), 1)
        for n in range(40)
        for k, line in enumerate(lines)
    )
    path = tmp_path / ("big.jsonl.gz" if compressed else "big.jsonl")
    path.write_bytes(gzip.compress(content) if compressed else content)
    reported = []
    con = store.connect(tmp_path / "s.duckdb")
    ingest_paths(con, [path], on_part=lambda *args: reported.append(args))
    con.close()
    size = path.stat().st_size
    assert (
        len(reported) > 3 and {p for p, _, _ in reported} == {path} and {s for _, _, s in reported} == {size}
    )
    read = [r for _, r, _ in reported]
    assert read == sorted(read) and read[0] < size and read[-1] == size


@pytest.mark.parametrize("compressed", [False, True])
def test_a_file_read_twice_counts_both_readings_in_how_much_is_read(tmp_path, monkeypatch, compressed):
    """A gateway log is read twice: its first pass reports as it goes, and the progress runs over
    twice its size, the first reading's bytes, then the second's after them, as it goes too (here
    the file is one part)."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 65536)
    monkeypatch.setattr(stream, "PROGRESS_RECORDS", 50)
    monkeypatch.setattr(ingest_module, "PROGRESS_TRACES", 10)
    in_parts(monkeypatch, rows=1_000_000)
    runs = [weather_run(n, cities=3) for n in range(150)]
    for run in runs:  # a field gzip cannot shrink, so that a gzip file is read over many chunks too
        for record in run.records:
            record["metadata"] = {"noise": os.urandom(400).hex()}
    path = write_jsonl(
        tmp_path / "gateway.jsonl", [r for run in runs for r in run.records], compress=compressed
    )
    reported = []
    con = store.connect(tmp_path / "s.duckdb")
    report = ingest_paths(con, [path], on_part=lambda *args: reported.append(args))
    con.close()
    assert report.totals()["traces"] == 150
    size = path.stat().st_size
    assert {(p, s) for p, _, s in reported} == {(path, 2 * size)}
    read = [r for _, r, _ in reported]
    assert read == sorted(read) and read[-1] == 2 * size
    first, second = [r for r in read if r <= size], [r for r in read if r > size]
    assert len(first) > 3 and first[-1] == size and len(second) > 3  # both readings, as they go


def test_an_id_a_file_holds_more_times_than_a_part_is_numbered_as_in_the_whole_file(tmp_path, monkeypatch):
    """The same conversation logged ten times: the whole file names them x, x@<hash>, x@<hash>~2,
    ... x@<hash>~9; written a trace a part, each part must see the numbered ids the parts before
    it took (it took them again, and broke the primary key)."""
    lines = (REPO / "sample_traces" / "anthropic_messages_transcripts.jsonl").read_text().splitlines()
    path = tmp_path / "logs" / "again.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines * 10) + "\n")
    ingest(tmp_path / "whole.duckdb", [path])
    in_parts(monkeypatch, rows=1)
    ingest(tmp_path / "parts.duckdb", [path])
    expected = snapshot(tmp_path / "whole.duckdb")
    assert sum("~9" in row[0] for row in expected["traces"]) == len(lines)
    assert snapshot(tmp_path / "parts.duckdb") == expected


def test_the_progress_bar_shows_how_much_of_a_big_file_is_read():
    from traceforge.cli.options import FileProgress

    with FileProgress() as progress:
        progress.on_file(Path("logs/big.jsonl"), 0, 2)
        progress.on_part(Path("logs/big.jsonl"), 512, 2048)
        (task,) = progress.progress.tasks
        assert (task.completed, task.fields["name"]) == (0, "big.jsonl (25%)")
        progress.on_part(Path("logs/big.jsonl"), 2048, 2048)
        assert task.fields["name"] == "big.jsonl (100%)"
