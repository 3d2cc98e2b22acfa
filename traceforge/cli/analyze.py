from __future__ import annotations

import json

import click

from traceforge import store
from traceforge.analysis.summary import summarize
from traceforge.cli import cli
from traceforge.cli.ingest import exit_for, run_ingest
from traceforge.cli.options import (
    db_option,
    format_option,
    json_option,
    stderr,
    stdout,
    strict_option,
)
from traceforge.report.terminal import render_ingest, render_summary


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@db_option
@format_option
@strict_option
@json_option
def analyze(paths, db, fmt, strict, as_json):
    """The main job: ingest PATHS (incrementally), analyse, and report.

    Rerunning on the same input reuses the store: unchanged files are not
    read again.

    \b
    Examples:
      traceforge analyze logs/
      traceforge analyze sample_traces/ --db /tmp/samples.duckdb
      traceforge analyze 'gateway/2026-11-*.jsonl.gz' --json > summary.json
    """
    report = run_ingest(paths, db, fmt)
    render_ingest(stderr(), report)
    con = store.connect(db, read_only=True)
    try:
        summary = summarize(con)
    finally:
        con.close()
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
    else:
        render_summary(stdout(), summary, db)
    exit_for(report, strict)
