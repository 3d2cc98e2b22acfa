"""Options and helpers shared by several verbs."""

from __future__ import annotations

import os
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from traceforge.analysis.batches import TraceProgressCallback
from traceforge.analysis.effects import MODES, ConfigError, DepsConfig, load_config
from traceforge.ingest import detect
from traceforge.pricing import PriceFileError, PriceTable, load_prices
from traceforge.store import DEFAULT_DB

db_option = click.option(
    "--db",
    default=DEFAULT_DB,
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The DuckDB store file.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
format_option = click.option(
    "--format",
    "fmt",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", *detect.formats()]),
    help="Input format; auto detects it from each file's content.",
)
strict_option = click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 if any record or file is rejected.",
)


mode_option = click.option(
    "--mode",
    type=click.Choice(MODES),
    default="conservative",
    show_default=True,
    help="conservative: every edge, unknown tools are barriers (claims you can train on); "
    "loose: only confident edges (the most a parallel model could save).",
)
config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Tool effects and latency defaults (default: ./traceforge.toml when it exists).",
)


def config_from(path: str | None) -> DepsConfig:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


workload_key_option = click.option(
    "--workload-key",
    default=None,
    help="Group traces by: workload (default: the source's name, else a fingerprint of system "
    "prompt and tools), agent, model, source_format, fingerprint, or attributes.PATH.",
)


prices_option = click.option(
    "--prices",
    type=click.Path(exists=True, dir_okay=False),
    help="A TOML price file adding to or overriding the shipped prices (same format).",
)


def prices_from(path: str | None) -> PriceTable:
    try:
        return load_prices(path)
    except PriceFileError as exc:
        raise click.ClickException(str(exc)) from exc


def output_failure(out: str, error: OSError, rerun: str) -> click.ClickException:
    """A failure to write the output files (a full disk, a folder that may not be written) said as
    what it is, with what to do (`rerun`), not as a bug in traceforge."""
    reason = error.strerror or str(error)
    detail = f"{error.filename}: {reason}" if error.filename else reason
    return click.ClickException(
        f"cannot write the outputs to {out} ({detail}); free some space or choose another --out, then {rerun}"
    )


PIPED_WIDTH = 10_000  # piped, a table is laid out this wide: as wide as it needs, no cell folded


def stdout() -> Console:
    """Report output: word-wrapped to the terminal's width on a terminal; piped or redirected (and
    no COLUMNS set), long lines and table rows stay whole (and colourless) so they can be grepped.
    No markup is read: names, paths and messages from traces print as they are (`[/tmp]` would
    fail as a closing tag, `[prod]` vanish as a style); the reports style their own words with
    `rich.text.Text`."""
    return _console(stderr=False)


def stderr() -> Console:
    """Progress, warnings and errors, as `stdout` writes them."""
    return _console(stderr=True)


def _console(stderr: bool) -> Console:
    console = Console(stderr=stderr, markup=False)
    if not console.is_terminal:
        console.soft_wrap = True
        if "COLUMNS" not in os.environ:
            console.width = PIPED_WIDTH
    return console


class TraceProgress:
    """A progress bar over traces on stderr, shown only on a terminal: `with TraceProgress("label")
    as on_progress:` gives the callback `(done, total)` that analyses and exports call."""

    def __init__(self, label: str) -> None:
        console = stderr()
        self.progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("traces"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )

    def __enter__(self) -> TraceProgressCallback:
        self.progress.__enter__()
        task = self.progress.add_task("traces", total=None)

        def on_progress(done: int, total: int) -> None:
            self.progress.update(task, completed=done, total=total)

        return on_progress

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)


class FileProgress:
    """A progress bar over files on stderr, shown only on a terminal: `with FileProgress() as
    progress:` gives `progress.on_file` and, for a big file written in parts, `progress.on_part`,
    which shows how much of it has been read."""

    def __init__(self) -> None:
        console = stderr()
        self.progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[name]}", markup=False),  # a file name, as it is
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self.task = None

    def __enter__(self) -> FileProgress:
        self.progress.__enter__()
        return self

    def on_file(self, path: Path, index: int, total: int) -> None:
        if self.task is None:
            self.task = self.progress.add_task("reading", total=total, name="")
        self.progress.update(self.task, completed=index, name=path.name)

    def on_part(self, path: Path, read: int, size: int) -> None:
        if self.task is not None and size:
            self.progress.update(self.task, name=f"{path.name} ({min(read, size) * 100 // size}%)")

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)
