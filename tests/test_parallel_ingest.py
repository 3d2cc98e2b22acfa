"""Parsing in worker processes gives the store a serial ingest gives; big JSON Lines files are
streamed with the records, rejects and line numbers a whole read gives; the benchmark corpus
ingests to exactly what its generator says it wrote."""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import polars as pl
import pytest

from traceforge import store
from traceforge.ingest import ingest_paths, parallel, stream
from traceforge.ingest.sources import SourceFile, content_size, read_records
from traceforge.ingest.values import MAX_NESTING
from traceforge.model import Reject

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import corpus as bench_corpus  # noqa: E402
from store_snapshot import ingest, snapshot  # noqa: E402


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> tuple[Path, dict]:
    """A corpus of every generated format in several files, with ids that collide across files:
    a conversation logged again in a second file (its ids are the first file's), and a log that
    grew (the same file with a record more, under another name)."""
    folder = tmp_path_factory.mktemp("corpus") / "logs"
    manifest = bench_corpus.generate(folder, tool_calls=600, file_mb=0.2)
    logs = sorted(folder.glob("openai-log-*.jsonl"))
    grown = folder / "zz-openai-log-grown.jsonl"
    lines = logs[0].read_text().splitlines()
    grown.write_text("\n".join([*lines, lines[0]]) + "\n")
    again = sorted(folder.glob("transcripts-*.jsonl"))[0].read_bytes() + b"\n"
    (folder / "zz-transcripts-again.jsonl.gz").write_bytes(gzip.compress(again))
    assert manifest.files
    return folder, json.loads((folder / bench_corpus.MANIFEST).read_text())


def test_workers_give_the_store_a_serial_ingest_gives(small_corpus, tmp_path):
    folder, _ = small_corpus
    serial = ingest(tmp_path / "serial.duckdb", [folder], workers=1)
    parallel = ingest(tmp_path / "parallel.duckdb", [folder], workers=2)
    assert [f.status for f in parallel.files] == [f.status for f in serial.files]
    assert parallel.totals() == serial.totals()
    # the copies collided with the originals' ids: they were given the fallback ids in both runs
    expected = snapshot(tmp_path / "serial.duckdb")
    assert any("@" in row[0] for row in expected["traces"])
    assert snapshot(tmp_path / "parallel.duckdb") == expected


@pytest.fixture
def tasks(monkeypatch) -> list[list[str]]:
    """The worker tasks of the parallel ingests that follow: each a list of files."""
    seen: list[list[str]] = []
    spied = parallel.ordered_map

    def spy(function, items, workers, shared=()):
        items = list(items)
        seen.extend(items)
        return spied(function, items, workers, shared)

    monkeypatch.setattr(parallel, "ordered_map", spy)
    return seen


def test_small_files_go_to_a_worker_several_at_a_time_to_the_same_store(
    small_corpus, tmp_path, monkeypatch, tasks
):
    """Thousands of small files (Claude Code sessions) cost a frame per table each, about 2 ms
    whatever their size, and a message back: consecutive small files are one worker task, their
    rows made and sent together, and each file's rows are its slice of them."""
    folder, _ = small_corpus
    monkeypatch.setattr(parallel, "GROUP_BYTES", 1 << 20)  # the corpus's 3 MB in several tasks
    grouped = ingest(tmp_path / "grouped.duckdb", [folder], workers=2)
    files = [f.path for f in grouped.files]
    assert [path for task in tasks for path in task] == files  # every file once, in its order
    assert 1 < len(tasks) < len(files) and max(map(len, tasks)) > 1
    for task in tasks:  # by their sizes decompressed (the corpus holds a gzip file)
        assert len(task) == 1 or sum(content_size(Path(path))[0] for path in task) <= parallel.GROUP_BYTES
    monkeypatch.setattr(parallel, "GROUP_BYTES", 0)  # every file a task alone
    tasks.clear()
    alone = ingest(tmp_path / "alone.duckdb", [folder], workers=2)
    assert len(tasks) == len(files)
    assert [asdict(f) for f in alone.files] == [asdict(f) for f in grouped.files]
    assert snapshot(tmp_path / "grouped.duckdb") == snapshot(tmp_path / "alone.duckdb")


