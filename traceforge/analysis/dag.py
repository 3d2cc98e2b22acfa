"""The dependency DAG of each trace: its parallel schedule, what that schedule would save, and the
analysis over a whole store.

For one trace, `schedule(inference, mode)` builds the networkx DAG of its agent tool calls (the
inferred edges, plus a barrier node at each user message: no call moves across one), takes its
topological generations as the parallel schedule (generation k = the k-th tool-calling turn a
parallel-calling model would need), and prices both schedules with one latency model:

    time = sum over turns of (one LLM call + the slowest tool call of the turn)

(LLMCompiler's model, reference/parallel-tool-calls.md section 4.3). Durations are measured where
the trace has them (an LLM call's duration; a tool call's own duration, else the gap between its
LLM call and the next), and the stated defaults of `traceforge.toml` [dag] (2,000 ms per LLM call,
600 ms per tool call) where it has not; `timing` says which. The final answer turn is the same in
both schedules and is left out of both.

Tokens saved: every turn the parallel schedule removes would not have re-sent its context. The
gross figure (`input_tokens_saved`) is that context; `tokens_saved` is what is left of it after an
ideal prefix cache, which would have served the prefix shared with the LLM call before (its input
and output). Where the source reported no usage, token counts are estimated at 4 characters per
token from the messages (`tokens_estimated`).

`analyze_dependencies(con)` runs inference and scheduling over every trace with tool calls, in
batches, and writes `tool_deps`, `tool_schedule` and `trace_dag`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import duckdb
import networkx as nx
import polars as pl

from traceforge import store
from traceforge.analysis.batches import TraceProgressCallback, trace_spans
from traceforge.analysis.deps import (
    ROW_TABLES,
    Edge,
    Inference,
    TraceInput,
    TraceTables,
    infer,
    read_trace_tables,
    read_traces,
    trace_input,
)
from traceforge.analysis.effects import MODES, DepsConfig
from traceforge.workers import ordered_map, worker_count

# Bump when inference or scheduling changes what they write: stored results of another version are
# recomputed by the next analysis.
ANALYSIS_VERSION = 2  # 2: a partial output count (Claude Code) gives way to the text estimate
BATCH_CALLS = 20_000


@dataclass
class Schedule:
    """One trace's observed schedule beside the parallel one, in one mode."""

    trace: TraceInput
    mode: str
    edges: list[Edge]
    graph: nx.DiGraph
    levels: list[int]  # per call index: its turn in the parallel schedule (0-based)
    generations: list[list[int]]  # call indices per parallel turn
    critical_path: list[int]  # call indices, one per parallel turn
    observed_turns: int
    parallel_turns: int  # observed turns that already held more than one call
    observed_ms: float
    parallel_ms: float
    timing: str  # measured | partial | default
    tokens_saved: int
    input_tokens_saved: int
    tokens_estimated: bool
    removed_turns: list[int] = field(default_factory=list)

    @property
    def min_turns(self) -> int:
        return len(self.generations)

    @property
    def turns_saved(self) -> int:
        return self.observed_turns - self.min_turns


