"""Security: values from options and traces never become SQL; reading input never writes outside the
store and the output folders; the HTML report shows hostile trace content as text; exports redact by
default (the per-kind tests are in test_redact.py, the Hub's private default in test_hub_push.py).
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import re
import stat
from html.parser import HTMLParser
from pathlib import Path

import pytest
from accounting import assert_accounting
from builders import OpenAILoop, openai_tool_call, write_jsonl

from traceforge import store
from traceforge.cli import cli

PACKAGE = Path(__file__).resolve().parents[1] / "traceforge"
INJECTION = "x' OR '1'='1'; DROP TABLE traces; --"

# --------------------------------------------------------------------------- SQL

SQL_TEXT = re.compile(
    r"\b(SELECT|INSERT|DELETE|UPDATE|CREATE|DROP|ALTER|FROM|WHERE|JOIN|LIMIT)\b|\bIN \($|GLOB|LIKE"
)
# Every value pasted into SQL text in the package, with why it cannot carry a user's text. A new
# f-string that builds SQL from anything else fails the test: bind the value as a parameter (`?`).
PASTED_INTO_SQL = {
    ("analysis/dag.py", "int(batch_calls)"): "an integer",
    ("analysis/dag.py", "int(top)"): "an integer",
    ("analysis/dag.py", "table"): "a loop over the analysis tables' names",
    ("analysis/deployment.py", "resent"): "one of two column expressions written in the code",
    ("analysis/workloads.py", "HEAD_SHARE"): "a constant",
    ("analysis/workloads.py", "key"): "checked to be 'agent' or 'source_format' just before",
    ("export/pipeline.py", "selected"): "a SQL fragment written in the code (its ids are bound)",
    ("export/selection.py", "patterns"): "'c.model GLOB ?' once per model: placeholders",
    ("export/selection.py", "', '.join('?' * len(criteria.outcomes))"): "placeholders",
    ("export/selection.py", "where"): "_matching's conditions, written in the code (values bound)",
    ("analysis/dag.py", "pending"): "a condition written in the code (its values are bound)",
    ("analysis/batches.py", "main"): "a table name from the callers' code (deps.ROW_TABLES...)",
    ("analysis/batches.py", "table"): "table names from the callers' code",
    ("analysis/batches.py", "spans"): "joins over table names from the callers' code",
    ("analysis/batches.py", "''.join((f', {table}.lo, {table}.hi' for table in others))"): (
        "columns named after table names from the callers' code"
    ),
    ("analysis/batches.py", "where"): "a condition written in the callers' code (values bound)",
    ("analysis/batches.py", "alias"): "a table alias written in the callers' code",
    ("analysis/deps.py", "table"): "a table of deps.ROW_COLUMNS, written in the code",
    ("analysis/deps.py", "alias"): "a table alias of deps.ROW_COLUMNS",
    ("analysis/deps.py", "columns"): "column expressions of deps.ROW_COLUMNS",
    ("analysis/deps.py", "order"): "an ORDER BY column of deps.ROW_COLUMNS",
    ("analysis/deps.py", "where"): "TraceBatch.within: a row-id range (values bound), deps.ROW_CONDITIONS",
    ("analysis/workloads.py", "messages"): "TraceBatch.within: a row-id range, values bound",
    ("analysis/workloads.py", "defs"): "TraceBatch.within: a row-id range, values bound",
    ("analysis/workloads.py", "calls"): "TraceBatch.within: a row-id range, values bound",
    ("analysis/workloads.py", "traces"): "TraceBatch.within: a row-id range, values bound",
    ("analysis/prefix_cache.py", "where"): "TraceBatch.within: a row-id range (values bound), c.copy_of",
    ("analysis/prefix_cache.py", "content"): "m.content, or its length(): written in the code",
    ("analysis/prefix_cache.py", "reasoning"): "m.reasoning, or its length(): written in the code",
    ("analysis/prefix_cache.py", "store.COMPACTION_STARTS_SQL"): "a constant column expression",
    ("export/source.py", "store.COMPACTION_STARTS_SQL"): "a constant column expression",
    ("ingest/copies.py", "table"): "a loop over the dependency analysis's table names",
    ("store.py", "table"): "insert_frame's table: writer.SCHEMAS and the analysis tables, named by callers",
    ("store.py", "column"): "migration 11's NOT NULL columns, written in the code",
    ("store.py", "keep"): "migration 11's ALTER statements, built from names written in the code",
    ("ingest/writer.py", "table"): "a loop over writer.SCHEMAS / TRACE_TABLES / _PATH_COLUMNS",
    ("ingest/writer.py", "column"): "an id column named by the writer, or one of _PATH_COLUMNS",
    (
        "ingest/writer.py",
        "traces",
    ): "_OWN_TRACES or TRACES_OF_FILES, subqueries written in the code (paths bound)",
    ("ingest/forget.py", "table"): "a loop over REMOVED_FROM, table names written in the code",
    ("ingest/forget.py", "writer.SOURCE_PATHS"): "a column expression written in the code",
    ("ingest/writer.py", "SOURCE_PATHS"): "a column expression written in the code",
    ("ingest/joins.py", "writer.SOURCE_PATHS"): "a column expression written in the code",
    ("ingest/log_joins.py", "writer.SOURCE_PATHS"): "a column expression written in the code",
    ("ingest/forget.py", "writer.TRACES_OF_FILES"): "a subquery written in the code (its paths are bound)",
    ("ingest/joins.py", "writer.TRACES_OF_FILES"): "a subquery written in the code (its paths are bound)",
    ("ingest/forget.py", "counts"): "count(*) subqueries over REMOVED_FROM, table names written in the code",
    ("ingest/forget.py", "given"): "a path in an error message that quotes a query for the user: not run",
    ("ingest/joins.py", "table"): "a loop over writer.TRACE_TABLES and traces",
    ("ingest/parallel.py", "table"): "a loop over writer.SCHEMAS",
    ("ingest/parallel.py", "column"): "parallel.ID_COLUMNS",
    ("lake.py", "table"): "a loop over the store's table names",
    ("lake.py", "DAY"): "a constant expression",
    ("lake.py", "selected"): "the store's own column names, from the code's schema",
    ("lake.py", "declared"): "the store's own column names and types",
    ("lake.py", "columns"): "lake column names quoted by lake._ident; the store's own as typed NULLs",
    ("lake.py", "day"): "a partition date, quoted as a literal by lake._quote",
    ("lake.py", "day_filter"): "a partition date, quoted as a literal by lake._quote",
    ("lake.py", "pattern"): "a path quoted by lake._quote: read_parquet takes no parameter",
    ("lake.py", "_scan(url, table, info)"): "read_parquet over a path quoted by lake._quote",
    ("lake.py", "_quote(_join(out, table))"): "a COPY target, which DuckDB takes only as a literal",
    ("lake.py", "_quote(url)"): "a COPY target (the manifest's), quoted by lake._quote",
    ("lake.py", "_quote(partition.source_format)"): "a partition value quoted by lake._quote",
    # text shown to people, not run
    ("cli/dag.py", "trace_id"): "a message suggesting a query, not executed",
    ("cli/dag.py", "db"): "a message suggesting a query, not executed",
    ("report/terminal.py", "display_path(db)"): "a message suggesting a command, not executed",
    ("samples/analyst.py", "region"): "the text of a sample trace's tool call, not executed",
    ("samples/analyst.py", "earlier"): "the text of a sample trace's tool call, not executed",
    ("samples/analyst.py", "later"): "the text of a sample trace's tool call, not executed",
}


def pasted_values() -> set[tuple[str, str]]:
    """(module, expression) of every value interpolated into an f-string that reads as SQL."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.JoinedStr):
                continue
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if SQL_TEXT.search(text):
                found |= {
                    (module, ast.unparse(v.value)) for v in node.values if isinstance(v, ast.FormattedValue)
                }
    return found


