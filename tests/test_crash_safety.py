"""Crash safety: `traceforge ingest` killed with SIGKILL at random points of a multi-file corpus.

After each kill the store opens, holds only whole files (every file in `sources` has all of its
traces, LLM calls and tool calls; no trace lacks its `sources` row) and its accounting holds; a rerun
then completes, with no duplicates and exactly the rows an uninterrupted ingest writes into a fresh
store. The ingest runs in a subprocess with small write batches, so a run commits many times and the
kills land between, inside and around commits; the parallel variant parses in worker processes and
checks that they do not outlive the killed ingest.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from accounting import assert_accounting
from seed_traces import write_gateway_corpus

import traceforge.ingest
from traceforge import store
from traceforge.ingest import ingest_paths, parallel

KILLS = 3
# `python -c` prelude: small batches (many commits), and for the parallel variant, workers at any size.
PRELUDE = (
    "import sys, traceforge.ingest as i, traceforge.ingest.parallel as p; i.BATCH_ROWS = 300; "
    "p.PARALLEL_MIN_BYTES = 0 if sys.argv.pop(1) == 'parallel' else p.PARALLEL_MIN_BYTES; "
    "from traceforge.cli import main; main()"
)


def snapshot(con) -> dict:
    """Everything a rerun must reproduce: each file's accounting, and every id in the store."""
    return {
        "sources": con.execute(
            "SELECT path, sha256, format, records, ingested, rejected, skipped, skipped_by_kind, traces, "
            "error FROM sources ORDER BY path"
        ).fetchall(),
        "traces": con.execute("SELECT trace_id, source_path FROM traces ORDER BY 1").fetchall(),
        "llm_calls": con.execute("SELECT call_id, trace_id FROM llm_calls ORDER BY 1").fetchall(),
        "tool_calls": con.execute(
            "SELECT tool_call_id, trace_id, call_id FROM tool_calls ORDER BY 1"
        ).fetchall(),
        "messages": con.execute("SELECT count(*) FROM messages").fetchone()[0],
        "rejects": con.execute("SELECT source_path, line, error FROM rejects ORDER BY 1, 2").fetchall(),
    }


def per_file(con) -> dict[str, tuple[int, int, int]]:
    """traces, LLM calls and tool calls per source file."""
    rows = con.execute(
        """
        SELECT s.path, count(DISTINCT t.trace_id), count(DISTINCT c.call_id), count(DISTINCT tc.tool_call_id)
        FROM sources s
        LEFT JOIN traces t ON t.source_path = s.path
        LEFT JOIN llm_calls c ON c.trace_id = t.trace_id
        LEFT JOIN tool_calls tc ON tc.trace_id = t.trace_id
        GROUP BY s.path
        """
    ).fetchall()
    return {path: counts for path, *counts in ((r[0], *r[1:]) for r in rows)}


def start_ingest(corpus: Path, db: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE, mode, "ingest", str(corpus), "--db", str(db)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: workers can be found (and cleaned up)
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict, dict]:
    """The corpus, and what an uninterrupted ingest into a fresh store makes of it."""
    assert hasattr(traceforge.ingest, "BATCH_ROWS") and hasattr(parallel, "PARALLEL_MIN_BYTES")
    folder = tmp_path_factory.mktemp("crash") / "logs"
    write_gateway_corpus(folder, files=24)
    con = store.connect(folder.parent / "reference.duckdb")
    try:
        ingest_paths(con, [folder])
        assert_accounting(con)
        return folder, snapshot(con), per_file(con)
    finally:
        con.close()


def timed_run(folder: Path, db: Path, mode: str) -> tuple[float, float]:
    """An uninterrupted run: (seconds until it created the store, seconds until it ended)."""
    started = time.monotonic()
    process = start_ingest(folder, db, mode)
    created = None
    while process.poll() is None:
        if created is None and db.exists():
            created = time.monotonic() - started
        time.sleep(0.005)
    assert process.returncode == 0, process.stderr.read().decode()
    ended = time.monotonic() - started
    return created if created is not None else ended, ended


def kill_at(folder: Path, db: Path, mode: str, delay: float) -> None:
    """Start an ingest, SIGKILL it (only its main process, as the OOM killer would) after `delay`
    seconds, and check that its parsing workers do not outlive it."""
    process = start_ingest(folder, db, mode)
    time.sleep(delay)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while group_alive(process.pid) and time.monotonic() < deadline:  # workers see their pipe close
        time.sleep(0.05)
    leftover = group_alive(process.pid)
    if leftover:
        os.killpg(process.pid, signal.SIGKILL)
    assert not leftover, "parsing workers outlived the killed ingest"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_an_ingest_killed_at_random_points_leaves_whole_files_and_a_rerun_completes(corpus, tmp_path, mode):
    """Each kill lands somewhere in the span where an uninterrupted run writes (from the store's
    creation to its end), on a store of its own; then the store is checked and the ingest rerun."""
    folder, expected, expected_per_file = corpus
    created, ended = timed_run(folder, tmp_path / "timing.duckdb", mode)
    rng = random.Random(f"kills/{mode}")
    outcomes: list[tuple[float, int]] = []  # (delay, files whole in the store after the kill)

    def kill_check_and_rerun(number: int, delay: float) -> None:
        db = tmp_path / f"killed-{number}.duckdb"
        kill_at(folder, db, mode, delay)
        files = 0
        if db.exists():
            con = store.connect(db)
            try:
                assert_accounting(con)
                counts = per_file(con)
                for path, got in counts.items():
                    assert got == expected_per_file[path], f"{path} is not whole after the kill: {got}"
                files = len(counts)
            finally:
                con.close()
        outcomes.append((delay, files))
        rerun = start_ingest(folder, db, mode)
        assert rerun.wait(timeout=300) == 0, rerun.stderr.read().decode()
        con = store.connect(db)
        try:
            assert_accounting(con)
            assert snapshot(con) == expected
        finally:
            con.close()

    def mid_run() -> bool:
        return any(0 < n < len(expected["sources"]) for _, n in outcomes)

    for number in range(KILLS):
        kill_check_and_rerun(number, rng.uniform(created, ended))
    # On a loaded machine random kills may all land before the first write or after the last: bisect
    # between the latest delay that left nothing and the earliest that left everything.
    for number in range(KILLS, KILLS + 12):
        if mid_run():
            break
        early = max([d for d, n in outcomes if n == 0], default=0.0)
        late = min([d for d, n in outcomes if n == len(expected["sources"])], default=ended * 2)
        kill_check_and_rerun(number, (early + late) / 2)
    partial = [n for _, n in outcomes]
    assert any(0 < n < len(expected["sources"]) for n in partial), partial
