"""The CLI as a user meets it: help, version, exit codes, messages, and the store it leaves."""

from __future__ import annotations

import gc
import json
import re

import duckdb
import pytest
from builders import OpenAILoop, openai_tool_call, write_jsonl
from conftest import SAMPLE_TRACES

from traceforge import __version__
from traceforge.cli import cli
from traceforge.workers import BULK_COLLECTION_THRESHOLDS


def logs(tmp_path, n: int = 2):
    folder = tmp_path / "logs"
    for i in range(n):
        loop = OpenAILoop("You are a support agent.", f"Where is order {1000 + i}?", workload="support")
        loop.call(
            tool_calls=[openai_tool_call(f"call_{i}", "get_order", {"order_id": str(1000 + i)})],
            prompt_tokens=300,
            completion_tokens=20,
        )
        loop.result(f"call_{i}", json.dumps({"status": "shipped"}))
        loop.call(content="It has shipped.", prompt_tokens=350, completion_tokens=8, cached=256)
        write_jsonl(folder / f"day{i}.jsonl", loop.records)
    return folder


def test_version_and_help_with_examples_on_every_verb(runner):
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output
    assert "Examples:" in runner.invoke(cli, ["--help"]).output
    for name in cli.list_commands(None):
        command = cli.get_command(None, name)
        help_text = runner.invoke(cli, [name, "--help"]).output
        assert "Examples:" in help_text, f"`traceforge {name} --help` has no examples"
        assert f"traceforge {name}" in help_text.split("Examples:")[1], name
        assert command.help


