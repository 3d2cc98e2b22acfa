from __future__ import annotations

import json

import click
from rich.table import Table

from traceforge.cli import cli
from traceforge.cli.options import json_option, stdout
from traceforge.report.terminal import print_table
from traceforge.samples import DEFAULT_SEED, generate


@cli.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option(
    "--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Random seed of the generator."
)
@json_option
def samples(out_dir, seed, as_json):
    """Write the sample traces (OpenAI and Anthropic logs and transcripts) into OUT_DIR.

    Small, realistic agent runs from three workloads (travel support, coding,
    data analysis), with parallel calls, errors and retries, data dependencies
    and several user turns. The same seed always writes the same files; files
    of the same names in OUT_DIR are overwritten.

    \b
    Examples:
      traceforge samples sample_traces/
      traceforge samples /tmp/more --seed 7 && traceforge analyze /tmp/more
      traceforge samples /tmp/s --json | jq '.files[].traces | length'
    """
    try:
        manifest = generate(out_dir, seed=seed)
    except OSError as exc:
        raise click.ClickException(f"cannot write the samples into {out_dir}: {exc}") from exc
    if as_json:
        click.echo(json.dumps(manifest.to_dict(), indent=2))
        return
    table = Table(title=f"Sample traces in {out_dir} (seed {seed})")
    table.add_column("file", no_wrap=True)
    for column in ("traces", "calls", "tools", "bytes"):
        table.add_column(column, justify="right")
    for file in manifest.files:
        table.add_row(
            file.name,
            str(len(file.traces)),
            str(sum(t.llm_calls for t in file.traces)),
            str(sum(t.tool_calls for t in file.traces)),
            str(file.bytes),
        )
    print_table(stdout(), table)
