from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceforge import store
from traceforge.cli import cli
from traceforge.cli.options import TraceProgress, db_option, json_option, stderr, stdout
from traceforge.ingest.parts import unfinished_files
from traceforge.report.terminal import render_unfinished

if TYPE_CHECKING:
    from traceforge.export.hub import PushResult

# As traceforge.export.pipeline.KINDS, which is not imported here: it loads `datasets`, which every
# `traceforge` command would then pay for at start-up.
KINDS = ("sft", "parallel", "preference", "rl")
# Not a dataset: the whole store as hive-partitioned Parquet (`traceforge.lake`, see `traceforge lake`).
LAKE_KIND = "parquet"


def _date(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(
            f"{value!r}: use a date or time like 2025-03-01 or 2025-03-01T12:00"
        ) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@cli.command()
@click.argument("kind", type=click.Choice([*KINDS, LAKE_KIND]))
@db_option
@click.option(
    "--out",
    default="traceforge-out/datasets",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The export folder (new, empty, or one traceforge wrote); this export becomes a config in it.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["hf", "openai"]),
    default="hf",
    show_default=True,
    help="hf: parquet shards + dataset card (TRL); openai: OpenAI fine-tuning JSONL.",
)
@click.option(
    "--workload",
    multiple=True,
    help="Only these workloads (repeatable): the traces' own names, or those the last analyze / "
    "profile reported under its --workload-key.",
)
@click.option(
    "--outcome",
    multiple=True,
    type=click.Choice(["success", "failure", "unknown"]),
    help="Only traces with this recorded outcome (repeatable).",
)
@click.option(
    "--model", multiple=True, help="Only traces with an LLM call to this model; globs work (gpt-4o*)."
)
@click.option("--since", help="Only traces started at or after this date/time (UTC unless given).")
@click.option("--until", help="Only traces started before this date/time.")
@click.option("--min-tool-calls", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--max-messages", type=click.IntRange(min=1), help="Drop (never cut) longer conversations.")
@click.option("--max-chars", type=click.IntRange(min=1), help="Drop conversations with more characters.")
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    help="Drop traces whose largest recorded LLM call (input + output) is bigger.",
)
@click.option("--no-dedup", is_flag=True, help="Keep exact and near duplicates.")
@click.option(
    "--near-dup-threshold",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.9,
    show_default=True,
    help="MinHash Jaccard similarity at which two conversations count as near duplicates.",
)
@click.option(
    "--split",
    "split_spec",
    default="train=0.9,test=0.1",
    show_default=True,
    help="Split names and fractions; a trace is never in two splits.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the split assignment.")
@click.option("--no-redact", is_flag=True, help="Do NOT remove secrets and personal data (on by default).")
@click.option(
    "--license", "license_id", help="License id for the dataset card (e.g. apache-2.0, cc-by-4.0, other)."
)
@click.option(
    "--push-to-hub", "repo_id", metavar="REPO_ID", help="Push the folder to this Hub dataset repo after."
)
@click.option("--public", is_flag=True, help="With --push-to-hub: create the repo public (default private).")
@click.option(
    "--token", help="With --push-to-hub: Hugging Face token (default: HF_TOKEN or `hf auth login`)."
)
@json_option
def export(
    kind,
    db,
    out,
    fmt,
    workload,
    outcome,
    model,
    since,
    until,
    min_tool_calls,
    max_messages,
    max_chars,
    max_tokens,
    no_dedup,
    near_dup_threshold,
    split_spec,
    seed,
    no_redact,
    license_id,
    repo_id,
    public,
    token,
    as_json,
):
    """Write a post-training dataset from the store: sft, parallel, preference or rl
    (or the whole store as Parquet: parquet).

    \b
    sft         whole conversations, TRL conversational format + tools
                (a compacted session: one row per context)
    parallel    the same, independent tool calls re-laid into one turn
                (needs the dependency analysis: run `traceforge analyze`)
    preference  prompt / chosen (parallel turn) / rejected (sequential)
    rl          prompt-only rows with tools and the recorded outcome
    parquet     every table as hive-partitioned Parquet (source_format/day),
                for a data lake: see `traceforge lake` (only --db, --out, --json);
                --out may be an object-storage URL (s3://, gs://, az://)

    Redaction of secrets and personal data is on unless --no-redact is given.
    Each export is a config of the --out folder; several can share it.

    \b
    Examples:
      traceforge export sft --workload support-bot --outcome success
      traceforge export parallel --out data/ --license apache-2.0
      traceforge export sft --format openai --max-tokens 32000
      traceforge export preference --out data/ --push-to-hub my-org/agent-prefs
      traceforge export parquet --out s3://bucket/traces-lake
    """
    if kind == LAKE_KIND:
        from traceforge.cli.lake import export_parquet_command

        return export_parquet_command(click.get_current_context(), db, out, as_json)
    from traceforge.export.folder import FolderError
    from traceforge.export.pipeline import ExportError, ExportOptions, command_line
    from traceforge.export.pipeline import export as run_export
    from traceforge.export.selection import Criteria, SelectionError, parse_splits, unmatched_filters

    if fmt == "openai" and kind == "rl":
        raise click.UsageError(
            "OpenAI's fine-tuning formats have no prompt-only RL rows; use --format hf for rl"
        )
    try:
        criteria = Criteria(
            workloads=workload,
            outcomes=outcome,
            models=model,
            since=_date(since),
            until=_date(until),
            min_tool_calls=min_tool_calls,
            max_messages=max_messages,
            max_chars=max_chars,
            max_tokens=max_tokens,
            dedup=not no_dedup,
            near_dup_threshold=near_dup_threshold,
            splits=parse_splits(split_spec),
            seed=seed,
        )
    except SelectionError as exc:
        raise click.UsageError(str(exc)) from exc
    options = ExportOptions(
        kind=kind,
        out=Path(out),
        criteria=criteria,
        fmt=fmt,
        redact=not no_redact,
        license=license_id,
        command=command_line(),
    )
    con = store.connect(db, read_only=True)
    try:
        render_unfinished(stderr(), unfinished_files(con))
        with TraceProgress(f"exporting {kind}") as on_progress:
            report = run_export(con, options, on_progress)
        unmatched = unmatched_filters(con, criteria) if not report.matched else []
    except (ExportError, FolderError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        con.close()
    from traceforge.report.datasets import render_export, render_push, render_unmatched

    if not as_json:
        render_export(stdout(), report)
    pushed = _push(Path(out), repo_id, not public, token) if repo_id and report.total_rows else None
    if as_json:
        payload = report.as_dict()
        if pushed is not None:
            payload["pushed"] = {"url": pushed.url, "private": pushed.private, "commit": pushed.commit_url}
        click.echo(json.dumps(payload, indent=2))
    elif pushed is not None:
        render_push(stdout(), pushed)
    render_unmatched(stderr(), unmatched)
    if not report.total_rows:
        stderr().print(f"No rows written for {kind}: see the counts above for what was left out.")
        sys.exit(1)


def _push(folder: Path, repo_id: str, private: bool, token: str | None) -> PushResult:
    from traceforge.export.folder import FolderError
    from traceforge.export.hub import HubError, push_folder

    try:
        return push_folder(folder, repo_id, private=private, token=token)
    except (HubError, FolderError) as exc:
        raise click.ClickException(f"the export is in {folder}, but the push failed: {exc}") from exc
