"""`traceforge analyze` end to end: the outputs, the terminal report, report.html in a real browser,
hostile trace content, and the SQL files in queries/ through the DuckDB shell."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from builders import OpenAILoop, openai_tool_call, write_jsonl
from click.testing import CliRunner
from conftest import REPO, SAMPLE_TRACES
from rich.console import Console

from traceforge.cli import cli
from traceforge.cli.sql import shell_binary
from traceforge.report.profile import money
from traceforge.report.terminal import human, render_report, workload_labels

sys.path.insert(0, str(REPO / "benchmarks"))
import corpus as bench_corpus

SECTIONS = (
    "Where spend goes",
    "What parallel tool calls would save",
    "What each workload needs of inference",
    "What to post-train first",
    "Outputs",
)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """The samples analysed once for the module: (store path, output folder, CLI result)."""
    from click.testing import CliRunner

    folder = tmp_path_factory.mktemp("analyze")
    db, out = folder / "store.duckdb", folder / "out"
    result = CliRunner().invoke(cli, ["analyze", str(SAMPLE_TRACES), "--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return db, out, result


def test_a_poor_power_law_fit_says_the_shares_say_more(analysed):
    """On ../shared/data the rank-size fit gave exponent 7.57 with R² 0.85: a few workloads
    carrying the spend and test runs of $0.0001 in the tail. Under R² 0.9 the report says so."""
    from traceforge.analysis.workloads import fit_power_law

    _, out, result = analysed
    summary = json.loads((out / "summary.json").read_text())
    law = summary["spend"]["power_law"]
    assert law["r_squared"] >= 0.9 and not law["poor_fit"]  # the samples' three workloads
    assert "Power law: exponent" in result.output and "poor fit" not in result.output
    summary["spend"]["power_law"] = fit_power_law([10.86, 2.13, 0.78, 0.0927, 1e-4, 1e-4, 4e-5, 3e-5])
    buffer = io.StringIO()
    render_report(Console(file=buffer, width=200, color_system=None), summary, "store.duckdb")
    assert re.search(
        r"exponent \d+\.\d\d \(R² 0\.8\d, [^)]*\): a poor fit, so the shares above say more",
        buffer.getvalue(),
    )
    # the HTML report's spend section and `traceforge profile` say it too
    from traceforge.report.html import _spend
    from traceforge.report.profile import render_profile

    assert "): a poor fit, so the shares above say more than the exponent.</p>" in _spend(summary)
    document = json.loads((out / "profile.json").read_text())
    document["spend"]["power_law"] = summary["spend"]["power_law"]
    buffer = io.StringIO()
    render_profile(Console(file=buffer, width=300, color_system=None), document, {})
    assert re.search(
        r"Power law: spend ∝ rank\^-\d+\.\d\d \(R² 0\.8\d, n=8; [^\n]*largest first\): a poor fit",
        buffer.getvalue(),
    )


def test_analyze_writes_every_output_consistent_with_the_store(analysed):
    db, out, _ = analysed
    summary = json.loads((out / "summary.json").read_text())
    profile = json.loads((out / "profile.json").read_text())
    replay = (out / "replay.jsonl").read_text().splitlines()
    con = duckdb.connect(str(db), read_only=True)
    try:
        traces, calls = con.execute(
            "SELECT (SELECT count(*) FROM traces), (SELECT count(*) FROM llm_calls)"
        ).fetchone()
        saved, observed = con.execute(
            "SELECT sum(turns_saved), sum(observed_turns) FROM trace_dag"
        ).fetchone()
        top80 = {r[0] for r in con.execute("SELECT workload FROM workloads WHERE in_top_80").fetchall()}
    finally:
        con.close()
    assert summary["totals"]["traces"] == traces and summary["totals"]["llm_calls"] == calls
    assert summary["parallel"]["turns_saved"] == saved and summary["parallel"]["observed_turns"] == observed
    assert saved > 0  # the samples plant independent calls made one per turn
    assert abs(sum(w["share"] for w in summary["spend"]["workloads"]) - 1) < 1e-9
    assert {r["workload"] for r in summary["recommendations"]} == top80
    assert profile["schema"] == "traceforge.profile"
    assert len(replay) == calls
    assert set(summary["outputs"]) == {"summary", "profile", "replay", "report"}


# Parts of summary.json documented elsewhere (profile.md, schema.md's views), or keyed by data.
DOCUMENTED_ELSEWHERE = {
    "spend",
    "parallel.by_workload",
    "parallel.tool_pairs",
    "parallel.edges_by_kind",
    "inference.projected",
    "inference.deployment.engine_hints",
}


def test_the_summary_json_reference_names_every_key_summary_json_has(analysed):
    """docs/analyze.md's table is the contract scripts read: a key added without a line there fails."""
    _, out, _ = analysed
    summary = json.loads((out / "summary.json").read_text())
    text = (REPO / "docs" / "analyze.md").read_text()
    section = text.split("## `summary.json`", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`([a-z_0-9]+)`", section))

    def keys(value, path: str = "") -> set[str]:
        if isinstance(value, list):  # a list of objects: the keys of its rows
            return set().union(*(keys(row, path) for row in value))
        if not isinstance(value, dict) or path in DOCUMENTED_ELSEWHERE:
            return set()
        found = set(value)
        for key, inner in value.items():
            found |= keys(inner, f"{path}.{key}" if path else key)
        return found

    every = keys(summary)
    assert {"totals", "cache_reported_input_tokens", "top_traces", "binding", "p99"} <= every
    assert every - documented == set()
    assert f'`"traceforge.summary"`, `{summary["schema_version"]}`' in section


def test_terminal_report_answers_the_four_questions_without_colour_when_piped(analysed):
    _, _, result = analysed
    for section in SECTIONS:
        assert section in result.output
    assert "\x1b[" not in result.output
    assert "traceforge dag TRACE_ID" in result.output


def test_terminal_report_is_readable_at_80_columns(analysed):
    _, out, _ = analysed
    summary = json.loads((out / "summary.json").read_text())
    buffer = io.StringIO()
    console = Console(file=buffer, width=80, force_terminal=True, color_system=None)
    render_report(console, summary, "store.duckdb")
    lines = buffer.getvalue().splitlines()
    too_wide = [line for line in lines if len(line) > 80]
    assert not too_wide, too_wide[:3]
    assert len(lines) > 30
    # dated model ids (`claude-sonnet-4-5-20250929`) stay whole: the table narrows its gaps first
    for row in summary["by_workload_model"]:
        assert any(re.search(rf"\s{re.escape(row['model'])}\s", line) for line in lines), row["model"]


@pytest.mark.parametrize("width", [40, 60])
def test_a_terminal_too_narrow_for_a_table_gets_its_numbers_whole(analysed, width):
    """Where even folded cells do not fit, a table's lines wrap rather than lose its last columns
    or the end of a number (`53.6k` once read `53` at 50 columns, `out` went at 60)."""
    _, out, _ = analysed
    summary = json.loads((out / "summary.json").read_text())
    buffer = io.StringIO()
    render_report(Console(file=buffer, width=width, color_system=None), summary, "store.duckdb")
    text = buffer.getvalue()
    usage = text.split("Usage by workload and model", 1)[1].split("No rejected records", 1)[0]
    assert re.search(r"\btraces +calls +tools +in +cached +out\b", usage)
    reported = [row for row in summary["by_workload_model"] if row["calls_without_usage"] == 0]
    assert reported
    for row in reported:
        for key in ("input_tokens", "cache_read_tokens", "output_tokens"):
            assert re.search(rf"(?<![\d.]){re.escape(human(row[key]))}(?![\d.k])", usage), (key, row)
    for row in summary["spend"]["workloads"]:
        assert f"{row['share']:.0%}" in text


@pytest.mark.parametrize("command", ["profile", "deps"])
def test_profile_and_deps_keep_their_numbers_whole_in_a_narrow_terminal(analysed, runner, tmp_path, command):
    """docs/analyze.md: every table `deps` and `profile` print keeps its numbers whole, as the
    report's do (at 50 columns `$0.1259` read `$0.…` and `7 (13%)` read `7 (13…`)."""
    db, out, _ = analysed
    copy = tmp_path / "store.duckdb"
    shutil.copy(db, copy)  # profile writes its tables
    extra = ["--out", str(tmp_path / "profile")] if command == "profile" else []
    shown = runner.invoke(cli, [command, "--db", str(copy), *extra], env={"COLUMNS": "40"})
    assert shown.exit_code == 0, shown.output
    summary = json.loads((out / "summary.json").read_text())
    if command == "profile":
        expected = [money(row["cost_usd"]) for row in summary["spend"]["workloads"]]
    else:
        expected = [f"({row['turns_saved_share'] or 0:.0%})" for row in summary["parallel"]["by_workload"]]
    assert expected
    for text in expected:
        assert text in shown.output, text


def test_the_example_in_docs_analyze_md_is_what_analyze_prints(runner, tmp_path, monkeypatch):
    """docs/analyze.md shows the report of the samples at 80 columns: a change to what the report
    prints, or to the samples, must come with the page (its cached shares once went stale)."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(SAMPLE_TRACES, "sample_traces")
    result = runner.invoke(cli, ["analyze", "sample_traces/"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    page = (REPO / "docs" / "analyze.md").read_text()
    example = page.split("$ traceforge analyze sample_traces/\n", 1)[1].split("```", 1)[0]
    printed = [line.rstrip() for line in result.stdout.splitlines()]
    assert printed == example.splitlines()


def test_terminal_tables_keep_two_space_gaps_where_they_fit(analysed):
    _, out, _ = analysed
    summary = json.loads((out / "summary.json").read_text())
    shown = {}
    for width in (80, 120):
        buffer = io.StringIO()
        render_report(Console(file=buffer, width=width, color_system=None), summary, "store.duckdb")
        shown[width] = buffer.getvalue()
    # the longest workload name and model id, and the header of two columns as wide as it
    assert "travel-support  gpt-4.1-mini-2025-04-14 " in shown[120] and " traces  calls " in shown[120]
    assert "travel-support gpt-4.1-mini-2025-04-14 " in shown[80] and " traces calls " in shown[80]
    # the spend table fits at 80 columns as it is
    assert " #  workload        traces   cost" in shown[80]


def test_json_prints_summary_json_and_a_rerun_reuses_the_store(analysed, runner, tmp_path):
    db, out, _ = analysed
    copy = tmp_path / "store.duckdb"
    shutil.copy(db, copy)
    again = runner.invoke(
        cli, ["analyze", str(SAMPLE_TRACES), "--db", str(copy), "--out", str(tmp_path / "o"), "--json"]
    )
    assert again.exit_code == 0
    assert "Nothing new" in again.stderr
    printed = json.loads(again.stdout)
    assert printed == json.loads((tmp_path / "o" / "summary.json").read_text())
    first = json.loads((out / "summary.json").read_text())
    for key in ("totals", "spend", "parallel", "recommendations"):
        assert printed[key] == first[key], key


def test_a_run_that_fails_to_write_its_outputs_leaves_the_last_summary_json_whole(
    analysed, runner, tmp_path, monkeypatch
):
    """summary.json is written last, in one rename: a run that fails on the way (here writing
    report.html, as a full disk would) leaves the previous run's, naming outputs that exist."""
    db, out, _ = analysed
    copy, outputs = tmp_path / "store.duckdb", tmp_path / "o"
    shutil.copytree(out, outputs)
    shutil.copy(db, copy)
    before = (outputs / "summary.json").read_bytes()

    def disk_full(path, *args):
        path.write_text("<!doctype html><title>trun")
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("traceforge.report.html.write_report", disk_full)
    failed = runner.invoke(cli, ["analyze", str(SAMPLE_TRACES), "--db", str(copy), "--out", str(outputs)])
    assert failed.exit_code == 1, failed.output
    report = outputs / "report.html"
    assert f"cannot write the outputs to {outputs} ({report}: No space left on device)" in failed.output
    assert "free some space or choose another --out, then run `traceforge analyze` again" in failed.output
    assert (outputs / "summary.json").read_bytes() == before
    assert not list(outputs.glob("*.new"))


def test_every_output_is_replaced_whole_or_left_as_it_was(analysed, runner, tmp_path, monkeypatch):
    """Each output is written beside itself and renamed over the last one: a run that fails half
    way through writing replay.jsonl (a full disk) leaves the previous run's files byte for byte,
    and nothing staged."""
    import traceforge.export.profile

    db, out, _ = analysed
    copy, outputs = tmp_path / "store.duckdb", tmp_path / "o"
    shutil.copytree(out, outputs)
    shutil.copy(db, copy)
    before = {p.name: p.read_bytes() for p in outputs.iterdir()}
    assert set(before) == {"summary.json", "profile.json", "replay.jsonl", "report.html"}

    def half_written(requests, path, block_size):
        path.write_text('{"timestamp": 0, "input_length"')
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(traceforge.export.profile, "write_replay", half_written)
    failed = runner.invoke(cli, ["analyze", str(SAMPLE_TRACES), "--db", str(copy), "--out", str(outputs)])
    assert failed.exit_code == 1 and "No space left on device" in failed.output, failed.output
    assert {p.name: p.read_bytes() for p in outputs.iterdir()} == before


def test_an_os_error_in_the_analysis_itself_is_not_called_an_output_failure(
    analysed, runner, tmp_path, monkeypatch
):
    db, _, _ = analysed
    copy = tmp_path / "store.duckdb"
    shutil.copy(db, copy)

    def broken(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("traceforge.pipeline.analyze_dependencies", broken)
    failed = runner.invoke(
        cli, ["analyze", str(SAMPLE_TRACES), "--db", str(copy), "--out", str(tmp_path / "o")]
    )
    assert isinstance(failed.exception, OSError) and "cannot write the outputs" not in failed.output


def test_summary_lists_the_traces_to_look_at_as_deps_does_up_to_its_cap(
    analysed, runner, tmp_path, monkeypatch
):
    """summary.json's traces with most turns to save are `traceforge deps`'s list, cut at
    `TOP_TRACES`."""
    from traceforge import pipeline

    db, _, _ = analysed
    copy = tmp_path / "store.duckdb"
    shutil.copy(db, copy)
    monkeypatch.setattr(pipeline, "TOP_TRACES", 3)
    result = runner.invoke(
        cli, ["analyze", str(SAMPLE_TRACES), "--db", str(copy), "--out", str(tmp_path / "o"), "--json"]
    )
    assert result.exit_code == 0, result.output
    listed = [t["trace_id"] for t in json.loads(result.stdout)["parallel"]["top_traces"]]
    deps = json.loads(runner.invoke(cli, ["deps", "--db", str(copy), "--json"]).stdout)
    ranked = [t["trace_id"] for t in deps["top_traces"]]
    assert len(ranked) > 3 and listed == ranked[:3]


def test_report_html_in_a_real_browser(analysed, chromium, artifacts):
    from browser import Browser

    _, out, _ = analysed
    html = (out / "report.html").read_text()
    assert "<script" not in html.lower() and "http://" not in html and "https://" not in html
    with Browser(chromium, width=1200, height=1000) as browser:
        browser.open(out / "report.html")
        kinds = browser.evaluate(
            "Array.from(document.querySelectorAll('svg.chart')).filter(s => s.querySelector('.mark'))"
            ".map(s => s.dataset.chart)"
        )
        problems = browser.problems()
        requests = browser.requests()
        browser.screenshot(artifacts / "report.png")
    assert not problems, problems
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    assert len(kinds) >= 8
    assert {"bar", "stacked", "line", "dag"} <= set(kinds)
    assert (artifacts / "report.png").stat().st_size > 10_000


def test_the_report_draws_the_dependencies_no_other_path_implies(runner, tmp_path):
    """The first result's region, used by the fourth call too, is an edge the chain through the
    second call already implies: `dag --json` keeps every edge, the report's drawings (observed and
    parallel) only those no other path implies, as `traceforge dag` lists them."""
    loop = OpenAILoop("You look up orders.", "where is my order?", workload="orders")
    steps = [
        ("get_customer", {"email": "ann@example.com"}, "customer CU-7781 in region RG-4410"),
        ("get_order", {"customer_id": "CU-7781"}, "order OR-5521 shipped"),
        ("get_weather", {"city": "Lisbon"}, "sunny"),  # needs nothing: a turn to save
        ("get_tracking", {"order_id": "OR-5521", "region": "RG-4410"}, "in transit"),
    ]
    for i, (name, arguments, result) in enumerate(steps):
        loop.call(tool_calls=[openai_tool_call(f"call_{i}", name, arguments)])
        loop.result(f"call_{i}", result)
    loop.call(content="It is in transit.")
    write_jsonl(tmp_path / "logs" / "orders.jsonl", loop.records)
    db, out = tmp_path / "store.duckdb", tmp_path / "out"
    analysed = runner.invoke(cli, ["analyze", str(tmp_path / "logs"), "--db", str(db), "--out", str(out)])
    assert analysed.exit_code == 0, analysed.output
    (top,) = json.loads((out / "summary.json").read_text())["parallel"]["top_traces"]
    assert top["turns_saved"] == 1
    shown = runner.invoke(cli, ["dag", top["trace_id"], "--db", str(db), "--json"])
    pairs = {(e["src"], e["dst"]) for e in json.loads(shown.stdout)["edges"]}
    assert pairs == {("call_0", "call_1"), ("call_1", "call_3"), ("call_0", "call_3")}
    html = (out / "report.html").read_text()
    drawings = re.findall(r'<svg[^>]*data-chart="dag".*?</svg>', html, re.DOTALL)
    assert len(drawings) == 2
    assert [drawing.count("<line ") for drawing in drawings] == [2, 2]


def analyse_logs(runner, tmp_path) -> Path:
    """`traceforge analyze` of `tmp_path/logs` into `tmp_path/s.duckdb`; the outputs' folder."""
    out = tmp_path / "out"
    result = runner.invoke(
        cli, ["analyze", str(tmp_path / "logs"), "--db", str(tmp_path / "s.duckdb"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


def test_a_long_trace_s_drawings_scroll_and_a_wide_one_keeps_its_labels_legible(runner, tmp_path, chromium):
    """A 137-turn Claude Code session was drawn 6,000 pixels tall, and a parallel turn of many
    calls shrunk to fit half the page, its labels specks. Three traces: 40 calls in 20 dependent
    pairs (narrow and tall: side by side, scrolling together in one box), 30 independent calls
    made one after another (a parallel row of 30: one drawing above the other, each at its own width,
    scrolling, the wide one sideways at no less than three quarters of its size), and 2 calls
    (left as they are)."""
    from browser import Browser

    def run(prefix: str, arguments: list[dict], results: list[str], t0: int) -> list[dict]:
        loop = OpenAILoop("You check stock.", f"check the {prefix} stores", workload="stock", t0=t0)
        for i, (argument, result) in enumerate(zip(arguments, results, strict=True)):
            loop.call(tool_calls=[openai_tool_call(f"{prefix}_{i}", "get_stock", argument)])
            loop.result(f"{prefix}_{i}", result)
        loop.call(content="All checked.")
        return loop.records

    # pair k's two calls both name the store the pair before it found: a chain of 20 turns of 2
    chained = run(
        "chain",
        [{"store": f"ST-{7000 + (i // 2 - 1) * 2 + 1}" if i >= 2 else "first"} for i in range(40)],
        [f"4 left; next store ST-{7000 + i}" for i in range(40)],
        1_790_000_000,
    )
    # and a 31st call needing the first's result: a parallel row of 30, then a row of one
    independent = run(
        "wide",
        [{"store": f"S-{i}"} for i in range(30)] + [{"transfer_to": "WH-9911"}],
        ["4 left; restock from WH-9911"] + ["4 left"] * 30,
        1_790_100_000,
    )
    short = run("short", [{"store": f"T-{i}"} for i in range(2)], ["1 left"] * 2, 1_790_200_000)
    write_jsonl(tmp_path / "logs" / "stock.jsonl", chained + independent + short)
    out = analyse_logs(runner, tmp_path)
    with Browser(chromium, width=1200, height=1000) as browser:
        browser.open(out / "report.html")
        boxes = browser.evaluate(
            "Array.from(document.querySelectorAll('.pair')).map(pair => ({"
            " trace: (h => { while (h.tagName !== 'H3') h = h.previousElementSibling;"
            "   return h.querySelector('code').textContent; })(pair.previousElementSibling),"
            " height: pair.clientHeight, content: pair.scrollHeight,"
            " figures: Array.from(pair.querySelectorAll('figure')).map(f => ({"
            "   top: f.getBoundingClientRect().top, height: f.clientHeight, content: f.scrollHeight,"
            "   sideways: f.scrollWidth > f.clientWidth,"
            # each row's first box, from the figure's left edge
            "   firsts: Object.values(Array.from(f.querySelectorAll('g.mark rect')).reduce((rows, r) => {"
            "     const left = r.getBoundingClientRect().left - f.getBoundingClientRect().left;"
            "     const y = r.getAttribute('y'); rows[y] = Math.min(rows[y] ?? Infinity, left);"
            "     return rows; }, {})), width: f.clientWidth})),"
            " scales: Array.from(pair.querySelectorAll('svg[data-chart=dag]')).map(svg =>"
            "   svg.getBoundingClientRect().width / svg.viewBox.baseVal.width)}))"
        )
        page_width = browser.evaluate("document.documentElement.scrollWidth")
    assert page_width <= 1200  # a wide drawing scrolls in its figure, not the page
    drawn = {box["trace"]: box for box in boxes}
    chain, wide, small = (drawn[trace_of(tmp_path, call)] for call in ("chain_0", "wide_0", "short_0"))
    # narrow and tall: side by side, one box of at most 720 pixels scrolling both together
    assert chain["figures"][0]["top"] == chain["figures"][1]["top"]
    assert chain["height"] <= 720 < chain["content"]
    assert all(0.99 <= scale <= 1 for scale in chain["scales"])  # 2 boxes a row: full size
    # wide: one above the other, the 30 rows of the observed one scrolling within 720 pixels at
    # its own width, the parallel row of 30 scrolling sideways
    assert wide["figures"][0]["top"] < wide["figures"][1]["top"]
    assert wide["figures"][0]["height"] <= 720 < wide["figures"][0]["content"]
    assert [figure["sideways"] for figure in wide["figures"]] == [False, True]
    assert wide["scales"][0] == 1 and 0.75 - 0.01 <= wide["scales"][1] < 1
    # rows packed from the left: the lone call of the parallel drawing's second row is in view,
    # not at the middle of a drawing 30 boxes wide
    parallel = wide["figures"][1]
    assert len(parallel["firsts"]) == 2 and max(parallel["firsts"]) < parallel["width"] / 4, parallel
    # short and narrow: as it was, but never blown up past its size
    assert small["height"] == small["content"] and not any(f["sideways"] for f in small["figures"])
    assert small["figures"][0]["top"] == small["figures"][1]["top"]
    assert all(scale <= 1 for scale in small["scales"])


def trace_of(tmp_path, tool_call_id: str) -> str:
    """The trace holding a tool call, from the store in `tmp_path`."""
    with duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True) as con:
        return con.execute(
            "SELECT trace_id FROM tool_calls WHERE tool_call_id = ?", [tool_call_id]
        ).fetchone()[0]


HOSTILE = {
    "workload": "<script>window.__pwned=1</script>",
    "tool": '<img src=x onerror="window.__pwned=2">',
    "result": '</svg></figure><script>window.__pwned=3</script><svg onload="window.__pwned=4">',
}


def test_hostile_trace_content_is_shown_as_text_and_runs_nothing(runner, tmp_path, chromium):
    from browser import Browser

    loop = OpenAILoop("You are an agent.", "do it", workload=HOSTILE["workload"])
    for i in range(3):
        loop.call(tool_calls=[openai_tool_call(f"call_{i}", HOSTILE["tool"], {"q": f"x{i}"})])
        loop.result(f"call_{i}", HOSTILE["result"])
    loop.call(content="done")
    write_jsonl(tmp_path / "logs" / "evil.jsonl", loop.records)
    out = analyse_logs(runner, tmp_path)
    html = (out / "report.html").read_text()
    for payload in HOSTILE.values():
        assert payload not in html  # never verbatim
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    with Browser(chromium) as browser:
        browser.open(out / "report.html")
        pwned = browser.evaluate("typeof window.__pwned")
        text = browser.evaluate("document.body.innerText")
        problems = browser.problems()
    assert pwned == "undefined"
    assert HOSTILE["workload"] in text  # shown to the reader as text
    assert not problems, problems


def test_every_query_file_runs_in_the_duckdb_shell(analysed):
    db, _, _ = analysed
    files = sorted((REPO / "queries").glob("*.sql"))
    assert len(files) >= 8
    binary = shell_binary()
    assert binary
    for path in files:
        text = path.read_text()
        assert text.startswith("-- "), f"{path.name} must open with a comment saying what it answers"
        run = subprocess.run(
            [binary, "-readonly", "-csv", str(db), "-c", f".read {path}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0 and "Error" not in run.stderr, f"{path.name}: {run.stderr}"
        header = run.stdout.splitlines()[0] if run.stdout else ""
        assert re.match(r"^[\w\",]+$", header), f"{path.name} printed no result header: {run.stdout[:200]}"
        # and `traceforge sql FILE` gives the same columns
        csv_out = CliRunner().invoke(cli, ["sql", "--db", str(db), "--csv", str(path)])
        assert csv_out.exit_code == 0, f"{path.name}: {csv_out.output}"
        assert csv_out.output.splitlines()[0] == header.replace('"', ""), path.name


def test_a_price_file_prices_models_the_shipped_table_lacks(runner, tmp_path):
    loop = OpenAILoop("You are an agent.", "hello", model="acme-llm-7b", workload="acme")
    loop.call(content="hi", prompt_tokens=1_000_000, completion_tokens=500_000)
    write_jsonl(tmp_path / "logs" / "acme.jsonl", loop.records)
    args = ["analyze", str(tmp_path / "logs"), "--db", str(tmp_path / "s.duckdb"), "--json"]
    unpriced = json.loads(runner.invoke(cli, [*args, "--out", str(tmp_path / "a")]).stdout)
    assert [m["model"] for m in unpriced["spend"]["unpriced_models"]] == ["acme-llm-7b"]
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[acme]\nsource = "contract"\nas_of = "2026-12-01"\n\n[acme.models]\n'
        '"acme-llm-7b" = { input = 2.0, cached_input = 1.0, output = 4.0 }\n'
    )
    priced = json.loads(
        runner.invoke(cli, [*args, "--out", str(tmp_path / "b"), "--prices", str(prices)]).stdout
    )
    assert priced["spend"]["unpriced_models"] == []
    assert priced["spend"]["totals"]["cost_usd"] == pytest.approx(1.0 * 2.0 + 0.5 * 4.0)
    bad = runner.invoke(cli, [*args, "--out", str(tmp_path / "c"), "--prices", str(tmp_path / "absent.toml")])
    assert bad.exit_code == 2


@pytest.mark.parametrize("key", ["agent", "model"])
def test_savings_per_workload_use_the_workload_key_of_the_run(runner, tmp_path, key):
    """The dependency analysis runs before the profile assigns the run's workloads; its savings per
    workload, the traces to look at and the recommendations are still under the run's names."""
    args = ["analyze", str(SAMPLE_TRACES), "--db", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "o")]
    result = runner.invoke(cli, [*args, "--workload-key", key, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    names = {w["workload"] for w in summary["spend"]["workloads"]}
    by_workload = summary["parallel"]["by_workload"]
    assert {row["workload"] for row in by_workload} <= names
    assert sum(row["turns_saved"] for row in by_workload) == summary["parallel"]["turns_saved"] > 0
    assert {t["workload"] for t in summary["parallel"]["top_traces"]} <= names
    saved = {row["workload"]: row["turns_saved"] for row in by_workload}
    for pick in summary["recommendations"]:
        says_parallel = any("independent calls made one after another" in r for r in pick["reasons"])
        assert says_parallel == bool(saved.get(pick["workload"]))
    assert any(saved.get(pick["workload"]) for pick in summary["recommendations"])


CLIPPED_TEXTS = """
Array.from(document.querySelectorAll('svg.chart')).flatMap(svg => {
  const box = svg.getBoundingClientRect();
  return Array.from(svg.querySelectorAll('text'))
    .map(t => [t.textContent, t.getBoundingClientRect()])
    .filter(([, r]) => r.width && (r.left < box.left - 1 || r.right > box.right + 1
                                   || r.top < box.top - 1 || r.bottom > box.bottom + 1))
    .map(([text]) => svg.dataset.chart + ': ' + text);
})
"""


def test_chart_labels_stay_inside_their_charts(runner, tmp_path, chromium):
    """Workloads named by long paths (a Claude Code session's working directory): the spend chart's
    slanted labels keep the folders that tell them apart, and no chart text falls outside its chart.
    Of ten workloads, the hit-ratio curves show the eight with most spend, one colour each, with the
    legend beside the lines, not over them."""
    from browser import Browser

    workloads = [f"/home/dev/projects/platform-worktrees/{name}" for name in ("checkout-api", "search")]
    workloads += [f"w{k}" for k in range(8)]
    for k, workload in enumerate(workloads):
        loop = OpenAILoop("You are an agent.", f"task {k}", workload=workload, t0=1_790_000_000 + 100 * k)
        for i in range(2 + k):
            loop.call(tool_calls=[openai_tool_call(f"call_{k}_{i}", "lookup", {"q": f"x{i}"})])
            loop.result(f"call_{k}_{i}", f"value {i}")
        loop.call(content="done")
        write_jsonl(tmp_path / "logs" / f"run{k}.jsonl", loop.records)
    out = analyse_logs(runner, tmp_path)
    with Browser(chromium, width=1200, height=1000) as browser:
        browser.open(out / "report.html")
        clipped = browser.evaluate(CLIPPED_TEXTS)
        bar_labels = browser.evaluate(
            "Array.from(document.querySelectorAll('svg.chart[data-chart=bar] text[transform]'))"
            ".map(t => t.textContent)"
        )
        curves = browser.evaluate(
            "(() => { const svg = document.querySelector("
            "'svg.chart[aria-label=\"Hit ratio against cache size\"]');"
            " const right = Math.max(...Array.from(svg.querySelectorAll('polyline'))"
            "   .map(p => p.getBBox().x + p.getBBox().width));"
            " return [Array.from(svg.querySelectorAll('polyline')).map(p => p.getAttribute('stroke')),"
            " svg.closest('figure').innerText,"
            " Array.from(svg.querySelectorAll('text.legend')).map(t => t.getBBox().x - right)]; })()"
        )
    assert clipped == [], clipped
    assert {"…/checkout-api", "…/search"} <= set(bar_labels)
    colours, caption, legend_past_lines = curves
    assert len(colours) == len(set(colours)) == 8
    # the legend stands right of every line, where none runs under it
    assert len(legend_past_lines) == 8 and min(legend_past_lines) > 0, legend_past_lines
    assert "for the 8 workloads with most spend" in caption


def test_path_workloads_are_shown_by_their_last_folders_in_every_table(runner, tmp_path):
    """Claude Code's workload is the project's folder: at 80 columns `/home/dev/projects/coding-agent`
    folded over three lines of each table. Tables show a path by as few last folders as tell it
    apart (`…/team-b/coding-agent` beside `…/projects/coding-agent`); the JSON keeps the path."""
    folder = tmp_path / "sessions"
    bench_corpus.generate(folder, tool_calls=300, only="claude-code")
    session = next(p for p in sorted(folder.glob("*.jsonl")) if "/projects/coding-agent" in p.read_text())
    text = session.read_text()
    # the same project in another folder: a session of its own (its own ids)
    prefix = json.loads(text.splitlines()[0])["sessionId"][:8]
    moved = text.replace("/home/dev/projects/", "/srv/team-b/").replace(prefix, "9" + prefix[1:])
    (folder / "moved.jsonl").write_text(moved.replace('"msg_', '"msg_9').replace('"req_', '"req_9'))
    # and the session resumed from another folder: its calls copies of the first session's, so that
    # folder's workload has no LLM call of its own (its profile once failed on the missing timing)
    resumed = text.replace("/home/dev/projects/", "/srv/team-c/").replace(prefix, "8" + prefix[1:])
    (folder / "resumed.jsonl").write_text(resumed)
    db, out = tmp_path / "store.duckdb", tmp_path / "out"
    analyzed = runner.invoke(
        cli, ["analyze", str(folder), "--db", str(db), "--out", str(out)], env={"COLUMNS": "80"}
    )
    assert analyzed.exit_code == 0, analyzed.output
    summary = json.loads((out / "summary.json").read_text())
    workloads = {row["workload"] for row in summary["by_workload_model"]}
    assert {"/home/dev/projects/coding-agent", "/srv/team-b/coding-agent"} <= workloads
    (copied,) = [row for row in summary["inference"] if row["workload"] == "/srv/team-c/coding-agent"]
    assert copied["tool_gap_ms"] == {"p50": None, "p90": None, "p99": None}
    shown = set(re.findall(r"…/[\w/-]+", analyzed.output))
    assert {"…/projects/coding-agent", "…/team-b/coding-agent", "…/team-c/coding-agent"} <= shown
    tables = analyzed.output.split("What to post-train first")[0]  # its picks name the whole path
    assert not re.search(r"^\s*(\d+\s+)?/(home|srv)/", tables, re.MULTILINE)
    assert "…/NAME: a workload by its last folders" in analyzed.output
    for command in (["deps"], ["profile", "--out", str(tmp_path / "profile")]):
        shown = runner.invoke(cli, [*command, "--db", str(db)], env={"COLUMNS": "80"})
        assert shown.exit_code == 0, shown.output
        assert "…/team-b/" in shown.output and "…/NAME" in shown.output, command


@pytest.mark.parametrize(
    "names",
    [
        ["/a/x/y", "/b/x/y", "/c/z"],
        ["/x/y", "/a/x/y", "y"],
        ["~/work/api", "/srv/api", "/home/dev/projects/long-project-name", None],
    ],
)
def test_workload_labels_tell_every_workload_apart_and_never_lengthen_one(names):
    labels = workload_labels(names)
    named = [name for name in names if name]
    assert set(labels) == set(named)
    assert len(set(labels.values())) == len(named)
    for name, label in labels.items():
        assert len(label) <= len(name)
        assert label == name or (label.startswith("…/") and name.endswith(label[1:]))
