"""The benchmark's figures (`benchmarks/plot.py`), drawn from the measurements of the run that
docs/performance.md's tables come from (docs/benchmark/results.json): the growth curve against linear
growth and the 4.6x target, and the peak memory against input size, as SVG files a browser shows."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import plot as bench_plot  # noqa: E402

from traceforge.report.svg import standalone  # noqa: E402

RECORDED = ROOT / "docs" / "benchmark" / "results.json"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads(RECORDED.read_text())


def _measured(results: dict, task: str, corpus: str) -> list[dict]:
    return [m for m in results["measurements"] if m["task"] == task and m["corpus"] == corpus]


def _flat(points: list[tuple[float, float]]) -> list[float]:
    return [value for point in points for value in point]


def _polylines(svg_text: str) -> dict[str, tuple[str, list[tuple[float, float]]]]:
    """Title -> (class, points) of each line drawn in a standalone SVG file's text."""
    root = ET.fromstring(svg_text)
    lines = {}
    for line in root.iter(f"{SVG}polyline"):
        points = [tuple(map(float, pair.split(","))) for pair in line.get("points").split()]
        lines[line.find(f"{SVG}title").text] = (line.get("class"), points)
    return lines


def test_the_growth_series_is_each_task_s_time_over_its_1x_time_at_the_measured_sizes(results):
    series = bench_plot.growth_series(results["measurements"])

    one_x = _measured(results, "ingest", "growth-1x-full")
    assert len(one_x) == results["rounds"] == 3
    base = sorted(m["seconds"] for m in one_x)[1]  # the median round, as the ingest table prints it
    expected_ingest = [(one_x[0]["input_mb"], 1.0)] + [
        (m["input_mb"], m["seconds"] / base)
        for factor in (2, 4)
        for m in _measured(results, "ingest", f"growth-{factor}x-full")
    ]
    assert _flat(series["ingest"]) == pytest.approx(_flat(expected_ingest))
    for task in ("analyze", "export"):
        (base,) = _measured(results, task, "growth-1x-full")
        expected = [
            (m["input_mb"], m["seconds"] / base["seconds"])
            for factor in (1, 2, 4)
            for m in _measured(results, task, f"growth-{factor}x-full")
        ]
        assert _flat(series[task]) == pytest.approx(_flat(expected))
    assert series["ingest"][-1][1] > 4  # the recorded run: 4.10x for 4.16x the input


def test_an_even_number_of_rounds_counts_the_lower_middle_one_as_the_tables_do(results):
    measurements = copy.deepcopy(results["measurements"])
    first = _measured({"measurements": measurements}, "ingest", "growth-1x-full")[0]
    measurements.append({**first, "seconds": 1000.0, "round": 4})
    rounds = sorted(
        m["seconds"] for m in measurements if m["corpus"] == "growth-1x-full" and m["task"] == "ingest"
    )
    (two,) = _measured({"measurements": measurements}, "ingest", "growth-2x-full")
    series = bench_plot.growth_series(measurements)
    assert series["ingest"][1][1] == pytest.approx(two["seconds"] / rounds[1])


def test_the_memory_series_are_the_mixed_analyses_the_exports_and_each_big_file(results):
    series = bench_plot.memory_series(results["measurements"])

    analyses = [
        m
        for m in results["measurements"]
        if m["task"] == "analyze"
        and m["corpus"] in ("growth-1x-full", "growth-2x-full", "growth-4x-full", "scale-full")
    ]
    assert series["analyze (mixed corpus)"] == sorted((m["input_mb"], m["rss_tree_mb"]) for m in analyses)
    assert max(series["analyze (mixed corpus)"])[0] > 5_000  # the 1M corpus: 5.8 GB
    assert len(series["export sft"]) == 3
    for fmt, name in bench_plot.BIG_FILES.items():
        half, whole = (_measured(results, "ingest", f"{fmt}-{layout}")[0] for layout in ("half", "whole"))
        assert series[name] == [
            (half["input_mb"], half["rss_tree_mb"]),
            (whole["input_mb"], whole["rss_tree_mb"]),
        ]
    # the one-trace and small-trace corpora, and the big files in 64 MB files, are other shapes
    assert sum(map(len, series.values())) == 4 + 3 + 2 * len(bench_plot.BIG_FILES)


def test_the_growth_chart_draws_each_task_against_linear_growth_and_the_target(results):
    chart = standalone(bench_plot.growth_chart(results))
    lines = _polylines(chart)

    assert {title: kind for title, (kind, _) in lines.items()} == {
        "ingest": "mark",
        "analyze": "mark",
        "export sft": "mark",
        "linear growth": "reference",
        "target: 4.6x at 4x": "reference",
    }
    series = bench_plot.growth_series(results["measurements"])
    for title, task in (("ingest", "ingest"), ("analyze", "analyze"), ("export sft", "export")):
        _, points = lines[title]
        assert len(points) == 3
        # screen y grows downwards: the larger the ratio, the higher the point
        by_ratio = sorted(range(3), key=lambda k: series[task][k][1])
        assert sorted(range(3), key=lambda k: -points[k][1]) == by_ratio
    root = ET.fromstring(chart)
    dots = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "point"]
    assert len(dots) == 9  # a dot per measurement, none on the reference lines
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert labels[labels.index("6") + 1 :][:3] == ["345", "712", "1.4k"]  # the x axis: the sizes measured
    # at 4x, the ingest (4.10x) is drawn below the target's end (4.6x at 4x the 1x input)
    (_, target), (_, ingest) = lines["target: 4.6x at 4x"], lines["ingest"]
    assert ingest[-1][1] > target[-1][1]


