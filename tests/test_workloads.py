"""Workloads and spend: assignment by key, cost from the source or the price table, ranking,
the 80% set, the power-law fit, and the prefill/decode split per workload and model."""

from __future__ import annotations

import json
import math

import pytest
from builders import WEATHER_TOOL, AnthropicLoop, OpenAILoop, write_jsonl
from conftest import REPO

from traceforge import store
from traceforge.analysis import workloads
from traceforge.analysis.prefill_decode import combine, prefill_decode
from traceforge.analysis.prefix_cache import estimate_tokens
from traceforge.analysis.summary import cached_text, summarize
from traceforge.analysis.workloads import (
    WorkloadKeyError,
    assign_workloads,
    compute_workloads,
    fit_power_law,
)
from traceforge.cli import cli
from traceforge.ingest import ingest_paths
from traceforge.pricing import PriceFileError, load_prices

# Published list prices (USD per million tokens), typed here from the providers' pages so the
# test does not read them back from traceforge's own table.
GPT_4O = {"input": 2.50, "cached": 1.25, "output": 10.00}
SONNET_45 = {"input": 3.00, "cache_write": 3.75, "cached": 0.30, "output": 15.00}


def one_call(
    user: str,
    *,
    workload: str | None = None,
    model: str = "gpt-4o-2024-08-06",
    prompt: int = 1000,
    completion: int = 100,
    cached: int = 0,
    cost: float | None = None,
    system: str = "You help.",
    t0: int = 1_790_000_000,
) -> list[dict]:
    loop = OpenAILoop(system, user, tools=[WEATHER_TOOL], workload=workload, model=model, t0=t0)
    loop.call(content="ok", prompt_tokens=prompt, completion_tokens=completion, cached=cached)
    if cost is not None:
        loop.records[0]["cost_usd"] = cost
    return loop.records


def ingest(con, tmp_path, records: list[dict], name: str = "gateway.jsonl") -> None:
    write_jsonl(tmp_path / name, records)
    ingest_paths(con, [tmp_path / name])


def test_explicit_names_and_fingerprints_and_other_keys(tmp_path, con, monkeypatch):
    records = (
        one_call("a", workload="support-bot")
        + one_call("b", workload="support-bot", t0=1_790_000_010)
        + one_call("c", system="You triage tickets.", t0=1_790_000_020)
        + one_call("d", system="You triage tickets.", model="gpt-4.1", t0=1_790_000_030)
    )
    ingest(con, tmp_path, records)
    unnamed = {
        row[0]
        for row in con.execute("SELECT workload FROM traces WHERE workload <> 'support-bot'").fetchall()
    }
    assert len(unnamed) == 1 and next(iter(unnamed)).startswith("fp-")  # same prompt and tools

    assert assign_workloads(con) == "workload"
    groups = dict(con.execute("SELECT workload, count(*) FROM trace_workloads GROUP BY 1").fetchall())
    assert groups == {"support-bot": 2, next(iter(unnamed)): 2}

    # the fingerprint key recomputes what ingest computed for unnamed traces, and names all four
    assign_workloads(con, "fingerprint")
    by_trace = dict(con.execute("SELECT trace_id, workload FROM trace_workloads").fetchall())
    for trace_id, stored in con.execute("SELECT trace_id, workload FROM traces").fetchall():
        assert by_trace[trace_id].startswith("fp-")
        if stored != "support-bot":
            assert by_trace[trace_id] == stored
    monkeypatch.setattr(workloads, "FINGERPRINT_BATCH_TRACES", 1)  # each trace read on its own
    assign_workloads(con, "fingerprint")
    assert dict(con.execute("SELECT trace_id, workload FROM trace_workloads").fetchall()) == by_trace

    assign_workloads(con, "model")
    assert dict(con.execute("SELECT workload, count(*) FROM trace_workloads GROUP BY 1").fetchall()) == {
        "gpt-4o-2024-08-06": 3,
        "gpt-4.1": 1,
    }
    assign_workloads(con, "attributes.shape")
    assert con.execute("SELECT DISTINCT workload, workload_key FROM trace_workloads").fetchall() == [
        ("api-log", "attributes.shape")
    ]
    assign_workloads(con, "attributes.no_such_field")
    assert con.execute("SELECT DISTINCT workload FROM trace_workloads").fetchall() == [
        ("(no attributes.no_such_field)",)
    ]
    with pytest.raises(WorkloadKeyError, match="unknown workload key 'colour'"):
        assign_workloads(con, "colour")


