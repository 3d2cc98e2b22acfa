"""Workloads and their spend: which few workloads carry most of the cost.

A workload is a group of traces served the same way: by default the name the source gave
(service, agent, project, metadata; set at ingest in `traces.workload`), else a fingerprint of
the system prompt and tool set (`fp-` and 8 hex digits, as `traceforge.ingest.conversation`
computes it). `workload_key` regroups the traces by another key (see `WORKLOAD_KEYS`, or
`attributes.PATH` for a value in `traces.attributes`). The assignment is written to
`trace_workloads`, the totals to `workloads`.

Spend per call is the cost the source reported where it reported one; else its reported tokens
times the price table (`traceforge.pricing`); else, for a call with no usage at all, its
estimated tokens (`traceforge.analysis.prefix_cache.estimate_tokens`) times the price table,
kept apart as `cost_estimated_usd`. A call whose output count is only a lower bound
(`llm_calls.output_tokens_partial`, counted in `calls_output_partial`) is priced on its reported
tokens, and the output its estimate adds beyond the reported count goes to `cost_estimated_usd`.
A call whose model is not in the table is counted in `unpriced_calls` and listed by model, never
priced by a guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import duckdb
import polars as pl

from traceforge import store
from traceforge.analysis.batches import trace_batches
from traceforge.model import stable_id
from traceforge.pricing import PriceTable, load_prices

WORKLOAD_KEYS = ("workload", "agent", "model", "source_format", "fingerprint")
DEFAULT_KEY = "workload"
HEAD_SHARE = 0.8


class WorkloadKeyError(ValueError):
    """A `--workload-key` that names no known key."""


@dataclass
class SpendReport:
    """What `compute_workloads` found: the ranked workloads and how concentrated spend is."""

    workload_key: str
    basis: str  # cost_usd, or tokens when no call could be costed
    workloads: list[dict[str, Any]] = field(default_factory=list)
    top_80: list[str] = field(default_factory=list)
    power_law: dict[str, Any] = field(default_factory=dict)
    unpriced_models: list[dict[str, Any]] = field(default_factory=list)
    price_sources: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload_key": self.workload_key,
            "basis": self.basis,
            "totals": self.totals,
            "workloads": self.workloads,
            "top_80_percent": self.top_80,
            "power_law": self.power_law,
            "unpriced_models": self.unpriced_models,
            "price_sources": self.price_sources,
        }


def assign_workloads(con: duckdb.DuckDBPyConnection, workload_key: str | None = None) -> str:
    """Write `trace_workloads`: each trace's workload under `workload_key`. Returns the key used.

    Keys: `workload` (the source's name, else the fingerprint), `agent`, `model` (the model with
    most calls in the trace), `source_format`, `fingerprint` (always the system prompt + tool set
    fingerprint), or `attributes.PATH` (a value in `traces.attributes`, e.g. `attributes.project`).
    Traces without a value get `(no KEY)`.
    """
    key = workload_key or DEFAULT_KEY
    if key in ("workload", "fingerprint"):
        # under `workload`, only the traces the source gave no name need a fingerprint
        unnamed = "trace_id IN (SELECT trace_id FROM traces WHERE coalesce(workload, '') = '')"
        fingerprints = _fingerprints(con, unnamed if key == "workload" else "TRUE")
        rows = con.execute("SELECT trace_id, workload FROM traces").fetchall()
        pairs = [
            (trace_id, (name if key == "workload" and name else fingerprints[trace_id]))
            for trace_id, name in rows
        ]
    elif key in ("agent", "source_format"):
        pairs = con.execute(f"SELECT trace_id, {key} FROM traces").fetchall()
    elif key == "model":
        pairs = con.execute(
            """
            SELECT t.trace_id, m.model
            FROM traces t
            LEFT JOIN (SELECT trace_id, model,
                              row_number() OVER (PARTITION BY trace_id ORDER BY count(*) DESC, model) AS r
                       FROM llm_calls WHERE model IS NOT NULL GROUP BY trace_id, model) m
                   ON m.trace_id = t.trace_id AND m.r = 1
            """
        ).fetchall()
    elif key.startswith("attributes.") and len(key) > len("attributes."):
        path = "$." + key[len("attributes.") :]
        try:
            pairs = con.execute(
                "SELECT trace_id, json_extract_string(attributes, ?) FROM traces", [path]
            ).fetchall()
        except duckdb.Error as exc:  # DuckDB's JSON path parser refused it
            raise WorkloadKeyError(
                f"{key!r} is not a path into the traces' attributes ({exc}); "
                'write attributes.KEY or attributes.KEY.SUBKEY, quoting odd keys: attributes."a b"'
            ) from exc
    else:
        raise WorkloadKeyError(
            f"unknown workload key {key!r}: use one of {', '.join(WORKLOAD_KEYS)}, "
            "or attributes.PATH for a value in the traces' attributes (e.g. attributes.project)"
        )
    frame = pl.DataFrame(
        {
            "trace_id": [p[0] for p in pairs],
            "workload": [p[1] if p[1] not in (None, "") else f"(no {key})" for p in pairs],
        },
        schema={"trace_id": pl.Utf8, "workload": pl.Utf8},
    )
    with store.transaction(con):
        con.execute("DELETE FROM trace_workloads")
        with store.registered(con, "_tf_assign", frame):
            con.execute("INSERT INTO trace_workloads SELECT trace_id, workload, ? FROM _tf_assign", [key])
    return key


FINGERPRINT_TABLES = ("traces", "messages", "tool_defs", "tool_calls")
# Traces fingerprinted at a time: a batch's system prompts and tool names are aggregated in memory.
FINGERPRINT_BATCH_TRACES = 10_000


def _fingerprints(con: duckdb.DuckDBPyConnection, where: str = "TRUE") -> dict[str, str]:
    """`fp-` fingerprints of system prompt + tool set of the traces satisfying `where` (a condition
    on `trace_id`), computed exactly as `traceforge.ingest.conversation.default_workload` does at
    ingest, a batch of traces at a time (one stretch of each table: analysis.batches)."""
    out: dict[str, str] = {}
    for batch in trace_batches(con, FINGERPRINT_TABLES, FINGERPRINT_BATCH_TRACES, where):
        # each table kept to the batch's stretch of it, in the order the query names them
        ranges = [batch.within("x", table) for table in ("messages", "tool_defs", "tool_calls", "traces")]
        with store.registered_ids(con, "_tf_batch", batch.trace_ids):
            rows = con.execute(
                _fingerprint_sql(*(clause for clause, _ in ranges)),
                [value for _, values in ranges for value in values],
            ).fetchall()
        for trace_id, prompt, defs, calls in rows:
            out[trace_id] = "fp-" + stable_id((prompt or "").strip(), sorted(defs or calls or []), length=8)
    return out


def _fingerprint_sql(messages: str, defs: str, calls: str, traces: str) -> str:
    """A trace's system prompt and its tool names, for the traces of `_tf_batch`; each argument
    keeps its table to the batch's stretch of it (`TraceBatch.within` on the alias x)."""
    return f"""
    WITH prompts AS (
        SELECT trace_id, string_agg(coalesce(content, ''), chr(10) ORDER BY seq) AS prompt
        FROM (SELECT x.trace_id, x.seq, x.content, x.role FROM messages x {messages})
        JOIN _tf_batch USING (trace_id)
        WHERE role IN ('system', 'developer')
        GROUP BY trace_id
    ), defs AS (
        SELECT trace_id, list(DISTINCT name) AS names
        FROM (SELECT x.trace_id, x.name FROM tool_defs x {defs}) JOIN _tf_batch USING (trace_id)
        GROUP BY trace_id
    ), calls AS (
        SELECT trace_id, list(DISTINCT name) AS names
        FROM (SELECT x.trace_id, x.name FROM tool_calls x {calls}) JOIN _tf_batch USING (trace_id)
        GROUP BY trace_id
    )
    SELECT trace_id, prompts.prompt, defs.names, calls.names
    FROM (SELECT x.trace_id FROM traces x {traces}) JOIN _tf_batch USING (trace_id)
    LEFT JOIN prompts USING (trace_id)
    LEFT JOIN defs USING (trace_id)
    LEFT JOIN calls USING (trace_id)
    """


