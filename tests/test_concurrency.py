"""Two runs on one store at once: the second fails at once with a message that says what to do, and
the store is exactly what the first run alone makes of it.

DuckDB lets one process write a database file at a time (and no other process read it meanwhile);
traceforge opens the store for a whole run, so a second `ingest`, `analyze` or `sql` on the same
file is refused before it reads or writes anything, never interleaved with the first.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from accounting import assert_accounting
from seed_traces import write_gateway_corpus

import traceforge.export.pipeline  # noqa: F401 - imported ahead, so the second run reaches the store at once
from traceforge import store
from traceforge.cli import cli
from traceforge.ingest import ingest_paths

TRACEFORGE = [sys.executable, "-m", "traceforge"]


def counts(db: Path) -> dict[str, int]:
    con = store.connect(db, read_only=True)
    try:
        assert_accounting(con)
        return {
            table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("sources", "traces", "llm_calls", "tool_calls", "messages", "rejects")
        }
    finally:
        con.close()


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """A corpus that takes the ingest a few seconds, and what one ingest alone makes of it."""
    folder = tmp_path_factory.mktemp("concurrency") / "logs"
    write_gateway_corpus(folder, files=60)
    reference = folder.parent / "reference.duckdb"
    con = store.connect(reference)
    try:
        ingest_paths(con, [folder])
    finally:
        con.close()
    return folder, counts(reference)


@pytest.mark.slow
@pytest.mark.parametrize(
    "second",
    [
        ["ingest", "{logs}", "--db", "{db}"],
        ["analyze", "{logs}", "--db", "{db}", "--out", "{out}"],
        ["profile", "--db", "{db}", "--out", "{out}"],
        ["export", "sft", "--db", "{db}", "--out", "{out}"],
        ["sql", "SELECT count(*) FROM traces", "--db", "{db}"],
    ],
    ids=["ingest", "analyze", "profile", "export", "sql"],
)
def test_a_second_run_on_a_store_in_use_is_refused_with_what_to_do(logs, tmp_path, runner, second):
    """The first run is a `traceforge ingest` process; the second runs here (already imported, so it
    reaches the store while the first is surely still at work)."""
    folder, expected = logs
    db = tmp_path / "shared.duckdb"
    first = subprocess.Popen([*TRACEFORGE, "ingest", str(folder), "--db", str(db)], stderr=subprocess.PIPE)
    try:
        while not db.exists():  # the first run has created (and so holds) the store
            assert first.poll() is None, first.stderr.read().decode()
            time.sleep(0.01)
        args = [a.format(logs=folder, db=db, out=tmp_path / "out") for a in second]
        refused = runner.invoke(cli, args)
        still_running = first.poll() is None
    finally:
        first_rc = first.wait(timeout=300)
    assert still_running, "the first ingest ended before the second started: make the corpus larger"
    assert first_rc == 0, first.stderr.read().decode()
    assert refused.exit_code == 1, refused.output
    assert isinstance(refused.exception, SystemExit), repr(refused.exception)
    assert "is in use by another process" in refused.output
    assert "Wait for it to finish" in refused.output and "--db" in refused.output
    assert not (tmp_path / "out").exists(), "the refused run wrote nothing"
    assert counts(db) == expected


@pytest.mark.slow
def test_two_ingests_started_together_on_a_new_store_leave_one_whole_store(logs, tmp_path):
    """Both race to create the store: one wins, the other is refused; nothing is half-made."""
    folder, expected = logs
    db = tmp_path / "new.duckdb"
    runs = [
        subprocess.Popen(
            [*TRACEFORGE, "ingest", str(folder), "--db", str(db)], stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outcomes = sorted((run.wait(timeout=300), run.stderr.read()) for run in runs)
    assert outcomes[0][0] == 0, outcomes
    assert outcomes[1][0] in (0, 1), outcomes
    if outcomes[1][0] == 1:  # refused, as it should be while the other held the store
        assert "is in use by another process" in outcomes[1][1]
    assert counts(db) == expected