def test_spend_uses_reported_cost_else_list_prices_and_never_guesses(tmp_path, con):
    records = (
        one_call("a", workload="priced", prompt=12_000, completion=800, cached=8_000)
        + one_call("b", workload="reported", prompt=50_000, completion=50, cost=0.42, t0=1_790_000_010)
        + one_call(
            "c", workload="mystery", model="acme-llm-7", prompt=90_000, completion=10, t0=1_790_000_020
        )
        + one_call("d", workload="mystery", prompt=1_000, completion=10, t0=1_790_000_030)
    )
    anthropic = AnthropicLoop("You plan trips.", "Plan a trip", model="claude-sonnet-4-5-20250929")
    anthropic.call(
        [{"type": "text", "text": "Done."}],
        input_tokens=200,
        cache_read=3_000,
        cache_write=1_000,
        output_tokens=400,
    )
    for record in anthropic.records:
        record["metadata"] = {"workload": "priced"}
    ingest(con, tmp_path, records)
    ingest(con, tmp_path, anthropic.records, "anthropic.jsonl")

    report = compute_workloads(con)

    openai_priced = (
        (12_000 - 8_000) * GPT_4O["input"] + 8_000 * GPT_4O["cached"] + 800 * GPT_4O["output"]
    ) / 1e6
    anthropic_priced = (
        200 * SONNET_45["input"]
        + 3_000 * SONNET_45["cached"]
        + 1_000 * SONNET_45["cache_write"]
        + 400 * SONNET_45["output"]
    ) / 1e6
    mystery_priced = (1_000 * GPT_4O["input"] + 10 * GPT_4O["output"]) / 1e6
    rows = {r["workload"]: r for r in report.workloads}
    assert rows["priced"]["cost_usd"] == pytest.approx(openai_priced + anthropic_priced)
    assert rows["priced"]["cost_priced_usd"] == pytest.approx(openai_priced + anthropic_priced)
    assert rows["reported"]["cost_usd"] == pytest.approx(0.42)
    assert rows["reported"]["cost_reported_usd"] == pytest.approx(0.42)
    # acme-llm-7 is in no price table: counted, listed, and not priced
    assert rows["mystery"]["cost_usd"] == pytest.approx(mystery_priced)
    assert rows["mystery"]["unpriced_calls"] == 1
    assert report.unpriced_models == [
        {"model": "acme-llm-7", "calls": 1, "input_tokens": 90_000, "output_tokens": 10}
    ]
    # ranking by cost, shares of the total, cumulative share, and the 80% set
    costs = sorted([openai_priced + anthropic_priced, 0.42, mystery_priced], reverse=True)
    total = sum(costs)
    stored = con.execute(
        "SELECT workload, rank, share, cumulative_share, in_top_80, workload_key FROM workloads ORDER BY rank"
    ).fetchall()
    assert [r[0] for r in stored] == ["reported", "priced", "mystery"]
    assert [r[2] for r in stored] == pytest.approx([c / total for c in costs])
    assert [r[3] for r in stored] == pytest.approx([sum(costs[: i + 1]) / total for i in range(3)])
    expected_top = next(k for k in range(1, 4) if sum(costs[:k]) / total >= 0.8)
    assert [r[0] for r in stored if r[4]] == [r[0] for r in stored][:expected_top]
    assert report.top_80 == [r[0] for r in stored][:expected_top]
    assert {r[5] for r in stored} == {"workload"}