def compute_workloads(
    con: duckdb.DuckDBPyConnection,
    workload_key: str | None = None,
    prices: PriceTable | None = None,
    estimates: pl.DataFrame | None = None,
) -> SpendReport:
    """Assign workloads, cost every call, and write the ranked `workloads` table.

    `estimates` (call_id, input_tokens, output_tokens) prices calls whose source reported no
    usage, and the output of calls whose output count is partial; without it they are costed
    from `traceforge.analysis.prefix_cache.estimate_tokens` when there are any.
    Returns a SpendReport: ranked rows with share and cumulative share, the smallest set of
    workloads covering 80% of spend, and the rank-size power-law fit.
    """
    key = assign_workloads(con, workload_key)
    prices = prices or load_prices()
    models = [row[0] for row in con.execute("SELECT DISTINCT model FROM llm_calls").fetchall()]
    matched = {m: prices.lookup(m) for m in models}
    price_frame = pl.DataFrame(
        {
            "model": [m for m, p in matched.items() if p is not None],
            "p_input": [p.input for p in matched.values() if p is not None],
            "p_cached": [p.cached_input for p in matched.values() if p is not None],
            "p_write": [p.cache_write for p in matched.values() if p is not None],
            "p_output": [p.output for p in matched.values() if p is not None],
        },
        schema={
            "model": pl.Utf8,
            "p_input": pl.Float64,
            "p_cached": pl.Float64,
            "p_write": pl.Float64,
            "p_output": pl.Float64,
        },
    )
    if estimates is None:
        needs = con.execute(
            "SELECT count(*) FROM llm_calls WHERE cost_usd IS NULL AND copy_of IS NULL"
            " AND (NOT usage_reported OR output_tokens_partial)"
        ).fetchall()[0][0]
        if needs:
            from traceforge.analysis.prefix_cache import estimate_tokens

            estimates = estimate_tokens(con)
    if estimates is None:
        estimates = pl.DataFrame(
            {"call_id": [], "input_tokens": [], "output_tokens": []},
            schema={"call_id": pl.Utf8, "input_tokens": pl.Int64, "output_tokens": pl.Int64},
        )
    with (
        store.registered(con, "_tf_prices", price_frame),
        store.registered(con, "_tf_estimates", estimates.select("call_id", "input_tokens", "output_tokens")),
    ):
        _write_workloads(con, key)
        unpriced = con.execute(
            """
            SELECT coalesce(c.model, '(no model)') AS model, count(*) AS calls,
                   sum(c.input_tokens) AS input_tokens, sum(c.output_tokens) AS output_tokens
            FROM llm_calls c LEFT JOIN _tf_prices p ON p.model = c.model
            WHERE c.cost_usd IS NULL AND p.model IS NULL AND c.copy_of IS NULL
            GROUP BY 1 ORDER BY calls DESC, model
            """
        )
        unpriced_models = _dicts(unpriced)
    rows = _dicts(con.execute("SELECT * FROM workloads ORDER BY rank"))
    total_cost = sum(r["cost_usd"] or 0.0 for r in rows)
    basis = "cost_usd" if total_cost > 0 else "tokens"
    values = [
        (r["cost_usd"] or 0.0)
        if basis == "cost_usd"
        else float((r["input_tokens"] or 0) + (r["output_tokens"] or 0))
        for r in rows
    ]
    return SpendReport(
        workload_key=key,
        basis=basis,
        workloads=rows,
        top_80=[r["workload"] for r in rows if r["in_top_80"]],
        power_law=fit_power_law(values),
        unpriced_models=unpriced_models,
        price_sources=prices.sources(),
        totals={
            "workloads": len(rows),
            "cost_usd": total_cost,
            "cost_reported_usd": sum(r["cost_reported_usd"] or 0.0 for r in rows),
            "cost_priced_usd": sum(r["cost_priced_usd"] or 0.0 for r in rows),
            "cost_estimated_usd": sum(r["cost_estimated_usd"] or 0.0 for r in rows),
            "unpriced_calls": sum(r["unpriced_calls"] or 0 for r in rows),
            "calls_without_usage": sum(r["calls_without_usage"] or 0 for r in rows),
            "calls_output_partial": sum(r["calls_output_partial"] or 0 for r in rows),
        },
    )


