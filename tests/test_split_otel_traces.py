"""OpenTelemetry traces whose spans a collector wrote to two files (a rotation in the middle of the
trace): ingested together, one after the other, in either order, or with the file still being
written, they give the trace the whole file gives.

The recorded fixture `otel_genai_current.jsonl` holds trace 5b8e... over its two lines (two
export batches); cutting the file between the lines is what a size-rotating file exporter does."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from split_traces import content, ingest, lines_read_again, run, where_from, whole, write

from traceforge import store
from traceforge.ingest import joins
from traceforge.ingest.sources import changed_since_ingest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import corpus as bench_corpus
import recut_logs

FIXTURE = Path(__file__).parent / "fixtures" / "otlp" / "otel_genai_current.jsonl"
SPLIT = "5b8efff798038103d269b633813fc60c"  # spans on both lines of the fixture


def lines() -> list[str]:
    return FIXTURE.read_text().splitlines(keepends=True)


def test_a_trace_over_two_files_ingested_together_is_the_trace_of_the_whole_file(runner, tmp_path):
    first, second = lines()
    rotated = write(tmp_path / "logs" / "traces-1.jsonl", first)
    active = write(tmp_path / "logs" / "traces.jsonl", second)
    db = tmp_path / "store.duckdb"
    report = ingest(runner, db, tmp_path / "logs")
    assert report["joined"] == [SPLIT] and report["left_apart"] == {}
    assert content(runner, db) == whole(runner, tmp_path, lines())
    sources = dict((row[0], row[1:]) for row in where_from(db))
    # the joined trace names both files; it was first seen (its root span) in the second one
    assert sources[SPLIT] == (
        str(active),
        json.dumps(sorted([str(rotated), str(active)]), separators=(",", ":")),
    )
    output = run(runner, "ingest", str(tmp_path / "logs"), "--db", str(db))
    assert "Nothing new" in output and "Joined" not in output
    output = run(runner, "ingest", str(tmp_path / "logs"), "--db", str(tmp_path / "fresh.duckdb"))
    assert "Joined 1 trace whose parts lay in several files" in output


def test_files_ingested_one_after_the_other_in_either_order_are_joined(runner, tmp_path):
    first, second = lines()
    a = write(tmp_path / "a" / "traces-1.jsonl", first)
    b = write(tmp_path / "b" / "traces-2.jsonl", second)
    expected = whole(runner, tmp_path, lines())
    for name, order in (("forward", (a, b)), ("backward", (b, a))):
        db = tmp_path / f"{name}.duckdb"
        assert ingest(runner, db, order[0])["joined"] == []
        parts = ingest(runner, db, order[1])
        assert parts["joined"] == [SPLIT], name
        assert content(runner, db) == expected, name


def relabelled(line: str, trace_id: str, spans: str) -> str:
    """A copy of the fixture's first batch as another trace, whole in one file: its trace id and
    span ids (`a000...`) changed."""
    return line.replace(SPLIT, trace_id).replace('"a0000000000000', f'"{spans}0000000000000')


def spelled(line: str, spelling: str) -> str:
    """An export batch with the split trace's id written as some exporters write it."""
    hex_id = SPLIT
    if spelling == "hex":
        return line
    if spelling == "base64":  # protobuf's JSON; a Java writer escapes `/` and `=`
        written = base64.b64encode(bytes.fromhex(hex_id)).decode()
        escaped = written.replace("/", "\\/").replace("=", "\\u003d")
        assert "/" in written and "\\" in escaped
        return line.replace(f'"{hex_id}"', f'"{escaped}"')
    written = {"upper-case": hex_id.upper(), "0x": "0x" + hex_id}[spelling]
    return line.replace(f'"{hex_id}"', f'"{written}"')


@pytest.mark.parametrize("spelling", ["hex", "upper-case", "0x", "base64"])
def test_only_the_lines_naming_a_split_trace_are_read_again_however_they_spell_it(
    runner, tmp_path, monkeypatch, spelling
):
    """The files holding a part are read again only where their lines hold the trace id: a line
    naming it in another spelling is still read, and the trace is whole."""
    first, second = lines()
    db, read_again = ingest_counting_lines_read_again(
        runner, tmp_path, monkeypatch, spelled(second, spelling)
    )
    assert sorted(read_again) == [1, 2]  # of each file, the one line that holds a part
    rotated, active = first + relabelled(first, "c" * 32, "c"), relabelled(first, "d" * 32, "d")
    assert content(runner, db) == whole(runner, tmp_path, [rotated, active, second])


def test_files_wanted_for_many_traces_are_read_again_whole(runner, tmp_path, monkeypatch):
    """Past `MAX_SPELLINGS`, searching every line for each id costs more than parsing it."""
    monkeypatch.setattr(joins, "MAX_SPELLINGS", 1)
    _, read_again = ingest_counting_lines_read_again(runner, tmp_path, monkeypatch, lines()[1])
    assert sorted(read_again) == [1, 1, 2, 2]


def ingest_counting_lines_read_again(
    runner, folder: Path, monkeypatch, second: str
) -> tuple[Path, list[int]]:
    """Two files, each holding one batch of the split trace (`second` in the later) and one of a
    trace of its own, ingested together; the store, and the lines the join read again."""
    first = lines()[0]
    write(folder / "logs" / "traces-1.jsonl", first + relabelled(first, "c" * 32, "c"))
    write(folder / "logs" / "traces.jsonl", relabelled(first, "d" * 32, "d") + second)
    read_again = lines_read_again(monkeypatch)
    db = folder / "store.duckdb"
    report = ingest(runner, db, folder / "logs")
    assert report["joined"] == [SPLIT] and report["left_apart"] == {}
    return db, read_again


