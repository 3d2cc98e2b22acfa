from __future__ import annotations

import json
from pathlib import Path

import click

from traceforge.cli import cli
from traceforge.cli.options import json_option, stdout


@cli.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.argument("repo_id")
@click.option(
    "--private/--public",
    default=True,
    show_default=True,
    help="Visibility of a repo this creates; an existing repo keeps its own.",
)
@click.option("--token", help="Hugging Face token with write access (default: HF_TOKEN or `hf auth login`).")
@click.option("-m", "--message", help="Commit message.")
@click.option(
    "--allow-unredacted",
    is_flag=True,
    help="Push configs exported with --no-redact (refused otherwise).",
)
@json_option
def push(folder, repo_id, private, token, message, allow_unredacted, as_json):
    """Publish an export folder to the Hugging Face Hub as a dataset, private by default.

    Uploads the parquet shards (or OpenAI files), README.md card and manifest in one
    commit, removing shards of the folder's configs that the folder no longer has.
    Refuses to push into an existing public repo unless --public is given,
    and refuses an export made with --no-redact unless --allow-unredacted is.
    HF_ENDPOINT selects another Hub endpoint.

    \b
    Examples:
      traceforge push traceforge-out/datasets my-org/support-agent-sft
      traceforge push data/ my-org/agent-prefs --public --token "$HF_TOKEN"
    """
    from traceforge.export.folder import FolderError
    from traceforge.export.hub import HubError, push_folder

    try:
        result = push_folder(
            Path(folder),
            repo_id,
            private=private,
            token=token,
            commit_message=message,
            allow_unredacted=allow_unredacted,
        )
    except (HubError, FolderError) as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(
            json.dumps(
                {
                    "url": result.url,
                    "commit_url": result.commit_url,
                    "private": result.private,
                    "created": result.created,
                    "files": result.files,
                },
                indent=2,
            )
        )
    else:
        from traceforge.report.datasets import render_push

        render_push(stdout(), result)
