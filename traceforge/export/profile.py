"""The inference profile: every figure of the workload analyses in one JSON document, and the
replay trace beside it. The schema is documented in docs/profile.md.

>>> from traceforge import store
>>> con = store.connect("traceforge.duckdb")                       # doctest: +SKIP
>>> profile = build_profile(con, target_rps=[10.0])                # doctest: +SKIP
>>> paths = write_profile(profile, "traceforge-out")              # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from traceforge import __version__, store
from traceforge.analysis import prefill_decode as pd_analysis
from traceforge.analysis.deployment import (
    DEFAULT_ITL_MS,
    DEFAULT_TTFT_MS,
    Demand,
    GpuProfile,
    dag_savings,
    plan_deployment,
    profile_dict,
    project_demand,
    resolve_gpu_profile,
)
from traceforge.analysis.prefix_cache import (
    BLOCK_SIZE,
    ESTIMATE_METHOD,
    Request,
    RequestLog,
    hit_ratio_curve,
    load_requests,
    provider_comparison,
    replay_chains,
)
from traceforge.analysis.timing import ALL, arrival_stats, gap_stats, no_timing, percentiles
from traceforge.analysis.workloads import assign_workloads, compute_workloads
from traceforge.export.replay import replay_commands, write_replay
from traceforge.files import replace_text, replacing
from traceforge.pricing import PriceTable
from traceforge.workers import ordered_map, worker_count

# Up to this many LLM calls, starting worker processes costs more than it saves (measured with
# `prefix_cache.PARALLEL_MIN_CALLS`: docs/performance.md#worker-processes-when-they-pay).
PARALLEL_MIN_REQUESTS = 50_000
SCHEMA = "traceforge.profile"
SCHEMA_VERSION = 1
PROFILE_FILE = "profile.json"
REPLAY_FILE = "replay.jsonl"


@dataclass
class Profile:
    """The profile document and the requests its replay trace is written from."""

    document: dict[str, Any]
    log: RequestLog


def build_profile(
    con: duckdb.DuckDBPyConnection,
    *,
    workload_key: str | None = None,
    prices: PriceTable | None = None,
    gpu_profile: GpuProfile | str | None = None,
    target_rps: list[float] | None = None,
    ttft_ms: float = DEFAULT_TTFT_MS,
    itl_ms: float = DEFAULT_ITL_MS,
    block_size: int = BLOCK_SIZE,
    store_path: str | None = None,
    workers: int | None = None,
) -> Profile:
    """Run the workload analyses on the store behind `con` and assemble the profile.

    Writes `trace_workloads`, `workloads` and `inference_profile`. Each workload (and all of
    them together, under `overall`) gets its prefill/decode split, length distributions, prefix
    cache hit ratios, timing, and a deployment plan per target request rate (its observed rate
    when none is given), observed and projected with the `trace_dag` savings.

    The workloads' cache replays are independent: with over `PARALLEL_MIN_REQUESTS` LLM calls they
    run in `workers - 1` processes (`traceforge.workers`; by default one per CPU) while this one
    replays all of them together.
    """
    gpu = gpu_profile if isinstance(gpu_profile, GpuProfile) else resolve_gpu_profile(gpu_profile)
    assign_workloads(con, workload_key)
    # The requests pile up in Python while their conversations are read: DuckDB's cache of what it
    # read would sit beside them. Measured (docs/performance-changes.md): the main process's peak
    # 605-618 MB against 910-928 for the 4x benchmark corpus, 687 against 978 for 100,000 traces.
    with store.cache_released(con):
        log = load_requests(con, block_size=block_size, workers=workers)
    estimates = pl.DataFrame(
        {
            "call_id": [r.call_id for r in log.requests],
            "input_tokens": [r.input_length for r in log.requests],
            "output_tokens": [r.output_length for r in log.requests],
        },
        schema={"call_id": pl.Utf8, "input_tokens": pl.Int64, "output_tokens": pl.Int64},
    )
    spend = compute_workloads(con, workload_key, prices, estimates)
    demand_rows = pd_analysis.prefill_decode(con, estimates)
    timing = gap_stats(con)
    savings = dag_savings(con)
    by_workload: dict[str, list[Request]] = defaultdict(list)
    for request in log.requests:
        by_workload[request.workload].append(request)
    rows_by_workload: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in demand_rows:
        rows_by_workload[row["workload"]].append(row)
    settings = {
        "workload_key": spend.workload_key,
        "block_size": block_size,
        "ttft_ms": ttft_ms,
        "itl_ms": itl_ms,
        "target_rps": list(target_rps or []),
        "gpu_profile": profile_dict(gpu),
    }
    context = _Context(gpu, list(target_rps or []), ttft_ms, itl_ms, block_size, bool(savings))
    overall_savings = _sum_savings(savings.values()) if savings else None
    overall_task = (log.requests, demand_rows, timing.get(ALL) or no_timing(), overall_savings)
    tasks = [
        (
            by_workload.get(row["workload"], []),
            rows_by_workload.get(row["workload"], []),
            timing.get(row["workload"]) or no_timing(),
            savings.get(row["workload"]),
        )
        for row in spend.workloads
    ]
    # All workloads together are as much work as all the others: this process profiles them while
    # the workers (one fewer than asked for) profile the workloads, so every request is held once
    # here and only the workloads being profiled are copied to a worker.
    count = worker_count(workers, len(log.requests), PARALLEL_MIN_REQUESTS, len(tasks) + 1) - 1
    with store.cache_released(con):  # the replays hold every request; they need no store
        if count >= 1 and tasks:
            with ThreadPoolExecutor(max_workers=1) as feeder:
                pending = feeder.submit(
                    list, ordered_map("traceforge.export.profile:workload_profile", tasks, count, (context,))
                )
                overall = workload_profile(context, overall_task)
                profiles = pending.result()
        else:
            overall = workload_profile(context, overall_task)
            profiles = [workload_profile(context, task) for task in tasks]
    workloads = []
    for row, profile in zip(spend.workloads, profiles, strict=True):
        entry = {
            key: row[key]
            for key in (
                "workload",
                "rank",
                "share",
                "cumulative_share",
                "in_top_80",
                "cost_usd",
                "traces",
                "llm_calls",
            )
        }
        entry.update(profile)
        workloads.append(entry)
    document = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "traceforge_version": __version__,
        "store": store_path,
        "settings": settings,
        "estimation": {
            "method": ESTIMATE_METHOD,
            "chars_per_token": log.chars_per_token,
            "counts": log.counts,
        },
        "spend": spend.as_dict(),
        "overall": overall,
        "workloads": workloads,
    }
    return Profile(document=_finite(document), log=log)


@dataclass
class _Context:
    gpu: GpuProfile
    target_rps: list[float]
    ttft_ms: float
    itl_ms: float
    block_size: int
    dag_ran: bool


WorkloadTask = tuple[list[Request], list[dict[str, Any]], dict[str, Any], dict[str, Any] | None]


def workload_profile(context: _Context, task: WorkloadTask) -> dict[str, Any]:
    """One workload's profile (or all of them together) from its (requests, prefill/decode rows,
    timing, DAG savings): what `build_profile`, or one of its worker processes, computes."""
    requests, demand_rows, timing, savings = task
    # `load_requests` builds hash ids as prefix chains: one pass replays every cache of the curve
    replays = replay_chains(requests, block_size=context.block_size)
    unlimited = replays[None, None]
    ordered = sorted(requests, key=lambda r: r.timestamp_ms)
    uncached = [
        r.input_length - hit for r, hit in zip(ordered, unlimited.per_request_hit_tokens, strict=True)
    ]
    arrivals = arrival_stats(requests)
    tool_gaps = timing["tool_gap_ms"]
    demand = None
    if requests:
        demand = Demand(
            rps=arrivals["rps"] or 0.0,
            mean_input_tokens=sum(r.input_length for r in requests) / len(requests),
            mean_uncached_input_tokens=sum(uncached) / len(requests),
            mean_output_tokens=sum(r.output_length for r in requests) / len(requests),
            hit_ratio=unlimited.hit_ratio,
            tool_gaps_per_request=tool_gaps["n"] / len(requests),
            tool_gap_p90_s=tool_gaps["p90"] / 1000.0 if tool_gaps["p90"] is not None else None,
            tool_gap_mean_s=tool_gaps["mean"] / 1000.0 if tool_gaps["mean"] is not None else None,
        )
    return {
        "prefill_decode": {"total": pd_analysis.combine(demand_rows), "by_model": demand_rows},
        "lengths": {
            "input_tokens": percentiles(r.input_length for r in requests),
            "uncached_input_tokens": percentiles(uncached),
            "output_tokens": percentiles(r.output_length for r in requests),
            "uncached_basis": "input minus the hits of an unlimited prefix cache over this workload",
        },
        "prefix_cache": {
            "unlimited": unlimited.as_dict(),
            "curve": hit_ratio_curve(requests, block_size=context.block_size, results=replays),
            "provider": provider_comparison(requests, context.block_size, results=replays),
        },
        "timing": {**timing, "arrivals": arrivals},
        "deployment": _deployment(demand, len(requests), savings, context),
    }


def _deployment(
    demand: Demand | None, calls: int, savings: dict[str, Any] | None, context: _Context
) -> dict[str, Any]:
    if demand is None:
        return {"observed": [], "projected": None, "note": "no requests"}
    targets: list[float | None] = list(context.target_rps) or ([None] if demand.rps else [])
    if not targets:
        return {
            "observed": [],
            "projected": None,
            "note": "no arrival times to measure a request rate: pass --target-rps to size a deployment",
        }

    def plans(d: Demand, scale: float) -> list[dict[str, Any]]:
        return [
            plan_deployment(
                d,
                context.gpu,
                target_rps=None if t is None else t * scale,
                ttft_ms=context.ttft_ms,
                itl_ms=context.itl_ms,
            )
            for t in targets
        ]

    out: dict[str, Any] = {"observed": plans(demand, 1.0)}
    if not context.dag_ran:
        out["projected"] = None
        out["projection_note"] = (
            "the projection needs the dependency DAG analysis (the trace_dag table is empty): "
            "run `traceforge analyze` first"
        )
    elif not savings:
        out["projected"] = None
        out["projection_note"] = "no trace of this workload has a row in trace_dag (no tool calls)"
    else:
        projected = project_demand(demand, calls, savings)
        scale = (
            projected.rps / demand.rps
            if demand.rps
            else (calls - int(savings.get("turns_saved") or 0)) / calls
        )
        out["projected"] = plans(projected, scale)
        out["projection"] = {
            "dag": savings,
            "llm_calls": calls,
            "projected_llm_calls": round(calls * scale),
            "basis": "same sessions at the same rate, turns_saved fewer calls, tokens_saved fewer input "
            "tokens (the cached share of them off the cached part)",
        }
    return out


def _sum_savings(rows) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for row in rows:
        for key, value in row.items():
            total[key] = (total.get(key) or 0) + (value or 0)
    return total


def _finite(value: Any) -> Any:
    """JSON-safe: infinities and NaN become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_profile(profile: Profile, out_dir: str | Path) -> dict[str, str]:
    """Write `profile.json` and `replay.jsonl` into `out_dir`, each replacing the last one whole;
    returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    replay_path = out / REPLAY_FILE
    block_size = profile.document["settings"]["block_size"]
    with replacing(replay_path) as staged:
        lines = write_replay(profile.log.requests, staged, block_size)
    profile.document["replay"] = {
        "path": REPLAY_FILE,
        "format": "mooncake_trace",
        "requests": lines,
        "block_size": block_size,
        "commands": replay_commands(REPLAY_FILE, block_size=block_size),
    }
    profile_path = out / PROFILE_FILE
    replace_text(profile_path, json.dumps(profile.document, indent=2, default=str) + "\n")
    return {"profile": str(profile_path), "replay": str(replay_path)}