def test_rank_size_power_law_fit():
    exact = [1000.0 * rank**-1.5 for rank in range(1, 9)]
    fit = fit_power_law(exact)
    assert fit["alpha"] == pytest.approx(1.5) and fit["r_squared"] == pytest.approx(1.0)

    noisy = [1000.0, 310.0, 240.0, 90.0, 70.0, 21.0, 20.0, 3.0, 0.0]  # the zero cannot enter a log fit
    fit = fit_power_law(noisy)
    xs = [math.log(r) for r in range(1, 9)]
    ys = [math.log(v) for v in noisy[:8]]
    mx, my = sum(xs) / 8, sum(ys) / 8
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    residual = sum((y - (my + slope * (x - mx))) ** 2 for x, y in zip(xs, ys, strict=True))
    assert fit["n"] == 8
    assert fit["alpha"] == pytest.approx(-slope)
    assert fit["r_squared"] == pytest.approx(1 - residual / sum((y - my) ** 2 for y in ys))
    assert "log(rank)" in fit["method"]
    assert fit_power_law([5.0, 1.0])["alpha"] is None


def test_workloads_ranked_by_tokens_when_nothing_can_be_costed(tmp_path, con):
    ingest(
        con,
        tmp_path,
        one_call("a", workload="small", model="acme-1", prompt=10)
        + one_call("b", workload="big", model="acme-1", prompt=5_000, t0=1_790_000_010),
    )
    report = compute_workloads(con)
    assert report.basis == "tokens"
    assert [r["workload"] for r in report.workloads] == ["big", "small"]
    assert report.workloads[0]["share"] == pytest.approx(5_100 / (5_100 + 110))


def test_price_lookup_matches_snapshots_and_prefixes_only():
    table = load_prices()
    assert table.lookup("gpt-4o-2024-08-06").model == "gpt-4o"
    assert table.lookup("openai/gpt-4o-mini").model == "gpt-4o-mini"
    assert table.lookup("gpt-4-0613") is None  # gpt-4 is not priced: no near match
    assert table.lookup("gpt-4o-audio-preview") is None
    assert table.lookup("claude-3-5-sonnet@20240620").model == "claude-3-5-sonnet"
    assert table.lookup("us.anthropic.claude-3-5-sonnet-20240620-v1:0").model == "claude-3-5-sonnet"
    assert table.lookup("claude-sonnet-4-5-20250929").cache_write == SONNET_45["cache_write"]
    assert table.lookup(None) is None


def test_user_price_file_adds_and_overrides(tmp_path, con, runner, db_path):
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[inhouse]\nsource = "our contract"\n[inhouse.models]\n'
        '"acme-llm-7" = { input = 1.0, output = 2.0 }\n'
        '"gpt-4o" = { input = 2.0, cached_input = 1.0, output = 8.0 }\n'
    )
    ingest(
        con,
        tmp_path,
        one_call("a", workload="w", model="acme-llm-7", prompt=1_000_000, completion=1_000_000)
        + one_call("b", workload="w", prompt=1_000_000, completion=0, t0=1_790_000_010),
    )
    report = compute_workloads(con, prices=load_prices(prices))
    assert report.workloads[0]["cost_usd"] == pytest.approx(1.0 + 2.0 + 2.0)
    assert report.unpriced_models == []

    bad = tmp_path / "bad.toml"
    bad.write_text("[x\n")
    with pytest.raises(PriceFileError, match=r"bad\.toml: not valid TOML"):
        load_prices(bad)
    con.close()
    result = runner.invoke(
        cli, ["profile", "--db", str(db_path), "--out", str(tmp_path / "out"), "--prices", str(bad)]
    )
    assert result.exit_code == 1 and "bad.toml: not valid TOML" in result.output
    result = runner.invoke(
        cli, ["profile", "--db", str(db_path), "--out", str(tmp_path / "out"), "--workload-key", "colour"]
    )
    assert result.exit_code == 2 and "unknown workload key 'colour'" in result.output