def test_no_value_from_outside_the_code_is_pasted_into_sql():
    unexplained = pasted_values() - set(PASTED_INTO_SQL)
    assert not unexplained, f"bind these as parameters (?), or explain them in PASTED_INTO_SQL: {unexplained}"


@pytest.fixture
def hostile_store(tmp_path: Path) -> Path:
    """A store whose ids, workloads, models and tool names carry SQL and markup, analysed."""
    logs = tmp_path / "logs"
    for number, session in enumerate([INJECTION, "plain-session", 'quote " and \\ backslash']):
        loop = OpenAILoop(
            "You are an agent.", f"task {number}", session=session, workload=INJECTION, model=INJECTION
        )
        for step in range(3):
            loop.call(tool_calls=[openai_tool_call(f"call_{number}_{step}", INJECTION, {"q": INJECTION})])
            loop.result(f"call_{number}_{step}", f"{INJECTION} {step}")
        loop.call(content="done")
        write_jsonl(logs / f"{number}.jsonl", loop.records)
    db = tmp_path / "hostile.duckdb"
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["analyze", str(logs), "--db", str(db), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    return db


def table_counts(db: Path) -> dict[str, int]:
    con = store.connect(db, read_only=True)
    try:
        assert_accounting(con)
        return {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("traces", "llm_calls", "tool_calls", "tool_deps", "trace_dag", "workloads")
        }
    finally:
        con.close()


def test_values_with_sql_in_them_are_data_everywhere(hostile_store, runner, tmp_path):
    before = table_counts(hostile_store)
    assert before["traces"] == 3 and before["tool_calls"] == 9

    # options naming a workload, a model, a trace: matched literally, never as SQL
    export = runner.invoke(
        cli,
        [
            "export",
            "sft",
            "--db",
            str(hostile_store),
            "--out",
            str(tmp_path / "e"),
            "--split",
            "train=1",
            "--workload",
            INJECTION,
            "--model",
            INJECTION,
            "--json",
        ],
    )
    assert export.exit_code == 0, export.output
    assert json.loads(export.stdout)["matched"] == 3
    for option in ("--workload", "--model"):
        nothing = runner.invoke(
            cli,
            [
                "export",
                "sft",
                "--db",
                str(hostile_store),
                "--out",
                str(tmp_path / option),
                option,
                "x' OR '1'='1",
            ],
        )
        assert nothing.exit_code == 1 and "No rows written" in nothing.output, nothing.output
    shown = runner.invoke(cli, ["dag", INJECTION, "--db", str(hostile_store)])
    assert shown.exit_code == 0, shown.output
    missing = runner.invoke(cli, ["dag", "x' OR 1=1 --", "--db", str(hostile_store)])
    assert missing.exit_code == 1 and "no trace" in missing.output

    # a workload key that is a path into the attributes, with SQL in it
    for key in (f"attributes.{INJECTION}", 'attributes."it\'s"'):
        profile = runner.invoke(
            cli, ["profile", "--db", str(hostile_store), "--out", str(tmp_path / "p"), "--workload-key", key]
        )
        assert profile.exit_code == 0, profile.output
        con = store.connect(hostile_store, read_only=True)
        assert con.execute("SELECT DISTINCT workload_key FROM trace_workloads").fetchall() == [(key,)]
        con.close()
    bad_path = runner.invoke(
        cli,
        [
            "profile",
            "--db",
            str(hostile_store),
            "--out",
            str(tmp_path / "p"),
            "--workload-key",
            "attributes.a[",
        ],
    )
    assert bad_path.exit_code == 2 and "is not a path into the traces' attributes" in bad_path.output
    assert table_counts(hostile_store)["traces"] == before["traces"]


# --------------------------------------------------------------------------- files


def tree(root: Path) -> dict[str, tuple]:
    """Every file and folder under `root` (symlinks not followed) with its size and mtime."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns)
    return found


@pytest.fixture
def hostile_inputs(tmp_path: Path):
    """A read-only input tree with names that look like path traversal, a gzip whose stored name
    points outside, symlinks out of the tree and back into it; made writable again afterwards."""
    inputs = tmp_path / "inputs"
    loop = OpenAILoop("You are helpful.", "hello")
    loop.call(tool_calls=[openai_tool_call("call_1", "lookup", {"q": "x"})])
    loop.result("call_1", "found")
    loop.call(content="done")
    text = "".join(json.dumps(r) + "\n" for r in loop.records)
    # (a name starting with "." is a hidden file: skipped when walking a folder, as documented)
    names = ["%2E%2E%2F%2E%2E%2Fescaped.jsonl", "a\\..\\..\\escaped.jsonl", "-rf.jsonl", "line\nbreak.jsonl"]
    for number, name in enumerate(names):
        write_jsonl(
            inputs / "deep" / name,
            [dict(r, request={**r["request"], "user": str(number)}) for r in loop.records],
        )
    with (
        open(inputs / "stored-name.gz", "wb") as raw,
        gzip.GzipFile("../../../pwned.jsonl", "wb", fileobj=raw) as fh,
    ):
        fh.write(text.replace("hello", "hello from gzip").encode())
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "linked.jsonl").write_text(text.replace("hello", "hello from outside"))
    (inputs / "link-out.jsonl").symlink_to(outside / "linked.jsonl")
    (inputs / "deep" / "loop").symlink_to(inputs, target_is_directory=True)
    for path in [inputs, *inputs.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    yield inputs
    for path in [inputs, *inputs.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_reading_folders_globs_and_archives_writes_nothing_but_the_store(
    tmp_path, hostile_inputs, runner, monkeypatch
):
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    db = tmp_path / "store" / "traces.duckdb"
    db.parent.mkdir()
    before = tree(tmp_path)

    result = runner.invoke(
        cli,
        [
            "ingest",
            str(hostile_inputs),
            str(hostile_inputs / ".." / "inputs" / "*.gz"),
            "--db",
            str(db),
            "--json",
        ],
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {f["status"] for f in report["files"]} == {"new"}
    assert len(report["files"]) == 6  # four traversal-looking names, the gzip, the link out
    after = tree(tmp_path)
    changed = {path for path in set(before) | set(after) if before.get(path) != after.get(path)}
    # the store (and its write-ahead log while open), and the folder holding it
    assert changed and all(path == "store" or path.startswith("store/traces.duckdb") for path in changed), (
        changed
    )
    assert not any(workdir.iterdir())
    assert not list(tmp_path.parent.glob("pwned*")) and not (tmp_path / "pwned.jsonl").exists()


def test_analyze_export_and_profile_write_only_into_their_output_folders(
    hostile_store, runner, tmp_path, monkeypatch
):
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    db = str(hostile_store)
    before = tree(tmp_path)
    runs = [
        ["analyze", str(tmp_path / "logs"), "--db", db, "--out", str(tmp_path / "analyze-out")],
        ["export", "parallel", "--db", db, "--out", str(tmp_path / "export-out"), "--split", "train=1"],
        ["profile", "--db", db, "--out", str(tmp_path / "profile-out")],
    ]
    for args in runs:
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
    after = tree(tmp_path)
    changed = {path for path in set(before) | set(after) if before.get(path) != after.get(path)}
    # analyze and profile write their analysis tables into the store
    allowed = ("analyze-out", "export-out", "profile-out", hostile_store.name)
    assert all(path.startswith(allowed) for path in changed), changed
    assert {"analyze-out", "export-out", "profile-out"} <= changed
    assert not any(workdir.iterdir())
    escape = runner.invoke(
        cli, ["export", "sft", "--db", db, "--out", str(tmp_path / "e2"), "--split", "../../x=1"]
    )
    assert escape.exit_code == 2 and "use letters, digits and underscores" in escape.output
    assert tree(tmp_path) == after


# --------------------------------------------------------------------------- the HTML report

PAYLOADS = {
    field: f'<img src=x onerror="window.__pwned_{field}=1"><script>window.__pwned_{field}=2</script>'
    for field in ("session", "workload", "model", "tool", "argument", "result", "user", "system", "reject")
}


def test_the_report_shows_every_hostile_field_as_text(tmp_path, runner):
    """Beyond the workload, tool and result of test_analyze.py's browser test: trace ids, models,
    prompts, arguments, a rejected line and the file's own name. String-level: no payload reaches
    the page verbatim, and the page forbids scripts outright."""
    loop = OpenAILoop(
        PAYLOADS["system"],
        PAYLOADS["user"],
        session=PAYLOADS["session"],
        workload=PAYLOADS["workload"],
        model=PAYLOADS["model"],
    )
    for step in range(3):
        loop.call(
            tool_calls=[openai_tool_call(f"call_{step}", PAYLOADS["tool"], {"q": PAYLOADS["argument"]})]
        )
        loop.result(f"call_{step}", PAYLOADS["result"])
    loop.call(content="done")
    file_name = '<img src=x onerror="window.__pwned_file=1">.jsonl'
    path = write_jsonl(tmp_path / "logs" / file_name, loop.records)
    with open(path, "a") as fh:
        fh.write(f'{{"request": {json.dumps(PAYLOADS["reject"])}\n')  # a cut line: a reject
    out = tmp_path / "out"
    result = runner.invoke(
        cli, ["analyze", str(path.parent), "--db", str(tmp_path / "s.duckdb"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output

    page = (out / "report.html").read_text()
    for payload in [*PAYLOADS.values(), file_name]:
        assert payload not in page
    tags = Tags()
    tags.feed(page)
    assert not tags.scripts and not tags.handlers, (tags.scripts, tags.handlers)
    assert "script-src 'none'" in page  # the Content-Security-Policy: nothing runs even if one slipped
    assert "window.__pwned_workload" in page  # shown, as text


class Tags(HTMLParser):
    """The elements of a page that could run code: script and img tags, on* attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.handlers: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "img", "iframe", "object", "embed"):
            self.scripts.append(tag)
        self.handlers.extend((tag, name) for name, _ in attrs if name.startswith("on"))