def dependency_graph(inference: Inference, mode: str = "conservative") -> nx.DiGraph:
    """The DAG of one trace's agent tool calls in `mode`.

    Call nodes are the call indices (attributes: name, turn, segment); edges carry kind, confidence
    and evidence. A node ("user", k) stands for the user message opening the k-th stretch of calls
    that has any: every call before it points to it and it points to every call after it.

    >>> from traceforge.analysis.deps import Call, TraceInput, Turn, infer
    >>> calls = [Call(0, "a", 0, "get_weather", {"city": "Paris"}, "18C", turn=0),
    ...          Call(1, "b", 1, "get_weather", {"city": "Rome"}, "21C", turn=1)]
    >>> turns = [Turn(0, None, [0]), Turn(1, None, [1])]
    >>> graph = dependency_graph(infer(TraceInput("t", None, calls, turns, [])))
    >>> sorted(graph.nodes), list(graph.edges)
    ([0, 1], [])
    """
    _check_mode(mode)
    trace = inference.trace
    graph = nx.DiGraph()
    for call in trace.calls:
        graph.add_node(call.index, name=call.name, turn=call.turn, segment=call.segment)
    for edge in inference.edges_for(mode):
        if graph.has_edge(edge.src, edge.dst):
            continue  # one edge per pair; the strongest evidence first (edges are sorted per pair)
        graph.add_edge(edge.src, edge.dst, kind=edge.kind, confidence=edge.confidence, evidence=edge.evidence)
    by_segment: dict[int, list[int]] = {}
    for call in trace.calls:
        by_segment.setdefault(call.segment, []).append(call.index)
    segments = sorted(by_segment)
    for before, after in itertools.pairwise(segments):
        barrier = ("user", after)
        graph.add_node(barrier)
        graph.add_edges_from((index, barrier) for index in by_segment[before])
        graph.add_edges_from((barrier, index) for index in by_segment[after])
        if before != segments[0]:
            graph.add_edge(("user", before), barrier)
    return graph


def schedule(inference: Inference, mode: str = "conservative", config: DepsConfig | None = None) -> Schedule:
    """The parallel schedule of one trace and what it saves against the observed one.

    The parallel schedule is the DAG's topological generations without the user-message barriers:
    each generation is one tool-calling turn, so the number of generations is the minimum number of
    tool-calling turns. Example: three independent lookups made in three turns need one.

    >>> from traceforge.analysis.deps import Call, TraceInput, Turn, infer
    >>> calls = [Call(i, f"c{i}", i, "get_weather", {"city": c}, "18C", turn=i)
    ...          for i, c in enumerate(["Paris", "Rome", "Oslo"])]
    >>> turns = [Turn(i, None, [i]) for i in range(3)]
    >>> s = schedule(infer(TraceInput("t", None, calls, turns, [])))
    >>> s.observed_turns, s.min_turns, s.generations
    (3, 1, [[0, 1, 2]])
    """
    config = config or DepsConfig()
    trace = inference.trace
    graph = dependency_graph(inference, mode)
    generations = [
        sorted(node for node in generation if isinstance(node, int))
        for generation in nx.topological_generations(graph)
    ]
    generations = [g for g in generations if g]
    levels = [0] * len(trace.calls)
    for level, generation in enumerate(generations):
        for index in generation:
            levels[index] = level
    tool_ms, tools_measured = _tool_durations(trace, config)
    llm_ms, llms_measured = _llm_durations(trace, config)
    observed_ms = sum(llm_ms[t.index] + max(tool_ms[c] for c in t.calls) for t in trace.turns)
    representative = [min(trace.calls[c].turn for c in generation) for generation in generations]
    parallel_ms = sum(
        llm_ms[turn] + max(tool_ms[c] for c in generation)
        for turn, generation in zip(representative, generations, strict=True)
    )
    removed = sorted(set(range(len(trace.turns))) - set(representative))
    gross = net = 0.0
    estimated = False
    for turn_index in removed:
        turn = trace.turns[turn_index]
        if turn.input_tokens is None:
            continue
        estimated = estimated or turn.tokens_estimated
        gross += turn.input_tokens
        cached = min(turn.input_tokens, turn.previous_tokens or 0.0)
        net += turn.input_tokens - cached
    measured = tools_measured + llms_measured
    total = len(trace.calls) + len(trace.turns)
    timing = "measured" if measured == total else ("default" if measured == 0 else "partial")
    return Schedule(
        trace=trace,
        mode=mode,
        edges=inference.edges_for(mode),
        graph=graph,
        levels=levels,
        generations=generations,
        critical_path=critical_path(trace, graph, levels, tool_ms),
        observed_turns=len(trace.turns),
        parallel_turns=sum(1 for t in trace.turns if len(t.calls) > 1),
        observed_ms=observed_ms,
        parallel_ms=parallel_ms,
        timing=timing,
        tokens_saved=round(net),
        input_tokens_saved=round(gross),
        tokens_estimated=estimated,
        removed_turns=removed,
    )


