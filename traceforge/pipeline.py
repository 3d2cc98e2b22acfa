"""The main job behind `traceforge analyze`: every analysis over the store, then the outputs.

>>> from traceforge import store
>>> from traceforge.pipeline import run_analysis
>>> con = store.connect("traceforge.duckdb")                            # doctest: +SKIP
>>> result = run_analysis(con, out_dir="traceforge-out")                # doctest: +SKIP
>>> result.summary["recommendations"][0]["workload"]                    # doctest: +SKIP
'coding-agent'

Steps, each rerunnable alone from its own verb: dependency inference and DAG schedules
(`traceforge deps`), workloads, spend and inference profiles (`traceforge profile`), then the
outputs: summary.json, profile.json, replay.jsonl and report.html in `out_dir`. The summary answers
the four questions of the design (where spend goes, what parallel calls would save, what inference
each workload needs, what to post-train first) from those tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from traceforge import __version__
from traceforge.analysis.dag import (
    SUMMARY_TOP,
    analyze_dependencies,
    dag_by_workload,
    top_traces,
    trace_schedule,
)
from traceforge.analysis.effects import DepsConfig
from traceforge.analysis.summary import ratio_text, summarize
from traceforge.export.profile import Profile, build_profile, write_profile
from traceforge.files import replace_text
from traceforge.pricing import PriceTable
from traceforge.report.dag_view import reduced_edges, schedule_json

SUMMARY_SCHEMA = "traceforge.summary"
SUMMARY_VERSION = 2  # docs/analyze.md#summaryjson: what changes it
DAG_DRAWINGS = 3  # traces whose observed and parallel schedules the HTML report draws
TOP_TRACES = 20  # traces with most turns to save that summary.json lists
# A workload needs this many successful traces before SFT on it is worth recommending.
MIN_TRACES_FOR_SFT = 50

StepCallback = Callable[[str], None]


@dataclass
class AnalysisResult:
    summary: dict[str, Any]  # what summary.json holds
    profile: Profile
    paths: dict[str, str]  # output name -> file written


def run_analysis(
    con: duckdb.DuckDBPyConnection,
    *,
    out_dir: str | Path,
    workload_key: str | None = None,
    mode: str = "conservative",
    deps_config: DepsConfig | None = None,
    prices: PriceTable | None = None,
    gpu_profile: str | None = None,
    store_path: str | None = None,
    on_step: StepCallback | None = None,
) -> AnalysisResult:
    """Run every analysis on the store behind `con` and write the outputs to `out_dir`."""
    from traceforge.report.html import write_report

    step = on_step or (lambda _name: None)
    step("inferring tool-call dependencies")
    dependencies = analyze_dependencies(con, mode, deps_config)
    step("profiling workloads and inference")
    profile = build_profile(
        con, workload_key=workload_key, prices=prices, gpu_profile=gpu_profile, store_path=store_path
    )
    step("writing the report")
    summary = assemble_summary(con, dependencies, profile, mode=mode, store_path=store_path)
    drawings = dag_drawings(con, summary["parallel"]["top_traces"], mode, deps_config)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = write_profile(profile, out)
        summary_path = out / "summary.json"
        paths["summary"] = str(summary_path)
        paths["report"] = str(write_report(out / "report.html", summary, profile, drawings))
        summary["outputs"] = paths
        replace_text(summary_path, json.dumps(summary, indent=2, default=str) + "\n")  # last: docs/analyze.md
    except OSError as exc:
        raise OutputError(exc) from exc
    return AnalysisResult(summary=summary, profile=profile, paths=paths)


class OutputError(Exception):
    """The analysis finished but its output files could not be written (`error`: why: a full disk,
    a folder that may not be written)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def assemble_summary(
    con: duckdb.DuckDBPyConnection,
    dependencies: dict[str, Any],
    profile: Profile,
    *,
    mode: str,
    store_path: str | None,
) -> dict[str, Any]:
    """summary.json: the store at a glance, spend, parallel opportunities, inference needs and the
    recommendation, each drawn from the analysis tables and the profile."""
    store_view = summarize(con)
    document = profile.document
    spend = document["spend"]
    # The stored analysis as a whole; the run's own bookkeeping (how many traces it redid) is not news.
    parallel = {k: v for k, v in dependencies.items() if k not in ("analysed_now", "batches")}
    parallel["mode"] = mode
    # The dependency analysis ran before the profile assigned this run's workloads: regrouped here,
    # the savings per workload are under the same names as spend and the profile.
    savings = dag_by_workload(con, top=None)
    parallel["by_workload"] = savings[:SUMMARY_TOP]
    parallel["top_traces"] = top_traces(con, TOP_TRACES)
    parallel["turns_saved_per_trace"] = [
        {"turns_saved": saved, "traces": traces}
        for saved, traces in con.execute(
            "SELECT turns_saved, count(*) FROM trace_dag GROUP BY 1 ORDER BY 1"
        ).fetchall()
    ]
    inference = [_inference_row(w) for w in document["workloads"]]
    return {
        "schema": SUMMARY_SCHEMA,
        "schema_version": SUMMARY_VERSION,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "traceforge_version": __version__,
        "store": store_path,
        "settings": {"workload_key": spend["workload_key"], "mode": mode},
        "totals": store_view["totals"],
        "by_workload_model": store_view["by_workload_model"],
        "reject_reasons": store_view["reject_reasons"],
        "spend": {
            "basis": spend["basis"],
            "totals": spend["totals"],
            "workloads": spend["workloads"],
            "top_80_percent": spend["top_80_percent"],
            "power_law": spend["power_law"],
            "unpriced_models": spend["unpriced_models"],
        },
        "parallel": parallel,
        "inference": inference,
        "recommendations": recommend(spend["workloads"], savings, inference, _successes(con)),
    }