def _write_workloads(con: duckdb.DuckDBPyConnection, key: str) -> None:
    """One row per workload, ranked by cost (by tokens when nothing could be costed)."""
    with store.transaction(con):
        con.execute("DELETE FROM workloads")
        con.execute(
            f"""
            INSERT INTO workloads BY NAME
            WITH calls AS (
                SELECT w.workload, c.call_id, c.trace_id, c.usage_reported, c.output_tokens_partial,
                       c.input_tokens, c.cache_read_tokens, c.cache_write_tokens,
                       c.output_tokens, c.reasoning_tokens, c.cost_usd AS cost_reported,
                       CASE WHEN c.cost_usd IS NULL AND c.usage_reported AND p.model IS NOT NULL THEN
                           (greatest(coalesce(c.input_tokens, 0) - coalesce(c.cache_read_tokens, 0)
                                     - coalesce(c.cache_write_tokens, 0), 0) * p.p_input
                            + coalesce(c.cache_read_tokens, 0) * p.p_cached
                            + coalesce(c.cache_write_tokens, 0) * p.p_write
                            + coalesce(c.output_tokens, 0) * p.p_output) / 1e6
                       END AS cost_priced,
                       CASE WHEN c.cost_usd IS NULL AND NOT c.usage_reported AND p.model IS NOT NULL THEN
                           (coalesce(e.input_tokens, 0) * p.p_input
                            + coalesce(e.output_tokens, 0) * p.p_output) / 1e6
                            WHEN c.cost_usd IS NULL AND c.output_tokens_partial AND p.model IS NOT NULL THEN
                           greatest(coalesce(e.output_tokens, 0) - coalesce(c.output_tokens, 0), 0)
                           * p.p_output / 1e6
                       END AS cost_estimated,
                       c.cost_usd IS NULL AND p.model IS NULL AS unpriced
                FROM llm_calls c
                JOIN trace_workloads w USING (trace_id)
                LEFT JOIN _tf_prices p ON p.model = c.model
                LEFT JOIN _tf_estimates e ON e.call_id = c.call_id
                WHERE c.copy_of IS NULL  -- a response a resumed session logged again: counted once
            ),
            per_workload AS (
                SELECT w.workload,
                       count(DISTINCT w.trace_id) AS traces,
                       count(c.trace_id) AS llm_calls,
                       coalesce(sum(c.input_tokens), 0) AS input_tokens,
                       coalesce(sum(c.cache_read_tokens), 0) AS cache_read_tokens,
                       coalesce(sum(c.cache_write_tokens), 0) AS cache_write_tokens,
                       coalesce(sum(c.output_tokens), 0) AS output_tokens,
                       coalesce(sum(c.reasoning_tokens), 0) AS reasoning_tokens,
                       -- summed in one order: DuckDB adds up a DOUBLE column in the order its
                       -- threads finish, so a rerun's costs (and all derived from them, the
                       -- power law's fit included) could differ in the last digits
                       coalesce(sum(c.cost_reported ORDER BY c.call_id), 0) AS cost_reported_usd,
                       coalesce(sum(c.cost_priced ORDER BY c.call_id), 0) AS cost_priced_usd,
                       coalesce(sum(c.cost_estimated ORDER BY c.call_id), 0) AS cost_estimated_usd,
                       count(*) FILTER (WHERE c.unpriced) AS unpriced_calls,
                       count(*) FILTER (WHERE NOT c.usage_reported) AS calls_without_usage,
                       count(*) FILTER (WHERE c.output_tokens_partial) AS calls_output_partial
                FROM trace_workloads w LEFT JOIN calls c USING (trace_id, workload)
                GROUP BY w.workload
            ),
            costed AS (
                SELECT *, cost_reported_usd + cost_priced_usd + cost_estimated_usd AS cost_usd,
                       CASE WHEN sum(cost_reported_usd + cost_priced_usd + cost_estimated_usd) OVER () > 0
                            THEN cost_reported_usd + cost_priced_usd + cost_estimated_usd
                            ELSE (input_tokens + output_tokens)::DOUBLE END AS basis
                FROM per_workload
            ),
            ranked AS (
                SELECT *,
                       row_number() OVER (ORDER BY basis DESC, input_tokens + output_tokens DESC,
                                          llm_calls DESC, workload) AS rank,
                       basis / nullif(sum(basis) OVER (), 0) AS share
                FROM costed
            )
            SELECT * EXCLUDE (basis),
                   sum(share) OVER (ORDER BY rank) AS cumulative_share,
                   coalesce(sum(share) OVER (ORDER BY rank ROWS BETWEEN UNBOUNDED PRECEDING
                                                         AND 1 PRECEDING), 0) < {HEAD_SHARE} - 1e-12
                       AND share IS NOT NULL AS in_top_80,
                   ?::VARCHAR AS workload_key
            FROM ranked
            """,
            [key],
        )


