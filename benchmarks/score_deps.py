"""Score traceforge's dependency inference against traces with planted dependencies.

Generates traces (benchmarks/planted.py), ingests them with `traceforge.ingest.ingest_paths`,
analyses them in both modes with `traceforge.analysis.dag.analyze_dependencies`, and compares:

- edge precision and recall, over the dependency closure (a needs b, directly or through others),
  within user turns (across a user message everything is ordered anyway);
- exact minimum turns: the share of traces whose minimum number of tool-calling turns equals the
  planted DAG's;
- false independence: planted dependencies (closure pairs) the parallel schedule would run in the
  same turn or the wrong order. The target is zero in conservative mode.

Usage:
    python benchmarks/score_deps.py                  # 1,000 traces, seed 1
    python benchmarks/score_deps.py --traces 2000 --seed 7 --keep /tmp/planted
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import planted

from traceforge import store
from traceforge.analysis.dag import analyze_dependencies
from traceforge.analysis.effects import MODES
from traceforge.ingest import ingest_paths

TARGET_EXACT = 0.95


def closure(calls: list[str], edges: list[tuple[str, str]]) -> dict[str, set[str]]:
    """Each call's ancestors under `edges` (which point from earlier to later calls)."""
    preds: dict[str, set[str]] = defaultdict(set)
    for src, dst in edges:
        preds[dst].add(src)
    ancestors: dict[str, set[str]] = {}
    for call in calls:
        found: set[str] = set()
        for pred in preds[call]:
            found.add(pred)
            found |= ancestors.get(pred, set())
        ancestors[call] = found
    return ancestors


def planted_min_turns(calls: list[str], segments: list[int], edges: list[tuple[str, str]]) -> int:
    """The planted DAG's depth: calls of a user turn come after every call of the turns before."""
    preds: dict[str, set[str]] = defaultdict(set)
    for src, dst in edges:
        preds[dst].add(src)
    level: dict[str, int] = {}
    floor, current_segment, deepest = 0, None, -1
    for call, segment in zip(calls, segments, strict=True):
        if segment != current_segment:
            floor, current_segment = deepest + 1, segment
        level[call] = max([floor] + [level[p] + 1 for p in preds[call]])
        deepest = max(deepest, level[call])
    return deepest + 1


def score(con: duckdb.DuckDBPyConnection, truth: dict[str, dict[str, Any]], mode: str) -> dict[str, Any]:
    """Compare the store's analysis (already run in `mode`) with the truth."""
    inferred: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for trace_id, src, dst, loose in con.execute(
        "SELECT trace_id, src_tool_call_id, dst_tool_call_id, loose FROM tool_deps"
    ).fetchall():
        if mode == "conservative" or loose:
            inferred[trace_id].append((src, dst))
    levels = dict(con.execute("SELECT tool_call_id, level FROM tool_schedule").fetchall())
    min_turns = dict(con.execute("SELECT trace_id, min_turns FROM trace_dag").fetchall())
    totals = defaultdict(int)
    by_block: dict[str, defaultdict] = defaultdict(lambda: defaultdict(int))
    misses: list[str] = []
    for trace_id, plan in truth.items():
        calls, segments = plan["calls"], plan["segments"]
        segment_of = dict(zip(calls, segments, strict=True))
        block_of = dict(zip(calls, plan["blocks"], strict=True))
        true_edges = [(s, d) for s, d, _ in plan["edges"]]
        true_pairs = {
            (a, b)
            for b, anc in closure(calls, true_edges).items()
            for a in anc
            if segment_of[a] == segment_of[b]
        }
        found_pairs = {
            (a, b)
            for b, anc in closure(calls, inferred[trace_id]).items()
            for a in anc
            if segment_of[a] == segment_of[b]
        }
        hit = true_pairs & found_pairs
        totals["true_pairs"] += len(true_pairs)
        totals["found_pairs"] += len(found_pairs)
        totals["hit_pairs"] += len(hit)
        wrong_order = {(a, b) for a, b in true_pairs if levels[b] <= levels[a]}
        totals["false_independence"] += len(wrong_order)
        expected = planted_min_turns(calls, segments, true_edges)
        exact = min_turns.get(trace_id) == expected
        totals["traces"] += 1
        totals["exact"] += exact
        if not exact:
            misses.append(f"{trace_id}: {min_turns.get(trace_id)} turns, planted {expected}")
        for block in set(plan["blocks"]):
            row = by_block[block]
            row["traces"] += 1
            row["exact"] += exact
        for a, b in true_pairs:
            by_block[block_of[b]]["true_pairs"] += 1
            by_block[block_of[b]]["hit_pairs"] += (a, b) in hit
            by_block[block_of[b]]["false_independence"] += (a, b) in wrong_order
        for a, b in found_pairs:
            by_block[block_of[b]]["found_pairs"] += 1
            by_block[block_of[b]]["hit_found"] += (a, b) in hit
    return {
        "mode": mode,
        "totals": dict(totals),
        "by_block": {k: dict(v) for k, v in by_block.items()},
        "misses": misses,
    }


