"""report.html: one self-contained file that tells the story of an analysis in pictures.

No script, no stylesheet or font from anywhere: the page opens from disk with the network off.
Every string that comes from a trace (workload and tool names, trace ids, reasons) is escaped with
`svg.esc`, and the page declares a Content-Security-Policy that forbids scripts altogether, so a
trace carrying `<script>` or an `onerror=` attribute shows as text and runs nothing.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from traceforge.analysis.summary import cached_text
from traceforge.export.profile import Profile
from traceforge.files import replace_text
from traceforge.report.svg import (
    DAG_BOX_SLOT,
    DAG_LEAST_SCALE,
    PALETTE,
    bar_chart,
    dag_diagram,
    esc,
    line_chart,
    stacked_bar_chart,
)
from traceforge.report.terminal import POOR_FIT_NOTE, display_path, unpriced_text

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'none'"
CDF_POINTS = 120
DAG_ROWS_SHOWN = 16  # a longer trace's drawings scroll in a box of about this many turns
DAG_HALF_PAGE = 498  # pixels for a drawing beside another: half of main's 1,052, less gap and padding

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 0; background: #fafafa; }
main { max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 32px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #666; font-size: 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 16px 0; }
.card { background: #fff; border: 1px solid #e3e3e3; border-radius: 8px; padding: 10px 14px;
        min-width: 120px; }
.card b { display: block; font-size: 20px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr)); gap: 16px; }
figure { background: #fff; border: 1px solid #e3e3e3; border-radius: 8px; margin: 0; padding: 10px; }
figcaption { font-size: 12px; color: #555; margin-top: 4px; }
table { border-collapse: collapse; background: #fff; margin: 8px 0; font-size: 13px; }
th, td { border-bottom: 1px solid #eee; padding: 4px 8px; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.pick { background: #fff; border-left: 4px solid #3b6ea5; padding: 8px 12px; margin: 8px 0; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.pair figure { min-width: 0; overflow-x: auto; }
.pair svg { display: block; margin: 0 auto; }
.pair.stacked { grid-template-columns: 1fr; }
.pair.scroll:not(.stacked), .pair.stacked.scroll figure {
  max-height: 720px; overflow-y: auto; box-sizing: border-box;
}
.pair.scroll { align-items: start; }
code { background: #f0f0f0; padding: 1px 4px; border-radius: 3px; }
"""


def write_report(
    path: Path, summary: dict[str, Any], profile: Profile, drawings: list[dict[str, Any]]
) -> Path:
    """Write report.html for an analysis, replacing the last one whole; returns its path."""
    replace_text(path, render(summary, profile, drawings))
    return path


def render(summary: dict[str, Any], profile: Profile, drawings: list[dict[str, Any]]) -> str:
    sections = [
        _header(summary),
        _recommendations(summary),
        _spend(summary),
        _parallel(summary, drawings),
        _inference(summary, profile),
        _rejects(summary),
        _footer(summary),
    ]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>traceforge report</title><style>{STYLE}</style></head><body><main>"
        + "".join(sections)
        + "</main></body></html>\n"
    )


def _num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and digits:
        return f"{value:,.{digits}f}"
    return f"{value:,.0f}" if isinstance(value, int | float) else esc(value)


def _pct(value: Any) -> str:
    return "–" if value is None else f"{value:.0%}"


