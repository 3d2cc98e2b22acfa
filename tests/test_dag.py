"""DAG analysis: schedules, the latency and token models, the store tables and views, the `dag` and
`deps` verbs, the planted ground truth, and BFCL's parallel tasks."""

from __future__ import annotations

import importlib
import json
import random
import sys
from pathlib import Path

import pytest
from builders import T0, OpenAILoop, openai_tool_call, write_jsonl
from dag_helpers import NEUTRAL, call, levels, load, transcript, turn

from traceforge import store
from traceforge.analysis.dag import analyze_dependencies, critical_path, trace_schedule
from traceforge.analysis.deps import infer, read_traces
from traceforge.analysis.effects import DEFAULT_LLM_MS, DEFAULT_TOOL_MS, DepsConfig
from traceforge.cli import cli
from traceforge.ingest import ingest_paths

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def weather_trace(trace_id: str, cities: list[str]) -> dict:
    """The user names every city: the lookups are independent, made one per turn."""
    return transcript(
        trace_id,
        "Weather in " + ", ".join(cities) + "?",
        *[
            turn(call(f"{trace_id}-{c}", "get_weather", {"city": c}, {"temp": 10 + i}))
            for i, c in enumerate(cities)
        ],
    )


def chain_trace(trace_id: str) -> dict:
    """search -> two independent reads of what it found -> a comparison of their numbers."""
    return transcript(
        trace_id,
        "Compare the prices of the two oak desks.",
        turn(
            call(
                f"{trace_id}-s",
                "search_products",
                {"query": "oak desk"},
                [{"id": "P-11111"}, {"id": "P-22222"}],
            )
        ),
        turn(call(f"{trace_id}-a", "get_product", {"product_id": "P-11111"}, {"price": 349.5})),
        turn(call(f"{trace_id}-b", "get_product", {"product_id": "P-22222"}, {"price": 412.25})),
        turn(
            call(f"{trace_id}-c", "compare_prices", {"first": 349.5, "second": 412.25}, {"cheaper": "first"})
        ),
    )


# --- one trace -----------------------------------------------------------------------------------


def test_the_parallel_schedule_of_a_diamond(con, tmp_path):
    load(con, tmp_path, chain_trace("d"))
    schedule = trace_schedule(con, "d")
    assert schedule.observed_turns == 4
    assert levels(schedule) == {"d-s": 0, "d-a": 1, "d-b": 1, "d-c": 2}
    assert schedule.min_turns == 3 and schedule.turns_saved == 1
    assert [[schedule.trace.calls[i].tool_call_id for i in g] for g in schedule.generations] == [
        ["d-s"],
        ["d-a", "d-b"],
        ["d-c"],
    ]
    path = [schedule.trace.calls[i].tool_call_id for i in schedule.critical_path]
    assert path[0] == "d-s" and path[-1] == "d-c" and len(path) == schedule.min_turns


def test_the_critical_path_prefers_the_slower_chain(con, tmp_path):
    load(con, tmp_path, chain_trace("d"))
    schedule = trace_schedule(con, "d")
    durations = [600.0, 100.0, 900.0, 600.0]  # get_product b is the slow one
    path = critical_path(schedule.trace, schedule.graph, schedule.levels, durations)
    assert [schedule.trace.calls[i].tool_call_id for i in path] == ["d-s", "d-b", "d-c"]


