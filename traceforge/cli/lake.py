"""`traceforge lake`: analyse traces kept as a Parquet dataset (a folder or object storage).

The dataset is what `traceforge export parquet` writes (library: `traceforge.lake`).
"""

from __future__ import annotations

import json

import click

from traceforge import lake, store
from traceforge.cli import cli
from traceforge.cli.options import config_from, config_option, db_option, json_option, mode_option, stdout


@cli.group(name="lake")
def lake_group() -> None:
    """Analyse a Parquet dataset of traces (`traceforge export parquet`), local or in object storage.

    \b
    Examples:
      traceforge export parquet --out lake/
      traceforge lake attach lake/ --db lake.duckdb
      traceforge profile --db lake.duckdb
      traceforge lake deps s3://bucket/lake --ray --address ray://head:10001
      traceforge lake load s3://bucket/lake --db lake.duckdb
    """


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@lake_group.command()
@click.argument("url")
@db_option
@json_option
def attach(url, db, as_json):
    """Make a new store read its traces from the dataset at URL (path, s3://, gs://, https://).

    The store's trace tables become views over the Parquet files; `traceforge
    deps`, `profile`, `sql` and `analyze`'s analyses then run on it, writing
    their own tables into the store.
    """
    con = store.connect(db)
    try:
        rows = lake.attach_parquet(con, url)
    except lake.LakeError as exc:
        raise _fail(exc) from exc
    finally:
        con.close()
    if as_json:
        click.echo(json.dumps({"store": db, "url": url, "rows": rows}, indent=2))
        return
    counts = ", ".join(f"{n:,} {table}" for table, n in rows.items())
    stdout().print(f"{db} now reads {url}: {counts}.")


@lake_group.command()
@click.argument("url")
@click.option("--out", help="Where to write the rows (default: into the dataset at URL).")
@mode_option
@config_option
@click.option(
    "--ray", "on_ray", is_flag=True, help="One Ray Data task per partition (pip install 'traceforge[ray]')."
)
@click.option(
    "--address", help="With --ray: the cluster to join (default: RAY_ADDRESS, else a local instance)."
)
@json_option
def deps(url, out, mode, config_path, on_ray, address, as_json):
    """Dependency analysis of every partition of the dataset at URL.

    Each partition (source format x day) holds whole traces; its tool_deps,
    tool_schedule and trace_dag rows are written back under the same
    partition. `traceforge lake load` brings them into a store.
    """
    config = config_from(config_path)
    try:
        if on_ray:
            from traceforge.lake_ray import analyze_lake_on_ray

            totals = analyze_lake_on_ray(url, out, mode, config, address=address)
        else:
            totals = lake.analyze_lake(url, out, mode, config)
    except lake.LakeError as exc:
        raise _fail(exc) from exc
    if as_json:
        click.echo(json.dumps(totals, indent=2))
        return
    counts = ", ".join(f"{n:,} {table}" for table, n in totals.items())
    stdout().print(f"Wrote {counts} under {out or url}.")


@lake_group.command()
@click.argument("url")
@db_option
@json_option
def load(url, db, as_json):
    """Copy the analysis rows written under URL (by `lake deps`) into a store."""
    con = store.connect(db)
    try:
        loaded = lake.load_analysis(con, url)
    except lake.LakeError as exc:
        raise _fail(exc) from exc
    finally:
        con.close()
    if as_json:
        click.echo(json.dumps(loaded, indent=2))
        return
    stdout().print(
        "Loaded " + ", ".join(f"{n:,} {table} rows" for table, n in loaded.items()) + f" into {db}."
    )


LAKE_OPTIONS = {"kind", "db", "out", "as_json"}
DEFAULT_LAKE_OUT = "traceforge-out/parquet"


def export_parquet_command(ctx: click.Context, db: str, out: str, as_json: bool) -> None:
    """`traceforge export parquet`: the store as a hive-partitioned Parquet dataset."""
    given = [
        name
        for name in ctx.params
        if name not in LAKE_OPTIONS
        and ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)
    ]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise click.UsageError(
            f"{flags}: not for `export parquet`, which writes every table (--db, --out, --json)"
        )
    if ctx.get_parameter_source("out") == click.core.ParameterSource.DEFAULT:
        out = DEFAULT_LAKE_OUT
    con = store.connect(db, read_only=True)
    try:
        written = lake.export_parquet(con, out)
    except lake.LakeError as exc:
        raise _fail(exc) from exc
    finally:
        con.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "out": written.out,
                    "tables": written.tables,
                    "partitions": written.partitions,
                    "files": written.files,
                    "bytes": written.bytes,
                },
                indent=2,
            )
        )
        return
    console = stdout()
    console.print(
        f"Wrote {len(written.tables)} tables ({written.files} Parquet files, {written.bytes / 1e6:,.1f} MB) "
        f"to {written.out}, in {len(written.partitions)} partitions (source_format x day):"
    )
    for table, rows in written.tables.items():
        console.print(f"  {table}: {rows:,} rows")