def _inference_row(workload: dict[str, Any]) -> dict[str, Any]:
    """The figures of one workload's profile that the report shows."""
    pd = workload["prefill_decode"]["total"]
    cache = workload["prefix_cache"]
    lengths = workload["lengths"]
    timing = workload["timing"]
    plans = workload["deployment"].get("observed") or []
    plan = plans[0] if plans else {}
    projected = (workload["deployment"].get("projected") or [None])[0]
    return {
        "workload": workload["workload"],
        "llm_calls": pd["llm_calls"],
        "calls_estimated": pd["calls_estimated"],
        "uncached_input_tokens": pd["uncached_input_tokens"],
        "cache_read_tokens": pd["cache_read_tokens"],
        "output_tokens": pd["output_tokens"],
        "reasoning_tokens": pd["reasoning_tokens"],
        "prefill_decode_ratio": pd["prefill_decode_ratio"],
        "reported_cache_hit_ratio": pd["cached_share"],
        "simulated_cache_hit_ratio": cache["unlimited"]["hit_ratio"],
        "hit_ratio_by_capacity": [
            {"capacity_tokens": p["capacity_tokens"], "hit_ratio": p["hit_ratio"]}
            for p in cache.get("curve", [])
            if p.get("capacity_tokens") and p.get("ttl_s") is None
        ],
        "input_length": {k: lengths["input_tokens"].get(k) for k in ("p50", "p90", "p99")},
        "output_length": {k: lengths["output_tokens"].get(k) for k in ("p50", "p90", "p99")},
        "tool_gap_ms": {k: timing["tool_gap_ms"].get(k) for k in ("p50", "p90", "p99")},
        "turns_per_trace_p50": timing["turns_per_trace"].get("p50"),
        "deployment": {
            "target_rps": plan.get("target_rps"),
            "mode": (plan.get("recommendation") or {}).get("mode"),
            "prefill_instances": (plan.get("prefill") or {}).get("instances"),
            "decode_instances": (plan.get("decode") or {}).get("instances"),
            "binding": (plan.get("decode") or {}).get("binding"),
            "reasons": (plan.get("recommendation") or {}).get("reasons_for_disaggregation")
            if (plan.get("recommendation") or {}).get("mode") == "disaggregated"
            else (plan.get("recommendation") or {}).get("reasons_against"),
            "engine_hints": plan.get("engine_hints"),
        },
        "projected": projected,
    }


