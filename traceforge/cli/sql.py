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
from traceforge.query import every_row, run_query
from traceforge.report.terminal import render_query_result, sql_text


def shell_binary() -> str | None:
    """The `duckdb` shell installed with traceforge (PyPI duckdb-cli), beside this Python first."""
    beside = Path(sys.executable).parent / ("duckdb.exe" if os.name == "nt" else "duckdb")
    if beside.exists():
        return str(beside)
    return shutil.which("duckdb")


@cli.command()
@click.argument("query", required=False)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON rows.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the result as CSV.")
def sql(query, db, as_json, as_csv):
    """Run QUERY on the store, or open the DuckDB shell on it.

    QUERY is SQL, or a .sql file's path (the shipped ones are in queries/).
    The table shows at most 40 rows, the first and last 20, as DuckDB's shell
    does; --csv and --json print every row.
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
            if as_json or as_csv:
                _write_every_row(con, query, as_json)
            else:
                result = run_query(con, query)
                if result is not None:
                    console = stdout()  # piped: as wide as the table needs (`options.PIPED_WIDTH`)
                    columns, rows, total = result.columns, result.rows, result.total
                    render_query_result(console, columns, rows, console.width, total=total)
        except duckdb.Error as exc:  # duckdb's errors name the problem and the position
            raise click.ClickException(str(exc)) from exc
    finally:
        con.close()


def _write_every_row(con: duckdb.DuckDBPyConnection, query: str, as_json: bool) -> None:
    """Every row to stdout as it streams from DuckDB: a JSON array of objects (written as
    `json.dumps(rows, indent=2)` would) or CSV."""
    found = every_row(con, query, as_text=not as_json)
    if found is None:
        return
    columns, rows = found
    out = sys.stdout
    if not as_json:
        writer = csv.writer(out, lineterminator="\n")  # as DuckDB's shell; no \r in $(...)
        writer.writerow(columns)
        writer.writerows([sql_text(v) if isinstance(v, bool) else v for v in row] for row in rows)
        return
    separator = "[\n"
    for row in rows:
        text = json.dumps(dict(zip(columns, row, strict=True)), indent=2, default=str)
        out.write(separator + "  " + text.replace("\n", "\n  "))
        separator = ",\n"
    out.write("[]\n" if separator == "[\n" else "\n]\n")
