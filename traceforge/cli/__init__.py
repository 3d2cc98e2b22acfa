"""The `traceforge` command: a click group with one module per verb, each a thin layer that parses
options, calls the library and renders the result.

Exit codes: 0 success, 1 failure (including rejects under --strict), 2 bad usage.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import click
import duckdb

from traceforge import __version__, store
from traceforge.store import StoreError
from traceforge.workers import collect_garbage_less_often


class TraceforgeGroup(click.Group):
    """Turns the errors a user can act on into one-line messages instead of tracebacks, and
    imports a verb's module only when that verb is run or listed (`traceforge ingest` does not
    import the analyses, the exports or Hugging Face `datasets`: every command starts sooner, and
    a parallel ingest starts its workers sooner)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_VERB_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _VERB_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"{__name__}.{module}")  # it adds itself with `@cli.command()`
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except StoreError as exc:
            raise click.ClickException(str(exc)) from exc
        except duckdb.OutOfMemoryException as exc:
            limit = os.environ.get("TRACEFORGE_MEMORY_LIMIT") or store.DEFAULT_SETTINGS["memory_limit"]
            raise click.ClickException(
                f"DuckDB needed more memory than its limit ({limit}) allows: {str(exc).splitlines()[0]}\n"
                "What finished before it is in the store; the step it stopped in was rolled back. Rerun "
                "with a higher limit, e.g. TRACEFORGE_MEMORY_LIMIT=2GB, or fewer DuckDB threads "
                "(TRACEFORGE_THREADS=1)."
            ) from exc
        except (KeyboardInterrupt, duckdb.InterruptException) as exc:
            raise _interrupted() from exc
        except RuntimeError as exc:  # a Ctrl-C while DuckDB reads a frame from Python
            if str(exc) != "Query interrupted":
                raise
            raise _interrupted() from exc


def _interrupted() -> click.exceptions.Exit:
    click.echo(
        "Interrupted. What finished before it is kept (files ingested, datasets exported); run the "
        "command again to do the rest: a file stopped half way is read again.",
        err=True,
    )
    return click.exceptions.Exit(130)


@click.group(cls=TraceforgeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceforge")
def cli() -> None:
    """Turn production tool-calling agent traces into post-training data and inference plans.

    \b
    Examples:
      traceforge analyze logs/                 # the main job: ingest, analyse, report
      traceforge ingest 'logs/**/*.jsonl.gz'   # only load traces into the store
      traceforge sql                           # the DuckDB shell on the store
      traceforge sql "SELECT * FROM v_trace_summary LIMIT 5"

    \b
    Environment (every command):
      TRACEFORGE_WORKERS=N         worker processes for parsing and analysis
                                   (default: one per CPU; 1: none)
      TRACEFORGE_MEMORY_LIMIT=4GB  cap on DuckDB's memory (default 512MB)
      TRACEFORGE_TEMP_DIRECTORY=D  where DuckDB spills beyond it
      TRACEFORGE_THREADS=N         DuckDB's threads
      TRACEFORGE_CHECKPOINT_THRESHOLD=256MB
                                   write-ahead log size that makes DuckDB
                                   checkpoint (default 1GB)
    """
    collect_garbage_less_often()


def main() -> None:
    try:
        cli.main(prog_name="traceforge", standalone_mode=True)
    except Exception as exc:  # a bug, not bad input: say so briefly, with a way to see more
        if os.environ.get("TRACEFORGE_DEBUG"):
            raise
        click.echo(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in traceforge; rerun with TRACEFORGE_DEBUG=1 for the traceback.",
            err=True,
        )
        sys.exit(1)


def _verb_modules() -> dict[str, str]:
    """Each verb's module in this package: the module's name, with "-" for "_" (`cache_sim.py`
    defines `cache-sim`)."""
    names = (module.name for module in pkgutil.iter_modules(__path__) if module.name != "options")
    return {name.replace("_", "-"): name for name in names}


_VERB_MODULES = _verb_modules()
