"""`traceforge forget`: the store left holding what ingesting the other files alone gives, whether
the forgotten file's traces were its own, joined with another file's, copied by a resumed session,
held for a file with the same content or holding ids another file's traces wanted; nothing
changed where that cannot be done."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from resumed_sessions import CONTINUATION, FIXTURES, RESUMED, read_lines, resumed_copy, write_lines
from stopped_runs import stop_at_part
from store_snapshot import snapshot

from traceforge import store
from traceforge.cli import cli
from traceforge.ingest import parallel, parts

SAMPLES = Path(__file__).parent.parent / "sample_traces"
OTEL = Path(__file__).parent / "fixtures" / "otlp" / "otel_genai_current.jsonl"  # a trace over its two lines


def run(runner, *args: object, code: int = 0):
    result = runner.invoke(cli, [str(arg) for arg in args])
    assert result.exit_code == code, result.output
    return result


def ingested(runner, db: Path, *paths: Path) -> Path:
    run(runner, "ingest", *paths, "--db", db)
    return db


def otel_halves(folder: Path) -> list[Path]:
    """The fixture's two export batches as two files: a rotation in the middle of a trace."""
    folder.mkdir(parents=True)
    files = [folder / "traces-1.jsonl", folder / "traces-2.jsonl"]
    for path, line in zip(files, OTEL.read_text().splitlines(keepends=True), strict=True):
        path.write_text(line)
    return files


def gateway_halves(folder: Path) -> list[Path]:
    """The sample gateway log cut after 20 lines, in the middle of two conversations."""
    folder.mkdir(parents=True)
    rows = (SAMPLES / "openai_chat_gateway.jsonl").read_text().splitlines(keepends=True)
    files = [folder / "gateway-1.jsonl", folder / "gateway-2.jsonl"]
    files[0].write_text("".join(rows[:20]))
    files[1].write_text("".join(rows[20:]))
    return files


def resumed_sessions(folder: Path) -> list[Path]:
    """A Claude Code session, and the session that resumed it (a copy of its calls, then more)."""
    original = read_lines(FIXTURES / "parallel_session.jsonl")
    return [
        write_lines(folder / "first" / f"{original[1]['sessionId']}.jsonl", original),
        write_lines(folder / "second" / f"{RESUMED}.jsonl", resumed_copy(original, CONTINUATION, RESUMED)),
    ]


def same_ids(folder: Path) -> list[Path]:
    """Two exports of the same runs, the second with one more: its traces and tool calls want the
    ids the first file's hold, and take other forms of them."""
    folder.mkdir(parents=True)
    runs = json.loads((SAMPLES / "openai_chat_transcripts.json").read_text())
    files = [folder / "export-1.json", folder / "export-2.json"]
    files[0].write_text(json.dumps(runs[:3]))
    files[1].write_text(json.dumps(runs[:4]))
    return files


def sample_files(folder: Path) -> list[Path]:
    shutil.copytree(SAMPLES, folder)
    return sorted(path for path in folder.iterdir() if path.is_file() and not path.name.startswith("."))


