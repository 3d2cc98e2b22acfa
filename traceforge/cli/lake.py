"""`traceforge lake`: analyse traces kept as a Parquet dataset (a folder or object storage).

The dataset is what `traceforge export parquet` writes (library: `traceforge.lake`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

import click
import duckdb

from traceforge import lake, store
from traceforge.cli import cli
from traceforge.cli.options import config_from, config_option, db_option, json_option, mode_option, stdout

T = TypeVar("T")


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


def _on_store(db: str, action: Callable[[duckdb.DuckDBPyConnection], T], read_only: bool = False) -> T:
    """`action` on the store at `db`, closed after; a LakeError is the command's error."""
    con = store.connect(db, read_only=read_only)
    try:
        return action(con)
    except lake.LakeError as exc:
        raise _fail(exc) from exc
    finally:
        con.close()


def _report(as_json: bool, data: object, text: str) -> None:
    """`data` as JSON with --json, else `text` for people."""
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        stdout().print(text)


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
    rows = _on_store(db, lambda con: lake.attach_parquet(con, url))
    counts = ", ".join(f"{n:,} {table}" for table, n in rows.items())
    _report(as_json, {"store": db, "url": url, "rows": rows}, f"{db} now reads {url}: {counts}.")


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
    counts = ", ".join(f"{n:,} {table}" for table, n in totals.items())
    _report(as_json, totals, f"Wrote {counts} under {out or url}.")


@lake_group.command()
@click.argument("url")
@db_option
@json_option
def load(url, db, as_json):
    """Copy the analysis rows written under URL (by `lake deps`) into a store."""
    loaded = _on_store(db, lambda con: lake.load_analysis(con, url))
    counts = ", ".join(f"{n:,} {table} rows" for table, n in loaded.items())
    _report(as_json, loaded, f"Loaded {counts} into {db}.")


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
    written = _on_store(db, lambda con: lake.export_parquet(con, out), read_only=True)
    data = {
        "out": written.out,
        "tables": written.tables,
        "partitions": written.partitions,
        "files": written.files,
        "bytes": written.bytes,
    }
    lines = [
        f"Wrote {len(written.tables)} tables ({written.files} Parquet files, {written.bytes / 1e6:,.1f} MB) "
        f"to {written.out}, in {len(written.partitions)} partitions (source_format x day):",
        *(f"  {table}: {rows:,} rows" for table, rows in written.tables.items()),
    ]
    _report(as_json, data, "\n".join(lines))
