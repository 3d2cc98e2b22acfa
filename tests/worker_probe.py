"""A function for `tests/test_workers.py` to run in worker processes (workers import it by name)."""

from __future__ import annotations

import gc
import os
import time


def timed(item: tuple[bytes, float]) -> tuple[int, float, float, int]:
    """Sleep for the item's delay; say which process ran it, when, and how much payload it got."""
    payload, delay = item
    started = time.time()
    time.sleep(delay)
    return os.getpid(), started, time.time(), len(payload)


def collector_thresholds(item: object) -> tuple[int, int, int]:
    """The garbage collector's thresholds in the process that runs this."""
    return gc.get_threshold()
