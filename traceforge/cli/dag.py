"""`traceforge dag TRACE_ID`: one trace's observed schedule beside its parallel one."""

from __future__ import annotations

import json

import click

from traceforge import store
from traceforge.analysis.dag import AmbiguousTraceId, find_trace_id, trace_schedule
from traceforge.cli import cli
from traceforge.cli.options import config_from, config_option, db_option, json_option, mode_option, stdout
from traceforge.report.dag_view import render_dot, render_mermaid, render_text, schedule_json


@cli.command()
@click.argument("trace_id")
@db_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "mermaid", "dot"]),
    default="text",
    show_default=True,
    help="text: the two schedules side by side; mermaid / dot: the DAG as a diagram.",
)
@mode_option
@config_option
@json_option
def dag(trace_id, db, fmt, mode, config_path, as_json):
    """Show TRACE_ID's tool calls as observed beside the parallel schedule.

    TRACE_ID may be a unique prefix. The schedule is computed from the store's
    canonical tables, so it needs no earlier analysis.

    \b
    Examples:
      traceforge dag conv-3f2a                     # text, conservative mode
      traceforge dag conv-3f2a --mode loose
      traceforge dag conv-3f2a --format mermaid > dag.mmd
      traceforge dag conv-3f2a --format dot | dot -Tsvg > dag.svg
    """
    config = config_from(config_path)
    con = store.connect(db, read_only=True)
    try:
        try:
            found = find_trace_id(con, trace_id)
        except AmbiguousTraceId as exc:
            raise click.ClickException(str(exc)) from exc
        if found is None:
            raise click.ClickException(
                f"no trace {trace_id!r} in {db}. The traces with most turns to save: traceforge sql "
                '"SELECT trace_id, turns_saved FROM trace_dag ORDER BY turns_saved DESC LIMIT 10"'
            )
        result = trace_schedule(con, found, mode, config)
        workload = con.execute("SELECT workload FROM traces WHERE trace_id = ?", [found]).fetchall()[0][0]
    finally:
        con.close()
    if not result.trace.calls:
        raise click.ClickException(
            f"trace {found} has no tool calls made by the agent: there is no DAG to show"
        )
    if as_json:
        click.echo(json.dumps(schedule_json(result), indent=2))
    elif fmt == "mermaid":
        click.echo(render_mermaid(result), nl=False)
    elif fmt == "dot":
        click.echo(render_dot(result), nl=False)
    else:
        render_text(stdout(), result, workload)
