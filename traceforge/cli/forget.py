from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from traceforge import store
from traceforge.cli import cli
from traceforge.cli.options import db_option, json_option, stderr
from traceforge.ingest.forget import CannotForget, forget_files
from traceforge.report.terminal import render_forget


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@db_option
@click.option(
    "-n", "--dry-run", is_flag=True, help="Do it all, then roll it back: say what would go; change nothing."
)
@json_option
def forget(paths, db, dry_run, as_json):
    """Remove files' traces from the store, as if never ingested.

    PATHS are files as they were ingested, or folders (every file ingested
    from under them); they need not exist any more. A trace joined from a
    forgotten file and others is rebuilt from the others, a file with a
    forgotten file's content holds it now, and a file whose ids took another
    form because a forgotten file held them first takes them back: those
    files are read again, so they must be as they were ingested. All in one
    transaction: on an error nothing is forgotten.

    Run `traceforge analyze` (or `profile`) again afterwards: the workload
    tables and the reports, and datasets exported before, still count the
    forgotten traces.

    \b
    Examples:
      traceforge forget logs/test-run.jsonl
      traceforge forget logs/2026-10/ --dry-run
    """
    if not Path(db).exists():
        raise click.ClickException(f"{db}: no such store. Run `traceforge ingest PATH` first.")
    con = store.connect(db)
    try:
        report = forget_files(con, paths, dry_run=dry_run)
    except CannotForget as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        con.close()
    if as_json:
        click.echo(json.dumps(asdict(report), indent=2))
    else:
        render_forget(stderr(), report)
