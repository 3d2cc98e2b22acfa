from __future__ import annotations

import json
from pathlib import Path

import click

from traceforge import store
from traceforge.analysis.workloads import WorkloadKeyError
from traceforge.cli import cli
from traceforge.cli.ingest import exit_for, run_ingest
from traceforge.cli.options import (
    config_from,
    config_option,
    db_option,
    format_option,
    json_option,
    mode_option,
    output_failure,
    prices_from,
    prices_option,
    stderr,
    stdout,
    strict_option,
    workload_key_option,
)
from traceforge.pipeline import OutputError, run_analysis
from traceforge.report.terminal import render_ingest, render_report


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@db_option
@click.option(
    "--out",
    default="traceforge-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for summary.json, profile.json, replay.jsonl and report.html.",
)
@workload_key_option
@mode_option
@config_option
@prices_option
@format_option
@strict_option
@json_option
def analyze(paths, db, out, workload_key, mode, config_path, prices, fmt, strict, as_json):
    """The main job: ingest PATHS (incrementally), analyse, report, write outputs.

    Answers where spend goes, what parallel tool calls would save, what
    inference each workload needs, and what to post-train first. Rerunning on
    the same input reuses the store: unchanged files are not read again and
    analysed traces are not analysed again.

    \b
    Examples:
      traceforge analyze logs/
      traceforge analyze sample_traces/ --db /tmp/samples.duckdb --out /tmp/report
      traceforge analyze 'gateway/2026-11-*.jsonl.gz' --workload-key agent
      traceforge analyze logs/ --json > summary.json
    """
    deps_config = config_from(config_path)
    price_table = prices_from(prices)
    report = run_ingest(paths, db, fmt)
    render_ingest(stderr(), report)
    if not report.files and not Path(db).exists():
        exit_for(report, strict)  # nothing found to read, and no store: exits 1
    con = store.connect(db)
    try:
        if not con.execute("SELECT count(*) FROM traces").fetchall()[0][0]:
            exit_for(report, strict)
            raise click.ClickException(f"{db} holds no traces to analyse.")
        status = stderr().status("analysing", spinner="dots")
        with status:
            try:
                result = run_analysis(
                    con,
                    out_dir=out,
                    workload_key=workload_key,
                    mode=mode,
                    deps_config=deps_config,
                    prices=price_table,
                    store_path=str(db),
                    on_step=lambda step: status.update(step),
                )
            except WorkloadKeyError as exc:
                raise click.BadParameter(str(exc), param_hint="--workload-key") from exc
            except OutputError as exc:
                rerun = "run `traceforge analyze` again (the store keeps what was ingested)"
                raise output_failure(out, exc.error, rerun) from exc
    finally:
        con.close()
    if as_json:
        click.echo(json.dumps(result.summary, indent=2, default=str))
    else:
        render_report(stdout(), result.summary, db)
    exit_for(report, strict)
