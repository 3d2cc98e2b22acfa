"""The worker processes of `traceforge.workers`: order, failures, and how many there are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from traceforge.workers import (
    BULK_COLLECTION_THRESHOLDS,
    WorkerError,
    default_workers,
    ordered_map,
    worker_count,
)


def test_results_come_back_in_the_order_of_the_items():
    # time.sleep takes longer on the first items, so later ones finish first in the other worker
    items = [0.3, 0.0, 0.2, 0.0, 0.0, 0.1]
    assert list(ordered_map("time:sleep", items, workers=2)) == [None] * len(items)
    words = ["delta", "alpha", "charlie", "bravo"]
    assert list(ordered_map("operator:concat", words, workers=3, shared=("<",))) == [f"<{w}" for w in words]


def test_a_failing_item_raises_with_the_worker_s_traceback():
    with pytest.raises(WorkerError, match=r"math:sqrt failed in a worker on item 1:(.|\n)*ValueError"):
        list(ordered_map("math:sqrt", [4.0, -1.0, 9.0], workers=2))


def test_an_empty_input_gives_nothing():
    assert list(ordered_map("math:sqrt", [], workers=2)) == []


def test_workers_collect_garbage_less_often_than_python_s_default(monkeypatch):
    """Parsing and analysis make millions of long-lived objects: each worker raises the collector's
    thresholds (`BULK_COLLECTION_THRESHOLDS`), whatever its caller's are."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    assert (
        list(ordered_map("worker_probe:collector_thresholds", [1, 2], workers=2))
        == [BULK_COLLECTION_THRESHOLDS] * 2
    )
    assert BULK_COLLECTION_THRESHOLDS[0] > 10 * 700  # Python's default: 700


def test_traceforge_workers_sets_how_many(monkeypatch):
    monkeypatch.setenv("TRACEFORGE_WORKERS", "1")
    assert default_workers() == 1
    monkeypatch.setenv("TRACEFORGE_WORKERS", "3")
    assert default_workers() == 3
    monkeypatch.setenv("TRACEFORGE_WORKERS", "many")
    with pytest.raises(ValueError, match="TRACEFORGE_WORKERS must be a whole number"):
        default_workers()


def test_how_many_workers_a_piece_of_work_gets(monkeypatch):
    monkeypatch.setenv("TRACEFORGE_WORKERS", "4")
    assert worker_count(None, work=10, threshold=100) == 1  # too little to pay for processes
    assert worker_count(None, work=101, threshold=100) == 4
    assert worker_count(None, work=101, threshold=100, items=3) == 3  # no more than the pieces
    assert worker_count(2, work=0, threshold=100) == 2  # asked for: always
    assert worker_count(0, work=0, threshold=100, items=0) == 1


def test_a_big_item_waiting_for_a_busy_worker_does_not_hold_up_the_others(monkeypatch):
    # A megabyte fills the pipe: written from the caller's thread, the second item would wait until
    # the first worker finished its first, and the other worker would get nothing until then.
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    big = b"x" * (1 << 20)
    items = [(big, 1.5), (big, 0.0)] + [(b"", 0.0)] * 4
    results = list(ordered_map("worker_probe:timed", items, workers=2))
    assert [size for *_, size in results] == [len(payload) for payload, _ in items]  # all of it arrived
    first_pid, _, first_done, _ = results[0]
    others = [started for pid, started, _, _ in results[2:] if pid != first_pid]
    assert others, "the small items all went to the busy worker"
    assert min(others) < first_done - 0.5


def test_an_item_that_cannot_be_sent_raises_instead_of_waiting_for_ever():
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            list(ordered_map("operator:not_", [1, lambda: 0, 2], workers=2))  # a lambda cannot be pickled
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert outcome, "ordered_map hung on an item it could not send"
    assert isinstance(outcome[0], WorkerError) and "cannot send item 1" in str(outcome[0])


def test_stopping_early_stops_the_workers_at_once():
    """A caller that wants no more (an error, Ctrl-C) does not wait for the items in flight."""
    results = ordered_map("time:sleep", [0.0, 60.0, 60.0], workers=2)
    assert next(results) is None
    started = time.monotonic()
    results.close()
    assert time.monotonic() - started < 20  # the sleeping workers were stopped, not waited for


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc (Linux)")
def test_ctrl_c_stops_an_ingest_and_its_workers_with_what_was_kept(tmp_path):
    """A Ctrl-C at the terminal reaches the whole foreground process group. The workers are in
    sessions of their own: only the main process is interrupted, it stops them, and says what was
    kept; no worker dies mid-item with a traceback, and none is left running."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import corpus as bench_corpus

    logs = tmp_path / "logs"
    bench_corpus.generate(logs, tool_calls=8_000, file_mb=8)  # over 32 MB in several files: workers
    command = [sys.executable, "-m", "traceforge", "ingest", str(logs), "--db", str(tmp_path / "s.duckdb")]
    process = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # a process group of its own, as a shell gives a command
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )

    def children() -> list[int]:
        """The main process's workers, once started (a child between fork and exec is not yet in
        its own session)."""
        tasks = Path(f"/proc/{process.pid}/task")
        try:
            pids = [int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()]
            return [pid for pid in pids if b"_serve" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        except OSError:
            return []

    deadline = time.monotonic() + 60
    while not children() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # every worker started: parsing, not being spawned
    workers = children()
    assert workers, "the ingest finished before its workers could be seen"
    # not in the group the terminal signals (a worker that got the Ctrl-C would die mid-item)
    assert all(os.getsid(pid) != os.getsid(process.pid) for pid in workers)
    os.killpg(process.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Interrupted. What finished before it is kept" in stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr

    def running(pid: int) -> bool:  # a zombie has stopped; only its parent's wait removes it
        try:
            return "\tZ" not in Path(f"/proc/{pid}/status").read_text().split("\n")[1]
        except OSError:
            return False

    assert not [pid for pid in workers if running(pid)]


def test_a_worker_whose_caller_stops_before_sending_work_exits_quietly():
    worker = subprocess.run(
        [sys.executable, "-c", "from traceforge import workers; workers._serve()"],
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert (worker.returncode, worker.stderr) == (0, b"")


def test_a_parsing_worker_does_not_import_what_only_the_writer_needs():
    """A worker imports the parser it runs (`traceforge.ingest.parallel`) before its first file,
    on the ingest's critical path; networkx, which only joining logs in the writing process uses,
    cost each worker about 85 ms of that."""
    probe = "import sys, traceforge.ingest.parallel; print('networkx' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
