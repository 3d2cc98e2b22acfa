"""Worker processes for the work that keeps a core busy in Python: parsing files at ingest, and
the per-trace dependency analysis and per-workload cache simulations of `analyze`.

`ordered_map(function, items, workers)` runs `function(*shared, item)` in `workers` processes and
yields the results in the order of `items`, with at most two items in flight per worker, so results
never pile up and memory stays bounded by a few items however many there are. The caller reads
the next items from the store while the workers compute, and writes what comes back.

Workers are plain subprocesses (a fresh Python running `_serve`) fed over pipes, not
multiprocessing: a worker never re-imports the caller's main script (a script without an
`if __name__ == "__main__"` guard would run again in each worker) and never inherits this
process's threads (DuckDB's, polars') through fork. `function` is named as "module:function" so a
worker imports only what it needs.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import pickle
import queue
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

IN_FLIGHT_PER_WORKER = 2

# Python's garbage collector runs after every 700 new container objects, and goes through the older
# generations after 10 such runs. traceforge makes millions of containers that live on and hold no
# cycles (parsed JSON, rows, requests), so the collector went through an ever bigger heap again and
# again: 7-10% of the CPU time of parsing a file, 5-9% of the inference profile's. Running it after
# 50,000 (the older generations after 20 runs) left the peak memory as it was (the 1x corpus's files).
BULK_COLLECTION_THRESHOLDS = (50_000, 20, 20)


def collect_garbage_less_often() -> None:
    """Set `BULK_COLLECTION_THRESHOLDS` for the rest of this process: each worker does, and so does
    the command line."""
    gc.set_threshold(*BULK_COLLECTION_THRESHOLDS)


class WorkerError(RuntimeError):
    """A worker failed: its traceback, or how it died."""


def default_workers() -> int:
    """`TRACEFORGE_WORKERS` when set (1: no worker processes), else one per CPU this process may
    run on."""
    configured = os.environ.get("TRACEFORGE_WORKERS", "").strip()
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            raise ValueError(f"TRACEFORGE_WORKERS must be a whole number, not {configured!r}") from None
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_count(requested: int | None, work: int, threshold: int, items: int | None = None) -> int:
    """How many worker processes to use: `requested` when given, else `default_workers()` when
    there is more `work` than `threshold` (below it, starting processes costs more than it
    saves), else 1 (none); never more than `items`, the pieces the work comes in, when known."""
    if requested is not None:
        count = max(1, requested)
    elif work > threshold:
        count = default_workers()
    else:
        count = 1
    return max(1, min(count, items)) if items is not None else count


def resolve(function: str) -> Callable[..., Any]:
    """The function named "package.module:function"."""
    module, _, name = function.partition(":")
    return getattr(importlib.import_module(module), name)


def ordered_map(function: str, items: Iterable[Any], workers: int, shared: tuple = ()) -> Iterator[Any]:
    """`resolve(function)(*shared, item)` for each item, computed in `workers` processes, in order.

    A worker that raises makes this raise `WorkerError` with the worker's traceback.

    >>> list(ordered_map("math:pow", [1, 2, 3], workers=2, shared=(2,)))
    [2.0, 4.0, 8.0]
    """
    results: queue.Queue = queue.Queue()
    pool = [_Worker(function, shared, results) for _ in range(max(workers, 1))]
    try:
        upcoming = iter(enumerate(items))
        done: dict[int, Any] = {}
        next_index = 0
        exhausted = False

        def feed(worker: _Worker) -> None:
            nonlocal exhausted
            while not exhausted and worker.in_flight < IN_FLIGHT_PER_WORKER:
                item = next(upcoming, None)
                if item is None:
                    exhausted = True
                    return
                worker.submit(*item)

        for worker in pool:
            feed(worker)
        while not exhausted or any(worker.in_flight for worker in pool) or done:
            while next_index not in done:
                index, answer, worker = results.get()
                if index is None:
                    code = worker.process.wait()
                    raise WorkerError(f"a worker process exited unexpectedly (exit status {code})")
                if isinstance(answer, WorkerError):
                    raise answer
                worker.in_flight -= 1
                done[index] = answer
                feed(worker)
            yield done.pop(next_index)
            next_index += 1
    except (KeyboardInterrupt, GeneratorExit):  # the rest is not wanted: stop now, not after it
        for worker in pool:
            worker.process.kill()
        raise
    finally:
        for worker in pool:  # all told first, so they wind down together
            worker.stop()
        for worker in pool:
            worker.close()


def _send(stream: BinaryIO, value: Any) -> None:
    """Pickle `value` straight into the pipe: the pickle is not held whole on either side (the
    receiving `pickle.load` reads exactly one pickle). An object that serialises itself (a polars
    frame does, whole) is held twice while it is sent: big tables are better sent as files
    (`ingest.parallel.SharedRows.spool`)."""
    pickle.dump(value, stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


def _receive(stream: BinaryIO) -> Any:
    return pickle.load(stream)


class _Worker:
    """One worker process, the thread that sends it items and the thread that reads its answers
    into the shared queue.

    Items are sent from a thread of their own: a big item fills the pipe, and the write waits until
    the worker has finished the item before it. Sent from the caller's thread, that wait would hold
    up the caller and every other worker with it."""

    def __init__(self, function: str, shared: tuple, results: queue.Queue) -> None:
        package_root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        # In a session of its own: a Ctrl-C at the terminal reaches this process, which stops the
        # workers, not the workers themselves (each would die mid-item with a traceback).
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from traceforge import workers; workers._serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.in_flight = 0
        self.outbox: queue.Queue = queue.Queue()
        self.outbox.put((function, shared))
        self.sender = threading.Thread(target=self._send_all, args=(results,), daemon=True)
        self.sender.start()
        self.reader = threading.Thread(target=self._read, args=(results,), daemon=True)
        self.reader.start()

    def submit(self, index: int, item: Any) -> None:
        self.in_flight += 1
        self.outbox.put((index, item))

    def _send_all(self, results: queue.Queue) -> None:
        try:
            while (message := self.outbox.get()) is not None:
                try:
                    _send(self.process.stdin, message)
                except OSError:
                    return  # the worker died: its reader reports it
                except Exception:  # the item cannot be pickled: its answer is this error
                    error = WorkerError(
                        f"cannot send item {message[0]} to a worker:\n{traceback.format_exc()}"
                    )
                    results.put((message[0], error, self))
                    return
                del message  # not held while waiting for the next
        finally:
            with contextlib.suppress(OSError):
                self.process.stdin.close()  # the worker's end of input: it exits

    def _read(self, results: queue.Queue) -> None:
        while True:
            try:
                message = _receive(self.process.stdout)
            except (EOFError, OSError, pickle.UnpicklingError):
                results.put((None, None, self))
                return
            results.put((*message, self))

    def stop(self) -> None:
        """Send nothing more: the worker exits once it has answered what it was sent."""
        with contextlib.suppress(queue.Empty):  # items not sent yet (the caller stopped early)
            while True:
                self.outbox.get_nowait()
        self.outbox.put(None)

    def close(self) -> None:
        """Wait for the worker to exit (after `stop`), killing it if it does not."""
        self.sender.join(timeout=30)
        if self.sender.is_alive():  # blocked writing to a worker that does not read
            self.process.kill()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _serve() -> None:
    """A worker's loop: read (function, shared), then (index, item) per task; answer (index, result)."""
    collect_garbage_less_often()
    source = sys.stdin.buffer
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing else may write to the answer pipe
    try:
        name, shared = _receive(source)
    except (EOFError, pickle.UnpicklingError):  # the caller stopped before sending any work
        os._exit(0)
    function = resolve(name)
    while True:
        try:
            index, item = _receive(source)
        except (EOFError, pickle.UnpicklingError):  # the end, or an item cut short by a failed send
            # Every answer is flushed already. Exiting at once skips the interpreter's teardown,
            # which frees every object one by one while the caller waits for the exit.
            sys.stderr.flush()
            os._exit(0)
        try:
            answer = function(*shared, item)
        except Exception:
            answer = WorkerError(f"{name} failed in a worker on item {index}:\n{traceback.format_exc()}")
        _send(answers, (index, answer))
