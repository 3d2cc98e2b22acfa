"""Prefill and decode demand per workload and model: uncached input, cached input, output and
reasoning tokens, and their ratios. Written to `inference_profile`.

Counts come from the usage the source reported. A call whose source reported no usage gets the
estimate of `traceforge.analysis.prefix_cache.estimate_tokens` (flagged: `calls_estimated`,
`estimate_method`); its cached and reasoning tokens are unknown and counted as none, so such
a workload's prefill is an upper bound. A call whose output count is only a lower bound
(`llm_calls.output_tokens_partial`) keeps its reported input and cache counts and decodes the
larger of its reported and estimated output (counted in `calls_estimated` too).
"""

from __future__ import annotations

from typing import Any

import duckdb
import polars as pl

from traceforge import store
from traceforge.analysis.prefix_cache import ESTIMATE_METHOD

RATIO_COLUMNS = ("cached_share", "prefill_decode_ratio", "input_output_ratio", "reasoning_share")


def prefill_decode(con: duckdb.DuckDBPyConnection, estimates: pl.DataFrame) -> list[dict[str, Any]]:
    """Write `inference_profile` (one row per workload and model) and return its rows.

    `estimates` is a frame (call_id, input_tokens, output_tokens) for calls without reported
    usage or with a partial output count. Workloads come from `trace_workloads`
    (`traceforge.analysis.workloads.assign_workloads`).

    Ratios: cached_share = cache_read / input over the calls that reported a cache count
    (`cache_reported_input_tokens`; NULL where none did: a source without cache fields, as
    tau2-bench's, says nothing of the provider's cache, and a call logged without usage in a log
    that reports it for the others, a streamed one say, is not a miss);
    prefill_decode_ratio = uncached input / output (the prefill a server does per decoded token
    once prefix caching is counted);
    input_output_ratio = input / output; reasoning_share = reasoning / output.
    """
    with (
        store.registered(con, "_tf_estimates", estimates.select("call_id", "input_tokens", "output_tokens")),
        store.transaction(con),
    ):
        con.execute("DELETE FROM inference_profile")
        con.execute(
            """
            INSERT INTO inference_profile BY NAME
            WITH calls AS (
                SELECT w.workload, coalesce(c.model, '(unknown)') AS model,
                       c.usage_reported AND c.output_tokens_partial IS NOT TRUE AS fully_reported,
                       if(c.usage_reported, c.input_tokens, e.input_tokens) AS input_tokens,
                       if(c.usage_reported, coalesce(c.cache_read_tokens, 0), 0) AS cache_read,
                       c.usage_reported AND c.cache_read_tokens IS NOT NULL AS cache_reported,
                       if(c.usage_reported, coalesce(c.cache_write_tokens, 0), 0) AS cache_write,
                       CASE WHEN NOT c.usage_reported THEN e.output_tokens
                            WHEN c.output_tokens_partial THEN greatest(c.output_tokens, e.output_tokens)
                            ELSE c.output_tokens END AS output_tokens,
                       if(c.usage_reported, coalesce(c.reasoning_tokens, 0), 0) AS reasoning
                FROM llm_calls c
                JOIN trace_workloads w USING (trace_id)
                LEFT JOIN _tf_estimates e USING (call_id)
                WHERE c.copy_of IS NULL
            ),
            sums AS (
                SELECT workload, model, count(*) AS llm_calls,
                       count(*) FILTER (WHERE NOT fully_reported) AS calls_estimated,
                       coalesce(sum(input_tokens), 0) AS input_tokens,
                       coalesce(sum(greatest(input_tokens - cache_read, 0)), 0) AS uncached_input_tokens,
                       coalesce(sum(cache_read), 0) AS cache_read_tokens,
                       coalesce(sum(cache_write), 0) AS cache_write_tokens,
                       coalesce(sum(output_tokens), 0) AS output_tokens,
                       coalesce(sum(reasoning), 0) AS reasoning_tokens,
                       count(*) FILTER (WHERE cache_reported) AS cache_reported_calls,
                       coalesce(sum(input_tokens) FILTER (WHERE cache_reported), 0)
                           AS cache_reported_input_tokens
                FROM calls GROUP BY ALL
            )
            SELECT * EXCLUDE (cache_reported_calls),
                   CASE WHEN cache_reported_calls > 0
                        THEN cache_read_tokens / nullif(cache_reported_input_tokens, 0) END AS cached_share,
                   uncached_input_tokens / nullif(output_tokens, 0) AS prefill_decode_ratio,
                   input_tokens / nullif(output_tokens, 0) AS input_output_ratio,
                   reasoning_tokens / nullif(output_tokens, 0) AS reasoning_share,
                   CASE WHEN calls_estimated > 0 THEN ? END AS estimate_method
            FROM sums
            """,
            [ESTIMATE_METHOD],
        )
    cursor = con.execute("SELECT * FROM inference_profile ORDER BY workload, input_tokens DESC, model")
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def combine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals and ratios of several `inference_profile` rows (e.g. all models of a workload)."""
    keys = (
        "llm_calls",
        "calls_estimated",
        "input_tokens",
        "uncached_input_tokens",
        "cache_read_tokens",
        "cache_reported_input_tokens",
        "cache_write_tokens",
        "output_tokens",
        "reasoning_tokens",
    )
    total = {k: sum(r[k] or 0 for r in rows) for k in keys}

    def ratio(a: str, b: str) -> float | None:
        return total[a] / total[b] if total[b] else None

    reported = any(r["cached_share"] is not None for r in rows)
    total["cached_share"] = ratio("cache_read_tokens", "cache_reported_input_tokens") if reported else None
    total["prefill_decode_ratio"] = ratio("uncached_input_tokens", "output_tokens")
    total["input_output_ratio"] = ratio("input_tokens", "output_tokens")
    total["reasoning_share"] = ratio("reasoning_tokens", "output_tokens")
    return total