def _successes(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, int]]:
    rows = con.execute(
        """
        SELECT coalesce(w.workload, t.workload), count(*) FILTER (WHERE t.outcome = 'success'),
               count(*) FILTER (WHERE t.outcome = 'failure'), count(*)
        FROM traces t LEFT JOIN trace_workloads w USING (trace_id)
        GROUP BY 1
        """
    ).fetchall()
    return {w: {"success": s, "failure": f, "traces": n} for w, s, f, n in rows}


def recommend(
    workloads: list[dict[str, Any]],
    savings: list[dict[str, Any]],
    inference: list[dict[str, Any]],
    outcomes: dict[str, dict[str, int]],
) -> list[dict[str, Any]]:
    """What to post-train first, and why: the workloads in the smallest set covering 80% of spend,
    largest first, each with the evidence for it (its share, the turns a parallel-calling model
    would save, how much data there is to train on, and how it should be served). `savings`: the
    rows of `v_dag_by_workload`, `inference` the profile's, `outcomes` the traces' by workload."""
    savings_by_workload = {row["workload"]: row for row in savings}
    profile_by_workload = {row["workload"]: row for row in inference}
    picks = [w for w in workloads if w.get("in_top_80")] or workloads[:1]
    out = []
    for workload in picks:
        name = workload["workload"]
        dag = savings_by_workload.get(name, {})
        served = profile_by_workload.get(name, {})
        outcome = outcomes.get(name, {"success": 0, "failure": 0, "traces": workload["traces"]})
        reasons = [f"{workload['share']:.0%} of spend (rank {workload['rank']})"]
        saved, observed = dag.get("turns_saved") or 0, dag.get("observed_turns") or 0
        if saved:
            reasons.append(
                f"{saved} of {observed} tool-calling turns ({saved / observed:.0%}) were independent "
                "calls made one after another: train on the parallel rewrite (`traceforge export parallel`)"
            )
        known = outcome["success"] + outcome["failure"]
        data = outcome["success"] if known else outcome["traces"]
        data_note = (
            f"{outcome['success']} successful traces of {outcome['traces']}"
            if known
            else f"{outcome['traces']} traces (outcome not recorded)"
        )
        if data < MIN_TRACES_FOR_SFT:
            data_note += f": collect more before SFT (aim for {MIN_TRACES_FOR_SFT}+)"
        reasons.append(data_note)
        ratio = served.get("prefill_decode_ratio")
        if ratio:
            mode = (served.get("deployment") or {}).get("mode") or "aggregated"
            reasons.append(
                f"prefill:decode {ratio_text(ratio)}, simulated prefix-cache hit "
                f"{served.get('simulated_cache_hit_ratio') or 0:.0%}: serve {mode} with prefix caching"
            )
        out.append(
            {
                "workload": name,
                "rank": workload["rank"],
                "share": workload["share"],
                "turns_saved": saved,
                "training_traces": data,
                "reasons": reasons,
            }
        )
    return out


def dag_drawings(
    con: duckdb.DuckDBPyConnection,
    top_traces: list[dict[str, Any]],
    mode: str,
    config: DepsConfig | None,
    count: int = DAG_DRAWINGS,
) -> list[dict[str, Any]]:
    """The observed and parallel schedules of the traces with most to gain, as plain data, with the
    edges no other path implies (as `traceforge dag` lists them): every edge of a long trace drawn
    is a tangle (540 lines for 150 Claude Code calls, 174 direct)."""
    drawings = []
    for row in top_traces[:count]:
        schedule = trace_schedule(con, row["trace_id"], mode, config)
        if schedule is not None:
            drawing = schedule_json(schedule)
            calls = schedule.trace.calls
            direct = {
                (calls[src].tool_call_id, calls[dst].tool_call_id) for src, dst, _ in reduced_edges(schedule)
            }
            drawing["edges"] = [e for e in drawing["edges"] if (e["src"], e["dst"]) in direct]
            drawings.append(drawing)
    return drawings