def _ratio(part: int, whole: int) -> str:
    return f"{part / whole:6.1%}" if whole else "     -"


def render(results: list[dict[str, Any]]) -> str:
    """The scores as plain-text tables: one line per mode, then per block in each mode."""
    lines = [
        "mode          traces  precision  recall  exact min turns  false independence",
        "------------  ------  ---------  ------  ---------------  ------------------",
    ]
    for result in results:
        t = result["totals"]
        lines.append(
            f"{result['mode']:<12}  {t['traces']:>6}  {_ratio(t['hit_pairs'], t['found_pairs']):>9}  "
            f"{_ratio(t['hit_pairs'], t['true_pairs']):>6}  {_ratio(t['exact'], t['traces']):>15}  "
            f"{t['false_independence']:>18}"
        )
    for result in results:
        lines += [
            "",
            f"{result['mode']} mode, by planted structure "
            "(pairs whose later call is in the block; traces holding it):",
            "block         traces  precision  recall  exact min turns  false independence",
            "------------  ------  ---------  ------  ---------------  ------------------",
        ]
        for block, row in sorted(result["by_block"].items()):
            lines.append(
                f"{block:<12}  {row.get('traces', 0):>6}  "
                f"{_ratio(row.get('hit_found', 0), row.get('found_pairs', 0)):>9}  "
                f"{_ratio(row.get('hit_pairs', 0), row.get('true_pairs', 0)):>6}  "
                f"{_ratio(row.get('exact', 0), row.get('traces', 0)):>15}  "
                f"{row.get('false_independence', 0):>18}"
            )
    return "\n".join(lines)


def run(n_traces: int, seed: int, folder: Path) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Generate, ingest and analyse in both modes; the scores per mode and the seconds each step took."""
    timings = {}
    started = time.perf_counter()
    transcripts, truth = planted.generate(n_traces, seed)
    path = planted.write(folder, transcripts, truth)
    timings["generate"] = time.perf_counter() - started
    con = store.connect(folder / "planted.duckdb")
    try:
        started = time.perf_counter()
        report = ingest_paths(con, [path])
        timings["ingest"] = time.perf_counter() - started
        if report.totals()["rejected"]:
            raise SystemExit(f"{path}: the ingest rejected records: {report.totals()}")
        results = []
        for mode in MODES:
            started = time.perf_counter()
            analyze_dependencies(con, mode, recompute=True)
            timings[f"analyse {mode}"] = time.perf_counter() - started
            results.append(score(con, truth, mode))
    finally:
        con.close()
    return results, timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=1000, help="traces to generate (default 1000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, help="write the traces, truth and store here")
    parser.add_argument("--show-misses", action="store_true", help="list traces whose minimum turns differ")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        results, timings = run(args.traces, args.seed, folder)
    print(render(results))
    print()
    print("seconds: " + ", ".join(f"{step} {seconds:.1f}" for step, seconds in timings.items()))
    conservative = next(r for r in results if r["mode"] == "conservative")
    if args.show_misses:
        for result in results:
            print(f"\n{result['mode']}: traces whose minimum turns differ from the plant")
            print("\n".join(result["misses"]) or "(none)")
    totals = conservative["totals"]
    ok = totals["false_independence"] == 0 and totals["exact"] / totals["traces"] >= TARGET_EXACT
    print(
        "conservative targets (zero false independence, exact minimum turns on >= 95% of traces): "
        + ("met" if ok else "NOT met")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
