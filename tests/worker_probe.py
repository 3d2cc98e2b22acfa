"""A function for `tests/test_workers.py` to run in worker processes (workers import it by name)."""

from __future__ import annotations

import os
import time


def timed(item: tuple[bytes, float]) -> tuple[int, float, float, int]:
    """Sleep for the item's delay; say which process ran it, when, and how much payload it got."""
    payload, delay = item
    started = time.time()
    time.sleep(delay)
    return os.getpid(), started, time.time(), len(payload)