# --------------------------------------------------------------------------- exports


def test_ids_and_workload_names_in_exported_rows_are_redacted(tmp_path, runner):
    """A gateway that keys sessions by the user's email puts it in the trace id; the row's metadata
    columns carry it into the dataset unless they are redacted like the messages."""
    from datasets import load_dataset

    loop = OpenAILoop(
        "You help.", "hi", session="ann.lee@example.org", workload="support for bob@example.com"
    )
    for step in range(2):
        loop.call(tool_calls=[openai_tool_call(f"c{step}", "lookup", {"q": str(step)})])
        loop.result(f"c{step}", "ok")
    loop.call(content="done")
    write_jsonl(tmp_path / "logs" / "a.jsonl", loop.records)
    db = tmp_path / "s.duckdb"
    assert runner.invoke(cli, ["ingest", str(tmp_path / "logs"), "--db", str(db)]).exit_code == 0
    out = tmp_path / "out"
    result = runner.invoke(cli, ["export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1"])
    assert result.exit_code == 0, result.output
    rows = load_dataset(str(out), "sft", split="train", cache_dir=str(tmp_path / "cache")).to_list()
    written = json.dumps(rows) + (out / "README.md").read_text()
    assert "ann.lee@example.org" not in written and "bob@example.com" not in written
