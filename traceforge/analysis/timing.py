"""Timing of a workload's requests: the gaps between turns (how long KV must survive), turns per
trace, session length, arrival rate and burstiness, and length distributions.

A gap is the time from one LLM call's end to the next call's start in the same trace. It is a tool
gap when only tool results came between the two calls' messages, a user gap when a user message
did, and unknown when the conversation does not say (no messages linked to the calls).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import duckdb

from traceforge.analysis.prefix_cache import Request


def percentiles(values: Iterable[float]) -> dict[str, float | int | None]:
    """n, mean, p50, p90, p99 and max, with percentiles interpolated linearly between ranks
    (as DuckDB's quantile_cont and numpy's default do).

    >>> percentiles([1, 2, 3, 4])["p50"]
    2.5
    """
    ordered = sorted(v for v in values if v is not None and not math.isnan(v))
    n = len(ordered)
    if not n:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}

    def quantile(q: float) -> float:
        position = q * (n - 1)
        low = math.floor(position)
        high = min(low + 1, n - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {
        "n": n,
        "mean": sum(ordered) / n,
        "p50": quantile(0.5),
        "p90": quantile(0.9),
        "p99": quantile(0.99),
        "max": ordered[-1],
    }


def arrival_stats(requests: list[Request]) -> dict[str, Any]:
    """Arrival rate and burstiness of the requests that have a time.

    rps = requests / span; interarrival_cv = std / mean of the gaps between arrivals (1 for a
    Poisson process); burstiness = (std - mean) / (std + mean) (Goh & Barabási: -1 periodic,
    0 Poisson, toward 1 bursty); peak_rps_1s and peak_rps_60s are the busiest aligned windows.
    """
    times = sorted(r.timestamp_ms for r in requests if r.timed)
    out: dict[str, Any] = {"requests": len(requests), "timed_requests": len(times)}
    if len(times) < 2 or times[-1] == times[0]:
        out.update(
            {
                "span_s": None,
                "rps": None,
                "interarrival_cv": None,
                "burstiness": None,
                "peak_rps_1s": None,
                "peak_rps_60s": None,
            }
        )
        return out
    span_s = (times[-1] - times[0]) / 1000.0
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = sum(gaps) / len(gaps)
    std = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    per_second = Counter(math.floor(t / 1000.0) for t in times)
    per_minute = Counter(math.floor(t / 60_000.0) for t in times)
    out.update(
        {
            "span_s": span_s,
            "rps": len(times) / span_s,
            "interarrival_cv": std / mean if mean else None,
            "burstiness": (std - mean) / (std + mean) if std + mean else None,
            "peak_rps_1s": float(max(per_second.values())),
            "peak_rps_60s": max(per_minute.values()) / 60.0,
        }
    )
    return out


ALL = "(all)"


def gap_stats(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Per workload (from `trace_workloads`), and for all of them under `ALL`: tool and user gap
    distributions in ms, turns (LLM calls) per trace, and session duration in seconds. A workload
    with no LLM call of its own is left out (`no_timing`)."""
    gaps = con.execute(
        """
        WITH running AS (
            -- user and tool messages up to and including each message, so the count between two
            -- messages is a difference: linear in the trace, not quadratic
            SELECT trace_id, seq, role, call_id,
                   count(*) FILTER (WHERE role = 'user') OVER upto AS users,
                   count(*) FILTER (WHERE role = 'tool') OVER upto AS tools
            FROM messages WINDOW upto AS (PARTITION BY trace_id ORDER BY seq)
        ),
        assistant AS (
            SELECT trace_id, call_id, arg_min(users, seq) AS users, arg_min(tools, seq) AS tools
            FROM running WHERE role = 'assistant' AND call_id IS NOT NULL GROUP BY ALL
        ),
        calls AS (
            SELECT c.trace_id, c.seq, w.workload, a.users, a.tools,
                   coalesce(epoch_ms(c.started_at)::DOUBLE, epoch_ms(c.ended_at) - c.duration_ms) AS start_ms,
                   coalesce(epoch_ms(c.ended_at)::DOUBLE, epoch_ms(c.started_at) + c.duration_ms) AS end_ms
            FROM llm_calls c
            JOIN trace_workloads w USING (trace_id)
            LEFT JOIN assistant a USING (trace_id, call_id)
            WHERE c.copy_of IS NULL
        ),
        between AS (
            SELECT workload, end_ms,
                   lead(start_ms) OVER turn AS next_start,
                   lead(users) OVER turn - users AS users,
                   lead(tools) OVER turn - tools AS tools
            FROM calls WINDOW turn AS (PARTITION BY trace_id ORDER BY seq)
        )
        SELECT workload, greatest(next_start - end_ms, 0) AS gap_ms,
               CASE WHEN users > 0 THEN 'user' WHEN tools > 0 THEN 'tool' ELSE 'unknown' END AS kind
        FROM between
        WHERE next_start IS NOT NULL AND end_ms IS NOT NULL
        """
    ).fetchall()
    by_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for workload, gap, kind in gaps:
        by_kind[workload][kind].append(gap)
        by_kind[ALL][kind].append(gap)
    traces = con.execute(
        """
        SELECT w.workload, count(*) AS turns,
               (max(coalesce(epoch_ms(c.ended_at)::DOUBLE, epoch_ms(c.started_at) + c.duration_ms))
                - min(coalesce(epoch_ms(c.started_at)::DOUBLE, epoch_ms(c.ended_at) - c.duration_ms)))
                   / 1000.0 AS session_s
        FROM llm_calls c JOIN trace_workloads w USING (trace_id)
        WHERE c.copy_of IS NULL
        GROUP BY w.workload, c.trace_id
        """
    ).fetchall()
    turns: dict[str, list[int]] = defaultdict(list)
    sessions: dict[str, list[float]] = defaultdict(list)
    for workload, count, session_s in traces:
        for key in (workload, ALL):
            turns[key].append(count)
            if session_s is not None:
                sessions[key].append(session_s)
    return {
        workload: timing_of(turns.get(workload, []), sessions.get(workload, []), by_kind.get(workload, {}))
        for workload in set(turns) | set(by_kind)
    }


def timing_of(turns: list[int], sessions: list[float], gaps: dict[str, list[float]]) -> dict[str, Any]:
    """One workload's timing from its traces' turns and durations and its gaps by kind."""
    return {
        "turns_per_trace": percentiles(turns),
        "session_s": percentiles(sessions),
        "tool_gap_ms": percentiles(gaps.get("tool", [])),
        "user_gap_ms": percentiles(gaps.get("user", [])),
        "unknown_gap_ms": percentiles(gaps.get("unknown", [])),
    }


def no_timing() -> dict[str, Any]:
    """The timing of a workload with no LLM call of its own (all of them copies a resumed session
    logged of another session's): every distribution empty."""
    return timing_of([], [], {})