def fit_power_law(values: list[float]) -> dict[str, Any]:
    """Fit `value ∝ rank^(-alpha)` to the positive values ranked largest first.

    Method: least squares on log(value) against log(rank) (the rank-size / Zipf plot); goodness
    of fit is that regression's R². Needs at least 3 positive values.

    >>> fit = fit_power_law([100.0, 50.0, 100 / 3, 25.0])
    >>> round(fit["alpha"], 6), round(fit["r_squared"], 6), fit["poor_fit"]
    (1.0, 1.0, False)
    >>> fit_power_law([10.86, 2.13, 0.78, 0.09, 1e-4, 1e-4, 5e-5, 4e-5])["poor_fit"]
    True
    """
    method = "least squares on log(value) vs log(rank), ranks 1..n largest first"
    positive = sorted((v for v in values if v and v > 0), reverse=True)
    n = len(positive)
    if n < 3:
        return {
            "alpha": None,
            "r_squared": None,
            "n": n,
            "method": method,
            "note": "needs at least 3 workloads with spend to fit",
        }
    xs = [math.log(rank) for rank in range(1, n + 1)]
    ys = [math.log(v) for v in positive]
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    ss_tot = sum((y - mean_y) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    r_squared = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return {
        "alpha": -slope,
        "r_squared": r_squared,
        "n": n,
        "method": method,
        "poor_fit": r_squared < POOR_FIT_R_SQUARED,
    }


# Ranks make any decreasing values look straight-ish on a log-log plot: a rank-size fit's R² is
# high even for spend that follows no power law, so under this one the exponent says little.
POOR_FIT_R_SQUARED = 0.9


def _dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