def test_latency_and_tokens_from_measured_durations_and_reported_usage(con, tmp_path):
    loop = OpenAILoop("You report weather.", "Weather in Oslo and Lima?")
    loop.call(tool_calls=[openai_tool_call("a", "get_weather", {"city": "Oslo"})], prompt_tokens=100)
    loop.result("a", json.dumps({"temp": 3}))
    loop.call(tool_calls=[openai_tool_call("b", "get_weather", {"city": "Lima"})], prompt_tokens=150)
    loop.result("b", json.dumps({"temp": 19}))
    loop.clock = T0 + 3 + 1.5 + 0.5  # the second tool phase took 0.5 s
    loop.call(content="Oslo 3, Lima 19.", prompt_tokens=200)
    ingest_paths(con, [write_jsonl(tmp_path / "log.jsonl", loop.records)])
    (trace_id,) = con.execute("SELECT trace_id FROM traces").fetchall()[0]
    schedule = trace_schedule(con, trace_id)
    # Each LLM call took 1.5 s; the tool phases 1.5 s and 0.5 s (the gaps between LLM calls).
    assert schedule.timing == "measured"
    assert schedule.observed_ms == pytest.approx((1500 + 1500) + (1500 + 500))
    assert schedule.parallel_ms == pytest.approx(1500 + max(1500, 500))
    # The second turn goes: it re-sent 150 tokens, of which the first call's 100 + 20 were a prefix.
    assert (schedule.input_tokens_saved, schedule.tokens_saved, schedule.tokens_estimated) == (150, 30, False)
    # Where the first call's output count is only a lower bound (Claude Code), the prefix it leaves
    # counts its output as estimated from its message's text (about 4 characters per token).
    con.execute("UPDATE llm_calls SET output_tokens = 1, output_tokens_partial = true WHERE seq = 0")
    [(chars,)] = con.execute(
        """SELECT length(coalesce(content, '')) + length(coalesce(reasoning, '')) + length(tool_calls)
           FROM messages WHERE role = 'assistant' ORDER BY seq LIMIT 1"""
    ).fetchall()
    assert chars / 4 > 1
    assert trace_schedule(con, trace_id).tokens_saved == round(150 - (100 + chars / 4))
    con.execute("UPDATE llm_calls SET output_tokens = 20, output_tokens_partial = false WHERE seq = 0")
    # A tool duration the source measured wins over the gap.
    con.execute("UPDATE tool_calls SET duration_ms = 200 WHERE tool_call_id = 'a'")
    assert trace_schedule(con, trace_id).parallel_ms == pytest.approx(1500 + max(200, 500))


def test_latency_from_the_stated_defaults_where_nothing_was_measured(con, tmp_path):
    load(con, tmp_path, weather_trace("w", ["Oslo", "Lima", "Quito"]))
    schedule = trace_schedule(con, "w")
    assert schedule.timing == "default"
    assert schedule.observed_ms == 3 * (DEFAULT_LLM_MS + DEFAULT_TOOL_MS)
    assert schedule.parallel_ms == DEFAULT_LLM_MS + DEFAULT_TOOL_MS
    configured = trace_schedule(con, "w", config=DepsConfig(llm_ms=1000, tool_ms=100))
    assert (configured.observed_ms, configured.parallel_ms) == (3300, 1100)
    assert schedule.tokens_estimated and schedule.input_tokens_saved > 0


# --- the store -----------------------------------------------------------------------------------


def test_analysis_writes_deps_schedule_and_dag_rows(con, tmp_path):
    load(con, tmp_path, weather_trace("w", ["Oslo", "Lima", "Quito"]), chain_trace("d"))
    summary = analyze_dependencies(con)
    assert summary["traces"] == 2 and summary["analysed_now"] == 2
    rows = con.execute(
        "SELECT trace_id, tool_calls, observed_turns, min_turns, turns_saved, mode, min_turns_loose "
        "FROM trace_dag ORDER BY trace_id"
    ).fetchall()
    assert rows == [("d", 4, 4, 3, 1, "conservative", 3), ("w", 3, 3, 1, 2, "conservative", 1)]
    assert summary["turns_saved"] == 3 and summary["observed_turns"] == 7 and summary["min_turns"] == 4
    assert con.execute("SELECT count(*) FROM tool_schedule").fetchall()[0][0] == 7
    deps = con.execute(
        "SELECT src_tool_call_id, dst_tool_call_id, kind, loose FROM tool_deps ORDER BY 2, 1"
    ).fetchall()
    assert deps == [
        ("d-s", "d-a", "data", True),
        ("d-s", "d-b", "data", True),
        ("d-a", "d-c", "data", True),
        ("d-b", "d-c", "data", True),
    ]
    assert (
        json.loads(con.execute("SELECT critical_path FROM trace_dag WHERE trace_id = 'd'").fetchall()[0][0])[
            0
        ]
        == "d-s"
    )


