"""The benchmark's figures, drawn from the measurements `benchmarks/run.py --json` writes: how the
time grows with the input (against linear growth and the 4.6x-at-4x target) and the peak memory
against the input's size (against the 3 GB target), as SVG files.

    python benchmarks/plot.py results.json                 # growth.svg and memory.svg beside it
    python benchmarks/plot.py results.json --out docs/img  # into another folder
    python benchmarks/run.py --plot FOLDER                 # a run that draws them when it ends

The charts are traceforge's own (`traceforge.report.svg`, as in the HTML report): no plotting
package is needed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from run import peak_mb

from traceforge.report.svg import line_chart, standalone

GROWTH_TARGET = 4.6  # at most 4.6x the time for 4x the input
MEMORY_TARGET_MB = 3_000  # peak RSS under 3 GB for a 5 GB input
BIG_FILES = {  # the big-file table's formats (a measurement's `format`) and their labels
    "transcripts": "big file: transcripts",
    "openai-log": "big file: gateway log",
    "otlp": "big file: OTel export",
    "openai-responses": "big file: Responses log",
}
FIGURES = ("growth.svg", "memory.svg")


class ResultsError(ValueError):
    """Measurements the figures cannot be drawn from."""


def _input_mb(measurement: dict[str, Any]) -> float:
    try:
        return float(measurement["input_mb"])
    except KeyError:
        raise ResultsError(
            f"the {measurement.get('task')} of {measurement.get('corpus')} has no input size "
            "(input_mb): these results were written by a benchmarks/run.py older than its plots; "
            "run it again"
        ) from None


def growth_series(measurements: Iterable[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per task (ingest, analyze, export), its (input MB, time over the 1x time) at each growth
    size (the measurements `run.py` tags with their `factor`). A size measured more than once (the
    1x ingest, once per loader round) counts its median round, as the tables do."""
    times: dict[str, dict[int, list[float]]] = {}
    sizes: dict[int, float] = {}
    for m in measurements:
        factor = m.get("factor")
        if factor is None or m["task"] not in ("ingest", "analyze", "export"):
            continue
        times.setdefault(m["task"], {}).setdefault(factor, []).append(m["seconds"])
        sizes[factor] = _input_mb(m)
    series = {}
    for task in ("ingest", "analyze", "export"):
        by_factor = {
            factor: statistics.median_low(seconds) for factor, seconds in times.get(task, {}).items()
        }
        if 1 not in by_factor:
            continue
        base = by_factor[1]
        series[task] = [(sizes[f], by_factor[f] / base) for f in sorted(by_factor)]
    if not series:
        raise ResultsError(
            "no growth measurements tagged with their factor (1x included): these results were written "
            "by a benchmarks/run.py older than its plots, or by a run without the growth curve; run it again"
        )
    return series


def growth_chart(results: dict[str, Any]) -> str:
    """Each task's time over its 1x time against the input's size, beside linear growth and the
    target (4.6x the time at 4x the input)."""
    series = growth_series(results["measurements"])
    sizes = sorted({x for points in series.values() for x, _ in points})
    smallest = sizes[0]
    labels = {"ingest": "ingest", "analyze": "analyze", "export": "export sft"}
    return line_chart(
        [(labels[task], points) for task, points in series.items()],
        title="Growth: time against input, each over its 1x time",
        x_label="input MB (the same mix at 1x, 2x, 4x)",
        y_label="time, times the 1x time",
        markers=True,
        references=[
            ("linear growth", [(x, x / smallest) for x in sizes]),
            ("target: 4.6x at 4x", [(smallest, 1.0), (4 * smallest, GROWTH_TARGET)]),
        ],
        x_ticks=sizes,
    )


def memory_series(measurements: Iterable[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """(input MB, peak RSS MB) of the analyses of the mixed corpora (the growth sizes and the 1M
    corpus, tagged `analysis: scale`), of the exports, and of each big file ingested alone (its
    `layout` half of it and all of it)."""
    series: dict[str, list[tuple[float, float]]] = {}
    for m in measurements:
        if m["task"] == "analyze" and (m.get("factor") or m.get("analysis") == "scale"):
            name = "analyze (mixed corpus)"
        elif m["task"] == "export" and m.get("factor"):
            name = "export sft"
        elif m["task"] == "ingest" and m.get("layout") in ("half", "whole"):
            name = BIG_FILES.get(m.get("format"))
        else:
            continue
        if name:
            series.setdefault(name, []).append((_input_mb(m), peak_mb(m)))
    if not series:
        raise ResultsError("no analyses, exports or big-file ingests in these results")
    return {name: sorted(points) for name, points in series.items()}


def memory_chart(results: dict[str, Any]) -> str:
    """Peak RSS (all processes together) against the input's size, beside the 3 GB target."""
    series = memory_series(results["measurements"])
    xs = [x for points in series.values() for x, _ in points]
    return line_chart(
        list(series.items()),
        title="Peak memory against input size",
        x_label="input MB (log scale)",
        y_label="peak RSS MB, all processes",
        log_x=True,
        markers=True,
        references=[("3 GB target", [(min(xs), MEMORY_TARGET_MB), (max(xs), MEMORY_TARGET_MB)])],
        x_ticks=_log_ticks(min(xs), max(xs)),
    )


def _log_ticks(low: float, high: float) -> list[float]:
    """1, 2, 5 times the powers of ten from `low` to `high`."""
    ticks = []
    for power in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        ticks += [m * 10**power for m in (1, 2, 5) if low <= m * 10**power <= high]
    return ticks


def write_figures(results: dict[str, Any], folder: Path) -> list[Path]:
    """The growth and memory charts as SVG files in `folder`; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, chart in zip(FIGURES, (growth_chart(results), memory_chart(results)), strict=True):
        path = folder / name
        path.write_text(standalone(chart) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="the JSON file `benchmarks/run.py --json` wrote")
    parser.add_argument("--out", type=Path, help="the folder to write the SVG files to (default: the JSON's)")
    args = parser.parse_args(argv)
    try:
        results = json.loads(args.results.read_text(encoding="utf-8"))
        written = write_figures(results, args.out or args.results.parent)
    except (OSError, json.JSONDecodeError, KeyError, ResultsError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        print(f"error: {args.results}: {what}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