def without_trace(line: str, trace_id: str) -> str:
    """An export batch without the spans of one trace."""
    document = json.loads(line)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            scope["spans"] = [span for span in scope["spans"] if span["traceId"] != trace_id]
    return json.dumps(document) + "\n"


def test_the_file_still_being_written_is_joined_again_with_its_new_content(runner, tmp_path):
    """The collector appends to its active file, so the next ingest reads it as changed. The joined
    trace is built again from both files: it neither loses the other file's spans nor keeps the
    active file's old content, whichever file holds the trace's first span."""
    first, second = lines()
    other = second.replace(SPLIT, "e" * 32).replace("0af7651916cd43dd8448eb211c80319c", "d" * 32)
    cases = {
        # the trace's later spans arrive in the active file after the first ingest
        "spans-arrive": (first, without_trace(second, SPLIT), second, first + second),
        # the active file holds the trace's first span and gets another trace appended
        "root-in-active": (first, second, second + other, first + second + other),
    }
    for name, (rotated_text, before, after, whole_text) in cases.items():
        folder = tmp_path / name
        rotated = write(folder / "logs" / "traces-1.jsonl", rotated_text)
        active = write(folder / "logs" / "traces.jsonl", before)
        db = folder / "store.duckdb"
        ingest(runner, db, rotated, active)
        write(active, after)
        report = ingest(runner, db, rotated, active)
        assert report["totals"]["files_changed"] == 1 and report["joined"] == [SPLIT], name
        expected = folder / "whole.duckdb"
        ingest(runner, expected, write(folder / "whole" / "export.jsonl", whole_text))
        assert content(runner, db) == content(runner, expected), name


def test_parts_whose_other_file_is_gone_are_kept_and_joined_when_it_is_back(runner, tmp_path, monkeypatch):
    first, second = lines()
    a = write(tmp_path / "a" / "traces-1.jsonl", first)
    b = write(tmp_path / "b" / "traces-2.jsonl", second)
    db = tmp_path / "store.duckdb"
    ingest(runner, db, a)
    os.remove(a)
    text = run(runner, "ingest", str(b), "--db", str(db))
    assert "kept in parts" in text and "cannot be read again" in text
    parts = [row[0] for row in where_from(db) if row[0].startswith(SPLIT)]
    assert len(parts) == 2 and SPLIT in parts  # both parts kept: nothing read is lost
    # Gone for good (an exporter's retention): later ingests neither warn again nor read b again.
    hashed = []

    def checked(path, sha):
        hashed.append(path)
        return changed_since_ingest(path, sha)

    monkeypatch.setattr(joins, "changed_since_ingest", checked)
    report = ingest(runner, db, b)
    assert report["left_apart"] == {} and report["joined"] == [] and hashed == []
    con = store.connect(db, read_only=True)
    try:
        marks = con.execute(
            "SELECT attributes->>'$.left_apart.missing' FROM traces WHERE trace_id LIKE ? || '%'", [SPLIT]
        ).fetchall()
    finally:
        con.close()
    assert marks == [(str(a),), (str(a),)]
    write(a, first)  # the file back where it was: the next ingest joins the parts
    report = ingest(runner, db, a, b)
    assert report["totals"]["files_unchanged"] == 2 and report["joined"] == [SPLIT]
    assert [row[0] for row in where_from(db) if row[0].startswith(SPLIT)] == [SPLIT]
    assert content(runner, db) == whole(runner, tmp_path, lines())


def test_parts_whose_other_file_changed_on_disk_are_joined_when_it_is_ingested_again(runner, tmp_path):
    first, second = lines()
    a = write(tmp_path / "a" / "traces-1.jsonl", first)
    b = write(tmp_path / "b" / "traces-2.jsonl", second)
    db = tmp_path / "store.duckdb"
    ingest(runner, db, a)
    write(a, first + "\n")  # the bytes the store read are no longer on disk
    report = ingest(runner, db, b)
    assert (
        report["left_apart"][SPLIT] == f"{a} has changed since it was ingested; ingest it again to join them"
    )
    report = ingest(runner, db, a)
    assert report["totals"]["files_changed"] == 1 and report["joined"] == [SPLIT]
    assert content(runner, db) == whole(runner, tmp_path, lines())


def test_a_generated_export_cut_into_many_files_is_the_uncut_export(runner, tmp_path, monkeypatch):
    """The benchmark corpus's OTel export, each trace's spans in two batches, cut into 24 files
    (`benchmarks/recut_logs.py --otlp`): many traces joined in one transaction; the files wanted
    for one trace searched for its id, the others parsed whole (`MAX_SPELLINGS` lowered to one
    id); and still the store of the uncut export."""
    bench_corpus.generate(tmp_path / "corpus", tool_calls=3000, file_mb=0.5)
    recut_logs.recut_otlp(tmp_path / "corpus", tmp_path / "cut", files=24)
    uncut = tmp_path / "uncut"
    uncut.mkdir()
    for path in (tmp_path / "corpus").glob("otlp-*.jsonl"):
        shutil.copy(path, uncut / path.name)
    searched = []

    def holding(joinable, keys):
        found = original(joinable, keys)
        searched.append(found is not None)
        return found

    original = joins._holding
    monkeypatch.setattr(joins, "MAX_SPELLINGS", 2)  # one trace's id, in hex and base64
    monkeypatch.setattr(joins, "_holding", holding)
    report = ingest(runner, tmp_path / "cut.duckdb", tmp_path / "cut")
    assert len(report["joined"]) >= 10 and report["left_apart"] == {}
    assert True in searched and False in searched
    ingest(runner, tmp_path / "uncut.duckdb", uncut)
    assert content(runner, tmp_path / "cut.duckdb") == content(runner, tmp_path / "uncut.duckdb")