def test_prefill_decode_per_workload_and_model(tmp_path, con):
    without_cache_fields = one_call(
        "c", workload="agent", model="gpt-4.1", prompt=5_000, completion=500, t0=1_790_000_020
    )
    del without_cache_fields[0]["response"]["usage"]["prompt_tokens_details"]
    records = (
        one_call("a", workload="agent", prompt=20_000, completion=50, cached=16_000)
        + one_call("b", workload="agent", prompt=30_000, completion=150, cached=24_000, t0=1_790_000_010)
        + without_cache_fields
    )
    no_usage = one_call("d", workload="chat", t0=1_790_000_030)
    del no_usage[0]["response"]["usage"]
    ingest(con, tmp_path, records + no_usage)
    assign_workloads(con)
    estimates = estimate_tokens(con)

    rows = {(r["workload"], r["model"]): r for r in prefill_decode(con, estimates)}

    agent = rows[("agent", "gpt-4o-2024-08-06")]
    assert (
        agent["llm_calls"],
        agent["input_tokens"],
        agent["cache_read_tokens"],
        agent["output_tokens"],
    ) == (2, 50_000, 40_000, 200)
    assert agent["uncached_input_tokens"] == 10_000
    assert agent["cached_share"] == pytest.approx(0.8)
    assert agent["prefill_decode_ratio"] == pytest.approx(10_000 / 200)
    assert agent["input_output_ratio"] == pytest.approx(50_000 / 200)
    assert agent["calls_estimated"] == 0 and agent["estimate_method"] is None
    other = rows[("agent", "gpt-4.1")]
    assert other["prefill_decode_ratio"] == pytest.approx(10.0)
    # its source reported no cache count: unknown, not 0%, alone and in the store's usage summary
    assert other["cache_read_tokens"] == 0 and other["cached_share"] is None
    assert combine([other])["cached_share"] is None
    # over the input whose cache count is known: gpt-4.1's 5,000 tokens are not misses
    assert agent["cache_reported_input_tokens"] == 50_000 and other["cache_reported_input_tokens"] == 0
    assert combine([agent, other])["cached_share"] == pytest.approx(40_000 / 50_000)
    summary = summarize(con)
    usage = {(r["workload"], r["model"]): r for r in summary["by_workload_model"]}
    assert usage[("agent", "gpt-4.1")]["cache_read_tokens"] is None
    # summary.json's totals: the cache share's base is the input of the calls with a cache count
    assert summary["totals"]["cache_read_tokens"] == 40_000
    assert summary["totals"]["cache_reported_input_tokens"] == 50_000
    assert summary["totals"]["input_tokens"] == 55_000  # gpt-4.1's 5,000 too; the chat call reported none
    assert cached_text(summary["totals"]) == "80% cached"
    assert usage[("agent", "gpt-4o-2024-08-06")]["cache_read_tokens"] == 40_000
    chat = rows[("chat", "gpt-4o-2024-08-06")]
    assert chat["calls_estimated"] == 1 and "characters per token" in chat["estimate_method"]
    estimate = estimates.filter(estimates["call_id"] == no_usage[0]["response"]["id"]).row(0, named=True)
    assert chat["input_tokens"] == estimate["input_tokens"] > 0
    # the store keeps the same figures for SQL users
    assert con.execute("SELECT count(*) FROM inference_profile").fetchone()[0] == 3
    assert json.loads(json.dumps(rows[("chat", "gpt-4o-2024-08-06")], default=str))["workload"] == "chat"


def test_cached_share_leaves_out_calls_logged_without_usage(tmp_path, con):
    """A gateway logs a streamed call without usage (no `stream_options.include_usage`) beside calls
    with it: its input is estimated, and the provider's cached share is that of the calls whose
    cache count is known, not diluted by the call whose count is not."""
    streamed = one_call("b", workload="agent", t0=1_790_000_010)
    del streamed[0]["response"]["usage"]
    ingest(
        con, tmp_path, one_call("a", workload="agent", prompt=20_000, completion=50, cached=16_000) + streamed
    )
    assign_workloads(con)
    (row,) = prefill_decode(con, estimate_tokens(con))
    assert (row["llm_calls"], row["calls_estimated"], row["cache_read_tokens"]) == (2, 1, 16_000)
    assert row["input_tokens"] > row["cache_reported_input_tokens"] == 20_000
    assert row["cached_share"] == pytest.approx(0.8)
    assert combine([row])["cached_share"] == pytest.approx(0.8)


