from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import click
import duckdb

from traceforge import store
from traceforge.cli import cli
from traceforge.cli.options import db_option, stdout
from traceforge.report.terminal import render_query_result, sql_text


def shell_binary() -> str | None:
    """The `duckdb` shell installed with traceforge (PyPI duckdb-cli), beside this Python first."""
    beside = Path(sys.executable).parent / ("duckdb.exe" if os.name == "nt" else "duckdb")
    if beside.exists():
        return str(beside)
    return shutil.which("duckdb")


NESTED_TYPES = frozenset({"list", "array", "struct", "map", "union"})


def query_result(
    con: duckdb.DuckDBPyConnection, query: str, *, nested_as_text: bool
) -> tuple[list[str], list[tuple]] | None:
    """The columns and rows of `query`'s last statement, or None where it returns none.

    With `nested_as_text`, lists, structs and maps come as DuckDB writes them (`[a, 'b,c']`,
    `{'k': v}`, `{k=1}`), as its shell shows them, not as Python's repr (`['a', 'b,c']`, a map
    written as a struct); JSON keeps them as values."""
    relation = con.sql(query)
    if relation is None:
        return None
    columns, types = relation.columns, relation.types
    if nested_as_text and any(kind.id in NESTED_TYPES for kind in types):
        relation = relation.project(
            ", ".join(
                f"#{n}::VARCHAR" if kind.id in NESTED_TYPES else f"#{n}" for n, kind in enumerate(types, 1)
            )
        )
    return columns, relation.fetchall()


@cli.command()
@click.argument("query", required=False)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON rows.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the result as CSV.")
def sql(query, db, as_json, as_csv):
    """Run QUERY on the store, or open the DuckDB shell on it.

    QUERY is SQL, or a .sql file's path (the shipped ones are in queries/).
    Without QUERY this starts the `duckdb` shell (installed with traceforge
    from the duckdb-cli package) on the store, where `.read queries/FILE.sql`
    runs the shipped queries too.

    \b
    Examples:
      traceforge sql
      traceforge sql "SELECT workload, count(*) FROM traces GROUP BY 1"
      traceforge sql queries/cache_reuse.sql
      traceforge sql --json "SELECT * FROM rejects"
    """
    if not Path(db).exists():
        raise click.ClickException(
            f"{db}: no such store. Run `traceforge analyze PATH` or `traceforge ingest PATH` first."
        )
    if query is None:
        binary = shell_binary()
        if binary is None:
            raise click.ClickException(
                "the duckdb shell is not installed; `pip install duckdb-cli`, or pass a QUERY"
            )
        os.execv(binary, [binary, db])
    if query.rstrip().lower().endswith(".sql") and "\n" not in query:
        path = Path(query.strip())
        if not path.is_file():
            raise click.ClickException(f"{path}: no such file (the shipped queries are in queries/)")
        query = path.read_text(encoding="utf-8")
    con = store.connect(db, read_only=True)
    try:
        try:
            result = query_result(con, query, nested_as_text=not as_json)
        except duckdb.Error as exc:  # duckdb's errors name the problem and the position
            raise click.ClickException(str(exc)) from exc
    finally:
        con.close()
    if result is None:
        return
    columns, rows = result
    if as_json:
        click.echo(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], indent=2, default=str))
    elif as_csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")  # as DuckDB's shell; no \r in $(...)
        writer.writerow(columns)
        writer.writerows([[sql_text(v) if isinstance(v, bool) else v for v in row] for row in rows])
    else:
        console = stdout()
        fits = console.is_terminal or "COLUMNS" in os.environ  # piped: every column, as wide as needed
        render_query_result(console, columns, rows, console.width if fits else None)
