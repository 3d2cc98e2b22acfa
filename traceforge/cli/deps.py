"""`traceforge deps`: dependency inference and parallel schedules for every trace in the store."""

from __future__ import annotations

import json

import click

from traceforge import store
from traceforge.analysis.dag import analyze_dependencies
from traceforge.cli import cli
from traceforge.cli.options import (
    TraceProgress,
    config_from,
    config_option,
    db_option,
    json_option,
    mode_option,
    stdout,
)
from traceforge.report.dag_view import render_summary


@cli.command()
@db_option
@mode_option
@config_option
@click.option("--recompute", is_flag=True, help="Analyse every trace again, not only new or changed ones.")
@json_option
def deps(db, mode, config_path, recompute, as_json):
    """Find the tool calls that could have run in parallel, and what that saves.

    Writes tool_deps (every dependency edge with its kind, evidence and
    confidence), tool_schedule (each call's observed and parallel turn) and
    trace_dag (one row per trace) to the store. Traces analysed before with
    the same mode and settings are skipped unless --recompute.

    \b
    Examples:
      traceforge deps
      traceforge deps --mode loose --json > deps.json
      traceforge deps --config my-tools.toml --recompute
    """
    config = config_from(config_path)
    con = store.connect(db)
    try:
        with TraceProgress("analysing") as on_progress:
            summary = analyze_dependencies(con, mode, config, recompute=recompute, on_progress=on_progress)
    finally:
        con.close()
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
    else:
        render_summary(stdout(), summary)