def test_a_source_without_cache_counts_reads_as_unreported_not_as_a_cold_cache(runner, tmp_path):
    """`analyze` and `profile` print '-' and "no cache count reported" for a workload whose calls
    carry no cache fields, and the provider's share for one whose calls do."""
    records = one_call("a", workload="cached", prompt=4_000, completion=100, cached=3_000)
    unreported = one_call("b", workload="plain", prompt=2_000, completion=100, t0=1_790_000_010)
    del unreported[0]["response"]["usage"]["prompt_tokens_details"]
    write_jsonl(tmp_path / "logs" / "gateway.jsonl", records + unreported)
    db = str(tmp_path / "s.duckdb")
    analyzed = runner.invoke(
        cli, ["analyze", str(tmp_path / "logs"), "--db", db, "--out", str(tmp_path / "a")]
    )
    assert analyzed.exit_code == 0, analyzed.output
    # the header's share is of the input whose cache count is known: 3,000 of 4,000, not of 6,000
    assert "tokens in 6.0k (75% cached)" in analyzed.output
    assert "(75% cached)" in (tmp_path / "a" / "report.html").read_text()
    write_jsonl(tmp_path / "plain" / "gateway.jsonl", unreported)
    alone = runner.invoke(
        cli,
        [
            "analyze",
            str(tmp_path / "plain"),
            "--db",
            str(tmp_path / "plain.duckdb"),
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert alone.exit_code == 0, alone.output
    assert "tokens in 2.0k (no cache count reported)" in alone.output
    assert "(no cache count reported)" in (tmp_path / "b" / "report.html").read_text()
    inference = analyzed.output.split("What each workload needs of inference")[1]
    usage = analyzed.output.split("Usage by workload and model")[1].split("Where spend goes")[0]
    cells = {
        line.split()[0]: line.split()
        for line in inference.splitlines()
        if line.split()[:1] in (["cached"], ["plain"])
    }
    assert cells["cached"][2] == "75%" and cells["plain"][2] == "-"
    rows = {
        line.split()[0]: line.split()
        for line in usage.splitlines()
        if line.split()[:1] in (["cached"], ["plain"])
    }
    assert rows["cached"][-2] == "3.0k" and rows["plain"][-2] == "-"
    profiled = runner.invoke(cli, ["profile", "--db", db, "--out", str(tmp_path / "p")])
    assert profiled.exit_code == 0, profiled.output
    assert "input 2.0k (no cache count reported)" in profiled.output
    assert "input 4.0k (cached by provider 75.0%)" in profiled.output
    # the shipped query counts the call without cache counts apart, not as a miss
    reuse = runner.invoke(cli, ["sql", "--db", db, "--json", str(REPO / "queries" / "cache_reuse.sql")])
    assert reuse.exit_code == 0, reuse.output
    reuse_of = {
        row["workload"]: (row["calls_without_cache_counts"], row["hit_pct"])
        for row in json.loads(reuse.output)
    }
    assert reuse_of == {"plain": (1, None), "cached": (0, 75.0)}


def test_a_trace_a_changed_file_no_longer_holds_leaves_the_workloads_the_last_analyze_gave(runner, tmp_path):
    runs = json.loads((REPO / "sample_traces" / "openai_chat_transcripts.json").read_text())
    export = tmp_path / "logs" / "export.json"
    export.parent.mkdir()
    export.write_text(json.dumps(runs[:3]))
    db = tmp_path / "store.duckdb"
    result = runner.invoke(
        cli, ["analyze", str(export.parent), "--db", str(db), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    # the file rewritten with its first run under another id: that trace goes, the other two stay
    export.write_text(json.dumps([{**runs[0], "id": "run_renamed"}, *runs[1:3]]))
    result = runner.invoke(cli, ["ingest", str(export), "--db", str(db)])
    assert result.exit_code == 0, result.output
    con = store.connect(db, read_only=True)
    try:
        assigned = {row[0] for row in con.execute("SELECT trace_id FROM trace_workloads").fetchall()}
    finally:
        con.close()
    assert assigned == {runs[1]["id"], runs[2]["id"]}
