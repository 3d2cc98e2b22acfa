from __future__ import annotations

import functools
import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from traceforge import store
from traceforge.cli import cli
from traceforge.cli.options import (
    FileProgress,
    db_option,
    format_option,
    json_option,
    stderr,
    strict_option,
)
from traceforge.ingest import IngestReport, ingest_files
from traceforge.ingest.sources import expand_paths
from traceforge.report.terminal import render_big_file, render_ingest


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@db_option
@format_option
@strict_option
@json_option
@click.option(
    "-v", "--verbose", is_flag=True, help="List every file: unchanged ones too, and each of many files read."
)
def ingest(paths, db, fmt, strict, as_json, verbose):
    """Load trace files into the store (files, folders, globs, .gz).

    Each file's format is detected from its content. Files already ingested
    with the same content are skipped; a changed file replaces what it gave.
    Records that cannot be used go to the `rejects` table with their line. A
    trace whose parts lie in several files (a rotated gateway log or OTel
    export, Langfuse or LangSmith pages, Langfuse's traces table) is joined
    into one. A file of 256 MiB or more is written in parts as it is read; a
    run stopped in one leaves it marked, and ingesting it again finishes it.

    \b
    Examples:
      traceforge ingest logs/
      traceforge ingest 'gateway/*.jsonl.gz' --db prod.duckdb
      traceforge ingest export.json --format anthropic-messages --strict
    """
    report = run_ingest(paths, db, fmt)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "files": [asdict(f) for f in report.files],
                    "problems": report.problems,
                    "unfinished": report.unfinished,
                    "joined": report.joined,
                    "left_apart": report.left_apart,
                    "after_joins": report.after_joins,
                    "totals": report.totals(),
                },
                indent=2,
            )
        )
    else:
        render_ingest(stderr(), report, verbose=verbose)
    exit_for(report, strict)


def run_ingest(paths, db, fmt) -> IngestReport:
    """Ingest `paths` into the store at `db`; a run that finds no file to read creates no store."""
    files, problems = expand_paths(list(paths))
    if not files and not Path(db).exists():
        return IngestReport(problems=problems)
    con = store.connect(db)
    try:
        with FileProgress() as progress:
            return ingest_files(
                con,
                files,
                fmt=fmt,
                on_file=progress.on_file,
                on_big_file=functools.partial(render_big_file, stderr()),
                on_part=progress.on_part,
                problems=problems,
            )
    finally:
        con.close()


def exit_for(report: IngestReport, strict: bool) -> None:
    """Exit 1 when nothing matched, when every file read failed, or on any reject under --strict.

    A file that is not a trace among good ones is reported but does not fail the run by itself.
    """
    totals = report.totals()
    if report.problems and not report.files:
        sys.exit(1)
    if totals["files_failed"] and totals["files_failed"] == len(report.files):
        sys.exit(1)
    if strict and totals["rejected"]:
        stderr().print(f"--strict: {totals['rejected']} rejected records or files.")
        sys.exit(1)