def test_the_memory_chart_draws_the_target_above_every_peak(results):
    lines = _polylines(standalone(bench_plot.memory_chart(results)))

    kind, target = lines["3 GB target"]
    assert kind == "reference"
    assert target[0][1] == target[1][1]  # a level line
    peaks = [point for title, (kind, points) in lines.items() if kind == "mark" for point in points]
    assert len(peaks) == 15
    assert all(y > target[0][1] for _, y in peaks)  # every peak under 3 GB: drawn lower


def test_plot_from_the_command_line_writes_svg_files_a_browser_shows(results, tmp_path, chromium):
    from browser import Browser

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plot.py"), str(RECORDED), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    written = [tmp_path / name for name in bench_plot.FIGURES]
    assert done.stdout.split() == [str(path) for path in written]
    for path in written:
        assert ET.parse(path).getroot().tag == f"{SVG}svg"
        with Browser(chromium, width=800, height=400) as browser:
            browser.open(path)
            drawn = browser.evaluate(
                "(() => { const svg = document.documentElement; const box = svg.getBoundingClientRect();"
                " const outside = Array.from(svg.querySelectorAll('text')).filter(t => {"
                "   const r = t.getBoundingClientRect();"
                "   return r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1"
                "     || r.bottom > box.bottom + 1; }).map(t => t.textContent);"
                " const lines = Array.from(svg.querySelectorAll('polyline.mark'))"
                "   .filter(p => p.getBBox().width > 0).length;"
                " return [svg.tagName, outside, lines]; })()"
            )
            assert browser.problems() == []
        tag, outside, lines = drawn
        assert tag == "svg" and outside == [] and lines >= 3, (path.name, drawn)


def test_results_without_input_sizes_are_refused_with_what_to_do(results, tmp_path):
    older = copy.deepcopy(results)
    for m in older["measurements"]:
        m.pop("input_mb")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(older))

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plot.py"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert str(path) in done.stderr and "input_mb" in done.stderr and "run it again" in done.stderr
    assert not list(tmp_path.glob("*.svg"))


@pytest.mark.parametrize("broken", ["missing", "not JSON", "no measurements"])
def test_a_results_file_that_cannot_be_read_is_named_with_why(tmp_path, capsys, broken):
    path = tmp_path / "results.json"
    if broken == "not JSON":
        path.write_text('{"measurements": [')
    elif broken == "no measurements":
        path.write_text("{}")
    assert bench_plot.main([str(path)]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: {path}: ")
    why = {
        "missing": "No such file or directory",
        "not JSON": "Expecting value: line 1 column 19",
        "no measurements": "missing 'measurements'",
    }
    assert why[broken] in error
    assert not list(tmp_path.glob("*.svg"))


def test_a_run_s_own_json_draws_its_figures(tmp_path, monkeypatch):
    """What `run.py --json --plot` writes, the plots read: every table of a run (on tiny corpora,
    each measurement stood in for by its input's size, so that no store is written) tags its
    measurements as `plot.py` looks for them."""
    import run as bench

    def measured(task, corpus, db, workers=None, keep=False):
        size = bench.input_mb(corpus)
        return {
            **dict.fromkeys(("cpu_workers", "tool_calls", "traces", "rows", "dag_traces"), 1),
            "task": task,
            "corpus": corpus.name,
            "input_mb": size,
            "seconds": size,
            "cpu_self": size,
            "rss_self_mb": 100.0,
            "rss_tree_mb": 100.0 + size,
            "phases": {"ingest": 1.0, "deps": 1.0, "profile": 1.0},
        }

    monkeypatch.setattr(bench, "CORPUS_ROOT", tmp_path / "corpora")
    monkeypatch.setattr(bench, "measure", measured)
    monkeypatch.setattr(bench, "compile_package", lambda: None)
    tiny = {
        "growth": 60,
        "scale": ("mixed", 120, None),
        "long": ("long", 20, None),
        "small": ("small", None, 20),
    }
    monkeypatch.setitem(bench.SIZES, "quick", {**tiny, "big_file": 300, "big_responses": 40})
    figures = tmp_path / "figures"

    results = bench.run("quick", str(tmp_path / "results.json"), workers=1, rounds=1, plot=str(figures))

    assert json.loads((tmp_path / "results.json").read_text())["measurements"] == json.loads(
        json.dumps(results["measurements"], default=str)
    )
    growth = _polylines((figures / "growth.svg").read_text())
    assert {title: len(points) for title, (kind, points) in growth.items() if kind == "mark"} == {
        "ingest": 3,
        "analyze": 3,
        "export sft": 3,
    }
    memory = _polylines((figures / "memory.svg").read_text())
    drawn = {title: len(points) for title, (kind, points) in memory.items() if kind == "mark"}
    assert drawn == {
        "analyze (mixed corpus)": 4,  # the growth sizes and the scale corpus, not the long or small one
        "export sft": 3,
        **dict.fromkeys(bench_plot.BIG_FILES.values(), 2),  # half and whole, not split or array
    }