def critical_path(trace: TraceInput, graph: nx.DiGraph, levels: list[int], tool_ms: list[float]) -> list[int]:
    """The chain of calls that sets the number of parallel turns: one call per turn, each depending
    on the one before it (or following it across a user message); among chains of equal length, the
    one whose tool calls take longest."""
    best: dict[Any, tuple[int, float, Any]] = {}  # node -> (calls on the chain, tool ms, previous)
    for node in nx.topological_sort(graph):
        weight = (1, tool_ms[node]) if isinstance(node, int) else (0, 0.0)
        chosen: tuple[int, float, Any] = (0, 0.0, None)
        for pred in graph.predecessors(node):
            length, ms, _ = best[pred]
            if (length, ms) > chosen[:2]:
                chosen = (length, ms, pred)
        best[node] = (chosen[0] + weight[0], chosen[1] + weight[1], chosen[2])
    if not best:
        return []
    node = max(best, key=lambda n: best[n][:2])
    path = []
    while node is not None:
        if isinstance(node, int):
            path.append(node)
        node = best[node][2]
    return path[::-1]


def _tool_durations(trace: TraceInput, config: DepsConfig) -> tuple[list[float], int]:
    durations, measured = [], 0
    for call in trace.calls:
        gap = trace.turns[call.turn].tool_gap_ms
        if call.duration_ms is not None:
            durations.append(float(call.duration_ms))
            measured += 1
        elif gap is not None:
            durations.append(gap)  # the turn's tool phase: an upper bound for each call in it
            measured += 1
        else:
            durations.append(config.tool_ms)
    return durations, measured


def _llm_durations(trace: TraceInput, config: DepsConfig) -> tuple[list[float], int]:
    known = [t.llm_ms for t in trace.turns if t.llm_ms is not None]
    fallback = sum(known) / len(known) if known else config.llm_ms
    return [t.llm_ms if t.llm_ms is not None else fallback for t in trace.turns], len(known)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


# --- the store -----------------------------------------------------------------------------------


def trace_schedule(
    con: duckdb.DuckDBPyConnection,
    trace_id: str,
    mode: str = "conservative",
    config: DepsConfig | None = None,
) -> Schedule | None:
    """Infer and schedule one trace straight from the store (None when it has no such trace)."""
    _check_mode(mode)
    exists = con.execute("SELECT count(*) FROM traces WHERE trace_id = ?", [trace_id]).fetchall()[0][0]
    if not exists:
        return None
    (trace,) = read_traces(con, [trace_id])
    return schedule(infer(trace, config), mode, config)


def settings_key(mode: str, config: DepsConfig) -> str:
    """What the stored results were computed with: a rerun with other settings recomputes them."""
    return f"v{ANALYSIS_VERSION}:{mode}:{config.fingerprint()}"


# Up to this many tool calls to analyse, starting worker processes costs more than it saves
# (measured: docs/performance.md#worker-processes-when-they-pay).
PARALLEL_MIN_CALLS = 25_000


