"""The benchmark's loader comparison (`benchmarks/run.py`): every loader measured once per round on
the same files, each figure a median round, and each ratio taken within a round."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import run as bench


def test_each_loader_is_measured_once_per_round_and_ratios_are_taken_within_a_round(tmp_path):
    folder = tmp_path / "corpus"
    bench.corpus_module.generate(folder, tool_calls=40, traces=None, shape="mixed")
    written = json.loads((folder / bench.corpus_module.MANIFEST).read_text())["totals"]
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    summary = bench.compare_loaders(folder, scratch, rounds=3, workers=1)

    by_loader: dict[str, list[dict]] = {}
    for result in summary["rounds"]:
        by_loader.setdefault(result["loader"], []).append(result)
    assert sorted(by_loader) == sorted(name for name, *_ in bench.LOADERS)
    for name, results in by_loader.items():
        assert [r["round"] for r in results] == [1, 2, 3]
        times = sorted(r["seconds"] for r in results)
        assert summary[name]["seconds"] == times[1]  # the median round, not the first or the fastest
        assert summary["range"][name] == (times[0], times[2])
    assert all(r["tool_calls"] == written["tool_calls"] > 0 for r in by_loader["ingest"])
    assert all(r["rows"] > 0 for r in by_loader["plain"] + by_loader["read_json"])

    for name in ("read_json", "read_json_memory", "plain"):
        ratios = sorted(
            ours["seconds"] / theirs["seconds"]
            for ours, theirs in zip(by_loader["ingest"], by_loader[name], strict=True)
        )
        assert summary["ratio"][name] == (ratios[1], (ratios[0], ratios[2]))
    assert "ingest" not in summary["ratio"]
    assert not list(scratch.iterdir())  # every measurement's database removed after it


def test_the_printed_relation_inverts_a_faster_ratio_and_its_range():
    # traceforge took 0.40 of the plain loader's time in the median round, 0.38-0.50 in the others
    assert bench.relation_to((0.40, (0.38, 0.50)), floor=False) == "2.50x faster (2.00-2.63)"
    assert bench.relation_to((1.25, (1.10, 1.40)), floor=False) == "1.25x slower (1.10-1.40)"
    assert bench.relation_to((2.33, (2.15, 2.55)), floor=True) == "2.33x its time (2.15-2.55)"


def test_each_format_is_measured_alone_on_its_own_files(tmp_path):
    mixed, responses = tmp_path / "mixed", tmp_path / "responses"
    bench.corpus_module.generate(mixed, tool_calls=300, traces=None, shape="mixed")
    bench.corpus_module.generate(responses, tool_calls=30, traces=None, only="openai-responses")
    written: dict[str, dict[str, int]] = {}
    for folder in (mixed, responses):
        for entry in json.loads((folder / bench.corpus_module.MANIFEST).read_text())["files"]:
            totals = written.setdefault(entry["format"], {"tool_calls": 0, "bytes": 0})
            totals["tool_calls"] += entry["tool_calls"]
            totals["bytes"] += entry["bytes"]
    sources = [(fmt, mixed) for fmt in bench.corpus_module.FORMATS] + [("openai-responses", responses)]
    assert {fmt for fmt, _ in sources} <= set(written)  # every format has files to measure
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    noted: list[dict] = []

    table = bench.format_table(sources, scratch, rounds=1, workers=1, note=noted.append)

    assert table.row_count == len(sources)
    assert list(table.columns[0].cells) == [fmt for fmt, _ in sources]
    for fmt, _ in sources:
        measured = {r["loader"]: r for r in noted if r["format"] == fmt}
        assert sorted(measured) == sorted(name for name, *_ in bench.LOADERS)
        # each loader read that format's files and no other's
        assert all(r["input_mb"] == written[fmt]["bytes"] / 1e6 for r in measured.values())
        assert measured["ingest"]["tool_calls"] == written[fmt]["tool_calls"] > 0
    assert not list(scratch.iterdir())  # the linked folders and every database removed after
