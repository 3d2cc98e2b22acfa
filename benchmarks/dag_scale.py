"""How dependency inference and DAG analysis scale: one long trace, and many small ones.

1. Long traces of 1,250, 2,500 and 5,000 tool calls in one user turn (planted structures, written as
   a transcript and ingested): the time per call should stay flat as the trace grows (near-linear).
2. 100,000 small traces (four calls each: a lookup, a read of what it found, an independent lookup,
   a write of the same order). Their rows are written straight into the store with DuckDB set
   operations, because this measures the analysis, not the ingest; the analysis then reads them in
   batches, so memory follows the batch, not the store.

Usage:
    python benchmarks/dag_scale.py            # the full run: a few minutes on two cores
    python benchmarks/dag_scale.py --quick    # 250-1,000 calls and 10,000 small traces
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import planted

from traceforge import store
from traceforge.analysis.dag import analyze_dependencies, schedule
from traceforge.analysis.deps import infer, read_traces
from traceforge.ingest import ingest_paths

SMALL_CALLS = 4


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def long_trace(folder: Path, calls: int, seed: int = 5) -> list[str]:
    """Ingest one trace of at least `calls` planted calls in one user turn; time each stage."""
    rng = random.Random(seed)
    record, _ = planted.generate_trace(rng, f"long-{calls}", user_turns=1, calls_per_turn=calls)
    path = folder / f"long-{calls}.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    con = store.connect(folder / f"long-{calls}.duckdb")
    try:
        started = time.perf_counter()
        ingest_paths(con, [path])
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        (trace,) = read_traces(con, [record["id"]])
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        inference = infer(trace)
        infer_s = time.perf_counter() - started
        started = time.perf_counter()
        conservative = schedule(inference, "conservative")
        loose = schedule(inference, "loose")
        schedule_s = time.perf_counter() - started
        started = time.perf_counter()
        analyze_dependencies(con, recompute=True)
        analyze_s = time.perf_counter() - started
    finally:
        con.close()
    n = len(trace.calls)
    return [
        f"{n:>6}",
        f"{conservative.observed_turns:>6}",
        f"{conservative.min_turns:>5}/{loose.min_turns:<5}",
        f"{len(inference.edges):>6}",
        f"{ingest_s:>7.2f}",
        f"{read_s:>6.2f}",
        f"{infer_s:>6.2f}",
        f"{schedule_s:>8.2f}",
        f"{analyze_s:>8.2f}",
        f"{analyze_s / n * 1e6:>8.0f}",
    ]


SMALL_TEMPLATE = f"""
CREATE TEMP TABLE bench_ids AS
    SELECT i, 'small-' || lpad(i::VARCHAR, 7, '0') AS trace_id FROM range($count) t(i);
CREATE TEMP TABLE bench_calls AS
WITH template(k, name, arguments, result) AS (VALUES
    (0, 'get_user', '{{"user_id": "u_$i"}}',
        '{{"user_id": "u_$i", "orders": ["W$i-7"], "email": "c$i@example.com"}}'),
    (1, 'get_order', '{{"order_id": "W$i-7"}}', '{{"status": "shipped", "total": $p.50}}'),
    (2, 'get_weather', '{{"city": "City$c"}}', '{{"temp": 12, "sky": "clear"}}'),
    (3, 'update_address', '{{"order_id": "W$i-7", "address": "$i Mill Lane"}}', '{{"status": "ok"}}')
)
SELECT b.trace_id, b.i, t.k, t.name,
       b.trace_id || '-c' || t.k AS tool_call_id,
       b.trace_id || '/llm-' || t.k AS call_id,
       replace(replace(replace(t.arguments, '$i', b.i::VARCHAR), '$c', (b.i % 50)::VARCHAR),
               '$p', (100 + b.i % 900)::VARCHAR) AS arguments,
       replace(replace(replace(t.result, '$i', b.i::VARCHAR), '$c', (b.i % 50)::VARCHAR),
               '$p', (100 + b.i % 900)::VARCHAR) AS result
