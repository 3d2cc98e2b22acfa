from __future__ import annotations

import json

import click

from traceforge.analysis.prefix_cache import BLOCK_SIZE, simulate
from traceforge.cli import cli
from traceforge.cli.options import json_option, stdout
from traceforge.export.replay import ReplayError, read_replay
from traceforge.report.profile import render_cache_sim


@cli.command("cache-sim")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--capacity-blocks",
    type=click.IntRange(min=1),
    default=None,
    help="LRU cache capacity in blocks (default: unlimited).",
)
@click.option(
    "--ttl",
    "ttl_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds a block stays cached after its last use (default: forever).",
)
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    default=BLOCK_SIZE,
    show_default=True,
    help="Tokens per hash id in TRACE.",
)
@json_option
def cache_sim(trace, capacity_blocks, ttl_s, block_size, as_json):
    """Simulate a prefix cache over a mooncake_trace JSONL file.

    TRACE is any file in the Mooncake trace format: the replay.jsonl that
    `traceforge profile` writes, or Mooncake's own traces. Prints the hit
    ratio by tokens (and by blocks) of the cache asked for, beside an
    unlimited cache (the most any cache could reuse).

    \b
    Examples:
      traceforge cache-sim traceforge-out/replay.jsonl
      traceforge cache-sim synthetic_trace.jsonl --capacity-blocks 10000
      traceforge cache-sim replay.jsonl --ttl 300 --json
    """
    try:
        read = read_replay(trace, block_size)
    except ReplayError as exc:
        raise click.ClickException(str(exc)) from exc
    if not read.requests:
        first = read.rejects[0]
        raise click.ClickException(
            f"{trace}: no usable request in {read.lines} lines; line {first.line}: {first.error}. "
            "Expected mooncake_trace lines with input_length and hash_ids."
        )
    configs = [(None, None)]
    if capacity_blocks is not None or ttl_s is not None:
        configs.insert(0, (capacity_blocks, ttl_s))
    results = [simulate(read.requests, c, t, block_size).as_dict() for c, t in configs]
    report = {
        "trace": trace,
        "block_size": block_size,
        "lines": read.lines,
        "results": results,
        "block_mismatch": read.block_mismatch,
        "untimed": read.untimed,
        "rejects": [{"line": r.line, "error": r.error} for r in read.rejects],
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render_cache_sim(stdout(), report)
