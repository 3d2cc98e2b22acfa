"""The worker processes of `traceforge.workers`: order, failures, and how many there are."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from traceforge.workers import WorkerError, default_workers, ordered_map, worker_count


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
