"""The benchmark scripts as a user runs them from a shell: `benchmarks/recut_logs.py` (gateway logs and
OTel exports cut mid-conversation, mid-trace), `benchmarks/run.py`'s argument checks, and the layouts
its big-file table ingests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import corpus as bench_corpus  # noqa: E402
import run as bench  # noqa: E402


def script(name: str, *args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bench") / "corpus"
    bench_corpus.generate(folder, tool_calls=600, file_mb=0.5)
    return folder


def _span_trace_ids(path: Path) -> Counter:
    """Spans per trace id in an OTLP/JSON Lines file."""
    found: Counter = Counter()
    for line in path.read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                found.update(span["traceId"] for span in scope["spans"])
    return found


def test_recut_otlp_from_the_command_line_cuts_traces_across_files_and_keeps_every_span(corpus, tmp_path):
    out = tmp_path / "cut"
    done = script("recut_logs.py", "--otlp", "--files", "3", corpus, out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote 3 files to {out}"
    cut = sorted(out.iterdir())
    assert [path.name for path in cut] == ["otlp.0.jsonl", "otlp.1.jsonl", "otlp.2.jsonl"]

    source: Counter = Counter()
    for path in corpus.glob("otlp-*.jsonl"):
        source.update(_span_trace_ids(path))
    per_file = [_span_trace_ids(path) for path in cut]
    assert sum(per_file, Counter()) == source  # every span once, none lost or doubled
    # a rotating exporter's cut: some trace's spans lie in two files
    assert any(set(per_file[k]) & set(per_file[k + 1]) for k in range(len(per_file) - 1))


def test_recut_logs_from_the_command_line_cuts_each_log_format_and_keeps_every_line(corpus, tmp_path):
    out = tmp_path / "cut"
    done = script("recut_logs.py", "--files", "2", corpus, out)
    assert done.returncode == 0, done.stderr
    names = sorted(path.name for path in out.iterdir())
    assert names == [
        "anthropic-log.0.jsonl",
        "anthropic-log.1.jsonl",
        "openai-log.0.jsonl",
        "openai-log.1.jsonl",
    ]
    for fmt in ("openai-log", "anthropic-log"):
        before = b"".join(path.read_bytes() for path in sorted(corpus.glob(f"{fmt}-*.jsonl")))
        after = b"".join((out / f"{fmt}.{k}.jsonl").read_bytes() for k in range(2))
        assert after == before  # the same lines in the same order, only the file boundaries moved


@pytest.mark.parametrize("rounds", ["0", "-2"])
def test_run_refuses_fewer_than_one_round_before_measuring_anything(rounds, tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run.py"), "--rounds", rounds],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--rounds must be 1 or more" in done.stderr
    assert done.stdout == ""
    assert "traceforge benchmark" not in done.stderr  # stopped before the run's header, corpora and stores


def test_the_big_file_table_ingests_a_file_whole_its_first_half_as_an_array_and_split_at_whole_lines(
    corpus, tmp_path, monkeypatch
):
    source = next(corpus.glob("openai-log-*.jsonl"))
    content = source.read_bytes()
    monkeypatch.setattr(bench, "SPLIT_BYTES", len(content) // 5)

    whole = bench.big_file_layout(source, tmp_path / "whole", "whole")
    assert [path.read_bytes() for path in whole.iterdir()] == [content]
    assert bench.big_file_layout(source, tmp_path / "whole", "whole") == whole  # made again: replaced

    (half,) = bench.big_file_layout(source, tmp_path / "half", "half").iterdir()
    kept = half.read_bytes()
    assert content.startswith(kept) and kept.endswith(b"\n")
    assert len(content) // 2 - len(content.splitlines()[kept.count(b"\n")]) <= len(kept) <= len(content) // 2

    (array,) = bench.big_file_layout(source, tmp_path / "array", "array").iterdir()
    assert array.suffix == ".json" and array.read_text().startswith("[\n{")
    assert json.loads(array.read_text()) == [json.loads(line) for line in content.splitlines()]

    split = sorted(bench.big_file_layout(source, tmp_path / "split", "split").iterdir())
    assert len(split) >= 5 and b"".join(path.read_bytes() for path in split) == content
    assert all(path.read_bytes().endswith(b"\n") for path in split)
    assert all(path.stat().st_size <= bench.SPLIT_BYTES for path in split)
