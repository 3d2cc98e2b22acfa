"""The store at a glance: counts, tokens per workload and model, rejects by reason."""

from __future__ import annotations

from typing import Any

import duckdb


def summarize(con: duckdb.DuckDBPyConnection, top_rejects: int = 5) -> dict[str, Any]:
    """Totals, usage per workload and model, and the commonest reject reasons.

    Token sums count only calls whose source reported usage; `calls_without_usage` says how many
    did not, so a zero is never mistaken for "not reported"; `cache_reported_input_tokens` is the
    input of the calls that reported a cache count (see `cached_text`); `calls_output_partial` how many
    reported only a lower bound of their output. A call logged again in another trace (a resumed
    session's copy) is counted once; `calls_copied` says how many copies were left out.
    """
    totals = con.execute(
        """
        WITH calls AS (SELECT * FROM llm_calls WHERE copy_of IS NULL)
        SELECT (SELECT count(*) FROM traces),
               (SELECT count(*) FROM calls),
               (SELECT count(*) FROM tool_calls WHERE copy_of IS NULL),
               (SELECT coalesce(sum(input_tokens), 0) FROM calls),
               (SELECT coalesce(sum(cache_read_tokens), 0) FROM calls),
               (SELECT coalesce(sum(input_tokens) FILTER (WHERE cache_read_tokens IS NOT NULL), 0)
                FROM calls),
               (SELECT coalesce(sum(output_tokens), 0) FROM calls),
               (SELECT count(*) FILTER (WHERE NOT usage_reported) FROM calls),
               (SELECT count(*) FILTER (WHERE output_tokens_partial) FROM calls),
               (SELECT count(*) FROM llm_calls WHERE copy_of IS NOT NULL),
               (SELECT count(*) FROM rejects),
               (SELECT count(*) FROM sources),
               (SELECT count(DISTINCT workload) FROM traces)
        """
    ).fetchone()
    keys = (
        "traces",
        "llm_calls",
        "tool_calls",
        "input_tokens",
        "cache_read_tokens",
        "cache_reported_input_tokens",
        "output_tokens",
        "calls_without_usage",
        "calls_output_partial",
        "calls_copied",
        "rejects",
        "files",
        "workloads",
    )
    usage = con.execute(
        """
        SELECT workload, model, traces, llm_calls, coalesce(tool_calls, 0) AS tool_calls,
               coalesce(input_tokens, 0) AS input_tokens,
               cache_read_tokens,  -- NULL where no call reported a cache count
               coalesce(output_tokens, 0) AS output_tokens, calls_without_usage
        FROM v_usage_by_workload_model
        ORDER BY input_tokens + output_tokens DESC, llm_calls DESC, workload, model
        """
    )
    columns = [d[0] for d in usage.description]
    by_workload_model = [dict(zip(columns, row, strict=True)) for row in usage.fetchall()]
    reasons = con.execute(
        """
        SELECT regexp_replace(error, ' at column \\d+.*| at byte \\d+.*', '') AS reason,
               count(*) AS n, min(source_path) AS example_file, min(line) AS example_line
        FROM rejects GROUP BY 1 ORDER BY n DESC, reason LIMIT ?
        """,
        [top_rejects],
    ).fetchall()
    return {
        "totals": dict(zip(keys, totals, strict=True)),
        "by_workload_model": by_workload_model,
        "reject_reasons": [
            {"reason": r, "count": n, "example_file": f, "example_line": line} for r, n, f, line in reasons
        ],
    }


def cached_text(totals: dict[str, Any]) -> str:
    """The share of input the provider's cache served, over the calls whose source reported a
    cache count, as the reports print it: "N% cached", or "no cache count reported" where none
    did (a source without cache fields says nothing of the cache)."""
    reported = totals["cache_reported_input_tokens"]
    return f"{totals['cache_read_tokens'] / reported:.0%} cached" if reported else "no cache count reported"


def ratio_text(ratio: float) -> str:
    """A prefill:decode ratio as the reports print it: `13:1`, and below 10 with a decimal (`0.4:1`,
    where a workload's outputs outweigh the uncached part of its inputs, is not `0:1`).

    >>> ratio_text(13.24), ratio_text(9.96), ratio_text(9.1), ratio_text(0.4)
    ('13:1', '10:1', '9.1:1', '0.4:1')
    """
    return f"{ratio:.0f}:1" if ratio >= 9.95 else f"{ratio:.1f}:1"