def analyze_dependencies(
    con: duckdb.DuckDBPyConnection,
    mode: str = "conservative",
    config: DepsConfig | None = None,
    *,
    recompute: bool = False,
    on_progress: TraceProgressCallback | None = None,
    batch_calls: int = BATCH_CALLS,
    workers: int | None = None,
) -> dict[str, Any]:
    """Infer dependencies and parallel schedules for every trace with tool calls; return a summary.

    Writes `tool_deps` (every edge, with `loose` marking those the loose mode keeps), `tool_schedule`
    (each call's observed turn and parallel turn) and `trace_dag` (one row per trace, in `mode`, with
    both modes' minimum turns). Traces analysed before with the same mode and settings are skipped
    unless `recompute`; traces are read in batches of about `batch_calls` tool calls, so memory
    follows the largest batch, not the store. `on_progress(traces_done, traces_total)` is called
    after each batch.

    Each trace is analysed on its own, so batches go to `workers` processes (`traceforge.workers`;
    by default one per CPU when there are over `PARALLEL_MIN_CALLS` tool calls to analyse) while
    this process reads the next batch and writes the finished ones; every way gives the same rows.

    >>> con = store.connect("traceforge.duckdb")                   # doctest: +SKIP
    >>> analyze_dependencies(con)["turns_saved"]                    # doctest: +SKIP
    1234
    """
    _check_mode(mode)
    config = config or DepsConfig()
    settings = settings_key(mode, config)
    pending = "? OR trace_id NOT IN (SELECT trace_id FROM trace_dag WHERE settings = ?)"
    spans = trace_spans(con, ROW_TABLES, pending, [recompute, settings])
    count = worker_count(workers, spans.main_rows, PARALLEL_MIN_CALLS)
    # Batches are read in the tables' physical order, one stretch of each table (analysis.batches),
    # and split in `count` parts so every worker has a share of each.
    parts = spans.batches(max(1, batch_calls // count))
    todo = [trace_id for part in parts for trace_id in part.trace_ids]

    def read_parts() -> Any:
        for part in parts:
            yield read_trace_tables(con, part.trace_ids, part)

    shared = (mode, config, settings)
    done = 0
    with store.transaction(con):
        for table in ("tool_deps", "tool_schedule", "trace_dag"):
            con.execute(
                f"DELETE FROM {table} WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))",
                [todo],
            )
        if count > 1:
            results = ordered_map("traceforge.analysis.dag:analyze_trace_tables", read_parts(), count, shared)
        else:
            results = (analyze_trace_tables(*shared, tables) for tables in read_parts())
        for rows in results:
            rows.write(con)
            done += rows.traces
            if on_progress:
                on_progress(done, len(todo))
    summary = summarize_dependencies(con)
    summary["analysed_now"] = len(todo)
    summary["batches"] = len(parts)
    return summary


def analyze_trace_tables(mode: str, config: DepsConfig, settings: str, traces: TraceTables) -> _Rows:
    """The rows for tool_deps, tool_schedule and trace_dag of `traces`: what one batch, or a
    worker, computes."""
    rows = _Rows()
    for trace in traces.rows():
        rows.add(trace_input(*trace), mode, config, settings)
    return rows


class _Rows:
    """Rows of one batch for tool_deps, tool_schedule and trace_dag."""

    def __init__(self) -> None:
        self.traces = 0
        self.deps: dict[str, list] = {k: [] for k in _DEPS_SCHEMA}
        self.calls: dict[str, list] = {k: [] for k in _SCHEDULE_SCHEMA}
        self.dags: dict[str, list] = {k: [] for k in _DAG_SCHEMA}

    def add(self, trace: TraceInput, mode: str, config: DepsConfig, settings: str) -> None:
        self.traces += 1
        inference = infer(trace, config)
        chosen = schedule(inference, mode, config)
        other_mode = "loose" if mode == "conservative" else "conservative"
        other = len([g for g in _generations(dependency_graph(inference, other_mode)) if g])
        min_turns = {mode: chosen.min_turns, other_mode: other}
        calls = trace.calls
        for edge in inference.edges:
            _append(
                self.deps,
                trace_id=trace.trace_id,
                src_tool_call_id=calls[edge.src].tool_call_id,
                dst_tool_call_id=calls[edge.dst].tool_call_id,
                kind=edge.kind,
                evidence=edge.evidence,
                confidence=edge.confidence,
                loose=edge.loose,
            )
        on_path = set(chosen.critical_path)
        for call in calls:
            _append(
                self.calls,
                trace_id=trace.trace_id,
                tool_call_id=call.tool_call_id,
                seq=call.seq,
                name=call.name,
                effect=call.effect.effect if call.effect else None,
                segment=call.segment,
                observed_turn=call.turn,
                level=chosen.levels[call.index],
                on_critical_path=call.index in on_path,
            )
        _append(
            self.dags,
            trace_id=trace.trace_id,
            tool_calls=len(calls),
            observed_turns=chosen.observed_turns,
            min_turns=chosen.min_turns,
            turns_saved=chosen.turns_saved,
            observed_ms=chosen.observed_ms,
            parallel_ms=chosen.parallel_ms,
            tokens_saved=chosen.tokens_saved,
            mode=mode,
            settings=settings,
            min_turns_conservative=min_turns["conservative"],
            min_turns_loose=min_turns["loose"],
            parallel_turns=chosen.parallel_turns,
            user_turns=len({c.segment for c in calls}),
            user_tool_calls=trace.user_tool_calls,
            edges=len(chosen.edges),
            critical_path=json.dumps([calls[i].tool_call_id for i in chosen.critical_path]),
            timing=chosen.timing,
            input_tokens_saved=chosen.input_tokens_saved,
            tokens_estimated=chosen.tokens_estimated,
        )

    def write(self, con: duckdb.DuckDBPyConnection) -> None:
        for table, columns, schema in (
            ("tool_deps", self.deps, _DEPS_SCHEMA),
            ("tool_schedule", self.calls, _SCHEDULE_SCHEMA),
            ("trace_dag", self.dags, _DAG_SCHEMA),
        ):
            if not next(iter(columns.values())):
                continue
            store.insert_frame(con, table, pl.DataFrame(columns, schema=schema))


def _generations(graph: nx.DiGraph) -> list[list[int]]:
    return [[n for n in g if isinstance(n, int)] for g in nx.topological_generations(graph)]


def _append(columns: dict[str, list], **values: Any) -> None:
    for key, items in columns.items():
        items.append(values[key])


_DEPS_SCHEMA = {
    "trace_id": pl.Utf8,
    "src_tool_call_id": pl.Utf8,
    "dst_tool_call_id": pl.Utf8,
    "kind": pl.Utf8,
    "evidence": pl.Utf8,
    "confidence": pl.Float64,
    "loose": pl.Boolean,
}
_SCHEDULE_SCHEMA = {
    "trace_id": pl.Utf8,
    "tool_call_id": pl.Utf8,
    "seq": pl.Int32,
    "name": pl.Utf8,
    "effect": pl.Utf8,
    "segment": pl.Int32,
    "observed_turn": pl.Int32,
    "level": pl.Int32,
    "on_critical_path": pl.Boolean,
}
_DAG_SCHEMA = {
    "trace_id": pl.Utf8,
    "tool_calls": pl.Int32,
    "observed_turns": pl.Int32,
    "min_turns": pl.Int32,
    "turns_saved": pl.Int32,
    "observed_ms": pl.Float64,
    "parallel_ms": pl.Float64,
    "tokens_saved": pl.Int64,
    "mode": pl.Utf8,
    "settings": pl.Utf8,
    "min_turns_conservative": pl.Int32,
    "min_turns_loose": pl.Int32,
    "parallel_turns": pl.Int32,
    "user_turns": pl.Int32,
    "user_tool_calls": pl.Int32,
    "edges": pl.Int32,
    "critical_path": pl.Utf8,
    "timing": pl.Utf8,
    "input_tokens_saved": pl.Int64,
    "tokens_estimated": pl.Boolean,
}


SUMMARY_TOP = 10  # workloads, tool pairs and traces a summary lists


def summarize_dependencies(con: duckdb.DuckDBPyConnection, top: int = SUMMARY_TOP) -> dict[str, Any]:
    """Totals of the stored analysis, the workloads and tool pairs that waste most turns, and the
    traces with most turns to save."""
    row = con.execute(
        """
        SELECT count(*), coalesce(sum(tool_calls), 0), coalesce(sum(observed_turns), 0),
               coalesce(sum(min_turns), 0), coalesce(sum(turns_saved), 0),
               count(*) FILTER (WHERE turns_saved > 0), coalesce(sum(parallel_turns), 0),
               coalesce(sum(min_turns_conservative), 0), coalesce(sum(min_turns_loose), 0),
               coalesce(sum(observed_ms), 0), coalesce(sum(parallel_ms), 0),
               coalesce(sum(tokens_saved), 0), coalesce(sum(input_tokens_saved), 0),
               count(*) FILTER (WHERE tokens_estimated), count(*) FILTER (WHERE timing = 'measured'),
               string_agg(DISTINCT mode, ',')
        FROM trace_dag
        """
    ).fetchall()[0]
    keys = (
        "traces",
        "tool_calls",
        "observed_turns",
        "min_turns",
        "turns_saved",
        "traces_with_savings",
        "parallel_turns",
        "min_turns_conservative",
        "min_turns_loose",
        "observed_ms",
        "parallel_ms",
        "tokens_saved",
        "input_tokens_saved",
        "traces_tokens_estimated",
        "traces_timing_measured",
        "mode",
    )
    summary: dict[str, Any] = dict(zip(keys, row, strict=True))
    summary["edges_by_kind"] = dict(
        con.execute(
            "SELECT kind, count(*) FROM tool_deps GROUP BY kind ORDER BY count(*) DESC, kind"
        ).fetchall()
    )
    summary["by_workload"] = dag_by_workload(con, top)
    summary["tool_pairs"] = _records(
        con,
        """SELECT * FROM v_dag_tool_pairs WHERE independent_pairs > 0
           ORDER BY independent_pairs DESC, first_tool, then_tool LIMIT ?""",
        [top],
    )
    summary["top_traces"] = top_traces(con, top)
    return summary


def dag_by_workload(con: duckdb.DuckDBPyConnection, top: int | None = SUMMARY_TOP) -> list[dict[str, Any]]:
    """`v_dag_by_workload`: turns and time a parallel-calling model would save per workload (under
    the workload key of the last profile), most turns saved first; the `top` ones, or all."""
    return _records(con, "SELECT * FROM v_dag_by_workload LIMIT ?", [top])  # LIMIT NULL: all


def top_traces(con: duckdb.DuckDBPyConnection, top: int | None = SUMMARY_TOP) -> list[dict[str, Any]]:
    """The traces where a parallel-calling model would save most turns, then most re-sent tokens,
    under the workload key of the last profile; the `top` ones, or all. Traces with nothing to save
    are left out."""
    return _records(
        con,
        """SELECT d.trace_id, coalesce(w.workload, t.workload) AS workload, d.tool_calls,
                  d.observed_turns, d.min_turns, d.turns_saved, d.observed_ms, d.parallel_ms,
                  d.tokens_saved, d.timing
           FROM trace_dag d JOIN traces t USING (trace_id) LEFT JOIN trace_workloads w USING (trace_id)
           WHERE d.turns_saved > 0
           ORDER BY d.turns_saved DESC, d.tokens_saved DESC, d.trace_id
           LIMIT ?""",
        [top],
    )


def _records(
    con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None
) -> list[dict[str, Any]]:
    result = con.execute(sql, params or [])
    columns = [d[0] for d in result.description]
    return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]


class AmbiguousTraceId(ValueError):
    """A trace id prefix that matches several traces."""


def find_trace_id(con: duckdb.DuckDBPyConnection, text: str) -> str | None:
    """The trace id `text` names: itself, or the one trace whose id starts with it (None: no match).

    Raises AmbiguousTraceId, listing a few candidates, when the prefix matches several traces.
    """
    if con.execute("SELECT count(*) FROM traces WHERE trace_id = ?", [text]).fetchall()[0][0]:
        return text
    matches = [
        row[0]
        for row in con.execute(
            "SELECT trace_id FROM traces WHERE starts_with(trace_id, ?) ORDER BY trace_id LIMIT 6", [text]
        ).fetchall()
    ]
    if len(matches) > 1:
        shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise AmbiguousTraceId(f"{text!r} matches several traces ({shown}); give more of the id")
    return matches[0] if matches else None
