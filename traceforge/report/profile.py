"""Rendering the inference profile and cache simulations in the terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceforge.report.terminal import (
    NOTE,
    POOR_FIT_NOTE,
    human,
    label_note,
    plural,
    print_table,
    workload_labels,
)

SHOWN_WORKLOADS = 5
REJECTED = Text("rejected:", style="yellow")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f}s" if value >= 1000 else f"{value:.0f}ms"


def money(value: float | None) -> str:
    """A cost as the profile prints it: cents from $1, four decimals below."""
    return "-" if value is None else f"${value:,.2f}" if value >= 1 else f"${value:.4f}"


def render_profile(console: Console, document: dict[str, Any], paths: dict[str, str]) -> None:
    """Spend ranking, then each of the top workloads' profile and plan, then what was written."""
    spend = document["spend"]
    basis = "cost" if spend["basis"] == "cost_usd" else "tokens (nothing could be costed)"
    table = Table(title=f"Workloads by {basis} (key: {spend['workload_key']})", title_justify="left")
    for column in ("#", "workload", "traces", "LLM calls", "cost", "share", "cumulative"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    labels = workload_labels(row["workload"] for row in spend["workloads"])
    for row in spend["workloads"][:20]:
        table.add_row(
            str(row["rank"]),
            labels.get(row["workload"], row["workload"]) + (" *" if row["in_top_80"] else ""),
            human(row["traces"]),
            human(row["llm_calls"]),
            money(row["cost_usd"]),
            _pct(row["share"]),
            _pct(row["cumulative_share"]),
        )
    print_table(console, table)
    label_note(console, labels)
    if len(spend["workloads"]) > 20:
        console.print(f"... {len(spend['workloads']) - 20} more workloads in profile.json")
    totals = spend["totals"]
    console.print(
        f"* the {plural(len(spend['top_80_percent']), 'workload')} covering 80% of spend. "
        f"Total {money(totals['cost_usd'])}: "
        f"{money(totals['cost_reported_usd'])} reported by the source, {money(totals['cost_priced_usd'])} "
        f"priced from tokens, {money(totals['cost_estimated_usd'])} from estimated tokens."
    )
    fit = spend["power_law"]
    if fit["alpha"] is not None:
        console.print(
            f"Power law: spend ∝ rank^-{fit['alpha']:.2f} (R² {fit['r_squared']:.2f}, n={fit['n']}; "
            f"{fit['method']})" + (f": {POOR_FIT_NOTE}" if fit.get("poor_fit") else "")
        )
    else:
        console.print(f"Power law: not fitted ({fit['note']})")
    for model in spend["unpriced_models"]:
        console.print(
            Text("unpriced:", style="yellow"),
            f"{model['model']}: {model['calls']} calls with no reported cost "
            "and no price (add it with --prices FILE)",
        )
    console.print()
    _render_workload(console, "All workloads", document["overall"])
    for entry in document["workloads"][:SHOWN_WORKLOADS]:
        _render_workload(console, f"#{entry['rank']} {entry['workload']}", entry)
    if len(document["workloads"]) > SHOWN_WORKLOADS:
        console.print(f"{len(document['workloads']) - SHOWN_WORKLOADS} more workloads in profile.json\n")
    estimation = document["estimation"]["counts"]
    if estimation["input_estimated"] or estimation["output_estimated"]:
        console.print(
            Text("estimated:", style="yellow"),
            f"{estimation['input_estimated']} calls' input and "
            f"{estimation['output_estimated']} calls' output tokens (no usage reported, or only a lower "
            "bound of the output): "
            f"{document['estimation']['method']}",
        )
    for name, path in paths.items():
        console.print(f"wrote {name}: {path}")


def _render_workload(console: Console, title: str, entry: dict[str, Any]) -> None:
    total = entry["prefill_decode"]["total"]
    lengths = entry["lengths"]
    cache = entry["prefix_cache"]
    timing = entry["timing"]
    console.print(Text(title, style="bold"))
    estimated = f" ({total['calls_estimated']} estimated)" if total.get("calls_estimated") else ""
    cached = (
        "no cache count reported"
        if total["cached_share"] is None
        else f"cached by provider {_pct(total['cached_share'])}"
    )
    line = (
        f"  tokens{estimated}: input {human(total['input_tokens'])} ({cached}), "
        f"output {human(total['output_tokens'])} (reasoning "
        f"{_pct(total['reasoning_share'])})"
    )
    if total["prefill_decode_ratio"] is not None:
        line += f"; {total['prefill_decode_ratio']:.1f} uncached input tokens per output token"
    console.print(line)
    inp, unc, out = lengths["input_tokens"], lengths["uncached_input_tokens"], lengths["output_tokens"]
    console.print(
        f"  lengths p50/p90/p99: input {human(inp['p50'])}/{human(inp['p90'])}/{human(inp['p99'])}, "
        f"uncached {human(unc['p50'])}/{human(unc['p90'])}/{human(unc['p99'])}, "
        f"output {human(out['p50'])}/{human(out['p90'])}/{human(out['p99'])}"
    )
    curve = ", ".join(
        f"{human(row['capacity_blocks'])} blk {_pct(row['hit_ratio'])}"
        for row in cache["curve"]
        if row["capacity_blocks"] is not None
    )
    ttls = ", ".join(
        f"TTL {row['ttl_s']:g}s {_pct(row['hit_ratio'])}"
        for row in cache["curve"]
        if row["ttl_s"] is not None
    )
    console.print(
        f"  prefix cache hit (tokens): unlimited {_pct(cache['unlimited']['hit_ratio'])}; LRU {curve}; {ttls}"
    )
    if cache["provider"]:
        provider = cache["provider"]
        console.print(
            f"  provider reported {_pct(provider['reported_hit_ratio'])} on {provider['calls']} calls; "
            f"simulated {_pct(provider['simulated_unlimited_hit_ratio'])} (unlimited), "
            f"{_pct(provider['simulated_ttl_300s_hit_ratio'])} (TTL 300s)"
        )
    turns, gaps, arrivals = timing["turns_per_trace"], timing["tool_gap_ms"], timing["arrivals"]
    console.print(
        f"  turns/trace p50 {human(turns['p50'])} p90 {human(turns['p90'])}; tool gaps p50 "
        f"{_ms(gaps['p50'])} p90 {_ms(gaps['p90'])} p99 {_ms(gaps['p99'])}; "
        + (
            f"{arrivals['rps']:.3g} req/s, inter-arrival CV {arrivals['interarrival_cv']:.2f}"
            if arrivals["rps"]
            else "no arrival rate (untimed)"
        )
    )
    deployment = entry["deployment"]
    for label, plans in (("observed", deployment["observed"]), ("projected", deployment.get("projected"))):
        for plan in plans or []:
            rec = plan["recommendation"]
            console.print(
                f"  {label} @ {plan['target_rps']:.3g} req/s on {plan['gpu_profile']}: "
                f"{plan['prefill']['instances']} prefill + {plan['decode']['instances']} decode instances "
                f"(decode bound by {plan['decode']['binding']}), "
                f"or {plan['aggregated']['instances']} shared;",
                Text(rec["mode"], style="bold"),
            )
    if deployment.get("note"):
        console.print(f"  deployment: {deployment['note']}")
    if deployment.get("projection_note"):
        console.print(f"  projection: {deployment['projection_note']}")
    console.print()


def render_cache_sim(console: Console, report: dict[str, Any]) -> None:
    """The result of `traceforge cache-sim`: the asked-for cache beside the unlimited one."""
    table = Table(title=f"Prefix cache simulation: {report['trace']}", title_justify="left")
    table.add_column("cache", no_wrap=True)
    for column in ("requests", "input tokens", "hit tokens", "hit ratio", "block hit", "peak blocks"):
        table.add_column(column, justify="right")
    for row in report["results"]:
        label = []
        label.append(f"LRU {human(row['capacity_blocks'])} blocks" if row["capacity_blocks"] else "unlimited")
        if row["ttl_s"] is not None:
            label.append(f"TTL {row['ttl_s']:g}s")
        table.add_row(
            ", ".join(label),
            human(row["requests"]),
            human(row["input_tokens"]),
            human(row["hit_tokens"]),
            _pct(row["hit_ratio"]),
            _pct(row["block_hit_ratio"]),
            human(row["peak_blocks"]),
        )
    print_table(console, table)
    if report["block_mismatch"]:
        console.print(
            NOTE,
            f"{report['block_mismatch']} requests' hash_ids do not cover input_length at "
            f"block size {report['block_size']} (pass --block-size for traces made with another block size)",
        )
    if report["untimed"]:
        console.print(NOTE, f"{report['untimed']} lines without a timestamp (TTL results mean little)")
    for reject in report["rejects"][:5]:
        console.print(REJECTED, f"{report['trace']}:{reject['line']}: {reject['error']}")
    if len(report["rejects"]) > 5:
        console.print(REJECTED, f"{len(report['rejects']) - 5} more lines")
