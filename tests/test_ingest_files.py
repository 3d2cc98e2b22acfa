"""Reading sources: folders, globs, gzip by content, format detection by content, idempotence,
changed and duplicate files, and files that are not traces."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

from builders import OpenAILoop, openai_tool_call, write_jsonl
from conftest import SAMPLE_TRACES

from traceforge import store
from traceforge.cli import cli
from traceforge.ingest import ingest_paths, sources


def conversation(user: str, n_tools: int = 2) -> list[dict]:
    loop = OpenAILoop("You are helpful.", user)
    for i in range(n_tools):
        loop.call(tool_calls=[openai_tool_call(f"call_{user[:4]}_{i}", "lookup", {"q": f"{user} {i}"})])
        loop.result(f"call_{user[:4]}_{i}", f"result {i}")
    loop.call(content="done")
    return loop.records


def table_counts(con) -> dict[str, int]:
    return {
        t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("traces", "llm_calls", "tool_calls", "messages", "tool_defs", "rejects", "sources")
    }


def test_folders_globs_and_gzip_detected_by_content(tmp_path, con):
    logs = tmp_path / "logs"
    write_jsonl(logs / "a" / "day1.jsonl", conversation("alpha"))
    write_jsonl(logs / "a" / "b" / "day2.log.gz", conversation("bravo"), compress=True)
    # gzip without a .gz name, and a misleading name: content decides.
    write_jsonl(logs / "archive.bin", conversation("charlie"), compress=True)
    write_jsonl(logs / "anthropic_export.jsonl", conversation("delta"))

    report = ingest_paths(con, [logs / "a", str(logs / "*.bin"), logs / "anthropic_export.jsonl"])

    assert sorted(f.status for f in report.files) == ["new"] * 4
    assert {f.format for f in report.files} == {"openai-chat"}
    assert table_counts(con)["traces"] == 4


def test_ingesting_the_same_files_twice_changes_nothing_and_says_so(tmp_path, con):
    write_jsonl(tmp_path / "logs" / "one.jsonl", conversation("alpha") + conversation("bravo"))
    ingest_paths(con, [tmp_path / "logs"])
    before = table_counts(con)
    ids = con.execute("SELECT trace_id FROM traces ORDER BY 1").fetchall()

    again = ingest_paths(con, [tmp_path / "logs"])

    assert [f.status for f in again.files] == ["unchanged"]
    assert again.totals()["traces"] == 0
    assert table_counts(con) == before
    assert con.execute("SELECT trace_id FROM traces ORDER BY 1").fetchall() == ids


def test_ids_are_stable_across_stores(tmp_path):
    write_jsonl(tmp_path / "logs" / "one.jsonl", conversation("alpha") + conversation("bravo"))
    ids = []
    for name in ("first.duckdb", "second.duckdb"):
        con = store.connect(tmp_path / name)
        ingest_paths(con, [tmp_path / "logs"])
        ids.append(
            con.execute("SELECT trace_id, call_id, tool_call_id FROM v_tool_calls ORDER BY 1, 3").fetchall()
        )
        con.close()
    assert ids[0] == ids[1] and ids[0]


def test_a_changed_file_replaces_what_it_gave_without_duplicates(tmp_path, con):
    path = write_jsonl(tmp_path / "logs" / "live.jsonl", conversation("alpha"))
    ingest_paths(con, [path])
    write_jsonl(path, conversation("alpha") + conversation("bravo"))  # the log grew

    report = ingest_paths(con, [path])

    assert [f.status for f in report.files] == ["changed"]
    assert table_counts(con)["traces"] == 2
    assert table_counts(con)["sources"] == 1
    assert con.execute("SELECT count(*) - count(DISTINCT call_id) FROM llm_calls").fetchone()[0] == 0


def test_a_file_is_the_same_file_whichever_folder_ingest_runs_in(tmp_path, con, monkeypatch):
    path = write_jsonl(tmp_path / "logs" / "live.jsonl", conversation("alpha"))
    monkeypatch.chdir(tmp_path)
    ingest_paths(con, ["logs"])
    assert con.execute("SELECT path FROM sources").fetchall() == [(str(path),)]
    assert con.execute("SELECT DISTINCT source_path FROM traces").fetchall() == [(str(path),)]
    monkeypatch.chdir(tmp_path / "logs")
    assert [f.status for f in ingest_paths(con, ["."]).files] == ["unchanged"]
    write_jsonl(path, conversation("alpha") + conversation("bravo"))  # the log grew
    monkeypatch.chdir(tmp_path.parent)
    report = ingest_paths(con, [f"{tmp_path.name}/logs/live.jsonl"])
    assert [f.status for f in report.files] == ["changed"]
    assert table_counts(con)["traces"] == 2 and table_counts(con)["sources"] == 1


def as_written_before_paths_were_absolute(con, folder: Path) -> None:
    """Make the store one an older traceforge wrote in `folder`: paths relative, as they were given."""
    for table, column in (("sources", "path"), ("traces", "source_path"), ("rejects", "source_path")):
        con.execute(f"UPDATE {table} SET {column} = replace({column}, ?, '')", [f"{folder}/"])
    con.execute(
        "UPDATE traces SET attributes = json_merge_patch(attributes, json_object('source_paths', to_json("
        "list_transform(json_extract_string(attributes, '$.source_paths[*]'), lambda p: replace(p, ?, '')))"
        ")) "
        "WHERE json_exists(attributes, '$.source_paths')",
        [f"{folder}/"],
    )


def test_a_store_with_relative_paths_takes_the_absolute_ones_when_its_files_are_ingested_again(
    tmp_path, con, monkeypatch
):
    otel = (
        (Path(__file__).parent / "fixtures" / "otlp" / "otel_genai_current.jsonl")
        .read_text()
        .splitlines(True)
    )
    live = write_jsonl(tmp_path / "logs" / "live.jsonl", conversation("alpha"))
    (tmp_path / "logs" / "broken.jsonl").write_text('{"cut": \n')
    for n, line in enumerate(otel):  # a trace joined from two files: its `source_paths` name them
        (tmp_path / "logs" / f"otel-{n}.jsonl").write_text(line)
    ingest_paths(con, [tmp_path / "logs"])
    as_written_before_paths_were_absolute(con, tmp_path)
    assert con.execute("SELECT count(*) FROM sources WHERE path LIKE 'logs/%'").fetchone()[0] == 4
    monkeypatch.chdir(tmp_path / "logs")
    ingest_paths(con, ["."])  # another folder: the relative paths name nothing here, so they stay
    assert con.execute("SELECT count(*) FROM sources WHERE path LIKE 'logs/%'").fetchone()[0] == 4
    write_jsonl(live, conversation("alpha") + conversation("bravo"))  # the log grew
    monkeypatch.chdir(tmp_path)  # the folder the store was written in

    report = ingest_paths(con, ["logs"])

    statuses = {Path(f.path).name: f.status for f in report.files}
    assert statuses == {
        "broken.jsonl": "unchanged",
        "live.jsonl": "changed",
        "otel-0.jsonl": "unchanged",
        "otel-1.jsonl": "unchanged",
    }
    folder = str(tmp_path / "logs")
    for table, column in (("sources", "path"), ("traces", "source_path"), ("rejects", "source_path")):
        paths = con.execute(f"SELECT DISTINCT {column} FROM {table}").fetchall()
        assert paths and all(p.startswith(folder + "/") for (p,) in paths), (table, paths)
    named = con.execute(
        "SELECT attributes->>'$.source_paths' FROM traces WHERE attributes->>'$.source_paths' IS NOT NULL"
    ).fetchall()
    assert [json.loads(n) for (n,) in named] == [[f"{folder}/otel-0.jsonl", f"{folder}/otel-1.jsonl"]]
    assert table_counts(con)["traces"] == 4 and table_counts(con)["sources"] == 4  # 2 alpha/bravo, 2 otel


def test_same_bytes_under_another_path_are_not_ingested_twice(tmp_path, con):
    path = write_jsonl(tmp_path / "logs" / "one.jsonl", conversation("alpha"))
    ingest_paths(con, [path])
    copy = tmp_path / "backup" / "one-copy.jsonl"
    copy.parent.mkdir()
    shutil.copy(path, copy)

    report = ingest_paths(con, [copy])

    assert [f.status for f in report.files] == ["duplicate"]
    assert str(path) in report.files[0].message
    assert table_counts(con)["traces"] == 1
    assert [f.status for f in ingest_paths(con, [copy]).files] == ["unchanged"]


def test_files_that_are_not_traces_get_one_clear_error_each(tmp_path, con):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"retries": 3, "endpoints": ["a", "b"]}))
    (bad / "corrupt.jsonl.gz").write_bytes(gzip.compress(json.dumps(conversation("x")).encode())[:60])
    (bad / "image.dat").write_bytes(bytes(range(256)) * 10)
    (bad / "empty.jsonl").write_text("")
    (bad / "prose.log").write_text("this is not json\nnor this\n")

    report = ingest_paths(con, [bad])

    messages = {f.path.rsplit("/", 1)[-1]: f.message for f in report.files}
    assert {f.status for f in report.files} == {"failed"}
    assert "not a recognised trace format" in messages["config.json"]
    assert "gzip" in messages["corrupt.jsonl.gz"]
    assert "binary" in messages["image.dat"]
    assert "empty" in messages["empty.jsonl"]
    assert "JSON" in messages["prose.log"]
    rejects = dict(
        con.execute(
            "SELECT regexp_extract(source_path, '[^/]+$'), count(*) FROM rejects GROUP BY 1"
        ).fetchall()
    )
    # every file is accounted for in `rejects`, with the start of its content where it is text
    assert rejects == {
        "config.json": 1,
        "corrupt.jsonl.gz": 1,
        "image.dat": 1,
        "empty.jsonl": 1,
        "prose.log": 1,
    }
    assert (
        con.execute("SELECT raw FROM rejects WHERE source_path LIKE '%prose.log'")
        .fetchone()[0]
        .startswith("this is not json")
    )
    assert con.execute("SELECT count(*) FROM sources WHERE error IS NOT NULL").fetchone()[0] == 5


def test_bom_crlf_and_odd_numbers_are_read(tmp_path, con):
    records = conversation("alpha")
    records[0]["response"]["usage"]["prompt_tokens"] = "120"  # a number as a string
    records[1]["response"]["usage"]["completion_tokens"] = 10**30  # absurd: not a count
    text = "\r\n".join(json.dumps(r) for r in records).replace('"result 0"', '"nan: NaN"') + "\r\n"
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    report = ingest_paths(con, [tmp_path / "bom.jsonl"])
    assert report.files[0].rejected == 0
    tokens = con.execute("SELECT input_tokens, output_tokens FROM llm_calls ORDER BY seq").fetchall()
    assert tokens[0][0] == 120 and tokens[1][1] is None


def test_a_log_whose_first_line_was_cut_keeps_its_other_lines(tmp_path, con):
    records = conversation("alpha")
    lines = [json.dumps(r) for r in records]
    lines[0] = lines[0][: len(lines[0]) // 2]  # the writer crashed mid-line
    (tmp_path / "cut.jsonl").write_text("\n".join(lines) + "\n")
    report = ingest_paths(con, [tmp_path / "cut.jsonl"])
    assert report.files[0].status == "new"
    assert con.execute("SELECT line FROM rejects").fetchall() == [(1,)]
    assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == len(records) - 1


def test_the_terminal_shows_stored_absolute_paths_as_a_user_would_type_them(tmp_path, runner, monkeypatch):
    from traceforge.cli import cli
    from traceforge.report.terminal import display_path

    path = write_jsonl(tmp_path / "work" / "logs" / "live.jsonl", conversation("alpha"))
    monkeypatch.chdir(tmp_path / "work")
    db = str(tmp_path / "store.duckdb")
    result = runner.invoke(cli, ["ingest", str(path), "--db", db])  # given absolute, under this folder
    assert result.exit_code == 0, result.output
    assert "new logs/live.jsonl " in result.output
    monkeypatch.chdir(tmp_path / "work" / "logs")
    (tmp_path / "other").mkdir()
    write_jsonl(tmp_path / "other" / "more.jsonl", conversation("bravo"))
    result = runner.invoke(cli, ["ingest", "../../other", "--db", db])  # relative, shorter than absolute
    assert "new ../../other/more.jsonl " in result.output
    assert display_path("/var/log/agent.jsonl") == "/var/log/agent.jsonl"  # far from here: absolute


def test_a_big_file_is_named_before_it_is_read_with_how_to_split_it(tmp_path, runner, monkeypatch):
    """A big file whose traces are all held until it is read (an agent framework's own log, here a
    Claude Code session; a JSON document that is not an array of records, read whole) takes more
    than its size in memory: ingest says so before reading it, with the command that splits it
    (zcat first for gzip, whose decompressed size counts). Transcripts, Chat Completions, Messages
    or Responses API logs and OTel, Langfuse or LangSmith exports, handed out a trace at a time (in
    JSON Lines, or as one JSON array read element by element), small files, and a big file the
    store holds unchanged, are not named; the ingest goes on either way."""
    import traceforge.ingest
    from traceforge.ingest import stream

    repo = Path(__file__).resolve().parents[1]
    logs = tmp_path / "logs"
    shutil.copytree(repo / "sample_traces", logs)
    spans = (repo / "tests" / "fixtures" / "otlp" / "otel_genai_current.jsonl").read_bytes()
    (logs / "spans.jsonl.gz").write_bytes(gzip.compress(spans))
    responses = (repo / "tests" / "fixtures" / "openai_responses" / "gateway.jsonl").read_bytes()
    (logs / "responses.jsonl.gz").write_bytes(gzip.compress(responses))
    session = (repo / "tests" / "fixtures" / "claude_code" / "compacted_session.jsonl").read_bytes()
    (logs / "session.jsonl.gz").write_bytes(gzip.compress(session))
    shutil.copy(repo / "tests" / "fixtures" / "langsmith" / "run_tree.json", logs)  # one run, a document
    openhands = repo / "tests" / "fixtures" / "openhands"
    shutil.copy(openhands / "parallel_calls.json", logs / "openhands-trajectory.json")  # events: one trace
    runs = [json.loads(line) for line in (openhands / "eval_output.jsonl").read_text().splitlines()] * 8
    write_jsonl(
        logs / "openhands-output.jsonl", [{**run, "instance_id": f"i{n}"} for n, run in enumerate(runs)]
    )
    roles = ["user", "assistant"]
    said = [{"role": roles[n % 2], "content": f"message {n} " + "words " * 15} for n in range(120)]
    write_jsonl(logs / "conversation.jsonl", said)  # bare messages, one a line: one conversation
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(traceforge.ingest, "BIG_FILE_BYTES", 11_000)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8192)  # files of more than a chunk are streamed
    db = str(tmp_path / "store.duckdb")
    first = runner.invoke(cli, ["ingest", "logs", "--db", db])
    assert first.exit_code == 0, first.output
    notes = [line for line in first.stderr.splitlines() if line.startswith("note:")]
    assert [note.split()[1] for note in notes] == [
        "logs/conversation.jsonl",
        "logs/openhands-trajectory.json",
        "logs/run_tree.json",
        "logs/session.jsonl.gz",
    ]
    assert notes[1].startswith("note: logs/openhands-trajectory.json holds 12.3kB of data. Its traces")
    streamed = [
        "anthropic_messages_transcripts.jsonl",
        "openai_chat_gateway.jsonl",
        "openai_chat_legacy_functions.jsonl",
        "openai_chat_transcripts.json",  # a JSON array
        "openhands-output.jsonl",  # a run a line
    ]
    assert all((logs / name).stat().st_size > 11_000 for name in streamed)  # handed out as read: not named
    assert len(spans) > 11_000 and len(responses) > 11_000
    assert notes[2:] == [
        "note: logs/run_tree.json holds 15.1kB of data. Its traces are all held in memory until the "
        "whole file is read, which can take more than its size. If it is JSON Lines, split it into "
        "files of about 64 MB and ingest those instead, to bound memory and use every core (mkdir "
        "parts && split -C 64m -d --additional-suffix=.jsonl logs/run_tree.json parts/part-): the "
        "traces spread over the parts are joined, so the store holds the same traces.",
        "note: logs/session.jsonl.gz holds 13.3kB of data. Its traces are all held in memory until "
        "the whole file is read, which can take more than its size. If it is JSON Lines, split it "
        "into files of about 64 MB and ingest those instead, to bound memory and use every core "
        "(mkdir parts && zcat logs/session.jsonl.gz | split -C 64m -d --additional-suffix=.jsonl - "
        "parts/part-): the traces spread over the parts are joined, so the store holds the same "
        "traces.",
    ]
    assert "12 new" in first.stderr
    again = runner.invoke(cli, ["ingest", "logs", "--db", db])
    assert again.exit_code == 0 and "note:" not in again.stderr, again.stderr
    (logs / "session.jsonl.gz").write_bytes(gzip.compress(session + b"\n"))  # changed: named again
    changed = runner.invoke(cli, ["ingest", "logs", "--db", db])
    assert [line[:34] for line in changed.stderr.splitlines() if line.startswith("note:")] == [
        "note: logs/session.jsonl.gz holds "
    ]


def test_a_gzip_file_s_size_is_its_content_s(tmp_path):
    plain = tmp_path / "a.jsonl"
    plain.write_text('{"a": 1}\n' * 10_000)
    packed = tmp_path / "a.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert packed.stat().st_size < 1_000
    assert sources.content_size(packed) == (90_000, True)
    assert sources.content_size(plain) == (90_000, False)


def test_a_cut_gzip_file_is_not_taken_for_a_big_one_by_its_last_bytes(tmp_path, runner):
    """A gzip file's size comes from its trailer, the last 4 bytes: in a file cut short they are
    whatever the data held there, here 1.6 GB, which no 2 kB of deflate could hold. The file fails
    as cut, with no note about a file too big to hold."""
    logs = tmp_path / "logs"
    logs.mkdir()
    packed = gzip.compress((SAMPLE_TRACES / "openai_chat_gateway.jsonl").read_bytes())
    cut = packed[:2_000] + (1_600_000_000).to_bytes(4, "little")
    (logs / "archive.jsonl.gz").write_bytes(cut)
    assert sources.content_size(logs / "archive.jsonl.gz") == (len(cut), True)
    result = runner.invoke(cli, ["ingest", str(logs), "--db", str(tmp_path / "s.duckdb")])
    assert result.exit_code == 1, result.output
    assert "corrupt or truncated gzip data" in result.stderr
    assert "note:" not in result.stderr and "GB" not in result.stderr


def test_analyze_names_a_big_file_too_and_quotes_its_path_for_the_shell(tmp_path, runner, monkeypatch):
    import traceforge.ingest

    logs = tmp_path / "agent logs"
    logs.mkdir()
    shutil.copy(
        Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "openai_responses" / "gateway.jsonl",
        logs,
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(traceforge.ingest, "BIG_FILE_BYTES", 20_000)
    result = runner.invoke(
        cli, ["analyze", "agent logs", "--db", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    assert (
        "(mkdir parts && split -C 64m -d --additional-suffix=.jsonl 'agent logs/gateway.jsonl' "
        "parts/part-)" in result.stderr
    )


def test_many_files_are_listed_a_line_per_folder_and_each_with_v(runner, tmp_path):
    logs = tmp_path / "logs"
    for i in range(25):
        write_jsonl(logs / "team-a" / f"session-{i:02}.jsonl", conversation(f"alpha {i}"))
    for i in range(3):
        write_jsonl(logs / "team-b" / f"session-{i}.jsonl", conversation(f"bravo {i}", n_tools=1))
    with open(logs / "team-b" / "session-0.jsonl", "a") as fh:
        fh.write('{"request": {"model": "gpt-4o", "messa\n')
    (logs / "team-b" / "notes.jsonl").write_text('{"theme": "dark"}\n')

    def folder_lines(db: Path) -> dict[str, str]:
        result = runner.invoke(cli, ["ingest", str(logs), "--db", str(db)])
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert not [line for line in lines if "session-" in line or "agent.jsonl" in line]
        assert [line for line in lines if line.startswith("error:") and "notes.jsonl" in line]
        read = sum(1 for path in logs.rglob("*.jsonl") if path.name != "notes.jsonl")
        assert f"({read} files read, a line per folder" in result.output
        # the query the closing line offers runs, and lists every file (the failed one too)
        query = re.search(r'traceforge sql "([^"]+)"', result.output).group(1)
        listed = runner.invoke(cli, ["sql", query, "--db", str(db), "--json"])
        assert listed.exit_code == 0, listed.output
        assert len(json.loads(listed.stdout)) == read + 1
        con = store.connect(db, read_only=True)
        found = {}
        for team in ("team-a", "team-b"):
            (line,) = [line for line in lines if line.strip().startswith("new") and f"{team}/" in line]
            traces, llm_calls, tool_calls, rejected, files = con.execute(
                "SELECT sum(traces), "
                "(SELECT count(*) FROM llm_calls JOIN traces USING (trace_id) WHERE source_path LIKE $1), "
                "(SELECT count(*) FROM tool_calls JOIN traces USING (trace_id) WHERE source_path LIKE $1), "
                "sum(rejected), count(*) FROM sources WHERE path LIKE $1 AND error IS NULL",
                [f"%/{team}/%"],
            ).fetchone()
            assert line.split()[:3] == ["new", str(files), "files"]
            assert f"openai-chat: {traces} traces, {llm_calls} LLM calls, {tool_calls} tool calls" in line
            assert (f"{rejected} rejected" in line) == (team == "team-b")
            found[team] = line
        con.close()
        return found

    lines = folder_lines(tmp_path / "s.duckdb")
    assert "folders in it" not in " ".join(lines.values())
    # A folder per session, as Claude Code keeps a session's subagents: 23 folders, past the 20
    # lines, so team-a's line holds the folders in it.
    for i in range(21):
        path = logs / "team-a" / f"session-{i:02}" / "subagents" / "agent.jsonl"
        write_jsonl(path, conversation(f"agent {i}"))
    lines = folder_lines(tmp_path / "t.duckdb")
    assert "team-a/ and the folders in it" in lines["team-a"] and "folders in it" not in lines["team-b"]

    listed = runner.invoke(cli, ["ingest", str(logs), "--db", str(tmp_path / "v.duckdb"), "-v"])
    assert len([line for line in listed.output.splitlines() if "jsonl" in line and "new" in line]) == 49
    assert "a line per folder" not in listed.output