def test_analysis_is_incremental_and_recomputes_on_other_settings(con, tmp_path):
    load(con, tmp_path, weather_trace("w", ["Oslo", "Lima"]))
    assert analyze_dependencies(con)["analysed_now"] == 1
    assert analyze_dependencies(con)["analysed_now"] == 0
    load(con, tmp_path, chain_trace("d"))
    assert analyze_dependencies(con)["analysed_now"] == 1
    assert analyze_dependencies(con, recompute=True)["analysed_now"] == 2
    loose = analyze_dependencies(con, "loose")
    assert loose["analysed_now"] == 2 and loose["mode"] == "loose"
    assert analyze_dependencies(con, "loose", DepsConfig(llm_ms=10))["analysed_now"] == 2
    assert con.execute("SELECT count(*) FROM trace_dag").fetchall()[0][0] == 2
    with pytest.raises(ValueError, match="mode must be one of"):
        analyze_dependencies(con, "reckless")


def test_batches_and_worker_processes_give_the_same_tables(tmp_path):
    traces = [weather_trace(f"w{i}", ["Oslo", "Lima", "Quito"][: 1 + i % 3]) for i in range(6)]
    traces += [chain_trace(f"d{i}") for i in range(4)]
    tables = []
    # serial in batches of one call, of 7 and whole; then two worker processes, batches of 7
    for run, (batch_calls, workers) in enumerate(((1, 1), (7, 1), (10_000, 1), (7, 2))):
        con = store.connect(tmp_path / f"s{run}.duckdb")
        folder = tmp_path / f"in{run}"
        folder.mkdir()
        load(con, folder, *traces)
        progress = []
        summary = analyze_dependencies(
            con,
            batch_calls=batch_calls,
            workers=workers,
            on_progress=lambda done, total, seen=progress: seen.append(done),
        )
        assert progress[-1] == summary["analysed_now"] == 10
        tables.append(
            [
                con.execute(f"SELECT * EXCLUDE (settings) FROM {t} ORDER BY ALL").fetchall()
                if t == "trace_dag"
                else con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in ("tool_deps", "tool_schedule", "trace_dag")
            ]
        )
        con.close()
    assert tables[0] == tables[1] == tables[2] == tables[3]
    assert len(tables[0][2]) == 10


def test_reingesting_a_changed_file_drops_its_analysis(con, tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(weather_trace("w", ["Oslo", "Lima"])) + "\n")
    ingest_paths(con, [path])
    analyze_dependencies(con)
    path.write_text(json.dumps(weather_trace("v", ["Oslo"])) + "\n")
    ingest_paths(con, [path])
    for table in ("tool_deps", "tool_schedule", "trace_dag"):
        assert con.execute(f"SELECT count(*) FROM {table} WHERE trace_id = 'w'").fetchall()[0][0] == 0
    assert analyze_dependencies(con)["analysed_now"] == 1


def test_views_by_workload_and_tool_pair(con, tmp_path):
    load(con, tmp_path, weather_trace("w", ["Oslo", "Lima", "Quito"]), chain_trace("d"))
    analyze_dependencies(con)
    totals = con.execute(
        "SELECT sum(observed_turns), sum(min_turns), sum(turns_saved), sum(observed_ms) FROM trace_dag"
    ).fetchall()[0]
    by_workload = con.execute(
        "SELECT sum(observed_turns), sum(min_turns), sum(turns_saved), sum(observed_ms) "
        "FROM v_dag_by_workload"
    ).fetchall()[0]
    assert by_workload == totals
    pairs = {
        (first, then): (sequential, dependent, independent)
        for first, then, sequential, dependent, independent in con.execute(
            "SELECT first_tool, then_tool, sequential_pairs, dependent_pairs, independent_pairs "
            "FROM v_dag_tool_pairs"
        ).fetchall()
    }
    # weather: Oslo->Lima->Quito, independent; the diamond: s->a (needed), a->b (not), b->c (needed)
    assert pairs[("get_weather", "get_weather")] == (2, 0, 2)
    assert pairs[("search_products", "get_product")] == (1, 1, 0)
    assert pairs[("get_product", "get_product")] == (1, 0, 1)
    assert pairs[("get_product", "compare_prices")] == (1, 1, 0)