def test_a_verb_imports_only_its_own_module(tmp_path):
    """`traceforge ingest` starts without importing the analyses, the exports or `datasets`; the
    full list of verbs still shows in `--help`."""
    import subprocess
    import sys

    code = (
        "import sys; from traceforge.cli import main; sys.argv = ['traceforge', 'ingest', '--help'];\n"
        "try: main()\nexcept SystemExit: pass\n"
        "print(sorted(m for m in ('traceforge.cli.analyze', 'traceforge.analysis.dag', 'networkx',"
        " 'datasets', 'traceforge.cli.export') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Load trace files into the store" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"
    listed = subprocess.run(
        [sys.executable, "-m", "traceforge", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert all(f"  {verb} " in listed for verb in ("analyze", "cache-sim", "ingest", "lake", "sql"))


def test_analyze_prints_the_summary_and_leaves_the_store(runner, tmp_path):
    db = tmp_path / "out.duckdb"
    result = runner.invoke(cli, ["analyze", str(logs(tmp_path)), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "2 traces in 1 workload," in result.output
    assert "support" in result.output and "gpt-4o-2024-08-06" in result.output
    assert "No rejected records." in result.output
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT sum(input_tokens), sum(cache_read_tokens) FROM llm_calls").fetchone() == (
        1300,
        512,
    )
    con.close()


def test_analyze_json_is_machine_readable_and_rerun_reuses_the_store(runner, tmp_path):
    folder, db = logs(tmp_path), tmp_path / "s.duckdb"
    first = runner.invoke(cli, ["analyze", str(folder), "--db", str(db), "--json"])
    summary = json.loads(first.stdout)
    assert summary["totals"]["traces"] == 2 and summary["totals"]["tool_calls"] == 2
    assert summary["by_workload_model"][0]["input_tokens"] == 1300
    again = runner.invoke(cli, ["analyze", str(folder), "--db", str(db), "--json"])
    assert json.loads(again.stdout)["totals"] == summary["totals"]
    assert "Nothing new" in again.stderr


def test_rejects_are_reported_and_strict_fails_the_run(runner, tmp_path):
    folder = logs(tmp_path)
    with open(folder / "day0.jsonl", "a") as fh:
        fh.write('{"request": {"model": "gpt-4o", "messa\n')
    db = str(tmp_path / "s.duckdb")
    lenient = runner.invoke(cli, ["ingest", str(folder), "--db", db])
    assert lenient.exit_code == 0
    assert "1 rejected" in lenient.output
    strict = runner.invoke(cli, ["analyze", str(folder), "--db", str(tmp_path / "t.duckdb"), "--strict"])
    assert strict.exit_code == 1
    assert "rejected records" in strict.output and "day0.jsonl:3" in strict.output


def test_a_file_that_is_not_a_trace_gets_a_one_line_error(runner, tmp_path):
    bogus = tmp_path / "settings.json"
    bogus.write_text(json.dumps({"theme": "dark"}))
    result = runner.invoke(cli, ["ingest", str(bogus), "--db", str(tmp_path / "s.duckdb")])
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "settings.json" in errors[0] and "--format" in errors[0]
    assert "Traceback" not in result.output


def test_bad_usage_exits_2_and_missing_paths_exit_1(runner, tmp_path):
    assert runner.invoke(cli, ["ingest"]).exit_code == 2
    assert runner.invoke(cli, ["ingest", str(tmp_path), "--format", "nonsense"]).exit_code == 2
    missing = runner.invoke(cli, ["ingest", str(tmp_path / "nope"), "--db", str(tmp_path / "s.duckdb")])
    assert missing.exit_code == 1 and "no such file or folder" in missing.output
    # a folder with nothing to read: said, not "Ingested 0 files" and "no traces to analyse"
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "README.md").write_text("# notes")
    (empty / ".hidden.jsonl").write_text("{}\n")
    for command in ("ingest", "analyze"):
        nothing = runner.invoke(cli, [command, str(empty), "--db", str(tmp_path / "e.duckdb")])
        assert nothing.exit_code == 1, nothing.output
        assert f"error: {empty}: the folder holds no file to read (hidden files and " in nothing.output
        assert ".md" in nothing.output and "no traces to analyse" not in nothing.output
    # ...and neither a missing path nor an empty folder leaves an empty store behind
    assert not (tmp_path / "s.duckdb").exists() and not (tmp_path / "e.duckdb").exists()
    # an existing store is still opened: the run says what it holds
    good = logs(tmp_path, n=1)
    assert runner.invoke(cli, ["ingest", str(good), "--db", str(tmp_path / "e.duckdb")]).exit_code == 0
    again = runner.invoke(cli, ["ingest", str(empty), str(good), "--db", str(tmp_path / "e.duckdb"), "-v"])
    assert again.exit_code == 0 and "unchanged" in again.output
    assert "folder holds no file to read" in again.output


def test_names_from_traces_print_as_they_are_not_as_rich_markup(runner, tmp_path):
    """Workload, tool and file names holding brackets: `[/tmp]` once failed the whole report as a
    closing tag matching nothing, `[bold]` vanished into a style."""
    folder = tmp_path / "[prod] logs"
    loop = OpenAILoop("You are a support agent.", "Where is order 1000?", workload="[/tmp] support")
    loop.call(tool_calls=[openai_tool_call("c0", "get[bold]order", {"order_id": "1000"})], prompt_tokens=30)
    loop.result("c0", json.dumps({"status": "[/shipped]"}))
    loop.call(content="It has shipped.", prompt_tokens=35, completion_tokens=8)
    write_jsonl(folder / "[bold]day0.jsonl", [*loop.records, "[/not json]"])
    db = str(tmp_path / "s.duckdb")
    result = runner.invoke(cli, ["analyze", str(folder), "--db", db, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "1. [/tmp] support" in result.output and "rejected records" in result.output
    assert "[bold]day0.jsonl:3" in result.output  # the rejected line, named by its file
    deps = runner.invoke(cli, ["deps", "--db", db])
    assert deps.exit_code == 0 and "[/tmp] support" in deps.output, deps.output
    rows = runner.invoke(cli, ["sql", "--db", db, "SELECT workload, name FROM traces, tool_calls"])
    assert re.search(r"│ \[/tmp\] support +│ get\[bold\]order +│", rows.output), rows.output
    hint = runner.invoke(
        cli, ["export", "sft", "--db", db, "--out", str(tmp_path / "x"), "--workload", "[x]"]
    )
    assert "--workload [x] matches no trace; the store's workloads: [/tmp] support (1 trace)" in hint.output


def test_piped_tables_keep_each_row_on_one_line(runner, tmp_path, monkeypatch):
    """Piped (no terminal, no COLUMNS), a table is as wide as it needs, so a row can be grepped:
    a long workload name once folded over two lines of the inference table at 80 columns."""
    name = "nightly-regression-triage-agent-with-a-long-name"
    loop = OpenAILoop("You triage.", "Triage build 7.", workload=name)
    loop.call(tool_calls=[openai_tool_call("c0", "get_build", {"id": "7"})], prompt_tokens=900)
    loop.result("c0", json.dumps({"status": "red"}))
    loop.call(content="Build 7 is red.", prompt_tokens=950, completion_tokens=8)
    folder = tmp_path / "logs"
    write_jsonl(folder / "day0.jsonl", loop.records)
    db = str(tmp_path / "s.duckdb")
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = runner.invoke(cli, ["analyze", str(folder), "--db", db, "--out", str(tmp_path / "o")])
    assert piped.exit_code == 0, piped.output
    rows = [line for line in piped.stdout.splitlines() if line.startswith(f" {name} ")]
    assert len(rows) == 2 and re.search(r":1 .*agg \d+P:\d+D", rows[1]), rows  # usage, inference
    narrow = runner.invoke(cli, ["analyze", str(folder), "--db", db], env={"COLUMNS": "80"})
    # at 80 columns the inference table folds the name to fit, as it did piped before
    assert len([line for line in narrow.stdout.splitlines() if line.startswith(f" {name} ")]) == 1


def test_forced_format_applies_to_every_file(runner, tmp_path):
    folder = logs(tmp_path, n=1)
    wrong = runner.invoke(
        cli,
        [
            "ingest",
            str(folder),
            "--db",
            str(tmp_path / "s.duckdb"),
            "--format",
            "anthropic-messages",
            "--json",
        ],
    )
    report = json.loads(wrong.stdout)
    assert report["files"][0]["format"] == "anthropic-messages"  # as asked, even though detection differs


def test_every_command_collects_garbage_less_often(runner, tmp_path, monkeypatch):
    # what the command sets is recorded, and this test process's own collector left as it was
    monkeypatch.setattr(gc, "set_threshold", lambda *t: monkeypatch.setattr(gc, "get_threshold", lambda: t))
    result = runner.invoke(cli, ["ingest", str(logs(tmp_path)), "--db", str(tmp_path / "s.duckdb")])
    assert result.exit_code == 0, result.output
    assert gc.get_threshold() == BULK_COLLECTION_THRESHOLDS


def test_sql_runs_queries_and_explains_a_missing_store(runner, tmp_path):
    db = str(tmp_path / "s.duckdb")
    runner.invoke(cli, ["ingest", str(logs(tmp_path)), "--db", db])
    result = runner.invoke(
        cli, ["sql", "--db", db, "--json", "SELECT workload, count(*) AS n FROM traces GROUP BY 1"]
    )
    assert json.loads(result.output) == [{"workload": "support", "n": 2}]
    csv_out = runner.invoke(cli, ["sql", "--db", db, "--csv", "SELECT count(*) AS n FROM tool_calls"])
    assert csv_out.stdout_bytes == b"n\n2\n"  # no \r for a shell's $(...) (.output drops it)
    # booleans and NULL as DuckDB's shell writes them, not Python's True and None
    flags = "SELECT bool_or(is_error) AS any_failed, NULL AS nothing, count(*) AS n FROM tool_calls"
    as_csv = runner.invoke(cli, ["sql", "--db", db, "--csv", flags]).output
    assert as_csv == "any_failed,nothing,n\nfalse,,2\n"
    assert re.search(r"│ false +│ NULL +│ +2 │", runner.invoke(cli, ["sql", "--db", db, flags]).output)
    # lists, structs and maps as DuckDB's shell writes them; JSON keeps them as JSON values
    nested = "SELECT 1 AS ignored; SELECT ['a', 'b,c', NULL] AS l, {'k': 'v'} AS s, MAP {'x': 1} AS m"
    as_csv = runner.invoke(cli, ["sql", "--db", db, "--csv", nested]).output
    assert as_csv == "l,s,m\n\"[a, 'b,c', NULL]\",{'k': v},{x=1}\n"
    table = runner.invoke(cli, ["sql", "--db", db, nested]).output
    assert re.search(r"│ \[a, 'b,c', NULL\] +│ \{'k': v\} +│ \{x=1\} +│", table), table
    as_json = json.loads(runner.invoke(cli, ["sql", "--db", db, "--json", nested]).output)
    assert as_json == [{"l": ["a", "b,c", None], "s": {"k": "v"}, "m": {"x": 1}}]
    # a long result: its first and last 20 rows and how many there are, as DuckDB's shell
    hundred = "SELECT range AS n FROM range(100)"
    table = runner.invoke(cli, ["sql", "--db", db, hundred]).output
    shown = [int(n) for n in re.findall(r"^│ +(\d+) │$", table, re.MULTILINE)]
    assert shown == [*range(20), *range(80, 100)] and re.search(r"^│ +· │$", table, re.MULTILINE)
    assert "100 rows (40 shown: the first and last 20; --csv or --json prints every row)" in table
    every = runner.invoke(cli, ["sql", "--db", db, "--csv", hundred]).output
    assert every.split() == ["n", *map(str, range(100))]
    assert "rows (" not in runner.invoke(cli, ["sql", "--db", db, "SELECT range FROM range(40)"]).output
    # a .sql file, as the shipped ones in queries/, comments and all
    query_file = tmp_path / "errors.sql"
    query_file.write_text(
        "-- how many tool calls failed\nSELECT count(*) FILTER (WHERE is_error) AS failed,\n"
        "       count(*) AS calls FROM tool_calls;\n"
    )
    from_file = runner.invoke(cli, ["sql", "--db", db, "--json", str(query_file)])
    assert from_file.exit_code == 0, from_file.output
    assert json.loads(from_file.output) == [{"failed": 0, "calls": 2}]
    missing = runner.invoke(cli, ["sql", "--db", db, str(tmp_path / "nope.sql")])
    assert missing.exit_code == 1 and "nope.sql: no such file" in missing.output
    broken = runner.invoke(cli, ["sql", "--db", db, "SELEC nothing"])
    assert broken.exit_code == 1 and "syntax error" in broken.output.lower()
    absent = runner.invoke(cli, ["sql", "--db", str(tmp_path / "absent.duckdb"), "SELECT 1"])
    assert absent.exit_code == 1 and "traceforge analyze" in absent.output


@pytest.mark.parametrize(("width", "leaves_out"), [(50, True), (80, None), (200, False), (None, False)])
def test_sql_never_cuts_a_number_and_names_the_columns_it_leaves_out(
    runner, tmp_path, monkeypatch, width, leaves_out
):
    """As DuckDB's shell: a line per row, long text cut, marked `…`, and where the columns do not
    fit the terminal those in the middle are left out and named, rather than `109…` for 10948.
    Piped (no terminal, no COLUMNS), every column is shown, as wide as the table needs."""
    db = str(tmp_path / "s.duckdb")
    runner.invoke(cli, ["ingest", str(SAMPLE_TRACES), "--db", db])
    query = (
        "SELECT workload, model, traces, llm_calls, input_tokens, cache_read_tokens, output_tokens, "
        "sum(input_tokens) OVER () * 1.5 AS scaled, "
        "'first line' || chr(10) || repeat('many words ', 20) AS note, repeat('x', 200) AS padding "
        "FROM v_usage_by_workload_model"
    )
    rows = json.loads(runner.invoke(cli, ["sql", "--db", db, "--json", query]).output)
    monkeypatch.delenv("COLUMNS", raising=False)
    shown = runner.invoke(cli, ["sql", "--db", db, query], env={"COLUMNS": str(width)} if width else {})
    assert shown.exit_code == 0, shown.output
    table = [line for line in shown.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert len([line for line in table if line[:1] == "│"]) == len(rows)  # a line per row
    if width:
        assert all(len(line) <= width for line in table), [line for line in table if len(line) > width]
    assert "x" * 41 not in shown.output  # text cut at 40 characters
    left_out = re.search(r"\((\d+) of 10 columns left out to fit the terminal: (.*); --csv", shown.output)
    dropped = left_out.group(2).split(", ") if left_out else []
    if leaves_out is not None:
        assert (left_out is not None) == leaves_out
    assert "workload" not in dropped and "padding" not in dropped  # the first and the last stay
    if "note" not in dropped:  # its line break shown as \n, as DuckDB's shell shows it
        note = "first line\\n" + "many words " * 20
        cells = re.findall(r"│ (first[^│]*?) *│", shown.output)
        assert len(cells) == len(rows) and all(note.startswith(cell.rstrip("…")) for cell in cells), cells
        if width in (None, 200):
            assert all(cell.startswith("first line\\nmany") for cell in cells), cells
    for column in ("traces", "llm_calls", "input_tokens", "cache_read_tokens", "output_tokens", "scaled"):
        if column in dropped:
            continue
        for row in rows:
            if row[column] is not None:
                assert re.search(rf"│ +{row[column]} │", shown.output), (column, row[column])


def test_a_store_in_use_gives_a_message_not_a_traceback(runner, tmp_path):
    db = tmp_path / "busy.duckdb"
    holder = duckdb.connect(str(db))  # another process's write lock looks the same to us
    try:
        import subprocess
        import sys

        out = subprocess.run(
            [sys.executable, "-m", "traceforge", "ingest", str(logs(tmp_path)), "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        holder.close()
    assert out.returncode == 1
    assert "in use by another process" in out.stderr and "Traceback" not in out.stderr


def test_sql_without_a_query_opens_the_duckdb_shell_on_the_store(runner, tmp_path):
    import subprocess
    import sys

    db = str(tmp_path / "s.duckdb")
    runner.invoke(cli, ["ingest", str(logs(tmp_path)), "--db", db])
    shell = subprocess.run(
        [sys.executable, "-m", "traceforge", "sql", "--db", db],
        input=".mode csv\nSELECT count(*) AS traces FROM traces;\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split() == ["traces", "2"]
