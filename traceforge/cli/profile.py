from __future__ import annotations

import json
from pathlib import Path

import click

from traceforge import store
from traceforge.analysis.deployment import (
    DEFAULT_ITL_MS,
    DEFAULT_TTFT_MS,
    GpuProfileError,
    resolve_gpu_profile,
)
from traceforge.analysis.prefix_cache import BLOCK_SIZE
from traceforge.analysis.workloads import WorkloadKeyError
from traceforge.cli import cli
from traceforge.cli.options import (
    db_option,
    json_option,
    output_failure,
    prices_option,
    stderr,
    stdout,
    workload_key_option,
)
from traceforge.export.profile import build_profile, write_profile
from traceforge.ingest.parts import unfinished_files
from traceforge.pricing import PriceFileError, load_prices
from traceforge.report.profile import render_profile
from traceforge.report.terminal import render_unfinished


@cli.command()
@db_option
@click.option(
    "--out",
    default="traceforge-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for profile.json and replay.jsonl.",
)
@workload_key_option
@click.option(
    "--gpu-profile",
    default=None,
    help="A shipped GPU-and-model profile name, or a TOML file of your own (FILE or FILE#NAME). "
    "Default: h100-llama-3.3-70b-fp8-tp2.",
)
@click.option(
    "--target-rps",
    type=click.FloatRange(min=0, min_open=True),
    multiple=True,
    help="Request rate to size each workload's deployment for; repeat for a sweep. "
    "Default: the observed rate.",
)
@click.option(
    "--ttft-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_TTFT_MS,
    show_default=True,
    help="Mean time-to-first-token target.",
)
@click.option(
    "--itl-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_ITL_MS,
    show_default=True,
    help="Inter-token latency target.",
)
@prices_option
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    default=BLOCK_SIZE,
    show_default=True,
    help="Tokens per prefix-cache block and replay hash id.",
)
@json_option
def profile(db, out, workload_key, gpu_profile, target_rps, ttft_ms, itl_ms, prices, block_size, as_json):
    """Profile each workload's inference demand and plan its deployment.

    Ranks workloads by spend (with the power-law fit), then for each gives
    prefill/decode tokens, prefix-cache hit ratios, tool gaps, arrival rate,
    length percentiles, and prefill/decode instance counts on a GPU profile,
    observed and projected with the dependency-DAG savings. Writes
    OUT/profile.json and OUT/replay.jsonl (mooncake_trace, for AIPerf, vLLM
    or SGLang replay).

    \b
    Examples:
      traceforge profile
      traceforge profile --workload-key model --target-rps 5 --target-rps 50
      traceforge profile --gpu-profile h100-llama-3.1-8b-fp8 --itl-ms 20
      traceforge profile --gpu-profile my_gpus.toml#b200-qwen --json > profile.json
    """
    if not Path(db).exists():
        raise click.ClickException(
            f"{db}: no such store. Run `traceforge ingest PATH` or `analyze PATH` first."
        )
    try:
        gpu = resolve_gpu_profile(gpu_profile)
        price_table = load_prices(prices)
    except (GpuProfileError, PriceFileError) as exc:
        raise click.ClickException(str(exc)) from exc
    con = store.connect(db)
    try:
        render_unfinished(stderr(), unfinished_files(con))
        if not con.execute("SELECT count(*) FROM llm_calls").fetchall()[0][0]:
            raise click.ClickException(
                f"{db}: the store holds no LLM calls. Run `traceforge ingest PATH` first."
            )
        try:
            with stderr().status("profiling workloads", spinner="dots"):
                result = build_profile(
                    con,
                    workload_key=workload_key,
                    prices=price_table,
                    gpu_profile=gpu,
                    target_rps=list(target_rps),
                    ttft_ms=ttft_ms,
                    itl_ms=itl_ms,
                    block_size=block_size,
                    store_path=str(db),
                )
        except WorkloadKeyError as exc:
            raise click.BadParameter(str(exc), param_hint="--workload-key") from exc
    finally:
        con.close()
    try:
        paths = write_profile(result, out)
    except OSError as exc:
        raise output_failure(out, exc, "run `traceforge profile` again") from exc
    if as_json:
        click.echo(json.dumps(result.document, indent=2, default=str))
    else:
        render_profile(stdout(), result.document, paths)