# --- the verbs -----------------------------------------------------------------------------------


def store_of(tmp_path: Path, *records: dict) -> Path:
    """A store file holding `records` (transcripts), ingested."""
    db = tmp_path / "cli.duckdb"
    con = store.connect(db)
    folder = tmp_path / "in"
    folder.mkdir()
    load(con, folder, *records)
    con.close()
    return db


@pytest.fixture
def analysed_db(tmp_path):
    return store_of(
        tmp_path, weather_trace("wx-1", ["Oslo", "Lima", "Quito"]), chain_trace("dx-1"), chain_trace("dx-2")
    )


def test_dag_text_shows_both_schedules(runner, analysed_db):
    result = runner.invoke(cli, ["dag", "wx-1", "--db", str(analysed_db)])
    assert result.exit_code == 0, result.output
    assert "3 tool calls in 3 turns -> 1 turn (2 saved)" in result.output
    assert "no dependencies between calls of one user turn" in result.output
    result = runner.invoke(cli, ["dag", "dx-1", "--db", str(analysed_db)])
    assert "#1 search_products -> #2 get_product  data 0.95  product_id=P-11111" in result.output
    assert "critical path: #1 search_products ->" in result.output


def test_dag_text_shows_the_end_of_a_long_path_where_the_file_is_named(runner, tmp_path):
    """Every Read of a Claude Code session showed `file_path=/home/USER/projects/spotter-worktr…`,
    the folders all its calls share; a long path now keeps its end. A path that fits, and text
    that is not a path (a command, a URL), are cut at the end as before."""
    project = "/home/dev/projects/platform-worktrees/checkout-api"
    files = [f"{project}/lib/checkout_web/live/{name}_live.ex" for name in ("cart", "payment")]
    loop = OpenAILoop("You are a coding agent.", "fix the cart", workload="coding")
    arguments = [
        {"file_path": files[0]},
        {"file_path": files[1], "limit": 200},
        {"path": "src/cart.py", "old_str": "total = sum(item.price for item in items) " * 3},
        {"command": f"find {project} -name '*.ex' -newer {files[0]}"},
        {"url": f"https://git.example.com{project}/blob/main/lib/checkout_web/router.ex"},
    ]
    for i, argument in enumerate(arguments):
        loop.call(tool_calls=[openai_tool_call(f"call_{i}", "Tool", argument)])
        loop.result(f"call_{i}", "ok")
    loop.call(content="done")
    write_jsonl(tmp_path / "logs" / "session.jsonl", loop.records)
    db = str(tmp_path / "s.duckdb")
    analysed = runner.invoke(
        cli, ["analyze", str(tmp_path / "logs"), "--db", db, "--out", str(tmp_path / "o")]
    )
    assert analysed.exit_code == 0, analysed.output
    (trace,) = json.loads(
        runner.invoke(cli, ["sql", "--db", db, "--json", "SELECT trace_id FROM traces"]).output
    )
    result = runner.invoke(cli, ["dag", trace["trace_id"], "--db", db], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    shown = [
        line[line.index("#") : line.rindex(")") + 1] for line in result.output.splitlines() if "Tool(" in line
    ]
    assert shown == [
        "#1 Tool(file_path=…/lib/checkout_web/live/cart_live.ex)",
        "#2 Tool(file_path=…/live/payment_live.ex, limit=200)",
        "#3 Tool(path=src/cart.py, old_str=total = sum(item.pric…)",
        "#4 Tool(command=find /home/dev/projects/platform-worktr…)",
        "#5 Tool(url=https://git.example.com/home/dev/projects/p…)",
    ]


def test_dag_mermaid_dot_and_json(runner, analysed_db):
    mermaid = runner.invoke(cli, ["dag", "dx-1", "--db", str(analysed_db), "--format", "mermaid"]).output
    assert mermaid.startswith("flowchart TD")
    assert mermaid.count("subgraph") == 3 and mermaid.count("-->|data|") == 4
    dot = runner.invoke(cli, ["dag", "dx-1", "--db", str(analysed_db), "--format", "dot"]).output
    assert dot.startswith('digraph "dx-1"') and dot.count("cluster_") == 3 and dot.count(" -> ") == 4
    data = json.loads(runner.invoke(cli, ["dag", "dx-1", "--db", str(analysed_db), "--json"]).output)
    assert (data["observed_turns"], data["min_turns"], len(data["edges"])) == (4, 3, 4)
    assert {c["tool_call_id"]: c["parallel_turn"] for c in data["calls"]} == {
        "dx-1-s": 0,
        "dx-1-a": 1,
        "dx-1-b": 1,
        "dx-1-c": 2,
    }


def test_dag_finds_a_unique_prefix_and_explains_misses(runner, analysed_db):
    assert runner.invoke(cli, ["dag", "wx", "--db", str(analysed_db)]).exit_code == 0
    ambiguous = runner.invoke(cli, ["dag", "dx", "--db", str(analysed_db)])
    assert ambiguous.exit_code == 1 and "matches several traces (dx-1, dx-2)" in ambiguous.output
    missing = runner.invoke(cli, ["dag", "nope", "--db", str(analysed_db)])
    assert missing.exit_code == 1 and "no trace 'nope'" in missing.output
    no_store = runner.invoke(cli, ["dag", "x", "--db", str(analysed_db.parent / "absent.duckdb")])
    assert no_store.exit_code == 1 and "no such store" in no_store.output


def test_deps_verb_analyses_the_store(runner, analysed_db, tmp_path):
    result = runner.invoke(cli, ["deps", "--db", str(analysed_db)])
    assert result.exit_code == 0, result.output
    assert (
        "3 traces, 11 tool calls in 11 tool-calling turns: a parallel-calling model needs 7" in result.output
    )
    data = json.loads(
        runner.invoke(cli, ["deps", "--db", str(analysed_db), "--json", "--mode", "loose"]).output
    )
    assert (data["traces"], data["analysed_now"], data["mode"]) == (3, 3, "loose")
    bad = tmp_path / "bad.toml"
    bad.write_text('[tools]\nget_weather = "sometimes"\n')
    result = runner.invoke(cli, ["deps", "--db", str(analysed_db), "--config", str(bad)])
    assert result.exit_code == 1 and f"{bad}: tools.get_weather: effect must be one of" in result.output


def test_the_traces_to_look_at_are_those_with_turns_to_save_most_first(runner, tmp_path):
    db = store_of(
        tmp_path,
        weather_trace("three", ["Oslo", "Lima", "Quito"]),
        weather_trace("two", ["Rome", "Pune"]),
        # as many turns to save as "two", but a long first result that every later request re-sends
        transcript(
            "two-long",
            "Weather in Kyiv, Accra?",
            turn(call("two-long-k", "get_weather", {"city": "Kyiv"}, {"forecast": "cold and grey " * 200})),
            turn(call("two-long-a", "get_weather", {"city": "Accra"}, {"temp": 31})),
        ),
        weather_trace("one", ["Bern"]),
    )
    data = json.loads(runner.invoke(cli, ["deps", "--db", str(db), "--json"]).output)
    ranked = [(t["trace_id"], t["turns_saved"]) for t in data["top_traces"]]
    assert ranked == [("three", 2), ("two-long", 1), ("two", 1)]  # ties: most re-sent tokens saved first
    shown = runner.invoke(cli, ["deps", "--db", str(db)]).output
    assert "see one: traceforge dag three" in shown
    listed = shown.split("traces with most turns to save", 1)[1]
    assert "three" in listed and "two" in listed and "one " not in listed


# --- ground truth --------------------------------------------------------------------------------


@pytest.fixture
def benchmarks(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    planted = importlib.import_module("planted")
    score_deps = importlib.import_module("score_deps")
    yield planted, score_deps
    for name in ("planted", "score_deps"):
        sys.modules.pop(name, None)


def test_planted_truth_is_consistent_with_its_transcripts(benchmarks):
    planted, _ = benchmarks
    transcripts, truth = planted.generate(40, seed=3)
    for record in transcripts:
        plan = truth[record["id"]]
        order = {call_id: i for i, call_id in enumerate(plan["calls"])}
        turn_of = {}
        for number, message in enumerate(record["messages"]):
            for tool_call in message.get("tool_calls") or []:
                turn_of[tool_call["id"]] = number
        assert set(turn_of) == set(order)
        for src, dst, _ in plan["edges"]:
            assert order[src] < order[dst] and turn_of[src] < turn_of[dst]


def test_inference_meets_the_targets_on_planted_traces(benchmarks, tmp_path):
    _, score_deps = benchmarks
    results, _ = score_deps.run(300, 1, tmp_path)
    conservative, loose = (
        next(r["totals"] for r in results if r["mode"] == m) for m in ("conservative", "loose")
    )
    assert conservative["false_independence"] == 0
    assert conservative["exact"] / conservative["traces"] >= score_deps.TARGET_EXACT
    assert conservative["hit_pairs"] == conservative["true_pairs"]  # every planted dependency found
    # loose is the optimistic bound: fewer edges, more precise, and it does parallelise some
    assert loose["found_pairs"] < conservative["found_pairs"]
    assert loose["false_independence"] > 0
    assert "false independence" in score_deps.render(results)


def test_edges_stay_near_linear_in_the_length_of_a_trace(benchmarks, tmp_path, con):
    planted, _ = benchmarks
    counts = {}
    for calls in (400, 1600):
        record, _ = planted.generate_trace(
            random.Random(5), f"long-{calls}", user_turns=1, calls_per_turn=calls
        )
        load(con, tmp_path, record)
        (trace,) = read_traces(con, [record["id"]])
        counts[calls] = (len(trace.calls), len(infer(trace).edges))
    (small_calls, small_edges), (large_calls, large_edges) = counts[400], counts[1600]
    assert large_calls >= 4 * 400
    # every rule that means "after all of these" links to the latest of them only
    assert large_edges / large_calls < 1.5 * small_edges / small_calls


def test_bfcl_parallel_tasks_laid_out_sequentially_come_out_in_one_turn(shared_data, tmp_path, con):
    folder = shared_data / "bfcl"
    records, expected_calls = [], 0
    for category in ("parallel", "parallel_multiple"):
        questions = {}
        for line in (folder / f"BFCL_v4_{category}.json").read_text().splitlines():
            if line.strip():
                task = json.loads(line)
                questions[task["id"]] = task
        for line in (folder / "possible_answer" / f"BFCL_v4_{category}.json").read_text().splitlines():
            if not line.strip():
                continue
            answer = json.loads(line)
            task = questions[answer["id"]]
            messages = [m for user_turn in task["question"] for m in user_turn]
            for number, ground_truth in enumerate(answer["ground_truth"]):
                ((name, parameters),) = ground_truth.items()
                arguments = {p: values[0] for p, values in parameters.items() if values and values[0] != ""}
                call_id = f"{answer['id']}-{number}"
                messages.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [openai_tool_call(call_id, name, arguments)],
                    }
                )
                messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(NEUTRAL)})
                expected_calls += 1
            messages.append({"role": "assistant", "content": "Done."})
            tools = [{"type": "function", "function": f} for f in task["function"]]
            records.append({"id": answer["id"], "messages": messages, "tools": tools})
    load(con, tmp_path, *records)
    summary = analyze_dependencies(con)
    assert summary["traces"] == len(records) and summary["tool_calls"] == expected_calls
    not_parallel = con.execute(
        "SELECT trace_id FROM trace_dag WHERE min_turns_conservative > 1 OR min_turns_loose > 1"
    ).fetchall()
    assert not_parallel == []