CASES = {
    "a trace joined from two OTel files": otel_halves,
    "conversations of a gateway log cut in two": gateway_halves,
    "a resumed session's copies": resumed_sessions,
    "ids another file wanted": same_ids,
    "files of their own": sample_files,
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("forgotten", [0, 1])
def test_forgetting_a_file_leaves_the_store_the_other_files_alone_give(runner, tmp_path, case, forgotten):
    files = CASES[case](tmp_path / "logs")
    kept = [path for k, path in enumerate(files) if k != forgotten]
    db = ingested(runner, tmp_path / "all.duckdb", *files)
    before = snapshot(db)
    run(runner, "analyze", tmp_path / "logs", "--db", db, "--out", tmp_path / "out")

    dry = json.loads(run(runner, "forget", files[forgotten], "--db", db, "--dry-run", "--json").stdout)
    assert snapshot(db) == before  # rolled back
    report = json.loads(run(runner, "forget", files[forgotten], "--db", db, "--json").stdout)
    assert {**dry, "dry_run": False} == report
    assert report["forgotten"] == [str(files[forgotten])]

    alone = ingested(runner, tmp_path / "alone.duckdb", *kept)
    assert snapshot(db) == snapshot(alone)
    held = {table: len(rows) for table, rows in before.items()}
    assert report["removed"] == {
        table: held[table] - len(rows)
        for table, rows in snapshot(alone).items()
        if table in report["removed"]
    }
    # the analysis of what went went with it; that of the other files' traces is kept or redone
    con = store.connect(db, read_only=True)
    try:
        for table in ("tool_deps", "trace_dag", "tool_schedule", "trace_workloads"):
            strays = con.execute(
                f"SELECT count(*) FROM {table} WHERE trace_id NOT IN (SELECT trace_id FROM traces)"
            )
            assert strays.fetchone()[0] == 0, table
    finally:
        con.close()
    run(runner, "analyze", tmp_path / "logs", "--db", db, "--out", tmp_path / "out")


def test_forgetting_a_joined_file_reads_the_other_again_and_says_so(runner, tmp_path):
    first, second = otel_halves(tmp_path / "logs")
    db = ingested(runner, tmp_path / "all.duckdb", first, second)
    output = run(runner, "forget", first, "--db", db).output
    assert "Forgot 1 file:" in output and "fewer in the store" in output
    assert "Read again 1 file, which shared traces, content or ids with them:" in output
    assert output.index("Read again") < output.index(second.name)
    assert f"{first.name} is still there: the next `ingest` or `analyze` of its folder reads it" in output
    assert "Run `traceforge analyze` again" in output


def test_a_file_with_the_forgotten_files_content_holds_it_now(runner, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    original = SAMPLES / "openai_chat_transcripts.json"
    files = [logs / name for name in ("a.json", "b.json", "c.json")]
    for path in files:
        shutil.copy(original, path)
    db = ingested(runner, tmp_path / "all.duckdb", logs)
    report = json.loads(run(runner, "forget", files[0], "--db", db, "--json").stdout)
    assert report["read_again"] == [str(files[1])]
    assert report["removed"]["traces"] == 0  # b.json holds them now
    # as if a.json had never been ingested: b.json read, c.json its duplicate
    assert snapshot(db) == snapshot(ingested(runner, tmp_path / "alone.duckdb", files[1], files[2]))
    con = store.connect(db, read_only=True)
    rows = con.execute("SELECT path, duplicate_of FROM sources ORDER BY path").fetchall()
    con.close()
    assert rows == [(str(files[1]), None), (str(files[2]), str(files[1]))]
    # both go together: nothing of them is left
    run(runner, "forget", logs, "--db", db)
    assert all(not rows for rows in snapshot(db).values())


def test_nothing_is_forgotten_where_a_file_to_read_again_is_gone_or_changed(runner, tmp_path):
    first, second = otel_halves(tmp_path / "logs")
    db = ingested(runner, tmp_path / "all.duckdb", first, second)
    before = snapshot(db)
    text = second.read_text()
    second.write_text(text.replace('"gen_ai.', '"genai.', 1))
    error = run(runner, "forget", first, "--db", db, code=1).output
    assert f"{second} holds data of the same traces as the files to forget" in error
    assert "has changed since it was ingested. Ingest it again first, or forget it too" in error
    second.unlink()
    error = run(runner, "forget", first, "--db", db, code=1).output
    assert "it cannot be read (No such file or directory). Put it back as it was, or forget it too" in error
    assert snapshot(db) == before
    # forgotten together, neither is read
    run(runner, "forget", first, second, "--db", db)
    assert all(not rows for rows in snapshot(db).values())


def test_a_forget_stopped_half_way_forgets_nothing(runner, tmp_path, monkeypatch):
    first, second = gateway_halves(tmp_path / "logs")
    db = ingested(runner, tmp_path / "all.duckdb", first, second)
    before = snapshot(db)

    def stopped(*args):  # Ctrl-C once the forgotten file's rows are deleted, before the rest is written
        raise KeyboardInterrupt

    monkeypatch.setattr(parallel, "write_items", stopped)
    result = runner.invoke(cli, ["forget", str(first), "--db", str(db)])
    assert result.exit_code == 130 and "Interrupted" in result.output
    assert snapshot(db) == before


def test_a_path_no_file_was_ingested_from_is_an_error_that_changes_nothing(runner, tmp_path):
    files = sample_files(tmp_path / "logs")
    db = ingested(runner, tmp_path / "all.duckdb", *files)
    before = snapshot(db)
    error = run(runner, "forget", files[0], tmp_path / "elsewhere.jsonl", "--db", db, code=1).output
    assert "elsewhere.jsonl: no file ingested from there" in error and "SELECT path FROM sources" in error
    assert snapshot(db) == before
    error = run(runner, "forget", files[0], "--db", tmp_path / "none.duckdb", code=1).output
    assert "none.duckdb: no such store. Run `traceforge ingest PATH` first." in error
    assert not (tmp_path / "none.duckdb").exists()


def test_a_folder_forgets_every_file_ingested_from_under_it_gone_or_not(runner, tmp_path):
    logs = tmp_path / "logs"
    otel = otel_halves(logs / "otel")
    samples = sample_files(logs / "samples")
    db = ingested(runner, tmp_path / "all.duckdb", logs)
    shutil.rmtree(logs / "otel")
    dry = run(runner, "forget", logs / "otel", "--db", db, "--dry-run").output
    assert "Would forget 2 files:" in dry and "Nothing changed (--dry-run)." in dry
    assert "still there" not in dry and "Run `traceforge analyze` again" not in dry
    report = json.loads(run(runner, "forget", logs / "otel", "--db", db, "--json").stdout)
    assert report["forgotten"] == [str(path) for path in otel] and report["read_again"] == []
    assert snapshot(db) == snapshot(ingested(runner, tmp_path / "alone.duckdb", *samples))


def test_many_files_forgotten_are_listed_up_to_twenty(runner, tmp_path):
    runs = json.loads((SAMPLES / "openai_chat_transcripts.json").read_text())
    folder = tmp_path / "logs"
    folder.mkdir()
    for number in range(23):
        (folder / f"run-{number:02}.json").write_text(json.dumps([{**runs[0], "id": f"run-{number}"}]))
    db = ingested(runner, tmp_path / "all.duckdb", folder)
    output = run(runner, "forget", folder, "--db", db).output
    assert "Forgot 23 files: 23 traces" in output
    listed = [line.strip() for line in output.splitlines() if line.strip().endswith(".json")]
    assert len(listed) == 20 and "... and 3 more" in output
    assert "23 of the files are still there" in output


def test_a_file_a_run_stopped_writing_whose_source_is_gone_can_be_forgotten(runner, tmp_path, monkeypatch):
    files = sample_files(tmp_path / "logs")
    stopped = SAMPLES.parent / "tests" / "fixtures" / "otlp" / "otel_genai_current.jsonl"
    big = tmp_path / "logs" / "big.jsonl"
    shutil.copy(stopped, big)
    db = tmp_path / "all.duckdb"
    ingested(runner, db, *files)
    monkeypatch.setattr(parts, "PARTS_MIN_BYTES", big.stat().st_size)
    monkeypatch.setattr(parts, "PART_ROWS", 1)
    resume = stop_at_part(monkeypatch, big, 2)
    run(runner, "ingest", big, "--db", db, code=130)
    resume()
    big.unlink()
    warning = "an earlier run stopped while writing this file"
    output = run(runner, "ingest", *files, "--db", db).output
    assert warning in output
    assert f"it is gone: put it back and ingest it again, or `traceforge forget {big}`" in output

    output = run(runner, "forget", big, "--db", db).output
    assert "Forgot 1 file:" in output
    assert warning not in run(runner, "ingest", *files, "--db", db).output
    assert snapshot(db) == snapshot(ingested(runner, tmp_path / "alone.duckdb", *files))


def test_the_rejected_records_a_file_held_are_counted_where_some_go(runner, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    clean, broken = logs / "clean.jsonl", logs / "broken.jsonl"
    shutil.copy(SAMPLES / "anthropic_messages_transcripts.jsonl", clean)
    broken.write_text((SAMPLES / "openai_chat_gateway.jsonl").read_text() + '{"cut short by a crash\n')
    db = ingested(runner, tmp_path / "all.duckdb", logs)
    assert "rejected record" not in run(runner, "forget", clean, "--db", db).output
    output = run(runner, "forget", broken, "--db", db).output
    assert "8 traces, 56 LLM calls, 47 tool calls, 1 rejected record fewer in the store" in output
