"""The DuckDB store: one file holding every trace and every analysis, readable in the DuckDB shell.

The schema is an ordered list of migrations. Each applied migration is recorded in
`schema_migrations`, so opening a store written by an older traceforge upgrades it in place.
Never edit a migration that has shipped: append a new one.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl

DEFAULT_DB = "traceforge.duckdb"

# The DuckDB shell installed with traceforge (PyPI `duckdb-cli`, 1.5.x) reads storage versions up to
# the 1.5 format; duckdb 2.x writes a newer one unless told otherwise. New stores are created in the
# format both read. Raise this together with the duckdb-cli lower bound in pyproject.toml.
SHELL_STORAGE_VERSION = "v1.5.0"


class StoreError(Exception):
    """A store that cannot be opened or used, with what to do about it."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def _without_primary_key(table: str, not_null: list[str]) -> str:
    """SQL rebuilding `table` without its primary key: its rows in their order, `not_null` kept."""
    keep = "".join(f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL;\n" for column in not_null)
    return (
        f"CREATE TABLE _tf_rebuilt AS SELECT * FROM {table};\n"
        f"DROP TABLE {table};\n"
        f"ALTER TABLE _tf_rebuilt RENAME TO {table};\n{keep}"
    )


def _spend_views(total: str) -> str:
    """The views that sum spend (`v_trace_summary`, `v_usage_by_workload_model`), `total` the SQL
    summing a column of costs (`{column}` in it names the column)."""
    return """
        CREATE OR REPLACE VIEW v_trace_summary AS
        SELECT t.trace_id, t.workload, t.agent, t.source_format, t.outcome,
               t.started_at, t.ended_at,
               date_diff('millisecond', t.started_at, t.ended_at) AS duration_ms,
               coalesce(c.llm_calls, 0) AS llm_calls,
               coalesce(tc.tool_calls, 0) AS tool_calls,
               coalesce(tc.tool_errors, 0) AS tool_errors,
               c.input_tokens, c.cache_read_tokens, c.output_tokens, c.cost_usd
        FROM traces t
        LEFT JOIN (SELECT trace_id, count(*) AS llm_calls, sum(input_tokens) AS input_tokens,
                          sum(cache_read_tokens) AS cache_read_tokens,
                          sum(output_tokens) AS output_tokens, {trace_cost} AS cost_usd
                   FROM llm_calls WHERE copy_of IS NULL GROUP BY trace_id) c USING (trace_id)
        LEFT JOIN (SELECT trace_id, count(*) AS tool_calls,
                          count(*) FILTER (WHERE is_error) AS tool_errors
                   FROM tool_calls WHERE copy_of IS NULL GROUP BY trace_id) tc USING (trace_id);

        CREATE OR REPLACE VIEW v_usage_by_workload_model AS
        SELECT coalesce(t.workload, '(none)') AS workload,
               coalesce(c.model, '(unknown)') AS model,
               count(DISTINCT c.trace_id) AS traces,
               count(*) AS llm_calls,
               sum(tc.n) AS tool_calls,
               sum(c.input_tokens) AS input_tokens,
               sum(c.cache_read_tokens) AS cache_read_tokens,
               sum(c.output_tokens) AS output_tokens,
               count(*) FILTER (WHERE NOT c.usage_reported) AS calls_without_usage,
               {model_cost} AS reported_cost_usd
        FROM llm_calls c
        JOIN traces t USING (trace_id)
        LEFT JOIN (SELECT call_id, count(*) AS n FROM tool_calls GROUP BY call_id) tc
               USING (call_id)
        WHERE c.copy_of IS NULL
        GROUP BY ALL;
""".format(trace_cost=total.format(column="cost_usd"), model_cost=total.format(column="c.cost_usd"))


MIGRATIONS: list[Migration] = [
    Migration(
        1,
        "ingest tables",
        """
        CREATE TABLE sources (
            path TEXT PRIMARY KEY,
            sha256 TEXT NOT NULL,
            format TEXT,
            bytes BIGINT,
            records BIGINT,          -- records read from the file
            ingested BIGINT,         -- records that became trace data
            rejected BIGINT,         -- records written to `rejects`
            skipped BIGINT,          -- records skipped by rule (progress lines, snapshots, ...)
            skipped_by_kind JSON,
            traces BIGINT,
            duplicate_of TEXT,       -- same bytes as this already-ingested file: not read again
            error TEXT,              -- why the file as a whole could not be read, if it could not
            ingested_at TIMESTAMPTZ,
            traceforge_version TEXT
        );
        CREATE TABLE traces (
            trace_id TEXT PRIMARY KEY,
            workload TEXT,
            agent TEXT,
            source_format TEXT,
            source_path TEXT,
            source_line BIGINT,
            started_at TIMESTAMPTZ,
            ended_at TIMESTAMPTZ,
            outcome TEXT,            -- success | failure | unknown
            parent_trace_id TEXT,    -- subagent runs and conversation branches
            attributes JSON
        );
        CREATE TABLE llm_calls (
            call_id TEXT PRIMARY KEY,
            trace_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            model TEXT,
            provider TEXT,
            started_at TIMESTAMPTZ,
            ended_at TIMESTAMPTZ,
            duration_ms DOUBLE,
            ttft_ms DOUBLE,
            input_tokens BIGINT,        -- includes cached tokens (OpenTelemetry semantics)
            cache_read_tokens BIGINT,   -- part of input_tokens served from the provider's cache
            cache_write_tokens BIGINT,  -- part of input_tokens written to the cache
            output_tokens BIGINT,       -- includes reasoning tokens
            reasoning_tokens BIGINT,
            usage_reported BOOLEAN NOT NULL,  -- false: the source gave no token counts at all
            cost_usd DOUBLE,
            finish_reason TEXT,
            source_line BIGINT
        );
        CREATE TABLE tool_calls (
            tool_call_id TEXT PRIMARY KEY,
            trace_id TEXT NOT NULL,
            call_id TEXT,            -- the LLM call that emitted it
            seq INTEGER NOT NULL,    -- order in the trace
            name TEXT NOT NULL,
            arguments JSON,
            result TEXT,
            is_error BOOLEAN,
            started_at TIMESTAMPTZ,
            ended_at TIMESTAMPTZ,
            duration_ms DOUBLE,
            requestor TEXT,          -- assistant | user
            source_tool_call_id TEXT -- the id the source gave, before any prefixing
        );
        CREATE TABLE messages (
            trace_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT,
            tool_calls JSON,         -- [{"id", "name", "arguments"}] on assistant messages
            tool_call_id TEXT,       -- on tool messages: the call answered
            name TEXT,
            reasoning TEXT,
            call_id TEXT,            -- on assistant messages: the LLM call that produced it
            PRIMARY KEY (trace_id, seq)
        );
        CREATE TABLE tool_defs (
            trace_id TEXT NOT NULL,
            name TEXT NOT NULL,
            description TEXT,
            parameters JSON,
            PRIMARY KEY (trace_id, name)
        );
        CREATE TABLE rejects (
            source_path TEXT NOT NULL,
            line BIGINT,             -- line number (JSON Lines) or record index (JSON documents)
            error TEXT NOT NULL,
            raw TEXT,
            rejected_at TIMESTAMPTZ
        );
        """,
    ),
    Migration(
        2,
        "views for the common joins",
        """
        CREATE VIEW v_llm_calls AS
        SELECT c.*,
               c.input_tokens - coalesce(c.cache_read_tokens, 0) AS uncached_input_tokens,
               t.workload, t.agent, t.source_format, t.source_path
        FROM llm_calls c JOIN traces t USING (trace_id);

        CREATE VIEW v_tool_calls AS
        SELECT tc.*, c.model, c.seq AS llm_seq, t.workload, t.agent, t.source_format
        FROM tool_calls tc
        JOIN traces t USING (trace_id)
        LEFT JOIN llm_calls c ON c.call_id = tc.call_id;

        CREATE VIEW v_trace_summary AS
        SELECT t.trace_id, t.workload, t.agent, t.source_format, t.outcome,
               t.started_at, t.ended_at,
               date_diff('millisecond', t.started_at, t.ended_at) AS duration_ms,
               coalesce(c.llm_calls, 0) AS llm_calls,
               coalesce(tc.tool_calls, 0) AS tool_calls,
               coalesce(tc.tool_errors, 0) AS tool_errors,
               c.input_tokens, c.cache_read_tokens, c.output_tokens, c.cost_usd
        FROM traces t
        LEFT JOIN (SELECT trace_id, count(*) AS llm_calls, sum(input_tokens) AS input_tokens,
                          sum(cache_read_tokens) AS cache_read_tokens,
                          sum(output_tokens) AS output_tokens, sum(cost_usd) AS cost_usd
                   FROM llm_calls GROUP BY trace_id) c USING (trace_id)
        LEFT JOIN (SELECT trace_id, count(*) AS tool_calls,
                          count(*) FILTER (WHERE is_error) AS tool_errors
                   FROM tool_calls GROUP BY trace_id) tc USING (trace_id);

        CREATE VIEW v_usage_by_workload_model AS
        SELECT coalesce(t.workload, '(none)') AS workload,
               coalesce(c.model, '(unknown)') AS model,
               count(DISTINCT c.trace_id) AS traces,
               count(*) AS llm_calls,
               sum(tc.n) AS tool_calls,
               sum(c.input_tokens) AS input_tokens,
               sum(c.cache_read_tokens) AS cache_read_tokens,
               sum(c.output_tokens) AS output_tokens,
               count(*) FILTER (WHERE NOT c.usage_reported) AS calls_without_usage,
               sum(c.cost_usd) AS reported_cost_usd
        FROM llm_calls c
        JOIN traces t USING (trace_id)
        LEFT JOIN (SELECT call_id, count(*) AS n FROM tool_calls GROUP BY call_id) tc
               USING (call_id)
        GROUP BY ALL;
        """,
    ),
    Migration(
        3,
        "analysis tables",
        """
        CREATE TABLE tool_deps (
            trace_id TEXT NOT NULL,
            src_tool_call_id TEXT NOT NULL,
            dst_tool_call_id TEXT NOT NULL,
            kind TEXT NOT NULL,      -- explicit | data | state | control | derived | user_turn
            evidence TEXT
        );
        CREATE TABLE trace_dag (
            trace_id TEXT PRIMARY KEY,
            tool_calls INTEGER,
            observed_turns INTEGER,
            min_turns INTEGER,
            turns_saved INTEGER,
            observed_ms DOUBLE,
            parallel_ms DOUBLE,
            tokens_saved BIGINT
        );
        CREATE TABLE workloads (
            workload TEXT PRIMARY KEY,
            traces BIGINT,
            llm_calls BIGINT,
            input_tokens BIGINT,
            cache_read_tokens BIGINT,
            output_tokens BIGINT,
            cost_usd DOUBLE,
            share DOUBLE,
            rank INTEGER
        );
        """,
    ),
    Migration(
        4,
        "dependency analysis: edge confidence, per-call schedule, DAG summaries",
        """
        ALTER TABLE tool_defs ADD COLUMN annotations JSON;   -- MCP tool annotations (readOnlyHint...)
        ALTER TABLE tool_deps ADD COLUMN confidence DOUBLE;  -- 0..1: how strong the evidence is
        ALTER TABLE tool_deps ADD COLUMN loose BOOLEAN;      -- the loose mode keeps this edge too
        ALTER TABLE trace_dag ADD COLUMN mode TEXT;          -- conservative | loose: the mode of min_turns
        ALTER TABLE trace_dag ADD COLUMN settings TEXT;      -- analysis version, mode, traceforge.toml digest
        ALTER TABLE trace_dag ADD COLUMN min_turns_conservative INTEGER;
        ALTER TABLE trace_dag ADD COLUMN min_turns_loose INTEGER;
        ALTER TABLE trace_dag ADD COLUMN parallel_turns INTEGER;   -- observed turns with 2+ calls
        ALTER TABLE trace_dag ADD COLUMN user_turns INTEGER;       -- stretches between user messages
        ALTER TABLE trace_dag ADD COLUMN user_tool_calls INTEGER;  -- calls the user made (not scheduled)
        ALTER TABLE trace_dag ADD COLUMN edges INTEGER;            -- dependency edges in the mode
        ALTER TABLE trace_dag ADD COLUMN critical_path JSON;       -- tool_call_ids, one per parallel turn
        ALTER TABLE trace_dag ADD COLUMN timing TEXT;              -- measured | partial | default
        ALTER TABLE trace_dag ADD COLUMN input_tokens_saved BIGINT;  -- context the removed turns re-sent
        ALTER TABLE trace_dag ADD COLUMN tokens_estimated BOOLEAN;   -- token counts from text length
        CREATE TABLE tool_schedule (
            trace_id TEXT NOT NULL,
            tool_call_id TEXT NOT NULL,
            seq INTEGER,
            name TEXT,
            effect TEXT,             -- pure | read | write | unknown
            segment INTEGER,         -- stretch between user messages
            observed_turn INTEGER,   -- tool-calling turn it was made in (0-based)
            level INTEGER,           -- turn of the parallel schedule (0-based)
            on_critical_path BOOLEAN
        );

        CREATE VIEW v_dag_by_workload AS
        SELECT coalesce(t.workload, '(none)') AS workload,
               count(*) AS traces,
               sum(d.tool_calls) AS tool_calls,
               sum(d.observed_turns) AS observed_turns,
               sum(d.min_turns) AS min_turns,
               sum(d.turns_saved) AS turns_saved,
               sum(d.turns_saved) / nullif(sum(d.observed_turns), 0) AS turns_saved_share,
               count(*) FILTER (WHERE d.turns_saved > 0) AS traces_with_savings,
               sum(d.parallel_turns) AS parallel_turns,
               sum(d.min_turns_conservative) AS min_turns_conservative,
               sum(d.min_turns_loose) AS min_turns_loose,
               sum(d.observed_ms) AS observed_ms,
               sum(d.parallel_ms) AS parallel_ms,
               sum(d.observed_ms) / nullif(sum(d.parallel_ms), 0) AS speedup,
               sum(d.tokens_saved) AS tokens_saved,
               sum(d.input_tokens_saved) AS input_tokens_saved
        FROM trace_dag d JOIN traces t USING (trace_id)
        GROUP BY 1
        ORDER BY turns_saved DESC, workload;

        -- Calls of one turn beside calls of the next turn (same user turn): did the second need the
        -- first (an edge of the analysed mode), or could they have shared a turn?
        CREATE VIEW v_dag_tool_pairs AS
        WITH pairs AS (
            SELECT a.trace_id, a.name AS first_tool, b.name AS then_tool,
                   a.tool_call_id AS first_id, b.tool_call_id AS then_id
            FROM tool_schedule a
            JOIN tool_schedule b
              ON a.trace_id = b.trace_id AND b.observed_turn = a.observed_turn + 1
             AND a.segment = b.segment
        ),
        edges AS (
            SELECT DISTINCT e.trace_id, e.src_tool_call_id, e.dst_tool_call_id
            FROM tool_deps e JOIN trace_dag d USING (trace_id)
            WHERE e.loose OR d.mode = 'conservative'
        )
        SELECT p.first_tool, p.then_tool,
               count(*) AS sequential_pairs,
               count(e.trace_id) AS dependent_pairs,
               count(*) - count(e.trace_id) AS independent_pairs,
               count(DISTINCT p.trace_id) AS traces
        FROM pairs p
        LEFT JOIN edges e
               ON e.trace_id = p.trace_id AND e.src_tool_call_id = p.first_id
              AND e.dst_tool_call_id = p.then_id
        GROUP BY ALL
        ORDER BY independent_pairs DESC, sequential_pairs DESC, first_tool, then_tool;
        """,
    ),
    Migration(
        5,
        "workload assignment, spend breakdown, prefill/decode profile",
        """
        -- Which workload each trace belongs to under the key the last analysis used
        -- (`traceforge profile --workload-key`), so every per-workload figure joins the same way.
        CREATE TABLE trace_workloads (
            trace_id TEXT PRIMARY KEY,
            workload TEXT NOT NULL,
            workload_key TEXT NOT NULL
        );
        ALTER TABLE workloads ADD COLUMN workload_key TEXT;
        ALTER TABLE workloads ADD COLUMN cumulative_share DOUBLE;
        ALTER TABLE workloads ADD COLUMN in_top_80 BOOLEAN;     -- in the smallest set covering 80% of spend
        ALTER TABLE workloads ADD COLUMN cache_write_tokens BIGINT;
        ALTER TABLE workloads ADD COLUMN reasoning_tokens BIGINT;
        ALTER TABLE workloads ADD COLUMN cost_reported_usd DOUBLE;   -- cost the source gave
        ALTER TABLE workloads ADD COLUMN cost_priced_usd DOUBLE;     -- reported tokens x price table
        ALTER TABLE workloads ADD COLUMN cost_estimated_usd DOUBLE;  -- estimated tokens x price table
        ALTER TABLE workloads ADD COLUMN unpriced_calls BIGINT;      -- no cost and a model not in the table
        ALTER TABLE workloads ADD COLUMN calls_without_usage BIGINT;
        -- Prefill and decode demand per workload and model (token counts; estimated where the source
        -- reported none, see `calls_estimated` and `estimate_method`).
        CREATE TABLE inference_profile (
            workload TEXT NOT NULL,
            model TEXT NOT NULL,
            llm_calls BIGINT,
            calls_estimated BIGINT,
            input_tokens BIGINT,
            uncached_input_tokens BIGINT,
            cache_read_tokens BIGINT,
            cache_write_tokens BIGINT,
            output_tokens BIGINT,
            reasoning_tokens BIGINT,
            cached_share DOUBLE,          -- cache_read / input (see migration 12)
            prefill_decode_ratio DOUBLE,  -- uncached input / output
            input_output_ratio DOUBLE,    -- input / output
            reasoning_share DOUBLE,       -- reasoning / output
            estimate_method TEXT,
            PRIMARY KEY (workload, model)
        );
        """,
    ),
    Migration(
        6,
        "dependency savings per workload under the key the last analysis used",
        """
        -- As migration 4's view, grouped by `trace_workloads` (the workload key of the last
        -- `profile` / `analyze`), like spend and the profile; by the source's workload for traces
        -- not assigned yet.
        CREATE OR REPLACE VIEW v_dag_by_workload AS
        SELECT coalesce(w.workload, t.workload, '(none)') AS workload,
               count(*) AS traces,
               sum(d.tool_calls) AS tool_calls,
               sum(d.observed_turns) AS observed_turns,
               sum(d.min_turns) AS min_turns,
               sum(d.turns_saved) AS turns_saved,
               sum(d.turns_saved) / nullif(sum(d.observed_turns), 0) AS turns_saved_share,
               count(*) FILTER (WHERE d.turns_saved > 0) AS traces_with_savings,
               sum(d.parallel_turns) AS parallel_turns,
               sum(d.min_turns_conservative) AS min_turns_conservative,
               sum(d.min_turns_loose) AS min_turns_loose,
               sum(d.observed_ms) AS observed_ms,
               sum(d.parallel_ms) AS parallel_ms,
               sum(d.observed_ms) / nullif(sum(d.parallel_ms), 0) AS speedup,
               sum(d.tokens_saved) AS tokens_saved,
               sum(d.input_tokens_saved) AS input_tokens_saved
        FROM trace_dag d JOIN traces t USING (trace_id)
        LEFT JOIN trace_workloads w USING (trace_id)
        GROUP BY 1
        ORDER BY turns_saved DESC, workload;
        """,
    ),
    Migration(
        7,
        "output tokens logged only as a lower bound",
        """
        -- True where the source logged only the usage a streamed response opened with (Claude Code
        -- sessions): input and cache counts are complete, output_tokens is a lower bound, and
        -- spend and the profile estimate the output from the response text instead.
        ALTER TABLE llm_calls ADD COLUMN output_tokens_partial BOOLEAN;
        ALTER TABLE workloads ADD COLUMN calls_output_partial BIGINT;
        """,
    ),
    Migration(
        8,
        "responses logged again in another trace (resumed Claude Code sessions) counted once",
        """
        -- A resumed Claude Code session is a new file that starts with a copy of the conversation
        -- it resumes. `response_key` identifies a response across traces; `copy_of` names the call
        -- (or tool call) first logged, on every other copy. Spend, usage, the profile, the replay
        -- and the dependency analysis leave copies out; the conversations (messages) keep them.
        ALTER TABLE llm_calls ADD COLUMN response_key TEXT;
        ALTER TABLE llm_calls ADD COLUMN copy_of TEXT;
        ALTER TABLE tool_calls ADD COLUMN copy_of TEXT;

        """
        + _spend_views("sum({column})"),
    ),
    Migration(
        9,
        "traces a file describes without holding their calls (Langfuse's traces table)",
        """
        -- Langfuse's batch export writes the traces table (session, user, tags, metadata) and the
        -- observations table (the calls and tools) to different files. The ids of the traces a file
        -- describes without any of their observations: ingest.joins builds those traces with the
        -- files that hold their observations.
        ALTER TABLE sources ADD COLUMN described_traces JSON;
        """,
    ),
    Migration(
        10,
        "conversations of a per-request log continued in another file (a rotated log) joined",
        """
        -- Per-request logs (OpenAI / Anthropic gateway logs): `chain_state` is the hash of the
        -- conversation after the call's response; `request_prefixes`, on a call that opens its trace
        -- mid-conversation, the hashes of its request's message prefixes: a trace whose call has
        -- one of them as its state, in another file, is the conversation it continues
        -- (ingest.log_joins). `source_line_path` is the file `source_line` is a line of, where it
        -- is not the trace's `source_path` (a trace joined from several files).
        ALTER TABLE llm_calls ADD COLUMN chain_state TEXT;
        ALTER TABLE llm_calls ADD COLUMN request_prefixes TEXT[];
        ALTER TABLE llm_calls ADD COLUMN source_line_path TEXT;
        """,
    ),
    Migration(
        11,
        "the largest ingest tables without primary-key indexes (a one-time rebuild of those tables)",
        """
        -- DuckDB keeps a primary key as an index it updates on every insert and writes at every
        -- checkpoint: on llm_calls, tool_calls, messages and tool_defs that cost a fifth of the
        -- ingest's time. Their keys stay unique without it: the writer checks every batch's ids
        -- against the store before writing them (ingest.parallel._colliding, ingest.writer).
        -- traces and sources keep theirs. Each table is rebuilt in its own order (the analyses
        -- read tables in physical order), its NOT NULL columns as they were.
"""
        + _without_primary_key("llm_calls", ["call_id", "trace_id", "seq", "usage_reported"])
        + _without_primary_key("tool_calls", ["tool_call_id", "trace_id", "seq", "name"])
        + _without_primary_key("messages", ["trace_id", "seq", "role"])
        + _without_primary_key("tool_defs", ["trace_id", "name"]),
    ),
    Migration(
        12,
        "the provider's cached share over the calls that reported a cache count",
        """
        -- A log can report cache counts for some calls and not others (a streamed call logged
        -- without usage, an agent that records usage for most steps): `cached_share` is now
        -- cache_read / this column, not / input_tokens, so the calls without a count do not read
        -- as misses.
        ALTER TABLE inference_profile ADD COLUMN cache_reported_input_tokens BIGINT;
        """,
    ),
    Migration(
        13,
        "spend summed exactly in the views: the same to the last digit on every run",
        """
        -- DuckDB sums in parallel, and a sum of doubles depends on the order it is taken in: the
        -- views' cost sums differed in their last digits from one query to the next. Each cost is
        -- now summed as a decimal of nano-dollars (exact, in any order), then given back as a double
        -- (a cost no decimal holds, which ingest never stores, counts as unknown, not as an error).
        """
        + _spend_views("sum(TRY_CAST({column} AS DECIMAL(38, 9)))::DOUBLE"),
    ),
]

SCHEMA_VERSION = max(m.version for m in MIGRATIONS)


# DuckDB settings a user can give every command through the environment, for stores larger than
# memory: `TRACEFORGE_MEMORY_LIMIT=4GB` caps DuckDB's memory (its buffer cache holds what was
# written, up to 80% of RAM by default), `TRACEFORGE_TEMP_DIRECTORY=/big/disk/tmp` is where it
# spills what does not fit, `TRACEFORGE_THREADS=2` bounds its threads.
SETTINGS_FROM_ENV = {
    "memory_limit": "TRACEFORGE_MEMORY_LIMIT",
    "temp_directory": "TRACEFORGE_TEMP_DIRECTORY",
    "threads": "TRACEFORGE_THREADS",
    "checkpoint_threshold": "TRACEFORGE_CHECKPOINT_THRESHOLD",
}


# DuckDB keeps what it read and wrote in its buffer cache, up to 80% of RAM unless told otherwise,
# so a big ingest or analysis would hold most of the machine. traceforge caps the cache; DuckDB
# spills what does not fit to `<store>.tmp` (or TRACEFORGE_TEMP_DIRECTORY), and
# TRACEFORGE_MEMORY_LIMIT sets another cap. The benchmark (docs/performance.md) found the 1M-call
# analysis as fast with 512 MB as with 1 GB, and 450 MB less at its peak.
# DuckDB checkpoints once its write-ahead log passes `checkpoint_threshold` (16 MB by default), and a
# checkpoint rewrites every row group appended to since the last one, whole: an ingest appends a
# batch of rows to each table's last, partly filled row group, so at every checkpoint that group
# (up to 122,880 messages: hundreds of MB) was written again, and the more often the more of it.
# With 256 MB the ingest checkpointed every few write batches instead of every other one: on the
# 1M-call corpus its main process spent 13-23% less CPU, in 7-14% less time. But a checkpoint's cost
# grows with the store (7-12 s each, past 2 GB of it, against 2 s at first), so a big ingest's main
# process became its bottleneck: with 1 GB, the 1M-call ingest took 121-122 s against 142-144 s
# (main process 74 CPU seconds against 92) at the same peak memory (docs/performance.md).
DEFAULT_SETTINGS = {"memory_limit": "512MB", "checkpoint_threshold": "1GB"}


def settings_from_env() -> dict[str, str]:
    """The DuckDB settings named in the environment (see SETTINGS_FROM_ENV)."""
    return {key: os.environ[name] for key, name in SETTINGS_FROM_ENV.items() if os.environ.get(name)}


def connect(
    path: str | Path = DEFAULT_DB, *, read_only: bool = False, settings: dict[str, str] | None = None
) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the store at `path`, upgraded to the current schema.

    `settings` are DuckDB settings (`memory_limit`, `temp_directory`, `threads`...) for this
    connection, over those named in the environment (`settings_from_env`), over DEFAULT_SETTINGS.

    Raises StoreError with what to do when the file is held by another process, is not a DuckDB
    database, was written by a newer traceforge, or a setting is not valid.
    """
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"{path}: no such store. Run `traceforge ingest` or `analyze` first.")
    config = {} if path.exists() else {"storage_compatibility_version": SHELL_STORAGE_VERSION}
    chosen = {**settings_from_env(), **(settings or {})}
    config.update({**DEFAULT_SETTINGS, **chosen})
    try:
        con = duckdb.connect(str(path), read_only=read_only, config=config)
    except duckdb.IOException as exc:
        message = str(exc)
        if "lock" in message.lower():
            raise StoreError(
                f"{path} is in use by another process (a running traceforge or DuckDB shell). "
                "Wait for it to finish or close it, then rerun; or pass --db to use another store."
            ) from exc
        raise StoreError(f"{path}: cannot open as a DuckDB store: {message}") from exc
    except duckdb.Error as exc:
        if chosen:
            named = ", ".join(f"{key}={value!r}" for key, value in chosen.items())
            raise StoreError(
                f"{path}: cannot open with the DuckDB settings {named}: {exc}. Fix or unset them "
                f"(environment: {', '.join(SETTINGS_FROM_ENV.values())})"
            ) from exc
        raise StoreError(f"{path}: cannot open as a DuckDB store: {exc}") from exc
    _MEMORY_LIMITS[con] = config["memory_limit"]
    if not read_only:
        migrate(con)
    else:
        _check_version(con, path)
    return con


def applied_migrations(con: duckdb.DuckDBPyConnection) -> list[int]:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
    ).fetchone()[0]
    if not exists:
        return []
    return [row[0] for row in con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]


def migrate(con: duckdb.DuckDBPyConnection, upto: int | None = None) -> list[int]:
    """Apply the migrations not yet recorded in the store, each in its own transaction.

    Returns the versions applied. `upto` stops at a given version (for tests of upgrades).
    """
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, name TEXT, applied_at TIMESTAMPTZ)"
    )
    done = set(applied_migrations(con))
    newer = [v for v in done if v > SCHEMA_VERSION]
    if newer:
        raise StoreError(
            f"this store has schema version {max(newer)}, newer than this traceforge understands "
            f"({SCHEMA_VERSION}). Upgrade traceforge (pip install -U traceforge)."
        )
    applied = []
    for migration in sorted(MIGRATIONS, key=lambda m: m.version):
        if migration.version in done or (upto is not None and migration.version > upto):
            continue
        with transaction(con):
            con.execute(migration.sql)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                [migration.version, migration.name, datetime.now(UTC)],
            )
        applied.append(migration.version)
    return applied


def _check_version(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    done = applied_migrations(con)
    if not done:
        raise StoreError(f"{path} is not a traceforge store (no schema_migrations table).")
    if max(done) < SCHEMA_VERSION:
        raise StoreError(
            f"{path} has schema version {max(done)}; this traceforge needs {SCHEMA_VERSION}. "
            "Any command that writes to it (`traceforge ingest --db FILE PATH`) upgrades it in place."
        )


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, frame: pl.DataFrame) -> Iterator[None]:
    """`frame` visible to SQL on `con` as the table `name` for the duration of the block."""
    con.register(name, frame)
    try:
        yield
    finally:
        # in a transaction a failed statement aborted, DuckDB refuses even this: the error that
        # aborted it is the one to report
        with contextlib.suppress(duckdb.TransactionException):
            con.unregister(name)


def registered_ids(
    con: duckdb.DuckDBPyConnection, name: str, trace_ids: list[str]
) -> contextlib.AbstractContextManager[None]:
    """`trace_ids` visible to SQL on `con` as the one-column table `name` (trace_id) for the
    duration of the block: what a query joins on to read some traces' rows."""
    return registered(con, name, pl.DataFrame({"trace_id": trace_ids}, schema={"trace_id": pl.Utf8}))


# Where a trace's later contexts start: the message seq of each compaction's summary
# (`traces.attributes.compactions`, written by the Claude Code reader), as an INTEGER[], or NULL for
# a trace never compacted. A column expression over `traces` aliased `t`.
COMPACTION_STARTS_SQL = (
    "CASE WHEN json_exists(t.attributes, '$.compactions') "
    "THEN json_extract(t.attributes, '$.compactions[*].message_seq')::INTEGER[] END"
)


def context_of(starts: list[int], seq: int) -> int:
    """Which context of its trace the message `seq` is in: 0 before the first compaction, k after
    the k-th. `starts`: `context_starts` of the trace."""
    return bisect.bisect_right(starts, seq)


def context_starts(compaction_starts: Iterable[int | None] | None) -> list[int]:
    """A `COMPACTION_STARTS_SQL` value as `context_of` takes it: distinct, sorted, without nulls."""
    return sorted({seq for seq in compaction_starts or () if seq is not None})


def insert_frame(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> None:
    """Insert `frame`'s rows into `table`, matching columns by name."""
    with registered(con, "_tf_rows", frame):
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _tf_rows")


# The memory limit each connection was opened with: DuckDB prints it to a tenth of a unit only.
_MEMORY_LIMITS: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, str] = weakref.WeakKeyDictionary()

# What DuckDB may keep while Python holds the data of a long computation (see `cache_released`).
RELEASED_MEMORY_LIMIT = "128MB"


@contextlib.contextmanager
def cache_released(con: duckdb.DuckDBPyConnection, limit: str = RELEASED_MEMORY_LIMIT) -> Iterator[None]:
    """DuckDB's buffer cache emptied for a stretch of Python work that does not query the store.

    DuckDB keeps what it read, up to its memory limit, until the connection closes; while Python
    holds a big computation's data, that cache would sit beside it and add to the process's peak.
    Lowering the limit to `limit` evicts the cache (DuckDB gives the memory back at once); the
    limit is restored when the block ends (as `connect` set it; on other connections, as DuckDB
    prints it, to a tenth of a unit). Queries in the block still run, spilling to disk beyond the
    low limit. Where DuckDB holds more than `limit` that it cannot evict (its indexes), the limit
    is left as it was: the cache stays, nothing fails."""
    configured = (
        _MEMORY_LIMITS.get(con) or con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    )
    try:
        con.execute("SET memory_limit = ?", [limit])
    except duckdb.OutOfMemoryException:
        # DuckDB 1.5 keeps the new limit even as it reports that it cannot meet it: put it back.
        con.execute("SET memory_limit = ?", [configured])
        yield
        return
    try:
        yield
    finally:
        con.execute("SET memory_limit = ?", [configured])


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The block's statements in one transaction: committed at its end (`commit`), rolled back on
    any error."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        commit(con)
    except BaseException:
        rollback(con)
        raise


def commit(con: duckdb.DuckDBPyConnection) -> None:
    """COMMIT the transaction open on `con`. DuckDB reports a COMMIT that could not allocate as a
    TransactionException: it is raised as the OutOfMemoryException it is, so callers handle running
    out of memory in one place."""
    try:
        con.execute("COMMIT")
    except duckdb.TransactionException as exc:
        if "could not allocate" in str(exc) or "failed to pin block" in str(exc):  # 2.0, 1.5
            raise duckdb.OutOfMemoryException(str(exc)) from exc
        raise


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """ROLLBACK the transaction open on `con`, if any: a COMMIT that failed (DuckDB out of memory
    while writing) has already ended it, and rolling back then would fail too and hide the error
    that matters, so that failure is ignored."""
    with contextlib.suppress(duckdb.TransactionException):
        con.execute("ROLLBACK")