def test_file_groups_hold_consecutive_small_files_and_a_big_or_unreadable_file_alone():
    sizes = {"a": 100, "b": 100, "c": 900, "d": 50, "e": 50, "f": 50, "g": 2000}
    groups = parallel.file_groups([*sizes, "unreadable", "h"], sizes | {"h": 10}, max_bytes=1000, max_files=2)
    assert groups == [["a", "b"], ["c", "d"], ["e", "f"], ["g"], ["unreadable"], ["h"]]


def test_a_small_gzip_file_holding_much_is_a_worker_task_alone(tmp_path, monkeypatch, tasks):
    """Tasks are cut by the bytes a worker parses: a gzip file's decompressed size."""
    folder = tmp_path / "logs"
    bench_corpus.generate(folder, tool_calls=300, file_mb=0.05, only="openai-log")
    logs = sorted(folder.glob("openai-log-*.jsonl"))
    packed = folder / "zz-packed.jsonl.gz"
    packed.write_bytes(gzip.compress(b"".join(path.read_bytes() for path in logs)))
    monkeypatch.setattr(parallel, "GROUP_BYTES", 1 << 20)
    assert packed.stat().st_size < parallel.GROUP_BYTES / 4 < parallel.GROUP_BYTES < content_size(packed)[0]
    ingest(tmp_path / "store.duckdb", [folder], workers=2)
    assert [str(packed)] in tasks
    assert max(map(len, tasks)) > 1


def test_workers_hand_their_rows_back_through_files_beside_the_store_removed_at_the_end(
    small_corpus, tmp_path, monkeypatch
):
    """A worker writes a file's rows to Arrow files in a hidden folder beside the store, rather
    than pickling them (which took 2.7 times their size at once); the folder is gone when the
    ingest ends, and when it is interrupted."""
    folder, _ = small_corpus
    monkeypatch.setattr(parallel, "SPOOL_MIN_BYTES", 0)  # the corpus's small files' rows too
    db = tmp_path / "stores" / "store.duckdb"
    db.parent.mkdir()
    seen = []
    con = store.connect(db)
    ingest_paths(
        con, [folder], workers=2, on_file=lambda *_: seen.extend(db.parent.glob(".traceforge-rows-*/*.arrow"))
    )
    con.close()
    assert seen and not list(db.parent.glob(".traceforge-rows-*"))
    ingest(tmp_path / "serial.duckdb", [folder], workers=1)
    assert snapshot(db) == snapshot(tmp_path / "serial.duckdb")

    def stop(path, index, total):
        if index == 3:
            raise KeyboardInterrupt

    monkeypatch.setenv("TRACEFORGE_TEMP_DIRECTORY", str(tmp_path / "scratch"))
    con = store.connect(tmp_path / "again.duckdb")
    with pytest.raises(KeyboardInterrupt):
        ingest_paths(con, [folder], workers=2, on_file=stop)
    con.close()
    assert (tmp_path / "scratch").is_dir() and not list((tmp_path / "scratch").iterdir())


def prepared(path: str, **spool) -> parallel.Prepared:
    (outcome,) = parallel.prepare_files([path], "auto", {}, set(), **spool)
    return outcome.prepared


def test_spooled_rows_load_back_as_they_were(small_corpus, tmp_path):
    folder, _ = small_corpus
    path = str(sorted(folder.glob("openai-log-*.jsonl"))[0])
    kept = prepared(path)
    spooled = prepared(path, spool=str(tmp_path), spool_min_bytes=1)
    assert not spooled.shared.frames and set(spooled.shared.spooled) == set(kept.shared.frames)
    assert all(Path(file).parent == tmp_path for file in spooled.shared.spooled.values())
    spooled.load()
    kept.load()
    assert not list(tmp_path.iterdir()) and not spooled.shared.spooled
    for table, frame in kept.frames.items():
        timeless = [name for name, kind in frame.schema.items() if kind != pl.Datetime(time_zone="UTC")]
        assert spooled.frames[table].schema == frame.schema
        assert spooled.frames[table].select(timeless).equals(frame.select(timeless)), table
    # a spool that cannot be written to (here a file, not a folder): the rows stay, to go pickled
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    unspooled = prepared(path, spool=str(blocked))
    assert not unspooled.shared.spooled and set(unspooled.shared.frames) == set(kept.frames)
    assert list(tmp_path.iterdir()) == [blocked]