def _table(headers: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f'<th class="{"n" if i in numeric else ""}">{esc(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"n" if i in numeric else ""}">{cell}</td>' for i, cell in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def _header(summary: dict[str, Any]) -> str:
    t = summary["totals"]
    cached = cached_text(t)
    output = _num(t["output_tokens"])
    if t["calls_output_partial"]:
        output += f" <small>(as logged: {_num(t['calls_output_partial'])} calls only a lower bound)</small>"
    cards = [
        ("traces", _num(t["traces"])),
        ("workloads", _num(t["workloads"])),
        (
            "LLM calls",
            _num(t["llm_calls"])
            + (
                f" <small>({_num(t['calls_copied'])} copies in resumed sessions not counted)</small>"
                if t["calls_copied"]
                else ""
            ),
        ),
        ("tool calls", _num(t["tool_calls"])),
        ("input tokens", f"{_num(t['input_tokens'])} <small>({cached})</small>"),
        ("output tokens", output),
        ("rejected records", _num(t["rejects"])),
    ]
    spend = summary["spend"]["totals"]
    if spend.get("cost_usd"):
        cards.insert(2, ("spend", f"${spend['cost_usd']:,.2f}"))
    return (
        "<h1>traceforge report</h1>"
        f'<p class="meta">Generated {esc(summary["generated_at"])} by traceforge '
        f"{esc(summary['traceforge_version'])} from <code>{esc(summary.get('store') or '')}</code>; "
        f"workloads by <code>{esc(summary['settings']['workload_key'])}</code>, dependencies in "
        f"{esc(summary['settings']['mode'])} mode.</p>"
        '<div class="cards">'
        + "".join(f'<div class="card">{esc(label)}<b>{value}</b></div>' for label, value in cards)
        + "</div>"
    )


def _recommendations(summary: dict[str, Any]) -> str:
    picks = summary["recommendations"]
    if not picks:
        return "<h2>What to post-train first</h2><p>No workload has spend to rank yet.</p>"
    items = "".join(
        f'<div class="pick"><b>{esc(p["workload"])}</b><ul>'
        + "".join(f"<li>{esc(reason)}</li>" for reason in p["reasons"])
        + "</ul></div>"
        for p in picks
    )
    return (
        "<h2>What to post-train first</h2><p>The smallest set of workloads covering 80% of spend, "
        f"largest first.</p>{items}"
    )


def _spend(summary: dict[str, Any]) -> str:
    spend = summary["spend"]
    workloads = spend["workloads"]
    law = spend.get("power_law") or {}
    basis = "cost" if spend["basis"] == "cost_usd" else "tokens"
    chart = bar_chart(
        [(w["workload"], w["share"]) for w in workloads],
        line=[w["cumulative_share"] for w in workloads],
        line_label="cumulative share",
        value_label=f"share of {basis}",
        percent=True,
        title="Spend by workload (Pareto)",
    )
    rows = [
        [
            w["rank"],
            esc(w["workload"]),
            _num(w["traces"]),
            _num(w["llm_calls"]),
            f"${w['cost_usd']:,.4f}" if w.get("cost_usd") is not None else "–",
            _pct(w["share"]),
            _pct(w["cumulative_share"]),
            "yes" if w.get("in_top_80") else "",
        ]
        for w in workloads
    ]
    fit = (
        f"Power law: exponent {law['alpha']:.2f}, R² {law['r_squared']:.2f} over {law['n']} workloads "
        f"({esc(law['method'])})" + (f": {POOR_FIT_NOTE}." if law.get("poor_fit") else ".")
        if law.get("alpha") is not None
        else "Too few workloads to fit a power law."
    )
    unpriced = spend.get("unpriced_models") or []
    note = (
        f"<p>Models without a price (their calls are not in the cost): {esc(unpriced_text(unpriced))}.</p>"
        if unpriced
        else ""
    )
    return (
        "<h2>Where spend goes</h2>"
        + _figure(
            chart,
            "Bars: each workload's share of spend; line: the running total. The workloads "
            "left of the 80% mark are where post-training pays off first.",
        )
        + _table(
            ["rank", "workload", "traces", "LLM calls", "cost", "share", "cumulative", "top 80%"],
            rows,
            {0, 2, 3, 4, 5, 6},
        )
        + f"<p>{fit}</p>{note}"
    )


def _parallel(summary: dict[str, Any], drawings: list[dict[str, Any]]) -> str:
    p = summary["parallel"]
    if not p.get("traces"):
        return "<h2>What parallel tool calls would save</h2><p>No trace has tool calls.</p>"
    observed, saved = p["observed_turns"], p["turns_saved"]
    share = saved / observed if observed else 0
    speed = p["observed_ms"] / p["parallel_ms"] if p.get("parallel_ms") else None
    head = (
        f"<p>{_num(saved)} of {_num(observed)} tool-calling LLM turns ({share:.0%}) were spent on calls "
        f"that did not depend on each other, in {_num(p['traces_with_savings'])} of {_num(p['traces'])} "
        f"traces. A model that issued them together would save about "
        f"{_num((p['observed_ms'] - p['parallel_ms']) / 1000, 1)} s of latency "
        + (f"({speed:.2f}× faster) " if speed else "")
        + f"and {_num(p['tokens_saved'])} re-sent input tokens net of cache. Mode: "
        f"{esc(p['mode'])}: a call is treated as independent only where no dependency of any kind "
        "was found.</p>"
    )
    top = p.get("top_traces", [])
    chart = bar_chart(
        [(t["trace_id"], t["turns_saved"]) for t in top],
        title="Turns saved per trace",
        value_label="turns saved",
    )
    histogram = bar_chart(
        [(f"{row['turns_saved']} saved", row["traces"]) for row in p.get("turns_saved_per_trace", [])],
        title="Traces by turns saved",
        value_label="traces",
    )
    pairs = [
        [esc(r["first_tool"]), esc(r["then_tool"]), _num(r["independent_pairs"]), _num(r["sequential_pairs"])]
        for r in p.get("tool_pairs", [])
    ]
    parts = [
        "<h2>What parallel tool calls would save</h2>",
        head,
        '<div class="grid">',
        _figure(chart, "The traces with most LLM round trips to save."),
        _figure(histogram, "How many traces save how many turns."),
        "</div>",
    ]
    if pairs:
        parts += [
            "<h3>Tool pairs made one after another without needing each other</h3>",
            _table(["first", "then", "independent", "in sequence"], pairs, {2, 3}),
        ]
    for drawing in drawings:
        parts.append(_dag_pair(drawing))
    return "".join(parts)


def _dag_pair(drawing: dict[str, Any]) -> str:
    calls = drawing["calls"]
    label = {c["tool_call_id"]: f"{c['name']}" for c in calls}

    def levels(key: str) -> list[list[tuple[str, str]]]:
        grouped: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for c in calls:
            if c.get(key) is not None:
                grouped[c[key]].append((c["tool_call_id"], label[c["tool_call_id"]]))
        return [grouped[k] for k in sorted(grouped)]

    edges = list(dict.fromkeys((e["src"], e["dst"]) for e in drawing["edges"]))  # a line per pair
    title = f"trace {drawing['trace_id']}"
    observed_levels, parallel_levels = levels("observed_turn"), levels("parallel_turn")
    widest = max(len(level) for level in observed_levels + parallel_levels) if calls else 1
    width = DAG_BOX_SLOT * widest + 50
    # Side by side while both fit half the page at a legible size, at one width so that a box is
    # the same size on each side; wider, one above the other, each at its own width (the observed
    # run, a call or two a row, is not spread over the width of a parallel turn of twenty).
    side_by_side = width * DAG_LEAST_SCALE <= DAG_HALF_PAGE
    shared, packed = (width, False) if side_by_side else (0, True)  # 0: as wide as its own rows
    observed = dag_diagram(observed_levels, edges, title=f"{title}: observed", width=shared, packed=packed)
    parallel = dag_diagram(parallel_levels, edges, title=f"{title}: parallel", width=shared, packed=packed)
    layout = "pair" if side_by_side else "pair stacked"
    heading = (
        f"<h3>Trace <code>{esc(drawing['trace_id'])}</code>: {drawing['observed_turns']} turns observed, "
        f"{drawing['min_turns']} needed</h3>"
    )
    observed_caption = "As the agent ran it: one row per LLM turn."
    parallel_caption = (
        "The parallel schedule: each row's calls issued together; lines are the dependencies no "
        "other path implies, as traceforge dag TRACE_ID lists them."
    )
    tall = max(len(observed_levels), len(parallel_levels)) > DAG_ROWS_SHOWN
    if not tall:
        return (
            heading
            + f'<div class="{layout}">'
            + _figure(observed, observed_caption)
            + _figure(parallel, parallel_caption)
            + "</div>"
        )
    # A long trace's drawings are thousands of pixels tall: they scroll in a box (side by side, one
    # box for both, so they scroll together), their captions above it rather than at its far end.
    where = ("Left", "Right") if side_by_side else ("Above", "Below")
    together = "the two drawings scroll together" if side_by_side else "each drawing scrolls"
    return (
        heading + f'<p class="meta">{where[0]}: {esc(observed_caption)} {where[1]}: {esc(parallel_caption)} '
        f"{max(len(observed_levels), len(parallel_levels))} rows: {together}.</p>"
        + f'<div class="{layout} scroll">'
        + f"<figure>{observed}</figure><figure>{parallel}</figure>"
        + "</div>"
    )


def _inference(summary: dict[str, Any], profile: Profile) -> str:
    rows = summary["inference"]
    if not rows:
        return "<h2>What each workload needs of inference</h2><p>No LLM calls.</p>"
    split = stacked_bar_chart(
        [
            (
                r["workload"],
                [r["uncached_input_tokens"] or 0, r["cache_read_tokens"] or 0, r["output_tokens"] or 0],
            )
            for r in rows
        ],
        series=["uncached input (prefill)", "cached input", "output (decode)"],
        title="Prefill and decode tokens per workload",
    )
    hits = bar_chart(
        [(r["workload"], r["simulated_cache_hit_ratio"] or 0) for r in rows],
        percent=True,
        title="Prefix-cache hit ratio per workload (simulated, unlimited cache)",
        value_label="hit ratio by tokens",
    )
    curved = rows[: len(PALETTE)]  # one colour each
    curve = line_chart(
        [
            (r["workload"], [(p["capacity_tokens"], p["hit_ratio"]) for p in r["hit_ratio_by_capacity"]])
            for r in curved
        ],
        title="Hit ratio against cache size",
        x_label="cache capacity (tokens, log scale)",
        y_label="hit ratio",
        log_x=True,
        percent_y=True,
    )
    lengths = _length_cdfs(profile)
    table = _table(
        [
            "workload",
            "calls",
            "prefill:decode",
            "cache hit (reported)",
            "cache hit (simulated)",
            "input p50/p90",
            "output p50/p90",
            "tool gap p90",
            "plan",
        ],
        [
            [
                esc(r["workload"]),
                _num(r["llm_calls"]),
                f"{r['prefill_decode_ratio']:.1f}:1" if r["prefill_decode_ratio"] else "–",
                _pct(r["reported_cache_hit_ratio"]),
                _pct(r["simulated_cache_hit_ratio"]),
                f"{_num(r['input_length']['p50'])} / {_num(r['input_length']['p90'])}",
                f"{_num(r['output_length']['p50'])} / {_num(r['output_length']['p90'])}",
                f"{_num(r['tool_gap_ms']['p90'])} ms" if r["tool_gap_ms"]["p90"] is not None else "–",
                esc(_plan_text(r["deployment"])),
            ]
            for r in rows
        ],
        {1, 2, 3, 4, 5, 6, 7},
    )
    return (
        "<h2>What each workload needs of inference</h2>"
        '<div class="grid">'
        + _figure(
            split,
            "Share of each workload's tokens: what must be prefilled, what a prefix cache "
            "served, what was decoded.",
        )
        + _figure(hits, "Input tokens a prefix cache with no size limit would serve (512-token blocks).")
        + _figure(
            curve,
            "How the hit ratio falls as the cache shrinks (LRU by capacity)"
            + (f", for the {len(curved)} workloads with most spend." if len(curved) < len(rows) else "."),
        )
        + lengths
        + "</div>"
        + table
        + "<p>Plans size prefill and decode instances for each workload's observed request rate on "
        "the default GPU profile; <code>traceforge profile --target-rps N --gpu-profile NAME</code> "
        "plans for your own load and hardware. profile.json holds every figure.</p>"
    )


def _plan_text(plan: dict[str, Any]) -> str:
    if not plan.get("mode"):
        return "–"
    text = f"{plan['mode']}: {plan.get('prefill_instances')} prefill + {plan.get('decode_instances')} decode"
    return text + (f" ({plan['binding']}-bound)" if plan.get("binding") else "")


def _length_cdfs(profile: Profile) -> str:
    requests = profile.log.requests
    series = []
    for name, values in (
        ("input tokens", sorted(r.input_length for r in requests)),
        ("output tokens", sorted(r.output_length for r in requests)),
    ):
        if values:
            step = max(len(values) // CDF_POINTS, 1)
            points = [(values[i], (i + 1) / len(values)) for i in range(0, len(values), step)]
            points.append((values[-1], 1.0))
            series.append((name, points))
    chart = line_chart(
        series,
        title="Input and output lengths (cumulative)",
        x_label="tokens (log scale)",
        y_label="share of calls",
        log_x=True,
        percent_y=True,
    )
    return _figure(chart, "Cumulative distribution of input and output lengths over all LLM calls.")


def _rejects(summary: dict[str, Any]) -> str:
    reasons = summary["reject_reasons"]
    if not reasons:
        return "<h2>Rejected records</h2><p>None: every record read was used or skipped by rule.</p>"
    rows = [
        [
            _num(r["count"]),
            esc(r["reason"]),
            esc(
                f"{display_path(r['example_file'])}:{r['example_line']}"
                if r["example_line"] is not None
                else display_path(r["example_file"])
            ),
        ]
        for r in reasons
    ]
    return (
        f"<h2>Rejected records</h2><p>{_num(summary['totals']['rejects'])} records could not be used; "
        "all are in the <code>rejects</code> table with their file, line and raw text.</p>"
        + _table(["records", "reason", "example"], rows, {0})
    )


def _footer(summary: dict[str, Any]) -> str:
    store = summary.get("store") or "traceforge.duckdb"
    return (
        '<h2>Explore further</h2><p class="meta">'
        f"<code>traceforge sql --db {esc(store)}</code> opens the DuckDB shell on the store; "
        "<code>.read queries/parallel_opportunities.sql</code> and the other files in queries/ answer "
        "the common questions. <code>traceforge dag TRACE_ID</code> shows one trace's schedules; "
        "<code>traceforge export sft|parallel|preference</code> writes training data.</p>"
    )