FROM bench_ids b CROSS JOIN template t;

INSERT INTO traces BY NAME
SELECT trace_id, 'bench-' || (i % 20) AS workload, 'openai-chat' AS source_format,
       'bench' AS source_path, 'unknown' AS outcome, '{{}}' AS attributes
FROM bench_ids;
INSERT INTO tool_calls BY NAME
SELECT tool_call_id, trace_id, call_id, k AS seq, name, arguments, result, false AS is_error,
       'assistant' AS requestor, tool_call_id AS source_tool_call_id
FROM bench_calls;
INSERT INTO llm_calls BY NAME
SELECT trace_id || '/llm-' || k AS call_id, trace_id, k AS seq, false AS usage_reported
FROM bench_ids CROSS JOIN range({SMALL_CALLS + 1}) r(k);
INSERT INTO messages BY NAME
SELECT trace_id, 0 AS seq, 'system' AS role, 'You are the assistant of an online shop.' AS content
FROM bench_ids
UNION ALL BY NAME
SELECT trace_id, 1 AS seq, 'user' AS role,
       'Show customer u_' || i || ', the weather in City' || (i % 50) ||
       ', and ship their order to ' || i || ' Mill Lane.' AS content
FROM bench_ids
UNION ALL BY NAME
SELECT trace_id, 2 + 2 * k AS seq, 'assistant' AS role,
       '[{{"id": "' || tool_call_id || '", "name": "' || name || '", "arguments": ' || arguments || '}}]'
           AS tool_calls,
       call_id
FROM bench_calls
UNION ALL BY NAME
SELECT trace_id, 3 + 2 * k AS seq, 'tool' AS role, result AS content, tool_call_id, name
FROM bench_calls
UNION ALL BY NAME
SELECT trace_id, 2 + 2 * {SMALL_CALLS} AS seq, 'assistant' AS role, 'Done.' AS content,
       trace_id || '/llm-{SMALL_CALLS}' AS call_id
FROM bench_ids;
"""


def small_traces(folder: Path, count: int) -> list[str]:
    """Write `count` four-call traces with DuckDB, analyse them, and check every schedule."""
    con = store.connect(folder / f"small-{count}.duckdb")
    try:
        started = time.perf_counter()
        con.execute(SMALL_TEMPLATE.replace("$count", str(int(count))))
        write_s = time.perf_counter() - started
        started = time.perf_counter()
        summary = analyze_dependencies(con)
        analyze_s = time.perf_counter() - started
        # Planted: get_user -> get_order (its id) -> update_address (same order); get_weather free.
        right = con.execute(
            "SELECT count(*) FROM trace_dag "
            "WHERE observed_turns = 4 AND min_turns = 3 AND min_turns_loose = 3"
        ).fetchall()[0][0]
    finally:
        con.close()
    return [
        f"{count:>7}",
        f"{summary['tool_calls']:>7}",
        f"{summary['batches']:>7}",
        f"{write_s:>7.1f}",
        f"{analyze_s:>9.1f}",
        f"{count / analyze_s:>9.0f}",
        f"{summary['tool_calls'] / analyze_s:>8.0f}",
        f"{right:>7}/{count}",
        f"{peak_rss_mib():>8.0f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a check in seconds")
    args = parser.parse_args(argv)
    sizes = (250, 500, 1000) if args.quick else (1250, 2500, 5000)
    small = (10_000,) if args.quick else (10_000, 100_000)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        print("one long trace, one user turn (seconds; min turns conservative/loose)")
        print(" calls  turns  min turns   edges   ingest   read  infer  schedule  analyse  us/call")
        for calls in sizes:
            print("  ".join(long_trace(folder, calls)), flush=True)
        print()
        print("small traces of four calls, rows written by DuckDB (seconds)")
        print(" traces    calls  batches   write  analyse   traces/s  calls/s  schedules right  peak MiB")
        for count in small:
            print("  ".join(small_traces(folder, count)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