def test_a_small_file_s_rows_go_back_pickled_and_a_big_one_s_through_files(small_corpus, tmp_path):
    """Below `SPOOL_MIN_BYTES`, writing, reading back and removing a file's five Arrow files costs
    the process writing the store more than the pickle: 4,204 Claude Code sessions took 49 s to
    ingest so, 34 s with their rows pickled."""
    folder, _ = small_corpus
    path = str(sorted(folder.glob("openai-log-*.jsonl"))[0])
    whole = prepared(path)
    whole.load()
    size = whole.bytes
    spool = tmp_path / "spool"
    spool.mkdir()
    small = prepared(path, spool=str(spool), spool_min_bytes=size + 1)
    assert small.shared.frames and not small.shared.spooled and not list(spool.iterdir())
    big = prepared(path, spool=str(spool), spool_min_bytes=size)
    assert not big.shared.frames and len(list(spool.iterdir())) == len(big.shared.spooled) > 0
    assert parallel.SPOOL_MIN_BYTES < 64 << 20  # a rotated log's 64 MB file still goes through files


def test_many_small_frames_are_inserted_as_one_chunk_and_a_few_big_ones_as_they_are():
    frames = [pl.DataFrame({"trace_id": [f"t{k}"], "n": [k]}) for k in range(parallel.RECHUNK_FRAMES + 1)]
    many = parallel._concat(frames)
    assert many.n_chunks() == 1 and many["n"].to_list() == list(range(len(frames)))
    few = parallel._concat(frames[:3])
    assert few.n_chunks() == 3 and few["trace_id"].to_list() == ["t0", "t1", "t2"]
    big = pl.DataFrame({"trace_id": ["x" * 1000] * (parallel.SPOOL_MIN_BYTES // 1000), "n": 0})
    assert parallel._concat([big] * (parallel.RECHUNK_FRAMES + 1)).n_chunks() == parallel.RECHUNK_FRAMES + 1


def test_workers_replace_a_changed_file_and_skip_unchanged_ones(small_corpus, tmp_path):
    folder, _ = small_corpus
    work = tmp_path / "logs"
    shutil.copytree(folder, work)
    for workers in (1, 2):
        db = tmp_path / f"store-{workers}.duckdb"
        ingest(db, [work], workers=workers)
    changed = sorted(work.glob("openai-log-*.jsonl"))[0]
    changed.write_text("\n".join(changed.read_text().splitlines()[:-1]) + "\n")
    reports = {
        workers: ingest(tmp_path / f"store-{workers}.duckdb", [work], workers=workers) for workers in (1, 2)
    }
    for report in reports.values():
        statuses = {Path(f.path).name: f.status for f in report.files}
        assert statuses.pop(changed.name) == "changed"
        assert set(statuses.values()) == {"unchanged"}
    assert snapshot(tmp_path / "store-1.duckdb") == snapshot(tmp_path / "store-2.duckdb")


def assert_ingested_as_written(folder: Path, manifest: dict, db: Path) -> None:
    """Each file's traces, LLM calls, tool calls and records in the store are what the generator
    counted as it wrote them."""
    con = store.connect(db, read_only=True)
    try:
        for written in manifest["files"]:
            path = str(folder / written["name"])
            traces, llm_calls, tool_calls = con.execute(
                """
                SELECT count(DISTINCT t.trace_id), count(DISTINCT c.call_id), count(DISTINCT tc.tool_call_id)
                FROM traces t
                LEFT JOIN llm_calls c USING (trace_id)
                LEFT JOIN tool_calls tc USING (trace_id)
                WHERE t.source_path = ?
                """,
                [path],
            ).fetchone()
            assert (traces, llm_calls, tool_calls) == (
                written["traces"],
                written["llm_calls"],
                written["tool_calls"],
            ), written["name"]
            records, rejected = con.execute(
                "SELECT records, rejected FROM sources WHERE path = ?", [path]
            ).fetchone()
            assert (records, rejected) == (written["records"], 0), written["name"]
    finally:
        con.close()


def test_the_corpus_ingests_to_what_its_generator_wrote(small_corpus, tmp_path):
    folder, manifest = small_corpus
    db = tmp_path / "store.duckdb"
    ingest(db, [folder], workers=2)
    assert_ingested_as_written(folder, manifest, db)


def test_a_responses_api_log_corpus_ingests_to_what_its_generator_wrote(tmp_path):
    """`--only openai-responses`: every run, long ones included, in a Responses API log whose calls
    send only their new items; each run is one conversation again, rebuilt from those items."""
    folder = tmp_path / "logs"
    bench_corpus.generate(folder, tool_calls=600, file_mb=0.5, only="openai-responses")
    manifest = json.loads((folder / bench_corpus.MANIFEST).read_text())
    assert {f["format"] for f in manifest["files"]} == {"openai-responses"}
    db = tmp_path / "store.duckdb"
    ingest(db, [folder], workers=2)
    assert_ingested_as_written(folder, manifest, db)
    con = store.connect(db, read_only=True)
    try:
        (results_in_longest,) = con.execute(
            "SELECT count(*) FROM messages WHERE role = 'tool' GROUP BY trace_id ORDER BY 1 DESC LIMIT 1"
        ).fetchone()
    finally:
        con.close()
    assert results_in_longest > bench_corpus.MAX_LOGGED_CALLS  # a long run, whole


def test_a_claude_code_corpus_ingests_to_what_its_generator_wrote(tmp_path):
    """`--only claude-code`: a session file per run, as Claude Code writes them (an assistant line
    per content block, a user line per tool result, hook lines beside them); each file is one
    trace again, its workload the project folder, every hook line skipped by rule."""
    folder = tmp_path / "sessions"
    bench_corpus.generate(folder, tool_calls=300, only="claude-code")
    manifest = json.loads((folder / bench_corpus.MANIFEST).read_text())
    assert {f["format"] for f in manifest["files"]} == {"claude-code"}
    assert len(manifest["files"]) == manifest["totals"]["traces"] > 1  # a file per session
    db = tmp_path / "store.duckdb"
    report = ingest(db, [folder], workers=2)
    assert_ingested_as_written(folder, manifest, db)
    con = store.connect(db, read_only=True)
    try:
        formats = con.execute("SELECT DISTINCT source_format FROM traces").fetchall()
        workloads = {w for (w,) in con.execute("SELECT DISTINCT workload FROM traces").fetchall()}
        parallel_turns = con.execute(
            "SELECT count(*) FROM (SELECT call_id FROM tool_calls GROUP BY call_id HAVING count(*) > 1)"
        ).fetchone()[0]
    finally:
        con.close()
    assert formats == [("claude-code",)]
    runs_workloads = {w.name for w in bench_corpus.RunMaker(bench_corpus.DEFAULT_SEED).workloads}
    assert workloads and {w.rsplit("/", 1)[-1] for w in workloads} <= runs_workloads
    assert parallel_turns > 0  # parallel tool_use lines of one response are one LLM call again
    # per session, the SessionStart hook's line and the stop hook's summary after its one reply
    # without tool calls (its last), skipped by rule
    assert sum(sum(f.skipped.values()) for f in report.files) == 2 * len(manifest["files"])
    # appended as things happen: a file's times never go back (a parallel turn's results as each
    # tool finishes, a follow-up question after the last result), as in recorded sessions
    for path in folder.glob("*.jsonl"):
        times = [json.loads(line)["timestamp"] for line in path.read_text().splitlines()]
        assert times == sorted(times), path.name


def test_the_corpus_follows_a_power_law_and_mixes_long_and_short_runs(small_corpus):
    folder, manifest = small_corpus
    formats = {f["format"] for f in manifest["files"]}
    assert formats == set(bench_corpus.FORMATS)
    workloads: dict[str, int] = {}
    lengths = []
    for path in folder.glob("transcripts-*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            name = record["messages"][0]["content"].split(".")[0]
            workloads[name] = workloads.get(name, 0) + 1
            lengths.append(sum(len(m.get("tool_calls") or []) for m in record["messages"]))
    assert max(lengths) >= 10 * min(lengths)
    assert len(workloads) >= 3


# --- streaming ----------------------------------------------------------------------------------


def _whole(path: Path) -> tuple[list[tuple], list[Reject]]:
    rejects: list[Reject] = []
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    records = [
        (r.line, r.value, r.raw) for r in read_records(SourceFile(path, data, "", len(data), False), rejects)
    ]
    return records, rejects


def _streamed(path: Path) -> tuple[list[tuple], list[Reject], bool]:
    rejects: list[Reject] = []
    opened = stream.open_records(path, rejects)
    records = [(r.line, r.value, r.raw) for r in opened.records]
    return records, rejects, opened.streamed


def _messy_lines(count: int) -> list[bytes]:
    lines = []
    for n in range(count):
        record = {"n": n, "text": "x" * (n % 50)}
        if n % 97 == 5:
            lines.append(b'{"n": ' + str(n).encode() + b', "cut')  # a truncated line
        elif n % 89 == 7:
            lines.append(b"")  # a blank line
        elif n % 83 == 3:
            lines.append(json.dumps(record).encode() + b"\r")  # CRLF endings in part of the file
        elif n % 79 == 2:
            lines.append(b'{"bad": "\xff\xfe"}')  # not UTF-8
        else:
            lines.append(json.dumps(record).encode())
    return lines


@pytest.mark.parametrize("compressed", [False, True])
def test_a_big_json_lines_file_streams_to_what_a_whole_read_gives(tmp_path, monkeypatch, compressed):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    data = b"\xef\xbb\xbf" + b"\n".join(_messy_lines(1500)) + b"\n"
    path = tmp_path / ("big.jsonl.gz" if compressed else "big.jsonl")
    path.write_bytes(gzip.compress(data) if compressed else data)
    records, rejects, streamed = _streamed(path)
    assert streamed
    expected_records, expected_rejects = _whole(path)
    assert records == expected_records
    assert [(r.line, r.error, r.raw) for r in rejects] == [(r.line, r.error, r.raw) for r in expected_rejects]
    assert len(rejects) > 20
    # told from the first chunk alone, as a first pass over a big file needs it (a log read twice)
    assert stream.streams_in_chunks(path)
    assert [(r.line, r.value, r.raw) for r in stream.first_pass(str(path))] == records


def _messy_elements(count: int) -> list[str]:
    """JSON texts of array elements: text with characters of 2 to 4 bytes (cut by chunk ends),
    NaN, lone and paired surrogate escapes, an element several chunks long, one nested too deep,
    and numbers, which a chunk can end inside of, last."""
    elements = []
    for n in range(count):
        text = json.dumps({"n": n, "text": "é€𐀀 " * (n % 40), "k": [1, 2.5, None, True]}, ensure_ascii=False)
        if n % 53 == 4:
            text = text[:-1] + ', "score": NaN, "lone": "\\ud800x", "pair": "\\ud83d\\ude00"}'
        elif n % 211 == 9:
            text = text[:-1] + ', "big": "' + "z" * 5000 + '"}'
        elif n == 300:
            text = '{"deep": ' + "[" * (MAX_NESTING + 5) + "]" * (MAX_NESTING + 5) + "}"
        elements.append(text)
    return [*elements, "12345678", "-0.5e3"]


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("layout", ["an element a line", "one line", "indented"])
def test_a_big_json_array_streams_element_by_element_to_what_a_whole_read_gives(
    tmp_path, monkeypatch, compressed, layout
):
    """An export written as one JSON array (Langfuse's, a benchmark's trajectories) is read in
    chunks, an element at a time, however it is laid out: the records and rejects are the whole
    read's, and what is held at once is a few chunks, not the file."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    elements = _messy_elements(700)
    if layout == "an element a line":
        text = "[\n" + ",\n".join(elements) + "\n]\n"
    elif layout == "one line":
        text = "[" + ",".join(elements) + "]"
    else:  # as json.dump(indent=2) writes it, but the element too deep (indented, it is 150 kB)
        pretty = [e if e.startswith('{"deep"') else json.dumps(json.loads(e), indent=2) for e in elements]
        text = "[\n" + ",\n".join(pretty) + "\n]"
    data = b"\xef\xbb\xbf" + text.encode()
    path = tmp_path / ("export.json.gz" if compressed else "export.json")
    path.write_bytes(gzip.compress(data) if compressed else data)
    held = []
    real_append = stream._ArrayReader._append
    monkeypatch.setattr(
        stream._ArrayReader,
        "_append",
        lambda self, chunk: real_append(self, chunk) or held.append(len(self.text)),
    )
    records, rejects, streamed = _streamed(path)
    assert streamed and len(held) > 50
    assert max(held) < 12_000 and len(text) > 15 * max(held)  # a 5 kB element and a chunk or two
    expected_records, expected_rejects = _whole(path)
    assert records == expected_records and len(records) > 690
    assert [(r.line, r.error) for r in rejects] == [(r.line, r.error) for r in expected_rejects]
    assert [r.line for r in rejects] == [301]  # the element too deep, by its number
    assert stream.streams_in_chunks(path)
    assert [(r.line, r.value, r.raw) for r in stream.first_pass(str(path))] == records


def test_numbers_cut_by_a_chunk_end_are_read_whole(tmp_path, monkeypatch):
    """A number at the end of the text read so far may go on in the next chunk: it is read on,
    not taken as it stands (30-digit numbers, 64-byte chunks: every chunk ends inside one)."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 64)
    numbers = [str(10**29 + n) for n in range(200)]
    path = tmp_path / "export.json"
    path.write_text('[{"n": 0},' + ",".join(numbers) + ", -0.5e3, 1.25]")
    records, _, streamed = _streamed(path)
    assert streamed and records == _whole(path)[0]
    assert [value for _, value, _ in records[1:]] == [int(n) for n in numbers] + [-500.0, 1.25]


@pytest.mark.parametrize(
    "cut, reason",
    [
        (
            lambda text: text[: text.index("}", len(text) // 2) + 1] + "\n",
            "Expecting ',' delimiter at line 355 column 1",
        ),
        (lambda text: text.replace("\n]\n", "\n"), "Expecting ',' delimiter at line 702 column 1"),
        (lambda text: text.replace('"n": 400,', '"n": 400'), "Expecting ',' delimiter at line 402 column 11"),
        (lambda text: text + "[]", "Extra data at line 703 column 1"),
    ],
    ids=["cut midway", "no closing bracket", "a comma missing", "more after it"],
)
def test_a_big_json_array_that_breaks_off_fails_with_where(tmp_path, monkeypatch, cut, reason):
    """As a JSON document read whole fails, with the line and column in the file."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    elements = [json.dumps({"n": n, "pad": "p" * (n % 30)}) for n in range(700)]
    text = cut("[\n" + ",\n".join(elements) + "\n]\n")
    path = tmp_path / "export.json"
    path.write_text(text)
    opened = stream.open_records(path, [])
    assert opened.streamed
    with pytest.raises(stream.SourceError) as raised:
        list(opened.records)
    assert str(raised.value) == (
        f"not JSON or JSON Lines ({reason}); if it is a truncated JSON document, the writer may have "
        "crashed: restore or re-export it"
    )


@pytest.mark.parametrize("kind", ["array", "csv"])
def test_a_file_in_one_chunk_is_read_whole_and_parsed_in_one_pass(tmp_path, kind):
    """Only a file of more than a chunk is worth reading in chunks; a smaller one is read whole,
    without probing its content further, and an adapter that reads big files twice parses it once."""
    path = tmp_path / f"small.{kind}"
    elements = ",\n".join(json.dumps({"n": n}) for n in range(50))
    path.write_text(f"[\n{elements}\n]\n" if kind == "array" else _messy_csv(20))
    records, _, streamed = _streamed(path)
    assert not streamed and len(records) >= 18
    assert not stream.streams_in_chunks(path) and stream.first_pass(str(path)) is None


def test_a_big_json_array_with_a_byte_that_is_not_utf8_fails_with_where(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    elements = [json.dumps({"n": n, "text": "é€ " * (n % 20)}, ensure_ascii=False) for n in range(300)]
    elements[200] = '{"n": 200, "text": "ab\udcffcd"}'  # a lone byte 0xff, written as it is
    path = tmp_path / "export.json"
    path.write_bytes(("[\n" + ",\n".join(elements) + "\n]\n").encode("utf-8", "surrogateescape"))
    with pytest.raises(stream.SourceError) as raised:
        list(stream.open_records(path, []).records)
    assert str(raised.value) == (
        "not JSON or JSON Lines (not valid UTF-8 (invalid start byte) at line 202 column 23); if it is "
        "a truncated JSON document, the writer may have crashed: restore or re-export it"
    )


def test_json_lines_of_arrays_with_a_first_line_longer_than_a_chunk_are_read_as_lines(tmp_path, monkeypatch):
    """A first line longer than the chunk could be a JSON array written on one line: what follows
    the line tells. Lines of bare message lists (a transcript format) stay lines, not an array's
    elements (read whole, as JSON Lines whose first line is longer than a chunk were before)."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 256)
    long_first = [{"role": "user", "content": "x" * 300}, {"role": "assistant", "content": "ok"}]
    short_first = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x" * 300}]
    for conversation, compressed in itertools.product((long_first, short_first), (False, True)):
        lines = [json.dumps(conversation)] * 3
        data = ("\n".join(lines) + "\n").encode()
        path = tmp_path / ("lists.jsonl.gz" if compressed else "lists.jsonl")
        path.write_bytes(gzip.compress(data) if compressed else data)
        records, rejects, _ = _streamed(path)
        assert [(line, value) for line, value, _ in records] == [(n, conversation) for n in (1, 2, 3)]
        assert not rejects and not stream.streams_in_chunks(path)  # read whole, as before


def _messy_csv(rows: int) -> str:
    """A CSV export as platforms write it: quoted cells holding commas, quotes, line breaks (some
    longer than a chunk) and characters of several bytes, CRLF line ends, blank lines, and rows
    with a field too many or too few."""
    lines = ["id,traceId,input,output"]
    for n in range(rows):
        text = f'line one, of {n}\nline "two" é€𐀀' + ("\n" + "w" * 3000 if n % 97 == 5 else "")
        if n % 61 == 7:
            lines.append(f"o{n},t{n % 9},{n}")  # a field too few
        elif n % 67 == 8:
            lines.append("")
        else:
            lines.append(f'o{n},t{n % 9},"{text.replace(chr(34), chr(34) * 2)}",{n * 2}')
    return "\r\n".join(lines) + "\r\n"


@pytest.mark.parametrize("compressed", [False, True])
def test_a_big_csv_table_streams_row_by_row_to_what_a_whole_read_gives(tmp_path, monkeypatch, compressed):
    """A CSV export is read a row at a time (a quoted cell may hold line breaks, so not in chunks
    of lines): the records, their raw text and the rejects are the whole read's."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    data = b"\xef\xbb\xbf" + _messy_csv(800).encode()
    path = tmp_path / ("observations.csv.gz" if compressed else "observations.csv")
    path.write_bytes(gzip.compress(data) if compressed else data)
    records, rejects, streamed = _streamed(path)
    assert streamed
    expected_records, expected_rejects = _whole(path)
    assert records == expected_records and len(records) > 770
    assert [(r.line, r.error, r.raw) for r in rejects] == [(r.line, r.error, r.raw) for r in expected_rejects]
    assert len(rejects) == 13 and rejects[0].error == "CSV row has 3 fields, the header has 4"
    assert stream.streams_in_chunks(path)
    assert [(r.line, r.value, r.raw) for r in stream.first_pass(str(path))] == records


def test_a_big_csv_table_with_bytes_that_are_not_utf8_fails_the_file(tmp_path, monkeypatch):
    """As a whole read fails it (no table, no JSON): with the reason and what to do."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    lines = _messy_csv(300).encode().split(b"\r\n")
    lines[250] = lines[250].replace(b"line one", b"line \xff one")
    path = tmp_path / "observations.csv"
    path.write_bytes(b"\r\n".join(lines))
    opened = stream.open_records(path, [])
    assert opened.streamed
    with pytest.raises(
        stream.SourceError,
        match=r"^not valid UTF-8 in the CSV table \(invalid start byte\); re-encode the file as UTF-8$",
    ):
        list(opened.records)
    with pytest.raises(stream.SourceError, match="not valid UTF-8"):
        _whole(path)


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({f"key{n}": n for n in range(100)}, indent=2),  # a pretty-printed document
        "a,b\n" + "\n".join(f"{n},{n * 2}" if n != 3 else '{"n": 1}' for n in range(300)) + "\n",
        "garbage first line\n" + "\n".join(json.dumps({"n": n}) for n in range(300)) + "\n",
        "[INFO] started\n" + "[INFO] step, done\n" * 100,  # text that merely starts with a bracket
        "[" + ",".join(str(n) for n in range(300)) + "]",  # an array of numbers, not of records
    ],
    ids=[
        "pretty-document",
        "csv-with-a-json-line",
        "first-line-not-json",
        "bracketed-text",
        "array-of-numbers",
    ],
)
def test_what_is_neither_json_lines_nor_an_array_of_records_is_read_whole_as_before(
    tmp_path, monkeypatch, content
):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 256)
    path = tmp_path / "file.json"
    path.write_text(content)
    try:
        records, rejects, streamed = _streamed(path)
    except stream.SourceError:  # not records at all, as a whole read says too
        with pytest.raises(stream.SourceError):
            _whole(path)
        return
    assert not streamed
    assert not stream.streams_in_chunks(path) and stream.first_pass(str(path)) is None  # parsed whole
    expected_records, expected_rejects = _whole(path)
    assert records == expected_records
    assert [(r.line, r.error) for r in rejects] == [(r.line, r.error) for r in expected_rejects]


def _hex_id(n: int) -> str:
    return f"{n:02d}" + "ab" * 15


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("chunk", [1 << 20, 200])  # the file in one chunk (not streamed otherwise), or many
def test_a_file_read_again_for_some_ids_parses_only_the_lines_holding_one(
    tmp_path, monkeypatch, compressed, chunk
):
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    lines = [json.dumps({"traceId": _hex_id(n), "n": n}).encode() for n in range(60)]
    lines[7] = lines[7].upper()  # an exporter writing its hex upper-case
    lines[20] = b'{"traceId": "' + _hex_id(20).encode() + b'", "cut'  # not JSON, and not wanted
    lines[33] = b'{"traceId": "' + _hex_id(33).encode() + b'", "cut'  # not JSON, and wanted
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / ("export.jsonl.gz" if compressed else "export.jsonl")
    path.write_bytes(gzip.compress(data) if compressed else data)
    wanted = [_hex_id(n).encode() for n in (3, 7, 33, 59)]
    rejects: list[Reject] = []
    opened = stream.open_records(path, rejects, holding=wanted)
    assert opened.streamed
    assert [(r.line, r.value.get("n", r.value.get("N"))) for r in opened.records] == [
        (4, 3),
        (8, 7),
        (60, 59),
    ]
    assert [r.line for r in rejects] == [34]  # the unwanted bad line was never parsed
    everything: list[Reject] = []
    assert len(list(stream.open_records(path, everything).records)) == 58 and len(everything) == 2


def test_a_file_not_plainly_json_lines_read_again_for_some_ids_gives_every_record(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps([{"traceId": _hex_id(n)} for n in range(5)], indent=2))
    opened = stream.open_records(path, [], holding=[_hex_id(3).encode()])
    assert not opened.streamed and len(list(opened.records)) == 5


def test_gzip_data_that_breaks_off_midway_fails_the_file_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 512)
    data = gzip.compress(b"\n".join(json.dumps({"n": n, "p": "z" * 30}).encode() for n in range(2000)))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    opened = stream.open_records(path, [])
    with pytest.raises(stream.SourceError, match="corrupt or truncated gzip"):
        list(opened.records)
